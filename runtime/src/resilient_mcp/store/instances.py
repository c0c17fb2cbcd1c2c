"""Who owns a pending claim, and whether that owner is still alive.

Every open store is an instance with a row (host, pid, heartbeat) in the table. A
claim whose owner stopped beating, or whose process on this machine is gone, can
never finish: it is in doubt. A SIGKILLed server's claims are therefore in doubt as
soon as any process on the same machine looks, not only after the lease runs out.

A heartbeat that stopped is proof only if the database was there to receive it: while the
database was down or restarting, every server's heartbeat stopped alike. A server that saw
its own heartbeat fail therefore judges no other server by its heartbeat until the database
has answered it for a whole stale window again (`Reachability`).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import sys
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from resilient_mcp.records import record
from resilient_mcp.store.store import STALE_AFTER_BEATS
from resilient_mcp.telemetry.logs import get_logger

_log = get_logger(__name__)

# Instances open in this very process: a pid equal to ours is alive only if listed here
# (after a container restart, our pid may be the one a dead server had).
_OPEN_HERE: set[str] = set()


@dataclass
class Reachability:
    """Since when this process has reached the database without a failed heartbeat between."""

    since: float = -math.inf  # no failure seen: other servers' heartbeats tell all they can
    failing: bool = False

    def failed(self) -> None:
        self.failing = True

    def reached(self, now: float) -> None:
        if self.failing:
            self.since, self.failing = now, False

    def seen_since(self, now: float) -> float:
        """The earliest time from which another server's missing heartbeats count."""
        return now if self.failing else self.since


@record
class Instance:
    """This store: `host_id` is equal for two processes exactly when their pids are comparable."""

    instance_id: str
    host_id: str
    hostname: str
    pid: int
    heartbeat_s: float
    reachability: Reachability = field(default_factory=Reachability, compare=False)

    @classmethod
    def new(cls, heartbeat_s: float) -> Instance:
        return cls(uuid.uuid4().hex, host_id(), socket.gethostname(), os.getpid(), heartbeat_s)

    def mark_open(self) -> None:
        _OPEN_HERE.add(self.instance_id)

    def mark_closed(self) -> None:
        _OPEN_HERE.discard(self.instance_id)


@record
class OwnerRow:
    """What the instances table says about the owner of a claim."""

    instance_id: str
    host_id: str
    hostname: str
    pid: int
    heartbeat_at: float
    heartbeat_s: float  # the owner's own beat interval: it is stale after STALE_AFTER_BEATS of them


def host_id() -> str:
    """Hostname, boot id and pid namespace: containers on one machine do not share pids."""
    parts = [socket.gethostname()]
    try:
        parts.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        parts.append(str(os.stat("/proc/self/ns/pid").st_ino))
    except OSError:
        pass
    return ":".join(parts)


def same_boot(owner: OwnerRow, me: Instance) -> bool:
    """Whether the owner ran on this machine since its last boot (host ids: hostname:boot id:pid ns).

    Then its writes that were not yet flushed to disk are still in the page cache, visible here.
    """
    owner_boot, my_boot = owner.host_id.split(":")[1:2], me.host_id.split(":")[1:2]
    return bool(my_boot) and owner_boot == my_boot


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid runs on this machine (a zombie does not)."""
    if sys.platform == "win32":
        return True  # os.kill would terminate it; rely on heartbeats there
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    state = stat.rpartition(")")[2].split()[:1]
    return state not in (["Z"], ["X"])


def owner_gone_reason(owner: OwnerRow | None, me: Instance, now: float) -> str | None:
    """Why a claim's owner can no longer finish it, or None while it may."""
    if owner is None:
        return "the server that claimed it has stopped"
    if owner.instance_id == me.instance_id:
        return None
    where = f"{owner.hostname} pid {owner.pid}"
    last_heard = max(owner.heartbeat_at, me.reachability.seen_since(now))
    if now - last_heard > owner.heartbeat_s * STALE_AFTER_BEATS:
        return f"the server that claimed it ({where}) stopped sending heartbeats"
    if owner.host_id == me.host_id:
        alive = owner.instance_id in _OPEN_HERE if owner.pid == me.pid else pid_alive(owner.pid)
        if not alive:
            return f"the server that claimed it ({where}) is no longer running"
    return None


class HeartbeatThread:
    """Awaits `beat` every `interval_s` on an event loop of its own, in its own thread, so a
    busy serving loop cannot starve it: a tool that blocks the loop must not make its own
    server look dead to the others. `on_exit` runs on that loop when the thread stops.
    """

    def __init__(
        self,
        beat: Callable[[], Awaitable[None]],
        on_exit: Callable[[], Awaitable[None]],
        interval_s: float,
    ) -> None:
        self._beat = beat
        self._on_exit = on_exit
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._wake: Callable[[], None] | None = None  # set by the thread's loop: ends its wait
        self._thread = threading.Thread(target=self._run, name="idempotency-heartbeat", daemon=True)
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        wake = self._wake  # None until the loop runs: it then sees the stop before it waits
        if wake is not None:
            wake()
        self._thread.join(timeout=self._interval_s + 30)

    def _run(self) -> None:
        anyio.run(self._loop, backend="asyncio")

    async def _loop(self) -> None:
        # The wait between beats is on this loop, woken from the stopping thread: no worker
        # thread of its own blocked in `Event.wait` for the process's life.
        loop = asyncio.get_running_loop()
        stopping = asyncio.Event()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the loop already closed: nothing waits
                loop.call_soon_threadsafe(stopping.set)

        self._wake = wake
        try:
            while not self._stop.is_set():
                with anyio.move_on_after(self._interval_s):
                    await stopping.wait()
                if self._stop.is_set():
                    break
                try:
                    await self._beat()
                    self.last_error = None
                except Exception as exc:  # keep beating: the next beat may reach the database again
                    self.last_error = type(exc).__name__
                    _log.warning("idempotency_heartbeat_failed", error=type(exc).__name__, detail=str(exc))
        finally:
            with anyio.CancelScope(shield=True):
                await self._on_exit()
