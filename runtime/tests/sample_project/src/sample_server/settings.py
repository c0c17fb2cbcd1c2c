"""This server's settings: the core's, plus your own.

Owner-owned: `copier update` never touches this file. Every field reads the
environment variable `SAMPLE_SERVER_<FIELD NAME>` (or a `.env` line); a bad value
stops the server at start-up with one line naming the variable.
"""

from __future__ import annotations

from .core import CoreSettings


class Settings(CoreSettings):
    """Add your fields here, e.g. `weather_api_url: str = "https://api.example.com"`."""
