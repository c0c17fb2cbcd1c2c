"""What the environment asks of telemetry, read without loading it: `server.otel` loads only then.

`METRICS`/`METRICS_ADDRESS` and the standard OTEL_* variables decide whether the server exports
traces or metrics at all; with none of them set (the common case), serving never imports the
core's OpenTelemetry module, and the server is built without the SDK's span per request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, NamedTuple

from opentelemetry import trace

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.project import this_project

Transport = Literal["pipe", "tcp"]  # network.transport: stdio is a pipe, Streamable HTTP runs on TCP


def prometheus_hint() -> str:
    return f" (for Prometheus, set {this_project().env_prefix}METRICS=true)"


class TelemetryPlan(NamedTuple):
    """What the environment asks for: OTLP traces, OTLP metrics, a Prometheus listener."""

    traces_otlp: bool = False
    metrics_otlp: bool = False
    prometheus: tuple[str, int] | None = None

    @property
    def metrics(self) -> bool:
        return self.metrics_otlp or self.prometheus is not None

    @property
    def wanted(self) -> bool:
        """Whether anything is exported at all."""
        return self.traces_otlp or self.metrics


def telemetry_plan(metrics: bool, metrics_address: str, env: Mapping[str, str] = os.environ) -> TelemetryPlan:
    """Read `METRICS`/`METRICS_ADDRESS` and the standard OTEL_* variables; FatalError if unusable."""
    if _sdk_disabled(env):
        return TelemetryPlan(prometheus=_listen_address(metrics_address) if metrics else None)
    protocol = env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip().lower()
    plan = TelemetryPlan(
        traces_otlp=_exports("traces", env),
        metrics_otlp=_exports("metrics", env),
        prometheus=_listen_address(metrics_address) if metrics else None,
    )
    if (plan.traces_otlp or plan.metrics_otlp) and protocol != "http/protobuf":
        raise FatalError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol} is not supported",
            "unset it or set http/protobuf (the collector's port 4318)",
        )
    return plan


def sdk_spans_wanted(env: Mapping[str, str] = os.environ, provider: object | None = None) -> bool:
    """Whether the SDK's span per request can reach anyone: traces exported over OTLP (OTEL_*),
    or a tracer provider this process set itself (`provider`: the global one) before serving."""
    if not _sdk_disabled(env):
        try:
            if _exports("traces", env):
                return True
        except FatalError:
            return True  # start_telemetry stops the server with the reason, before serving
    if provider is None:
        provider = trace.get_tracer_provider()
    return not isinstance(provider, trace.ProxyTracerProvider)


def _sdk_disabled(env: Mapping[str, str]) -> bool:
    """OpenTelemetry's own switch: `OTEL_SDK_DISABLED=true` exports nothing."""
    return env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"


def _exports(signal: str, env: Mapping[str, str]) -> bool:
    """Whether `signal` goes out over OTLP: an endpoint for it, or its exporter named `otlp`."""
    exporter = env.get(f"OTEL_{signal.upper()}_EXPORTER", "").strip().lower()
    if exporter == "none":
        return False
    if exporter not in ("", "otlp"):
        raise FatalError(
            f"OTEL_{signal.upper()}_EXPORTER={exporter} is not supported",
            f"use otlp or none{prometheus_hint() if signal == 'metrics' else ''}",
        )
    endpoint = env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get(
        f"OTEL_EXPORTER_OTLP_{signal.upper()}_ENDPOINT"
    )
    return bool(exporter or endpoint)


def _listen_address(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise FatalError(
            f"{this_project().env_prefix}METRICS_ADDRESS={address!r} is not host:port",
            "set it like 127.0.0.1:9464 or [::1]:9464",
        )
    return host, int(port)
