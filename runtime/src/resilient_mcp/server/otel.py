"""OpenTelemetry for the core: its outcomes on the SDK's spans, trace ids for the log, metrics.

The SDK opens a SERVER span per request (`mcp.server._otel.OpenTelemetryMiddleware`, a no-op
until a tracer provider is set) and parents it on `_meta.traceparent` in either era. Here the
core adds what only it knows to the `tools/call` span (category, attempts, idempotency
outcome, correlation id), parents a request without `_meta.traceparent` on its HTTP
`traceparent` header, and counts calls with the OpenTelemetry metrics API: one set of
instruments, read by Prometheus (`METRICS=true`, on a listener of its own) and/or pushed over
OTLP (`OTEL_EXPORTER_OTLP_ENDPOINT`). The OpenTelemetry SDK comes with the `otel` extra.

Nothing configured (`server.telemetry_plan` reads that), serving does not import this module:
nothing beyond the API the SDK already imports, no thread or listener starts, and a call pays one
`is None` check. Nor does
any span reach anyone then, so the server is built without the SDK's span middleware
(`sdk_spans_wanted`), which costs every request a span that nobody records.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR, CallToolResult
from mcp_types.version import SUPPORTED_PROTOCOL_VERSIONS
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.propagate import extract
from opentelemetry.trace import StatusCode, get_current_span
from pydantic import ValidationError

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.outcomes import RETRYABLE
from resilient_mcp.calls.running import abandoned_threads
from resilient_mcp.project import this_project
from resilient_mcp.records import record
from resilient_mcp.server.telemetry_plan import TelemetryPlan, Transport
from resilient_mcp.telemetry.logs import correlate_traces, get_logger
from resilient_mcp.telemetry.stderr_writer import dropped_lines

if TYPE_CHECKING:
    from opentelemetry.metrics import CallbackOptions, Counter, Histogram, Meter, Observation
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.trace import TracerProvider

    from resilient_mcp.authoring.outcomes import Attempts
    from resilient_mcp.calls.served_tool import ServedTool
    from resilient_mcp.server.resilient_server import ResilientServer
    from resilient_mcp.store import IdempotencyStore
    from resilient_mcp.store.task_table import TaskStatus

log = get_logger(__name__)

# The MCP semantic conventions' advice for mcp.server.operation.duration, in seconds.
DURATION_BUCKETS_S = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# From a task's creation to its end: a second to a day (a body's default time limit is TASK_TTL_S).
TASK_DURATION_BUCKETS_S = (0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 21600.0, 86400.0)
OTHER = "_OTHER"  # a label for a name the client made up: label values stay bounded
TOOL = "gen_ai.tool.name"
CATEGORY = "mcp.tool.category"  # "ok", an error category, or "protocol_error"
IDEMPOTENCY_OUTCOME = "mcp.idempotency.outcome"
METHOD = "mcp.method.name"
PROTOCOL_VERSION = "mcp.protocol.version"
NETWORK_TRANSPORT = "network.transport"
STATUS_CODE = "rpc.response.status_code"  # a JSON-RPC error's code, as a string
ERROR_TYPE = "error.type"
# The client's mistakes, answered as the protocol says: on the server side these are no errors
# (the MCP semantic conventions): -32002 is the 2025 era's resource not found.
NOT_SERVER_ERRORS = frozenset({PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, -32002})
TASK_STATUS = "mcp.task.status"
# Request methods of both eras: any other a client sends is counted as _OTHER.
KNOWN_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "server/discover",
        "tools/list",
        "tools/call",
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
        "logging/setLevel",
    }
)
_STORE_ANSWER_S = 2.0  # how long a scrape waits for the store's counts (keys in doubt, tasks)
_T = TypeVar("_T")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.partition("%")[0]).is_loopback
    except ValueError:
        return False


def start_telemetry(
    server: ResilientServer, plan: TelemetryPlan, transport: Transport, env: Mapping[str, str] = os.environ
) -> Telemetry:
    """The telemetry `plan` asks for (something: `plan.wanted`), started; FatalError before serving."""
    missing = _missing_modules(plan)
    if missing:
        asked = (
            f"{this_project().env_prefix}METRICS=true"
            if plan.prometheus is not None
            else "an OTLP exporter (OTEL_*)"
        )
        raise FatalError(
            f"{asked} needs the otel extra, which is not installed (no {missing})",
            f"pip install '{this_project().slug}[otel]'"
            f" (or uv pip install '{this_project().slug}[otel]'), or unset it",
        )
    telemetry = Telemetry(server, plan, transport)
    telemetry.start(env)
    return telemetry


def _missing_modules(plan: TelemetryPlan) -> str | None:
    """The first module of the `otel` extra this plan needs that cannot be imported."""
    needed = ["opentelemetry.sdk"]
    if plan.prometheus is not None:
        needed += ["opentelemetry.exporter.prometheus", "prometheus_client"]
    if plan.traces_otlp or plan.metrics_otlp:
        needed.append("opentelemetry.exporter.otlp.proto.http")
    for name in needed:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


class Telemetry:
    """The core's OpenTelemetry: span attributes, metric instruments, the server middleware."""

    def __init__(self, server: ResilientServer, plan: TelemetryPlan, transport: Transport = "pipe") -> None:
        self.server = server
        self.plan = plan
        self.transport = transport
        self.tracing = plan.traces_otlp
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        self._listener: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._meters: _Instruments | None = None  # made in start() when metrics are on

    def start(self, env: Mapping[str, str]) -> None:
        from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource

        self._loop = asyncio.get_running_loop()
        attributes: dict[str, str] = {SERVICE_VERSION: this_project().installed_version()}
        if not env.get("OTEL_SERVICE_NAME"):
            attributes[SERVICE_NAME] = this_project().slug
        resource = Resource.create(attributes)
        if self.plan.traces_otlp:
            self._start_tracing(resource)
        if self.plan.metrics:
            self._start_metrics(resource)
        # Before the SDK's own span middleware: a traceparent header becomes the ambient parent.
        self.server.middleware.insert(0, self.around_request)

    def _start_tracing(self, resource: Any) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=resource)  # OTEL_TRACES_SAMPLER applies
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        trace.set_tracer_provider(provider)
        self._tracer_provider = provider
        correlate_traces(current_trace_ids)

    def _start_metrics(self, resource: Any) -> None:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import MetricReader

        readers: list[MetricReader] = []
        if self.plan.prometheus is not None:
            readers.append(self._prometheus_reader(*self.plan.prometheus))
        if self.plan.metrics_otlp:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
            from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

            readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))  # OTEL_METRIC_EXPORT_INTERVAL
        provider = MeterProvider(metric_readers=readers, resource=resource)
        self._meter_provider = provider
        meter = provider.get_meter(this_project().slug, this_project().installed_version())
        self._meters = _Instruments(
            duration=meter.create_histogram(
                "mcp.server.operation.duration",
                unit="s",
                description="MCP request duration as observed on the receiver",
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS_S),
            ),
            calls=meter.create_counter(
                "mcp.server.tool.calls",
                unit="{call}",
                description="tool calls answered, by tool and category",
            ),
            retries=meter.create_counter(
                "mcp.server.tool.retries", unit="{attempt}", description="in-process retries"
            ),
            idempotency=meter.create_counter(
                "mcp.server.idempotency.outcomes",
                unit="{call}",
                description="side-effecting calls by idempotency outcome: new, replayed, conflict, in_doubt",
            ),
            rate_limited=meter.create_counter(
                "mcp.server.rate_limited",
                unit="{call}",
                description="calls refused by a rate limit: by tool, or by method for the other primitives",
            ),
            primitive_calls=meter.create_counter(
                "mcp.server.primitive.calls",
                unit="{call}",
                description="resource reads, prompt gets and completions answered, by method and category",
            ),
            task_duration=meter.create_histogram(
                "mcp.server.task.duration",
                unit="s",
                description="durable tasks ended on this process, from creation to end, by tool and status",
                explicit_bucket_boundaries_advisory=list(TASK_DURATION_BUCKETS_S),
            ),
        )
        counts = _Counts(self.server)
        _gauge(meter, "mcp.server.calls_in_flight", "{call}", "calls running now", counts.calls_in_flight)
        _gauge(meter, "mcp.server.tool.abandoned_threads", "{thread}", "abandoned bodies", abandoned_threads)
        _gauge(meter, "mcp.server.draining", "1", "1 while the server stops", counts.draining)
        meter.create_observable_counter(
            "mcp.server.log.dropped_lines",
            callbacks=[_observed(dropped_lines)],
            unit="{line}",
            description="log lines dropped because nothing read stderr fast enough",
        )
        meter.create_observable_gauge(
            "mcp.server.idempotency.keys_in_doubt",
            callbacks=[self._observe_keys_in_doubt],
            unit="{key}",
            description="idempotency keys whose outcome is unknown",
        )
        meter.create_observable_gauge(
            "mcp.server.tasks",
            callbacks=[self._observe_tasks],
            unit="{task}",
            description="durable tasks kept in the store (every replica's), by status",
        )

    def _prometheus_reader(self, host: str, port: int) -> Any:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        reader = PrometheusMetricReader()
        try:
            self._listener = start_http_server(port, addr=host)
        except OSError as exc:
            raise FatalError(
                f"{this_project().env_prefix}METRICS_ADDRESS {host}:{port} cannot be bound"
                f" ({exc.strerror or exc})",
                "pick a free port, or an address this machine has",
            ) from None
        if not _is_loopback(host):
            log.warning("metrics_listener_not_loopback", address=f"{host}:{port}", path="/metrics")
        return reader

    def _observe_keys_in_doubt(self, _: CallbackOptions) -> Iterable[Observation]:
        from opentelemetry.metrics import Observation

        count = self._ask_store(lambda store: store.in_doubt_count())
        return [] if count is None else [Observation(count)]

    def _observe_tasks(self, _: CallbackOptions) -> Iterable[Observation]:
        """One query per collection (a scrape, an OTLP export), never one per call."""
        from opentelemetry.metrics import Observation

        counts = self._ask_store(lambda store: store.tasks.counts())
        return [] if counts is None else [Observation(n, {TASK_STATUS: s}) for s, n in counts.items()]

    def _ask_store(self, read: Callable[[IdempotencyStore], Coroutine[Any, Any, _T]]) -> _T | None:
        """Asked from a reader's thread: the store is asked on the serving loop, briefly.

        None when it cannot answer in time (down or slow: health_check and /readyz say why).
        """
        loop = self._loop
        if loop is None or loop.is_closed() or _on_loop(loop):
            return None

        async def ask() -> _T:
            return await read(await self.server.store.get())

        future = asyncio.run_coroutine_threadsafe(ask(), loop)
        try:
            return future.result(timeout=_STORE_ANSWER_S)
        except Exception:
            future.cancel()
            return None

    def stop(self) -> None:
        """Flush what is batched and stop the exporters and the listener (at exit, on the loop).

        The gauges stop asking the store first: the loop they would ask is blocked right here.
        """
        self._loop = None
        if self._tracer_provider is not None:
            self._tracer_provider.force_flush(timeout_millis=2000)
            self._tracer_provider.shutdown()
        if self._meter_provider is not None:
            self._meter_provider.shutdown(timeout_millis=2000)
        if self._listener is not None:
            listener, _ = self._listener
            listener.shutdown()

    def tool_call(self, served: ServedTool | None, correlation_id: str, outcome: Attempts | None) -> None:
        """How a call ended, on its span and in the counters; `outcome` None: a protocol error."""
        failure = outcome.failure if outcome is not None else None
        idempotency = _idempotency_outcome(served, outcome)
        if self.tracing:
            span = get_current_span()
            if span.is_recording():
                attributes: dict[str, str | int | bool] = {"mcp.correlation_id": correlation_id}
                if outcome is not None:
                    attributes["mcp.tool.attempts"] = outcome.count
                if failure is not None:
                    retryable = failure.retryable
                    attributes["mcp.tool.error.category"] = failure.category
                    attributes["mcp.tool.retryable"] = (
                        RETRYABLE[failure.category] if retryable is None else retryable
                    )
                    attributes["error.type"] = "tool_error"
                    span.set_status(StatusCode.ERROR)
                if idempotency is not None:
                    attributes[IDEMPOTENCY_OUTCOME] = idempotency
                span.set_attributes(attributes)
        meters = self._meters
        if meters is None:
            return
        tool = served.spec.name if served is not None else OTHER
        category = "protocol_error" if outcome is None else failure.category if failure is not None else "ok"
        meters.calls.add(1, {TOOL: tool, CATEGORY: category})
        if outcome is not None and outcome.count > 1:
            meters.retries.add(outcome.count - 1, {TOOL: tool})
        if idempotency is not None:
            meters.idempotency.add(1, {TOOL: tool, IDEMPOTENCY_OUTCOME: idempotency})
        if category == "rate_limited":
            meters.rate_limited.add(1, {TOOL: tool})

    def task_ended(self, tool: str, status: TaskStatus, duration_s: float) -> None:
        """A task this process ran ended (completed, failed or cancelled): its duration."""
        if self._meters is not None:
            self._meters.task_duration.record(duration_s, {TOOL: tool, TASK_STATUS: status})

    def primitive_call(self, method: str, category: str) -> None:
        """How a resource read, prompt get or completion ended, in the counters (its span has its error)."""
        meters = self._meters
        if meters is None:
            return
        meters.primitive_calls.add(1, {METHOD: method, CATEGORY: category})
        if category == "rate_limited":
            meters.rate_limited.add(1, {METHOD: method})

    async def around_request(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Server middleware outside the SDK's span: the HTTP traceparent, and the request's duration."""
        token = None
        request = ctx.request
        if self.tracing and request is not None:
            headers = getattr(request, "headers", None)
            if headers is not None and "traceparent" in headers:
                token = otel_context.attach(extract(headers))
        started = time.perf_counter()
        error_type: str | None = None
        code: int | None = None
        try:
            result = await call_next(ctx)
            if ctx.method == "tools/call" and _is_tool_error(result):
                error_type = "tool_error"
            return result
        except MCPError as exc:
            code = exc.error.code
            raise
        except ValidationError:  # the SDK answers it as invalid params
            code = INVALID_PARAMS
            raise
        except BaseException as exc:
            error_type = type(exc).__qualname__
            raise
        finally:
            if token is not None:
                otel_context.detach(token)
            if self._meters is not None and ctx.request_id is not None:
                if code is not None and code not in NOT_SERVER_ERRORS:
                    error_type = str(code)
                elapsed_s = time.perf_counter() - started
                self._meters.duration.record(elapsed_s, self._request_labels(ctx, error_type, code))

    def _request_labels(
        self, ctx: ServerRequestContext[Any, Any], error_type: str | None, code: int | None
    ) -> dict[str, str]:
        method = ctx.method if ctx.method in KNOWN_METHODS else OTHER
        version = ctx.protocol_version
        labels = {
            METHOD: method,
            PROTOCOL_VERSION: version if version in SUPPORTED_PROTOCOL_VERSIONS else OTHER,
            NETWORK_TRANSPORT: self.transport,
        }
        if method == "tools/call":
            name = ctx.params.get("name") if ctx.params else None
            labels[TOOL] = name if isinstance(name, str) and name in self.server.served else OTHER
        if code is not None:
            labels[STATUS_CODE] = str(code)
        if error_type is not None:
            labels[ERROR_TYPE] = error_type
        return labels


@record
class _Instruments:
    duration: Histogram
    calls: Counter
    retries: Counter
    idempotency: Counter
    rate_limited: Counter
    primitive_calls: Counter
    task_duration: Histogram


@record
class _Counts:
    """What the gauges read, where health_check reads it."""

    server: ResilientServer

    def calls_in_flight(self) -> int:
        return self.server.stats.in_flight

    def draining(self) -> int:
        return int(self.server.shutdown.stopping)


def current_trace_ids() -> tuple[str, str] | None:
    """The recording span's trace and span id, hex as in a W3C traceparent; None outside one."""
    span = get_current_span()
    if not span.is_recording():
        return None
    context = span.get_span_context()
    return format(context.trace_id, "032x"), format(context.span_id, "016x")


def _idempotency_outcome(served: ServedTool | None, outcome: Attempts | None) -> str | None:
    """new, replayed, conflict or in_doubt for a side-effecting call that reached its key."""
    if served is None or outcome is None or not served.spec.side_effect:
        return None
    if outcome.replayed:
        return "replayed"
    category = outcome.failure.category if outcome.failure is not None else None
    if category in ("conflict", "in_doubt"):
        return category
    return "new" if outcome.count > 0 else None  # 0: refused before the key was claimed


def _is_tool_error(result: Any) -> bool:
    if isinstance(result, CallToolResult):
        return result.is_error is True
    return isinstance(result, dict) and result.get("isError") is True


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _observed(read: Callable[[], int]) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """An instrument's callback: a count the core keeps anyway, read when a reader collects."""
    from opentelemetry.metrics import Observation

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(read())]

    return observe


def _gauge(meter: Meter, name: str, unit: str, description: str, read: Callable[[], int]) -> None:
    meter.create_observable_gauge(name, callbacks=[_observed(read)], unit=unit, description=description)
