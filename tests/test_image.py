"""The rendered project's image, built and run with the commands of its README's container section.

Real parts only: podman builds the project's own Dockerfile, compose.yaml brings up its
services (PostgreSQL, two replicas and the proxy for the postgres backend), and the SDK's
client talks to the server inside over HTTP with a bearer token (tests/containers.py says
how the engine and its base images are had on a machine without a registry).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import pytest

from . import containers
from .answers import MATRIX, answers
from .container_client import call_tool
from .containers import Engine, http_status, wait_for

CONTAINER_SECTION = "## Run it in a container"
BASE = "http://localhost:8000"
# The README's `docker run` makes its token with openssl; the test makes its own, the same size.
README_TOKEN = "$(openssl rand -hex 32)"
INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
SLOW_TOOL = '''"""A tool that takes its time: the image tests stop the server while it runs."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import anyio
from pydantic import Field

from ..core import tool


@tool(read_only=True, open_world=False)
async def wait_a_while(seconds: Annotated[float, Field(description="How long to wait, in seconds")]) -> str:
    """Wait, then say so; marks its start in the data directory for the test to see."""
    (Path(os.environ["{prefix}DATA_DIR"]) / "wait-started").touch()
    await anyio.sleep(seconds)
    return f"waited {{seconds}} s"
'''


@pytest.fixture(scope="session")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    return containers.find_engine(tmp_path_factory.mktemp("engine"))


def owner_project(rendered: Path, workdir: Path, prefix: str, package: str) -> Path:
    """A copy of the rendered project, in a folder named as its slug (compose names its
    containers after the folder), with one slow tool added as an owner adds tools."""
    project = workdir / "example-tools"
    shutil.copytree(rendered, project)
    (project / "src" / package / "tools" / "wait.py").write_text(
        SLOW_TOOL.format(prefix=prefix), encoding="utf-8"
    )
    return project


def call(token: str, name: str, arguments: dict[str, Any], url: str = f"{BASE}/mcp") -> dict[str, Any]:
    return anyio.run(call_tool, url, token, name, arguments)


def call_inside(engine: Engine, container: str, token: str, name: str, arguments: dict[str, Any]) -> Any:
    """The same call from inside a container (the image has the SDK): it reaches that replica only."""
    client = Path(__file__).with_name("container_client.py").read_text(encoding="utf-8")
    command = [engine.podman, "exec", "-i", "-e", f"MCP_BEARER_TOKEN={token}", container, "python", "-"]
    done = subprocess.run(
        [*command, "http://127.0.0.1:8000/mcp", name, json.dumps(arguments)],
        input=client,
        env=engine.environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def with_assignments(command: list[str]) -> tuple[dict[str, str], list[str]]:
    """`A=... B=... docker compose up --build`: the variables a user sets (here random) and the command."""
    settings: dict[str, str] = {}
    while "=" in command[0]:
        name, _, shown = command.pop(0).partition("=")
        assert shown == "...", f"the README gives {name} a value: {shown}"
        settings[name] = secrets.token_hex(20)
    return settings, command


@pytest.fixture
def port_8000() -> Iterator[None]:
    """The README's commands publish port 8000: one test at a time on this machine."""
    with containers.machine_lock("port-8000"):
        yield


@pytest.mark.generated(minutes=2)
def test_sqlite_image_and_compose_run_as_the_readme_says(
    engine: Engine, rendered_project: Callable[[str], Path], tmp_path: Path, port_8000: None
) -> None:
    chosen = answers(**MATRIX["defaults"])
    slug, prefix = chosen["project_slug"], chosen["env_prefix"]
    project = owner_project(rendered_project("defaults"), tmp_path, prefix, chosen["package_name"])
    containers.ensure_base_images(engine, containers.base_images(project, slug), tmp_path)
    build, docker_run, compose_up = containers.readme_commands(project / "README.md", CONTAINER_SECTION)

    engine.run_readme(build, project)
    (image,) = json.loads(engine("image", "inspect", slug))
    server_json = json.loads((project / "server.json").read_text(encoding="utf-8"))
    assert image["Config"]["User"] == "10001:10001"
    assert image["Labels"]["io.modelcontextprotocol.server.name"] == server_json["name"]
    assert image["Healthcheck"]["Test"][:2] == ["CMD", "python"]  # kept: the docker image format

    token = secrets.token_hex(32)
    assert docker_run[:3] == ["docker", "run", "--rm"]
    assert f"{prefix}BEARER_TOKEN={README_TOKEN}" in docker_run
    # Detached and kept after it stops (not --rm), so the test can read its exit code.
    run_it = ["docker", "run", "-d", "--name", "readme-run", *docker_run[3:]]
    run_it[run_it.index(f"{prefix}BEARER_TOKEN={README_TOKEN}")] = f"{prefix}BEARER_TOKEN={token}"
    engine.exit_code("rm", "-f", "readme-run")
    try:
        with engine.explained():  # the containers' state and logs, before they go
            engine.run_readme(run_it, project)
            assert json.loads(wait_for(f"{BASE}/livez")) == {"status": "live"}
            assert engine("exec", "readme-run", "id", "-u").strip() == "10001"
            assert json.loads(wait_for(f"{BASE}/readyz"))["status"] == "ok"
            assert http_status(f"{BASE}/mcp", headers=MCP_HEADERS, body=INITIALIZE)[0] == 401
            bearer = {**MCP_HEADERS, "Authorization": f"Bearer {token}"}
            assert http_status(f"{BASE}/mcp", headers=bearer, body=INITIALIZE)[0] == 200
            foreign = {**bearer, "Host": "attacker.example:8000"}
            assert http_status(f"{BASE}/mcp", headers=foreign, body=INITIALIZE)[0] == 421
            assert engine("healthcheck", "run", "readme-run").strip() in {"", "healthy"}
            assert (
                engine("inspect", "readme-run", "--format", "{{.State.Health.Status}}").strip() == "healthy"
            )
            counted = call(token, "word_count", {"text": "one two three"})
            assert not counted["is_error"], counted

            # SIGTERM while a call runs: the call is answered, then the process exits 0.
            with ThreadPoolExecutor(1) as pool:
                in_flight = pool.submit(call, token, "wait_a_while", {"seconds": 4})
                deadline = time.monotonic() + 120
                while engine.exit_code("exec", "readme-run", "test", "-e", "/data/wait-started") != 0:
                    assert not in_flight.done(), in_flight.result()
                    assert time.monotonic() < deadline, "the slow call never started"
                    time.sleep(0.2)
                engine("stop", "-t", "30", "readme-run")
                answered = in_flight.result(timeout=120)
            assert not answered["is_error"], answered
            assert answered["structured"] == {"result": "waited 4.0 s"}
            assert engine("inspect", "readme-run", "--format", "{{.State.ExitCode}}").strip() == "0"
    finally:
        engine.exit_code("rm", "-f", "readme-run")

    # compose.yaml: the idempotency table on its volume outlives the container.
    settings, compose_command = with_assignments(compose_up)
    assert compose_command == ["docker", "compose", "up", "--build"]
    key_call = {"notebook": "image", "text": "written once", "idempotency_key": "image:restart"}
    try:
        with engine.explained():  # the containers' state and logs, before they go
            engine.run_readme([*compose_command, "-d"], project, settings)
            wait_for(f"{BASE}/livez")
            first = call(settings[f"{prefix}BEARER_TOKEN"], "append_note", key_call)
            assert not first["is_error"], first
            engine.run_readme(["docker", "compose", "down"], project, settings)
            engine.run_readme(["docker", "compose", "up", "-d"], project, settings)
            wait_for(f"{BASE}/livez")
            again = call(settings[f"{prefix}BEARER_TOKEN"], "append_note", key_call)
    finally:
        engine.run_readme(["docker", "compose", "down", "-v"], project, settings)
    assert again["meta"]["idempotency"]["replayed"] is True, again
    assert again["structured"] == first["structured"]


@pytest.mark.generated(minutes=2)
def test_postgres_compose_runs_two_replicas_behind_the_proxy_as_the_readme_says(
    engine: Engine, rendered_project: Callable[[str], Path], tmp_path: Path, port_8000: None
) -> None:
    entry = "proprietary-postgres"  # Python 3.11, the version the Debian stand-in base has
    chosen = answers(**MATRIX[entry])
    slug, prefix = chosen["project_slug"], chosen["env_prefix"]
    project = owner_project(rendered_project(entry), tmp_path, prefix, chosen["package_name"])
    containers.ensure_base_images(engine, containers.base_images(project, slug), tmp_path)
    *_, compose_up = containers.readme_commands(project / "README.md", CONTAINER_SECTION)
    settings, compose_command = with_assignments(compose_up)
    assert set(settings) == {f"{prefix}BEARER_TOKEN", f"{prefix}REQUEST_STATE_KEYS", "POSTGRES_PASSWORD"}
    token = settings[f"{prefix}BEARER_TOKEN"]
    replicas = [f"{project.name}_server-1_1", f"{project.name}_server-2_1"]
    key_call = {"notebook": "replicas", "text": "written once", "idempotency_key": "image:replicas"}
    try:
        with engine.explained():  # the containers' state and logs, before they go
            engine.run_readme([*compose_command, "-d"], project, settings)
            wait_for(f"{BASE}/readyz")  # through the proxy, once PostgreSQL is up
            first = call_inside(engine, replicas[0], token, "append_note", key_call)
            second = call_inside(engine, replicas[1], token, "append_note", key_call)
            proxied = call(token, "append_note", key_call)

            # The store goes away: /readyz says so (503), and recovers when it is back.
            engine("stop", "-t", "20", f"{project.name}_postgres_1")
            broken = json.loads(wait_for(f"{BASE}/readyz", 503))
            engine("start", f"{project.name}_postgres_1")
            wait_for(f"{BASE}/readyz")
    finally:
        engine.run_readme(["docker", "compose", "down", "-v"], project, settings)
    assert not first["is_error"], first
    assert (first["meta"] or {}).get("idempotency", {}).get("replayed") is not True, first
    for replayed in (second, proxied):
        assert (replayed["meta"] or {}).get("idempotency", {}).get("replayed") is True, replayed
        assert replayed["structured"] == first["structured"]
    assert broken["failing"]["idempotency_store"]["status"] == "failing"
