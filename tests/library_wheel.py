"""The runtime library as PyPI would serve it: a wheel built from runtime/, in a find-links folder.

Rendered projects depend on `resilient-mcp~=X.Y.0`. Tests, CI and this repository's README
commands run offline from PyPI's point of view: uv and pip find the library in this folder
(`UV_FIND_LINKS`, `PIP_FIND_LINKS`), so no generated file needs a path or git dependency.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RUNTIME = REPO_ROOT / "runtime"


def build_wheel_folder(folder: Path) -> Path:
    """Build the library's wheel (and sdist) from the work tree into `folder`; returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    uv = Path(sys.executable).with_name("uv")
    command = [str(uv) if uv.exists() else shutil.which("uv") or "uv", "build", "--quiet"]
    subprocess.run([*command, "--out-dir", str(folder), str(RUNTIME)], check=True, timeout=600)
    return folder


def find_links_environ(folder: Path) -> dict[str, str]:
    """What makes uv and pip install the library from `folder` before PyPI; set for every process."""
    return {"UV_FIND_LINKS": str(folder), "PIP_FIND_LINKS": str(folder)}
