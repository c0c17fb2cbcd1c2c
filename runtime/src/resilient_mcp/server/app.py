"""The app factory: settings and tools in, a ready `ResilientServer` out.

The owner's code (their `Settings` class and `tools` package) is handed in by the entry point
(`cli.py`): the core imports no owner module by name.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from resilient_mcp.authoring.checks import Check, HealthCheck
from resilient_mcp.authoring.current_settings import use_settings
from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.authoring.resources import Resources
from resilient_mcp.authoring.settings import CoreSettings
from resilient_mcp.calls.request_state import request_state_security
from resilient_mcp.calls.running import MAX_ABANDONED_THREADS, abandoned_threads
from resilient_mcp.calls.stats import CallStats
from resilient_mcp.project import this_project
from resilient_mcp.records import record
from resilient_mcp.sdk_fence import drop_sdk_spans
from resilient_mcp.server.cache_hints import cache_hints
from resilient_mcp.server.discovery import discover_primitives, discover_resources, discover_tools
from resilient_mcp.server.health_tool import make_health_tool
from resilient_mcp.server.identity import server_identity
from resilient_mcp.server.resilient_server import ResilientServer
from resilient_mcp.server.signatures import check_signatures
from resilient_mcp.server.startup import check_data_dir, exit_fatal, load_settings, run_startup_checks
from resilient_mcp.server.telemetry_plan import sdk_spans_wanted
from resilient_mcp.server.tool_filter import declared_tools
from resilient_mcp.skills.folder import skill_folders, skills_folder
from resilient_mcp.store import StoreHandle, create_store
from resilient_mcp.store.task_table import TaskStatus
from resilient_mcp.telemetry.logs import configure_logging, get_logger
from resilient_mcp.telemetry.redaction import configure_redaction
from resilient_mcp.telemetry.stderr_writer import dropped_lines

if TYPE_CHECKING:
    from resilient_mcp.skills.catalog import SkillCatalog

log = get_logger(__name__)


@record
class OwnerCode:
    """What the owner wrote: their settings class (`settings.py`) and their tools package."""

    settings_class: type[CoreSettings]
    tools: ModuleType


def create_server(
    settings: CoreSettings, tools_package: ModuleType, *, strict: bool | None = None
) -> ResilientServer:
    """Configure logging, then build the server and register health_check and every tool.

    Logging comes first: MCPServer's constructor configures the root logger unless
    it already has a handler. `strict` overrides the project's strict_arguments answer.
    The idempotency store is opened when serving starts (or on first use).
    """
    configure_logging(settings.log_level)
    configure_redaction(settings.redact_keys, settings.redact_patterns)
    use_settings(settings)
    version = this_project().installed_version()
    stats = CallStats()
    store = StoreHandle(create_store(settings))

    async def data_dir_check() -> Check:
        # Clients see this: the path stays in the server's own log and `check` output.
        try:
            check_data_dir(settings.data_dir)
        except FatalError as exc:
            log.warning("data_dir_failing", problem=exc.problem)
            return Check(status="failing", detail=f"not writable; see {this_project().env_prefix}DATA_DIR")
        return Check(status="ok", detail="writable")

    async def threads_check() -> Check:
        stuck = abandoned_threads()
        if not stuck:
            return Check(status="ok", detail="no call runs past its time limit")
        detail = f"{stuck} sync calls still run past their time limit"
        return Check(status="degraded", detail=f"{detail} (new ones refused at {MAX_ABANDONED_THREADS})")

    async def log_stream_check() -> Check:
        dropped = dropped_lines()
        if dropped:  # degraded, not failing: the server serves on, only its log has gaps
            detail = f"{dropped} log lines dropped: nothing reads this server's stderr fast enough"
            return Check(status="degraded", detail=detail)
        return Check(status="ok", detail="every log line written")

    async def store_check() -> Check:
        status, detail = await (await store.get()).check()
        return Check(status=status, detail=detail)

    async def keys_in_doubt() -> int:
        return await (await store.get()).in_doubt_count()

    async def task_counts() -> dict[TaskStatus, int]:
        return await (await store.get()).tasks.counts(open_only=True)

    checks: dict[str, HealthCheck] = {
        "data_dir": data_dir_check,
        "idempotency_store": store_check,
        "worker_threads": threads_check,
        "log_stream": log_stream_check,
    }
    resources = Resources(*discover_resources(tools_package))
    for name, check in resources.health_checks().items():
        if name in checks:
            raise FatalError(f"two dependency checks are named {name!r}", "rename yours in @dependency(...)")
        checks[name] = check
    health = make_health_tool(stats, version, checks, keys_in_doubt, task_counts)
    specs = discover_tools(tools_package)
    primitives = discover_primitives(tools_package)
    check_signatures(specs, primitives.prompts)
    folder = skills_folder(getattr(tools_package, "__file__", None))  # src/<package>/skills, beside tools/
    found = skill_folders(folder)
    skills = _load_skills(found) if found else None
    if any(spec.name == health.name for spec in specs):
        raise FatalError(f"a tool in tools/ is named {health.name!r}, which the core reserves", "rename it")
    identity = server_identity(this_project())
    server = ResilientServer(
        this_project().slug,
        title=this_project().display_name,
        version=version,
        description=identity.description,
        instructions=identity.instructions,
        website_url=identity.website_url,
        icons=identity.icons,
        specs=declared_tools([health, *specs], settings, always=health.name),
        app_settings=settings,
        stats=stats,
        store=store,
        resources=resources,
        health_checks=checks,
        primitives=primitives,
        skills=skills,
        lifespan=resources.sdk_lifespan,
        strict=this_project().strict_arguments if strict is None else strict,
        request_state_security=request_state_security(settings),
        cache_hints=cache_hints(settings),
    )
    if not sdk_spans_wanted():
        drop_sdk_spans(server)  # nothing would record them: a span per request for nobody
    return server


def _load_skills(found: list[Path]) -> SkillCatalog:
    """Every skill checked and hashed: the catalog's modules load only for a project with skills."""
    from resilient_mcp.skills.catalog import catalog_of

    return catalog_of(found)


def build_from_environment(owner: OwnerCode) -> ResilientServer:
    """Settings, start-up checks, then the server; on a FatalError, one line and exit 78."""
    try:
        settings = load_settings(owner.settings_class)
        run_startup_checks(settings)
        return create_server(settings, owner.tools)
    except FatalError as exc:
        exit_fatal(exc)
