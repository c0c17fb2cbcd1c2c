"""Traces, trace ids in the log, and metrics, with real parts: an OTLP/HTTP receiver on loopback
(the protobuf decoded with opentelemetry-proto), a Prometheus scrape of /metrics, and promtool
over the scrape and the shipped alert rules. Nothing configured: no listener, no trace ids."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, MCPError
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import ProxyTracerProvider

from http_support import post
from resilient_mcp import ResilientServer
from resilient_mcp.authoring.errors import EXIT_FATAL_AT_STARTUP
from resilient_mcp.commands.diagnose import LEGACY, MODERN, Era, open_session, with_envelope
from resilient_mcp.server.telemetry_plan import sdk_spans_wanted
from sample_server.project import SLUG
from support import (
    ANSWER_TIMEOUT_S,
    HERE,
    SAMPLE_TOOLS,
    StdioSession,
    free_port,
    http_server,
    server_argv,
    server_env,
)
from task_support import TASK_TOOLS, as_task, start_task, wait_for_status
from template_files import rendered_for_the_sample_project, template_source

ALERT_RULES = "deploy/observability/prometheus-alerts.yml"
DASHBOARD = "deploy/observability/grafana-dashboard.json"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_SPAN_ID}-01"
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "50", "OTEL_METRIC_EXPORT_INTERVAL": "200"}
needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool is not installed (Debian: apt-get install prometheus)"
)


class Receiver:
    """An OTLP/HTTP collector on loopback: the spans it was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.metric_names: set[str] = set()
        self.changed = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/traces":
                    request = ExportTraceServiceRequest.FromString(body)
                    with receiver.changed:
                        for resource_spans in request.resource_spans:
                            for scope_spans in resource_spans.scope_spans:
                                receiver.spans.extend(scope_spans.spans)
                        receiver.changed.notify_all()
                elif self.path == "/v1/metrics":
                    metrics = ExportMetricsServiceRequest.FromString(body)
                    with receiver.changed:
                        for resource_metrics in metrics.resource_metrics:
                            for scope_metrics in resource_metrics.scope_metrics:
                                receiver.metric_names.update(metric.name for metric in scope_metrics.metrics)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def span_of(self, correlation_id: str) -> Span:
        """The tools/call span the core marked with this correlation id (waits for its export)."""
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        with self.changed:
            while True:
                for span in self.spans:
                    if attributes(span).get("mcp.correlation_id") == correlation_id:
                        return span
                left = deadline - time.monotonic()
                assert left > 0, f"no span for {correlation_id} in {[s.name for s in self.spans]}"
                self.changed.wait(left)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    collector = Receiver()
    yield collector
    collector.server.shutdown()


def attributes(span: Span) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for attribute in span.attributes:
        value = attribute.value
        found[attribute.key] = getattr(value, value.WhichOneof("value") or "string_value")
    return found


def call(session: StdioSession, era: Era, name: str, **arguments: Any) -> dict[str, Any]:
    """A tools/call with the caller's traceparent in `_meta`; its result."""
    params = with_envelope(era, {"name": name, "arguments": arguments, "_meta": {"traceparent": TRACEPARENT}})
    result: dict[str, Any] = session.request("tools/call", params, timeout=ANSWER_TIMEOUT_S)["result"]
    return result


def correlation_id_of(result: dict[str, Any]) -> str:
    correlation_id: str = result["_meta"]["error"]["correlation_id"]
    return correlation_id


def call_lines(stderr: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stderr.splitlines() if line.startswith('{"event":"tool_call"')]


@pytest.mark.parametrize("era", [MODERN, LEGACY])
def test_the_tool_call_span_carries_the_cores_outcome_and_the_callers_trace(
    data_dir: Path, receiver: Receiver, era: Era
) -> None:
    """A traceparent in `_meta` (either era) parents the span; the call's log line has its ids.
    The metrics go to the same collector."""
    env = server_env(data_dir=str(data_dir)) | FAST_EXPORT
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint}
    with StdioSession(server_argv(extra_tools=SAMPLE_TOOLS), env=env) as session:
        assert "result" in open_session(session, era, timeout=ANSWER_TIMEOUT_S)
        failed = call(session, era, "crash")
        charge = {"account": "acct", "cents": 5, "idempotency_key": f"telemetry-{era}"}
        first = call(session, era, "charge", **charge)
        replayed = call(session, era, "charge", **charge)
        assert session.close() == 0, session.stderr_tail()
        stderr = session.stderr_text()
    assert failed["isError"]
    span = receiver.span_of(correlation_id_of(failed))
    assert span.name == "tools/call crash"
    assert span.trace_id.hex() == TRACE_ID
    assert span.parent_span_id.hex() == PARENT_SPAN_ID
    assert span.status.code == Status.STATUS_CODE_ERROR
    found = attributes(span)
    assert found["mcp.tool.error.category"] == "internal"
    assert found["mcp.tool.retryable"] is False
    assert found["mcp.tool.attempts"] == 1
    assert found["error.type"] == "tool_error"
    (line,) = [line for line in call_lines(stderr) if line["correlation_id"] == correlation_id_of(failed)]
    assert (line["trace_id"], line["span_id"]) == (TRACE_ID, span.span_id.hex())
    # The replay's span says so; the first call's says it ran.
    charged = [line["correlation_id"] for line in call_lines(stderr) if line["tool"] == "charge"]
    assert not first.get("isError")
    assert not replayed.get("isError")
    outcomes = [attributes(receiver.span_of(cid))["mcp.idempotency.outcome"] for cid in charged]
    assert outcomes == ["new", "replayed"]
    with receiver.changed:  # the last export happens at exit, before the process ends
        assert {"mcp.server.tool.calls", "mcp.server.operation.duration"} <= receiver.metric_names


def test_an_http_requests_traceparent_header_parents_the_span(data_dir: Path, receiver: Receiver) -> None:
    env = server_env(data_dir=str(data_dir)) | FAST_EXPORT
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_METRICS_EXPORTER": "none"}
    with http_server(env, extra_tools=SAMPLE_TOOLS) as (url, process):
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": with_envelope(MODERN, {"name": "refused", "arguments": {}}),
        }
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "refused"}
        status, _, text = post(url, body, traceparent=TRACEPARENT, **headers)
        assert status == 200, text
        answer = json.loads(text[text.index("{") :]) if not text.startswith("{") else json.loads(text)
        correlation_id = correlation_id_of(answer["result"])
        span = receiver.span_of(correlation_id)
        process.terminate()
        process.wait(ANSWER_TIMEOUT_S)
    assert span.trace_id.hex() == TRACE_ID
    assert span.parent_span_id.hex() == PARENT_SPAN_ID
    assert attributes(span)["mcp.tool.error.category"] == "terminal"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=ANSWER_TIMEOUT_S) as response:
        text: str = response.read().decode()
        return text


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of the one series of `name` with these labels (others may be present; "": absent)."""
    found = []
    for line in metrics.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, _, value = line.rpartition(" ")
        have = dict(re.findall(r'(\w+)="([^"]*)"', series))
        if all(have.get(key, "") == wanted for key, wanted in labels.items()):
            found.append(float(value))
    assert len(found) == 1, f"{name} {labels}: {found}"
    return found[0]


def calls_then_scrape(
    data_dir: Path,
    calls: list[tuple[str, dict[str, Any]]],
    host: str = "127.0.0.1",
    refused: tuple[dict[str, Any], ...] = (),
    **settings: str,
) -> tuple[str, str]:
    """A stdio server with METRICS=true on a free port: these calls answered (and the `refused`
    tools/call params answered with a JSON-RPC error), then /metrics; and stderr."""
    port = free_port()
    env = server_env(data_dir=str(data_dir), metrics="true", metrics_address=f"{host}:{port}", **settings)
    with StdioSession(server_argv(extra_tools=SAMPLE_TOOLS), env=env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        for name, arguments in calls:
            params = with_envelope(LEGACY, {"name": name, "arguments": arguments})
            assert "result" in session.request("tools/call", params, timeout=ANSWER_TIMEOUT_S)
        for params in refused:
            assert "error" in session.request(
                "tools/call", with_envelope(LEGACY, params), timeout=ANSWER_TIMEOUT_S
            )
        metrics = scrape(port)
        assert session.close() == 0, session.stderr_tail()
        return metrics, session.stderr_text()


def test_metrics_count_a_known_mix_of_calls(data_dir: Path) -> None:
    """ok, invalid, retried, new, replayed, conflict, in_doubt and rate-limited calls: each counter exact."""
    charge = {"account": "a", "cents": 1, "idempotency_key": "k1"}
    mix: list[tuple[str, dict[str, Any]]] = [
        ("echo", {"text": "a"}),
        ("echo", {"text": "b"}),
        ("echo", {}),  # invalid_input
        ("flaky", {"key": "k", "failures": 1}),  # retried once, then ok
        ("charge", charge),  # new
        ("charge", charge),  # replayed
        ("charge", {**charge, "cents": 2}),  # conflict
        ("charge_then_fail", {**charge, "failure": "bug", "idempotency_key": "k2"}),  # in_doubt
        ("no_such_tool_x", {}),
    ]
    # A tools/call without a name: the client's mistake (-32602), not the server's error.
    metrics, stderr = calls_then_scrape(data_dir, mix, refused=({"arguments": {}},))
    assert "metrics_listener_not_loopback" not in stderr
    # One call a minute at most (a bucket of one token): the second echo is refused. On all
    # interfaces, as set explicitly: served, with a warning.
    two_echoes: list[tuple[str, dict[str, Any]]] = [("echo", {"text": "a"}), ("echo", {"text": "b"})]
    limited, stderr = calls_then_scrape(data_dir, two_echoes, host="0.0.0.0", rate_limit="1")
    (warning,) = [json.loads(line) for line in stderr.splitlines() if "metrics_listener_not_loopback" in line]
    assert warning["level"] == "warning"
    calls = "mcp_server_tool_calls_total"
    assert sample(metrics, calls, gen_ai_tool_name="echo", mcp_tool_category="ok") == 2
    assert sample(metrics, calls, gen_ai_tool_name="echo", mcp_tool_category="invalid_input") == 1
    assert sample(metrics, calls, gen_ai_tool_name="flaky", mcp_tool_category="ok") == 1
    assert sample(metrics, calls, gen_ai_tool_name="charge", mcp_tool_category="conflict") == 1
    assert sample(metrics, calls, gen_ai_tool_name="charge_then_fail", mcp_tool_category="in_doubt") == 1
    assert sample(metrics, calls, gen_ai_tool_name="_OTHER", mcp_tool_category="unknown_tool") == 1
    assert "no_such_tool_x" not in metrics  # a name the client made up is no label value
    assert sample(metrics, "mcp_server_tool_retries_total", gen_ai_tool_name="flaky") == 1
    outcomes = "mcp_server_idempotency_outcomes_total"
    for tool, outcome, count in [
        ("charge", "new", 1),
        ("charge", "replayed", 1),
        ("charge", "conflict", 1),
        ("charge_then_fail", "in_doubt", 1),
    ]:
        assert sample(metrics, outcomes, gen_ai_tool_name=tool, mcp_idempotency_outcome=outcome) == count
    duration = "mcp_server_operation_duration_seconds"
    ok_echo = {"mcp_method_name": "tools/call", "gen_ai_tool_name": "echo", "error_type": ""}
    assert sample(metrics, duration + "_count", **ok_echo) == 2
    # The semantic conventions' attributes: the era, stdio as a pipe, and a JSON-RPC error's code.
    era_and_pipe = {
        "mcp_protocol_version": LEGACY,
        "network_transport": "pipe",
        "rpc_response_status_code": "",
    }
    assert sample(metrics, duration + "_count", **ok_echo, **era_and_pipe) == 2
    refused = {"gen_ai_tool_name": "_OTHER", "rpc_response_status_code": "-32602", "error_type": ""}
    assert sample(metrics, duration + "_count", mcp_method_name="tools/call", **refused) == 1
    assert sample(metrics, duration + "_count", gen_ai_tool_name="echo", error_type="tool_error") == 1
    assert (
        sample(metrics, duration + "_count", gen_ai_tool_name="charge_then_fail", error_type="tool_error")
        == 1
    )
    assert sample(metrics, duration + "_bucket", gen_ai_tool_name="flaky", le="300.0") == 1
    assert sample(metrics, "mcp_server_idempotency_keys_in_doubt") == 1
    assert sample(metrics, "mcp_server_calls_in_flight") == 0
    assert sample(metrics, "mcp_server_draining") == 0
    assert sample(metrics, "mcp_server_tool_abandoned_threads") == 0
    assert sample(metrics, "mcp_server_log_dropped_lines_total") == 0
    assert sample(limited, "mcp_server_rate_limited_total", gen_ai_tool_name="echo") == 1
    assert sample(limited, calls, gen_ai_tool_name="echo", mcp_tool_category="rate_limited") == 1
    assert sample(limited, calls, gen_ai_tool_name="echo", mcp_tool_category="ok") == 1
    assert_shipped_queries_name_exposed_metrics(metrics + limited, lambda name: not is_task_metric(name))
    assert_promtool_accepts(metrics, limited)


@pytest.mark.anyio
async def test_the_call_duration_over_http_in_the_2026_era_names_it_and_tcp(data_dir: Path) -> None:
    port = free_port()
    env = server_env(data_dir=str(data_dir), metrics="true", metrics_address=f"127.0.0.1:{port}")
    with http_server(env, extra_tools=SAMPLE_TOOLS) as (url, _):
        async with Client(url, mode="auto") as client:
            assert not (await client.call_tool("echo", {"text": "a"})).is_error
            with pytest.raises(MCPError) as unknown:
                await client.read_resource("notes://nowhere")
        metrics = scrape(port)
    duration = "mcp_server_operation_duration_seconds_count"
    modern_tcp = {"mcp_protocol_version": MODERN, "network_transport": "tcp"}
    ok = {"gen_ai_tool_name": "echo", "rpc_response_status_code": "", "error_type": ""}
    assert sample(metrics, duration, mcp_method_name="tools/call", **modern_tcp, **ok) == 1
    # An unknown resource is the client's mistake: its code is recorded, not as the server's error.
    assert unknown.value.error.code == -32602  # invalid params, since SEP-2164
    not_found = {"rpc_response_status_code": "-32602", "error_type": ""}
    assert sample(metrics, duration, mcp_method_name="resources/read", **modern_tcp, **not_found) == 1


def is_task_metric(name: str) -> bool:
    return name.startswith(("mcp_server_tasks", "mcp_server_task_"))


def assert_shipped_queries_name_exposed_metrics(scraped: str, of: Callable[[str], bool]) -> None:
    """Every metric (of those `of` picks) the alert rules and the dashboard query is in `scraped`."""
    used = re.findall(r"\bmcp_server_\w+", rendered_for_the_sample_project(ALERT_RULES))
    used += re.findall(r"\bmcp_server_\w+", template_source(DASHBOARD))
    exposed = {line.split("{")[0].split(" ")[0] for line in scraped.splitlines() if line.startswith("mcp_")}
    picked = {name for name in used if of(name)}
    assert picked, "the alert rules and the dashboard query none of these metrics"
    assert picked <= exposed, picked - exposed


def assert_promtool_accepts(*scrapes: str) -> None:
    if shutil.which("promtool") is not None:
        for text in scrapes:
            checked = subprocess.run(
                ["promtool", "check", "metrics"], input=text.encode(), capture_output=True, check=False
            )
            assert checked.returncode == 0, checked.stderr.decode() + checked.stdout.decode()


def task_timed(metrics: str, label: str) -> bool:
    """Whether a series of the task duration histogram has this label."""
    return (
        re.search(r"^mcp_server_task_duration_seconds_count\{[^}]*" + re.escape(label), metrics, re.M)
        is not None
    )


def test_metrics_count_tasks_by_status_and_time_each_task_that_ends(data_dir: Path) -> None:
    """One task of each status; those that ended here timed by tool and status, the parked one not."""
    port = free_port()
    env = server_env(
        data_dir=str(data_dir), metrics="true", metrics_address=f"127.0.0.1:{port}", shutdown_grace_s="1"
    )
    with StdioSession(server_argv(extra_tools=TASK_TOOLS), env=env) as session:
        assert "result" in open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        wait_for_status(session, start_task(session, "slow_compute", seconds=0), "completed")
        wait_for_status(session, start_task(session, "protocol_error_job"), "failed")
        wait_for_status(session, start_task(session, "confirm_delete", filename="a.txt"), "input_required")
        start_task(session, "slow_compute", seconds=300)
        cancelled = start_task(session, "slow_compute", seconds=300)
        assert "result" in session.request("tasks/cancel", as_task({"taskId": cancelled}))
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while not task_timed(metrics := scrape(port), 'mcp_task_status="cancelled"'):
            assert time.monotonic() < deadline, "the cancelled task's run never ended"
            time.sleep(0.05)
    for status in ("working", "input_required", "completed", "failed", "cancelled"):
        assert sample(metrics, "mcp_server_tasks", mcp_task_status=status) == 1, status
    duration = "mcp_server_task_duration_seconds"
    ended = [("slow_compute", "completed"), ("protocol_error_job", "failed"), ("slow_compute", "cancelled")]
    for tool, status in ended:
        assert sample(metrics, duration + "_count", gen_ai_tool_name=tool, mcp_task_status=status) == 1
    assert 0.2 <= sample(metrics, duration + "_sum", gen_ai_tool_name="protocol_error_job") < ANSWER_TIMEOUT_S
    assert not task_timed(metrics, 'gen_ai_tool_name="confirm_delete"'), "a parked task has not ended"
    assert_shipped_queries_name_exposed_metrics(metrics, is_task_metric)
    assert_promtool_accepts(metrics)


def test_metrics_count_reads_prompt_gets_and_completions_like_tool_calls(data_dir: Path) -> None:
    """RATE_LIMIT=3: a held read is in flight; two more requests spend the bucket, then two are refused."""
    port = free_port()
    env = server_env(
        data_dir=str(data_dir), metrics="true", metrics_address=f"127.0.0.1:{port}", rate_limit="3"
    )
    markers = data_dir / "markers"
    completion = {"ref": {"type": "ref/prompt", "name": "review"}, "argument": {"name": "book", "value": "n"}}
    with StdioSession(server_argv(extra_tools=HERE / "primitive_tools"), env=env) as session:
        assert "result" in open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        session.send(
            {"jsonrpc": "2.0", "id": "held", "method": "resources/read", "params": {"uri": "books://held/a"}}
        )
        deadline = time.monotonic() + ANSWER_TIMEOUT_S
        while not (markers / "a.started").exists():  # the read is running now
            assert time.monotonic() < deadline, "the held read never started"
            time.sleep(0.02)
        during = scrape(port)
        (markers / "release").touch()
        assert "result" in session.wait_for("held")
        assert "error" in session.request("resources/read", {"uri": "books://broken"})  # internal
        assert "result" in session.request("prompts/get", {"name": "review", "arguments": {"book": "Dune"}})
        assert "error" in session.request("resources/read", {"uri": "books://catalogue"})  # rate_limited
        assert "error" in session.request("completion/complete", completion)  # rate_limited
        metrics = scrape(port)
        assert session.close() == 0, session.stderr_tail()
    assert sample(during, "mcp_server_calls_in_flight") == 1
    assert sample(metrics, "mcp_server_calls_in_flight") == 0
    calls = "mcp_server_primitive_calls_total"
    for method, category, count in [
        ("resources/read", "ok", 1),
        ("resources/read", "internal", 1),
        ("resources/read", "rate_limited", 1),
        ("prompts/get", "ok", 1),
        ("completion/complete", "rate_limited", 1),
    ]:
        assert sample(metrics, calls, mcp_method_name=method, mcp_tool_category=category) == count
    limited = "mcp_server_rate_limited_total"
    assert sample(metrics, limited, mcp_method_name="resources/read") == 1
    assert sample(metrics, limited, mcp_method_name="completion/complete") == 1
    assert "mcp_server_tool_calls_total{" not in metrics, "no tool was called"


@needs_promtool
def test_the_alert_rules_pass_promtool_and_fire_on_keys_in_doubt_dropped_lines_and_server_errors(
    tmp_path: Path,
) -> None:
    rules = tmp_path / "prometheus-alerts.yml"
    rules.write_text(rendered_for_the_sample_project(ALERT_RULES), encoding="utf-8")
    checked = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, check=False)
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    test = tmp_path / "alerts-test.yml"
    in_doubt_from_minute_one = {
        "series": 'mcp_server_idempotency_keys_in_doubt{job="mcp", instance="a"}',
        "values": "0 1x20",
    }
    fired = {
        "exp_labels": {"severity": "warning", "job": "mcp", "instance": "a"},
        "exp_annotations": {
            "summary": "1 idempotency keys in doubt on a",
            "description": "Calls of a side-effecting tool were interrupted and may or may not have taken "
            f"effect. Check the outside system, then settle each key with `{SLUG} keys settle`.",
        },
    }
    # 100 lines dropped in minute 3, none before or after: the alert fires, then clears.
    dropped_in_minute_three = {
        "series": 'mcp_server_log_dropped_lines_total{job="mcp", instance="a"}',
        "values": "0 0 0 100 100x30",
    }
    dropped = {
        "exp_labels": {"severity": "warning", "job": "mcp", "instance": "a"},
        "exp_annotations": {
            "summary": "a dropped 100 log lines in 10 minutes",
            "description": "Nothing read the server's stderr fast enough, so log lines (tool_call lines among"
            " them) were dropped rather than let a full pipe stall the server. Read its stderr, or send it"
            " to a file or a collector that keeps up.",
        },
    }
    # prompts/get: 1 in 10 a server error (-32603); resources/read: all unknown URIs, the client's.
    requests = "mcp_server_operation_duration_seconds_count"
    server_errors = [
        {"series": f'{requests}{{job="mcp", mcp_method_name="prompts/get"}}', "values": "0+9x30"},
        {
            "series": f'{requests}{{job="mcp", mcp_method_name="prompts/get", error_type="-32603", '
            'rpc_response_status_code="-32603"}',
            "values": "0+1x30",
        },
        {
            "series": f'{requests}{{job="mcp", mcp_method_name="resources/read", '
            'rpc_response_status_code="-32602"}',
            "values": "0+10x30",
        },
    ]
    failing = {
        "exp_labels": {"severity": "warning", "job": "mcp", "mcp_method_name": "prompts/get"},
        "exp_annotations": {
            "summary": "prompts/get fails 10% of its requests",
            "description": "More than 5% of these requests were answered with a JSON-RPC error of the "
            "server's own (error_type is its code) for 10 minutes; invalid params or an unknown method do "
            "not count. The server's log has the reason.",
        },
    }
    tests = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [in_doubt_from_minute_one, dropped_in_minute_three, *server_errors],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "McpKeysInDoubt", "exp_alerts": []},
                    {"eval_time": "15m", "alertname": "McpKeysInDoubt", "exp_alerts": [fired]},
                    {"eval_time": "2m", "alertname": "McpLogLinesDropped", "exp_alerts": []},
                    {"eval_time": "5m", "alertname": "McpLogLinesDropped", "exp_alerts": [dropped]},
                    {"eval_time": "25m", "alertname": "McpLogLinesDropped", "exp_alerts": []},
                    {"eval_time": "20m", "alertname": "McpRequestErrorRatioHigh", "exp_alerts": [failing]},
                ],
            }
        ],
    }
    test.write_text(json.dumps(tests))  # JSON is YAML
    tested = subprocess.run(["promtool", "test", "rules", str(test)], capture_output=True, check=False)
    assert tested.returncode == 0, tested.stdout.decode() + tested.stderr.decode()


def listening_ports(pid: int) -> set[int]:
    """TCP ports the process listens on: its sockets' inodes found in the kernel's tables."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = os.readlink(fd) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc to list the server's sockets")
def test_nothing_configured_means_no_listener_and_no_trace_ids(data_dir: Path) -> None:
    env = {k: v for k, v in server_env(data_dir=str(data_dir)).items() if not k.startswith("OTEL_")}
    with StdioSession(server_argv(extra_tools=SAMPLE_TOOLS), env=env) as session:
        assert "result" in open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        assert call(session, MODERN, "echo", text="hi")["content"][0]["text"] == "hi"
        assert listening_ports(session.process.pid) == set()
        assert session.close() == 0, session.stderr_tail()
        (line,) = call_lines(session.stderr_text())
    assert "trace_id" not in line
    assert "span_id" not in line


def sdk_span_middleware(server: ResilientServer) -> list[object]:
    return [m for m in server.middleware if type(m).__name__ == "OpenTelemetryMiddleware"]


@pytest.mark.anyio
async def test_nothing_configured_means_no_span_per_request(
    make_server: Callable[..., ResilientServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's span middleware records nothing without an exporter or a provider: it is left out."""
    for name in [name for name in os.environ if name.startswith("OTEL_")]:
        monkeypatch.delenv(name)
    assert sdk_span_middleware(make_server()) == []
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    assert len(sdk_span_middleware(make_server())) == 1


@pytest.mark.parametrize(
    ("env", "wanted"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, False),  # metrics only: no trace is exported
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, True),  # kept: start_telemetry refuses it with a FATAL line
    ],
)
def test_sdk_spans_are_wanted_only_where_a_trace_can_leave(env: dict[str, str], wanted: bool) -> None:
    assert sdk_spans_wanted(env, ProxyTracerProvider()) is wanted


def test_a_tracer_provider_set_by_the_owner_keeps_the_sdk_spans() -> None:
    assert sdk_spans_wanted({}, TracerProvider()) is True


def test_metrics_without_the_otel_extra_is_a_fatal_error_naming_it(data_dir: Path, tmp_path: Path) -> None:
    """The SDK hidden from the import system, as in an install without the extra."""
    (tmp_path / "sitecustomize.py").write_text(
        "import sys\n\n\n"
        "class HideOtelSdk:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('opentelemetry.sdk'):\n"
        "            raise ImportError(name)\n\n\n"
        "sys.meta_path.insert(0, HideOtelSdk())\n"
    )
    env = server_env(data_dir=str(data_dir), metrics="true", metrics_address=f"127.0.0.1:{free_port()}")
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        server_argv(),
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=ANSWER_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == EXIT_FATAL_AT_STARTUP, done.stderr.decode()
    assert f"pip install '{SLUG}[otel]'" in done.stderr.decode()
