"""The call counters the call pipeline keeps and health_check reports."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class CallStats:
    """Counters the resilience layer keeps and health_check reports."""

    started_at: float = field(default_factory=time.monotonic)
    calls: int = 0
    in_flight: int = 0
    errors: Counter[str] = field(default_factory=Counter)

    def uptime_s(self) -> float:
        return round(time.monotonic() - self.started_at, 3)
