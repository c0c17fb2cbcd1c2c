"""Owner extension points: `@lifespan` resources, `shared()`, and `@dependency` health checks.

A lifespan is an async generator function in a tools/ module: the server runs it up to its
`yield` once before serving and finishes it at shutdown, in reverse order; `shared(fn)` is
the object it yielded. A dependency returns a `Check`; it runs, bounded in time, in
health_check, /readyz and `<slug> check`, and once at start-up.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from typing import Any, TypeVar, cast

import anyio

from resilient_mcp.authoring.checks import Check, HealthCheck
from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.records import record
from resilient_mcp.telemetry.logs import get_logger
from resilient_mcp.telemetry.redaction import redact_text, strip_paths
from resilient_mcp.telemetry.text import clip

log = get_logger(__name__)
T = TypeVar("T")
LifespanFunction = Callable[[], AsyncIterator[Any]]
DependencyFunction = Callable[[], "Check | Awaitable[Check]"]
D = TypeVar("D", bound=Callable[[], Any])

LIFESPAN_ATTRIBUTE = "__mcp_lifespan__"
DEPENDENCY_ATTRIBUTE = "__mcp_dependency__"
DEFAULT_CHECK_TIMEOUT_S = 5.0
_DETAIL_CHARS = 200


@record
class DependencySpec:
    """What `@dependency` recorded about one function."""

    name: str
    fn: DependencyFunction
    timeout_s: float


def lifespan(fn: Callable[[], AsyncIterator[T]]) -> Callable[[], AsyncIterator[T]]:
    """Mark an async generator function as a resource: set up before `yield`, torn down after."""
    if not inspect.isasyncgenfunction(fn):
        raise TypeError(
            f"@lifespan needs an async generator function, and {_name(fn)} is not one: write "
            "`async def name() -> AsyncIterator[T]:` with one `yield value` inside"
        )
    setattr(fn, LIFESPAN_ATTRIBUTE, True)
    return fn


def dependency(name: str, *, timeout_s: float = DEFAULT_CHECK_TIMEOUT_S) -> Callable[[D], D]:
    """Mark a function returning `Check` (async or sync) as the health check of a dependency."""
    if not isinstance(name, str) or not name.strip():
        raise TypeError('@dependency needs the name the check is reported under: @dependency("billing_api")')
    if timeout_s <= 0:
        raise ValueError(f"@dependency({name!r}, timeout_s={timeout_s}) needs a positive time limit")

    def mark(fn: D) -> D:
        setattr(fn, DEPENDENCY_ATTRIBUTE, DependencySpec(name, fn, timeout_s))
        return fn

    return mark


def dependency_of(value: object) -> DependencySpec | None:
    spec = getattr(value, DEPENDENCY_ATTRIBUTE, None)
    return spec if isinstance(spec, DependencySpec) else None


def is_lifespan(value: object) -> bool:
    return inspect.isasyncgenfunction(value) and getattr(value, LIFESPAN_ATTRIBUTE, False) is True


# The objects the open lifespans yielded, by function: one server serves per process.
_opened: dict[Callable[..., Any], Any] = {}


def shared(fn: Callable[[], AsyncIterator[T]]) -> T:
    """The object that the `@lifespan` function `fn` yielded, while the server runs."""
    if not is_lifespan(fn):
        raise TypeError(
            f"shared({_name(fn)}): {_name(fn)} is not a @lifespan function; decorate it with "
            "@lifespan (from the core) in a tools/ module"
        )
    try:
        return cast(T, _opened[fn])
    except KeyError:
        raise RuntimeError(
            f"shared({_name(fn)}) was called while no server is running, so {_name(fn)} is not "
            "open: call shared() inside a tool or a dependency check, not at import time"
        ) from None


class Resources:
    """One server's lifespans and dependency checks."""

    def __init__(self, lifespans: Iterable[LifespanFunction], dependencies: Iterable[DependencySpec]) -> None:
        self.lifespans = list(lifespans)
        self.dependencies = list(dependencies)
        self._stack: AsyncExitStack | None = None

    async def open(self) -> None:
        """Run every lifespan up to its `yield`, in order; a failure is a FatalError. Idempotent."""
        if self._stack is not None:
            return
        stack = AsyncExitStack()
        try:
            for fn in self.lifespans:
                _opened[fn] = await _enter(stack, fn)
                stack.callback(_opened.pop, fn, None)
        except BaseException:
            await stack.aclose()  # the ones already open, last first
            raise
        self._stack = stack

    async def close(self) -> None:
        """Finish every open lifespan, last opened first; a failure is logged, never raised."""
        stack, self._stack = self._stack, None
        if stack is None:
            return
        try:
            await stack.aclose()
        except Exception:
            log.exception("lifespan_close_failed")

    def sdk_lifespan(self, _: object) -> AbstractAsyncContextManager[dict[str, Any]]:
        """For the SDK's `lifespan=`: in-memory clients open the resources; transports opened them."""
        return self._opened_for_the_sdk()

    @asynccontextmanager
    async def _opened_for_the_sdk(self) -> AsyncIterator[dict[str, Any]]:
        if self._stack is not None:
            yield {}
            return
        await self.open()
        try:
            yield {}
        finally:
            await self.close()

    def health_checks(self) -> dict[str, HealthCheck]:
        """One health_check entry per dependency, each bounded in time and never raising."""
        return {spec.name: _bounded(spec) for spec in self.dependencies}

    async def check_at_startup(self) -> None:
        """Run every dependency check once; a FatalError raised by one stops the server."""
        for spec in self.dependencies:
            result = await _run(spec, fatal=True)
            if result.status != "ok":
                log.warning(
                    "dependency_not_ok", dependency=spec.name, status=result.status, detail=result.detail
                )


async def _enter(stack: AsyncExitStack, fn: LifespanFunction) -> Any:
    """Run the lifespan up to its `yield` on the stack; a set-up failure is a FatalError naming it."""
    try:
        return await stack.enter_async_context(asynccontextmanager(fn)())
    except FatalError:
        raise
    except Exception as exc:
        raise FatalError(
            f"lifespan {_name(fn)} failed to open: {type(exc).__name__}: {_shown(exc)}",
            "fix it or the service it opens (the server cannot serve without it)",
        ) from None


def _bounded(spec: DependencySpec) -> HealthCheck:
    async def check() -> Check:
        return await _run(spec, fatal=False)

    return check


async def _run(spec: DependencySpec, *, fatal: bool) -> Check:
    try:
        with anyio.move_on_after(spec.timeout_s) as scope:
            outcome = await _call(spec.fn)
        if scope.cancelled_caught:
            return Check(status="failing", detail=f"timed out after {spec.timeout_s:g} s")
    except FatalError:
        if fatal:
            raise
        log.exception("dependency_check_failed", dependency=spec.name)
        return Check(status="failing", detail="the check raised FatalError; see the server log")
    except Exception as exc:  # a check that crashes is itself the finding
        log.warning("dependency_check_failed", dependency=spec.name, error=f"{type(exc).__name__}: {exc}")
        return Check(status="failing", detail=f"{type(exc).__name__}: {_shown(exc)}")
    if not isinstance(outcome, Check):
        returned = type(outcome).__name__
        return Check(status="failing", detail=f"the check returned {returned}, not a Check")
    return Check(status=outcome.status, detail=_shown(outcome.detail))


async def _call(fn: DependencyFunction) -> object:
    if inspect.iscoroutinefunction(fn):
        return await fn()
    # A sync check runs in a thread its time limit can abandon (a thread cannot be cancelled).
    outcome = await anyio.to_thread.run_sync(fn, abandon_on_cancel=True)
    return await outcome if inspect.isawaitable(outcome) else outcome


def _shown(value: object) -> str:
    """Text clients may see: no secrets, no paths of this machine, one short line."""
    text = strip_paths(redact_text(str(value))).replace("\n", " ")
    return clip(text, _DETAIL_CHARS)


def _name(fn: object) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn))
