"""What a rendered project ships: container, compose, workflows and its MCP registry entry.

Each MATRIX entry once, on the rendered files (no venv): hadolint and actionlint (both
from PyPI wheels that carry the binary), the compose services of the chosen backend,
and server.json against the registry's published schema (tests/data, with its `$id`).
"""

from __future__ import annotations

import json
import shutil
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from .answers import MATRIX, answers
from .project_env import run

ENTRIES = list(MATRIX)
REGISTRY_SCHEMA = Path(__file__).parent / "data" / "server.schema.json"
RenderedProject = Callable[[str], Path]


def tool(name: str) -> str:
    """A linter installed beside this interpreter (the test dependencies bring it)."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not installed: it comes with this repository's `test` dependency group")
    return found


def load_yaml(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return loaded


@pytest.mark.parametrize("entry", ENTRIES)
def test_dockerfile_passes_hadolint(rendered_project: RenderedProject, entry: str) -> None:
    project = rendered_project(entry)

    run([tool("hadolint"), "--no-color", "Dockerfile"], project)


@pytest.mark.parametrize("entry", ENTRIES)
def test_workflows_pass_actionlint(rendered_project: RenderedProject, entry: str) -> None:
    workflows = sorted((rendered_project(entry) / ".github" / "workflows").glob("*.yml"))

    assert [path.name for path in workflows] == ["ci.yml", "release.yml", "template-update.yml"]
    # actionlint also flags actions whose major version runs on a deprecated Node runtime.
    run([tool("actionlint"), "-no-color", *map(str, workflows)], rendered_project(entry))


@pytest.mark.parametrize("entry", ENTRIES)
def test_ci_runs_every_supported_python_and_the_backend_database(
    rendered_project: RenderedProject, entry: str
) -> None:
    chosen = answers(**MATRIX[entry])
    ci = load_yaml(rendered_project(entry) / ".github" / "workflows" / "ci.yml")
    tests = ci["jobs"]["tests"]

    supported = [version for version in ("3.11", "3.12", "3.13") if version >= chosen["python_version"]]
    assert tests["strategy"]["matrix"]["python-version"] == supported
    assert [step["run"] for step in tests["steps"] if "run" in step][-1].endswith("-s tests core")
    if chosen["idempotency_backend"] == "postgres":
        assert tests["services"]["postgres"]["image"].startswith("postgres:")
        assert f"{chosen['env_prefix']}TEST_DATABASE_URL" in tests["env"]
    else:
        assert "services" not in tests


@pytest.mark.parametrize("entry", ENTRIES)
def test_compose_file_has_the_services_of_its_backend(rendered_project: RenderedProject, entry: str) -> None:
    chosen = answers(**MATRIX[entry])
    prefix = chosen["env_prefix"]
    services = load_yaml(rendered_project(entry) / "compose.yaml")["services"]
    published = {name: spec["ports"] for name, spec in services.items() if "ports" in spec}

    if chosen["idempotency_backend"] == "postgres":
        assert set(services) == {"postgres", "server-1", "server-2", "proxy"}
        replicas = [services["server-1"], services["server-2"]]
        for replica in replicas:
            assert replica["build"] == "."
            assert replica["environment"][f"{prefix}HTTP_STATELESS"] == "true"
            assert ":?" in replica["environment"][f"{prefix}REQUEST_STATE_KEYS"], "one shared key, given"
            assert "@postgres:5432/" in replica["environment"][f"{prefix}DATABASE_URL"]
            assert replica["depends_on"]["postgres"]["condition"] == "service_healthy"
        assert replicas[0]["environment"] == replicas[1]["environment"]
        assert set(published) == {"proxy"}, "one port in front of both replicas"
        proxy_command = " ".join(services["proxy"]["command"])
        assert "server-1:8000" in proxy_command
        assert "server-2:8000" in proxy_command
    else:
        assert set(services) == {"server"}
        assert services["server"]["volumes"] == ["data:/data"]
        assert set(published) == {"server"}
    for spec in services.values():
        if spec.get("build") == ".":
            environment = spec["environment"]
            assert environment[f"{prefix}AUTH"] == "bearer"
            assert environment[f"{prefix}ALLOWED_HOSTS"]
            assert ":?" in environment[f"{prefix}BEARER_TOKEN"], "the token must be given, never defaulted"


@pytest.mark.parametrize("entry", ENTRIES)
def test_server_json_is_a_valid_mcp_registry_entry(rendered_project: RenderedProject, entry: str) -> None:
    project = rendered_project(entry)
    chosen = answers(**MATRIX[entry])
    schema = json.loads(REGISTRY_SCHEMA.read_text(encoding="utf-8"))
    server = json.loads((project / "server.json").read_text(encoding="utf-8"))
    version = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]

    jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker()).validate(server)
    assert server["$schema"] == schema["$id"]
    owner = chosen["repository_url"].split("/")[3] if chosen["repository_url"] else "example-author"
    assert server["name"] == f"io.github.{owner}/{chosen['project_slug']}"
    assert server.get("repository", {}).get("url", "") == chosen["repository_url"]
    (package,) = server["packages"]
    assert (package["registryType"], package["identifier"]) == ("pypi", chosen["project_slug"])
    assert package["transport"] == {"type": "stdio"}
    assert server["version"] == package["version"] == version
    secrets = {variable["name"] for variable in package["environmentVariables"] if variable.get("isSecret")}
    if chosen["idempotency_backend"] == "postgres":
        assert secrets == {f"{chosen['env_prefix']}DATABASE_URL"}
    else:
        assert secrets == set()
    # The registry accepts a PyPI package only when its README names the server this way.
    assert f"mcp-name: {server['name']}" in (project / "README.md").read_text(encoding="utf-8")


def test_registry_schema_rejects_an_entry_without_a_version() -> None:
    schema = json.loads(REGISTRY_SCHEMA.read_text(encoding="utf-8"))

    with pytest.raises(jsonschema.ValidationError, match="'version' is a required property"):
        jsonschema.Draft7Validator(schema).validate({"name": "io.github.a/b", "description": "x"})
