"""All probes of one target and the one JSON report they add up to.

Fields: verdict, exit_code, target, server_exit_code (after its stdin was closed; null
when it had to be killed), first_answer_ms, handshake, eras (per era: ok,
first_answer_ms, failure, ...), eras_ok, server_info (name, title, version, description,
websiteUrl, icons: a `data:` icon's src shortened to its type and length), instructions_bytes
(the size of the instructions the server sends; null: none), tool_count, tools,
tools_list_bytes (the largest tools/list result seen, compact JSON), health_check (its
structured result), stdout_noise (stdout lines that are not JSON-RPC), stderr_tail,
hints (the likely cause and the fix).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resilient_mcp.commands.diagnose.eras import ERAS, MODERN
from resilient_mcp.commands.diagnose.exit_codes import (
    EXIT_HEALTHY,
    EXIT_NO_HANDSHAKE,
    EXIT_SERVER_FATAL,
    EXIT_STDOUT_NOISE,
    EXIT_TIMEOUT,
    EXIT_UNHEALTHY,
)
from resilient_mcp.commands.diagnose.hints import (
    FATAL_LINE,
    clip,
    exception_line,
    last_line,
    noise_hints,
    probe_hints,
    stderr_hints,
)
from resilient_mcp.commands.diagnose.probes import EraProbe, probe_http, probe_stdio
from resilient_mcp.commands.diagnose.progress import QUIET, Progress
from resilient_mcp.commands.diagnose.session import unbuffered_free_env

_MAX_NOISE_LINES = 20


@dataclass
class Diagnosis:
    """All probes of one target and what they add up to."""

    target: dict[str, Any]
    probes: list[EraProbe]
    timeout: float
    http: bool
    require_all_eras: bool

    @property
    def answered(self) -> list[EraProbe]:
        return [probe for probe in self.probes if probe.handshake]

    def verdict(self) -> tuple[int, str]:
        """The exit code and a one-line verdict; the most fundamental problem wins."""
        fatal = [p for p in self.probes if p.exit_code == EXIT_SERVER_FATAL and FATAL_LINE.search(p.stderr)]
        if fatal and not self.answered:
            return EXIT_SERVER_FATAL, "start-up checks failed: " + FATAL_LINE.findall(fatal[0].stderr)[-1]
        missing = [p for p in self.probes if not p.handshake]
        if not self.answered or (self.require_all_eras and missing):
            first = missing[0]
            era = "" if not self.answered else f" {first.era}"
            what = f"no{era} handshake: {first.detail or first.failure}"
            return (EXIT_TIMEOUT if first.failure == "timeout" else EXIT_NO_HANDSHAKE), what
        noise = self.noise()
        if noise:
            return EXIT_STDOUT_NOISE, f"stdout noise: {len(noise)} line(s) that are not JSON-RPC"
        problems = self.problems()
        if problems:
            return EXIT_UNHEALTHY, "unhealthy: " + "; ".join(problems)
        eras = " and ".join(p.era for p in self.answered)
        tools = self.answered[0].tool_names or []
        health = f", health_check {self.answered[0].health_status}" if "health_check" in tools else ""
        return EXIT_HEALTHY, f"healthy: handshake in {eras}, {len(tools)} tools{health}"

    def problems(self) -> list[str]:
        """What is wrong after a working handshake."""
        problems: list[str] = []
        for probe in self.answered:
            if probe.failure is not None:
                problems.append(f"{probe.era}: {probe.failed_at} failed ({probe.detail})")
            elif probe.health_status not in (None, "ok"):
                problems.append(f"{probe.era}: health_check reports {probe.health_status}")
        if not self.http:
            for probe in self.answered:
                if probe.failure is not None:
                    continue  # its exit is part of that failure
                if probe.killed:
                    problems.append(f"{probe.era}: the server did not exit after its stdin closed")
                elif probe.exit_code not in (0, None):
                    problems.append(f"{probe.era}: the server exited {probe.exit_code} when its stdin closed")
        return list(dict.fromkeys(problems))

    def noise(self) -> list[str]:
        lines = [line for probe in self.probes for line in probe.noise]
        return list(dict.fromkeys(lines))

    def hints(self) -> list[str]:
        hints: list[str] = []
        for probe in self.probes:
            hints += stderr_hints(probe.stderr, probe.exit_code)
        if not any(h.startswith("the server stopped at its start-up checks") for h in hints):
            for probe in self.probes:
                if self.answered and not probe.handshake and not self.require_all_eras:
                    continue  # reported below as a missing era
                hints += probe_hints(probe, self.timeout, http=self.http)
        for probe in self.probes:
            if self.http and probe.noise:
                hints.append(
                    f"the endpoint answered with a body that is not JSON-RPC: {clip(probe.noise[0], 80)!r}"
                )
            elif probe.noise:
                hints += noise_hints(probe.noise, probe.noise_after)
        hints += self._era_hints()
        hints += self._health_hints()
        for probe in self.answered:
            if probe.failure == "closed" and not self.http:
                last = exception_line(probe.stderr) or last_line(probe.stderr)
                hints.append(f"{probe.detail}" + (f": {last}" if last else ""))
            elif probe.failure is not None:
                continue
            elif probe.killed:
                hints.append(
                    "the server kept running after its stdin closed and was killed: MCP hosts stop stdio "
                    "servers by closing stdin; a non-daemon thread or a blocking shutdown keeps it alive"
                )
            elif probe.exit_code not in (0, None) and not self.http:
                last = exception_line(probe.stderr) or last_line(probe.stderr)
                hints.append(
                    f"the server exited {probe.exit_code} when its stdin closed; it should exit 0"
                    + (f" ({last})" if last else "")
                )
        return list(dict.fromkeys(hints))

    def _era_hints(self) -> list[str]:
        if not self.answered:
            return []
        hints = []
        for probe in self.probes:
            if probe.handshake:
                continue
            if probe.era == MODERN:
                hints.append(
                    f"the 2026-07-28 era failed ({probe.detail or probe.failure}): the server predates it "
                    "(SDK v1 or another older server); clients fall back to initialize; mcp>=2.3 serves both"
                )
            else:
                hints.append(
                    f"the 2025-11-25 initialize handshake failed ({probe.detail or probe.failure}): most MCP "
                    "hosts still connect that way"
                )
        return hints

    def _health_hints(self) -> list[str]:
        for probe in self.answered:
            if probe.health_status in (None, "ok") or probe.health is None:
                continue
            checks = probe.health.get("checks")
            failing = (
                [
                    f"{name} ({check.get('detail', '')})"
                    for name, check in checks.items()
                    if isinstance(check, dict) and check.get("status") != "ok"
                ]
                if isinstance(checks, dict)
                else []
            )
            detail = ": " + ", ".join(failing) if failing else f": {probe.health.get('text', '')}"
            return [f"health_check reports {probe.health_status}{detail.rstrip(': ')}"]
        return []

    def report(self) -> dict[str, Any]:
        code, verdict = self.verdict()
        first = self.answered[0] if self.answered else (self.probes[0] if self.probes else EraProbe(MODERN))
        sizes = [p.tools_list_bytes for p in self.answered if p.tools_list_bytes is not None]
        stderr_source = next((p for p in self.probes if p.failure is not None), first)
        exit_codes = [p.exit_code for p in self.probes if p.failure != "not_started"]
        answer_times = [p.first_answer_ms for p in self.probes if p.first_answer_ms is not None]
        return {
            "verdict": verdict,
            "exit_code": code,
            "target": self.target,
            "server_exit_code": None if self.http else _worst_exit(exit_codes),
            "first_answer_ms": next(iter(answer_times), None),
            "handshake": bool(self.answered),
            "eras": {p.era: p.summary() for p in self.probes},
            "eras_ok": [p.era for p in self.answered],
            "server_info": first.server_info,
            "instructions_bytes": first.instructions_bytes,
            "tool_count": len(first.tool_names) if first.tool_names is not None else None,
            "tools": first.tool_names,
            "tools_list_bytes": max(sizes) if sizes else None,
            "health_check": first.health,
            "stdout_noise": [clip(line) for line in self.noise()[:_MAX_NOISE_LINES]],
            "stderr_tail": [clip(line) for line in stderr_source.stderr.splitlines()[-20:]],
            "hints": self.hints(),
        }


def _worst_exit(codes: Sequence[int | None]) -> int | None:
    """The first exit code that is not 0 (None when killed), else 0."""
    for code in codes:
        if code != 0:
            return code
    return 0 if codes else None


def diagnose_stdio(
    argv: Sequence[str],
    *,
    timeout: float,
    require_all_eras: bool,
    env: Mapping[str, str] | None = None,
    progress: Progress = QUIET,
) -> Diagnosis:
    environment = dict(env) if env is not None else unbuffered_free_env()
    probes = [probe_stdio(argv, era, timeout=timeout, env=environment, progress=progress) for era in ERAS]
    return Diagnosis({"command": list(argv)}, probes, timeout, False, require_all_eras)


def diagnose_http(url: str, *, timeout: float, progress: Progress = QUIET) -> Diagnosis:
    probes = [probe_http(url, era, timeout=timeout, progress=progress) for era in ERAS]
    return Diagnosis({"url": url}, probes, timeout, True, False)
