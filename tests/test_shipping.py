"""What a rendered project ships: container, compose, workflows and its MCP registry entry.

Each MATRIX entry once, on the rendered files (no venv): hadolint and actionlint (both
from PyPI wheels that carry the binary), the compose services of the chosen backend,
and server.json against the registry's published schema (tests/data, with its `$id`).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # the Kubernetes API schemas, in the wheel: no cluster, no network
import pytest
import yaml

from .answers import MATRIX, answers
from .containers import readme_commands
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
    # The project's own checks; the library's suite runs in the template repository, not here.
    assert [step["run"] for step in tests["steps"] if "run" in step][-1].endswith("-s tests")
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
    # Who the server says it is: its website, and the icon it serves, by the URL the registry needs.
    assert server.get("websiteUrl", "") == chosen["repository_url"]
    icon = f"src/{chosen['package_name']}/icon.png"
    assert (project / icon).read_bytes().startswith(b"\x89PNG")
    raw = chosen["repository_url"].replace("https://github.com/", "https://raw.githubusercontent.com/")
    expected_icons = [{"src": f"{raw}/HEAD/{icon}", "mimeType": "image/png"}] if raw else None
    assert server.get("icons") == expected_icons
    pypi, oci = server["packages"]
    assert (pypi["registryType"], pypi["identifier"]) == ("pypi", chosen["project_slug"])
    assert pypi["transport"] == {"type": "stdio"}
    assert server["version"] == pypi["version"] == version
    prefix = chosen["env_prefix"]
    secrets = {variable["name"] for variable in pypi["environmentVariables"] if variable.get("isSecret")}
    if chosen["idempotency_backend"] == "postgres":
        assert secrets == {f"{prefix}DATABASE_URL"}
    else:
        assert secrets == set()
    # The image release.yml pushes, tagged with the version; inside it, Streamable HTTP with a bearer.
    repository = "/".join(chosen["repository_url"].split("/")[3:5])
    owner_and_repo = repository or server["name"].removeprefix("io.github.")
    assert oci["registryType"] == "oci"
    assert oci["identifier"] == f"ghcr.io/{owner_and_repo.lower()}:{version}"
    assert oci["transport"]["type"] == "streamable-http"
    assert oci["transport"]["url"] == "http://localhost:8000/mcp"
    (authorization,) = oci["transport"]["headers"]
    assert authorization["name"] == "Authorization"
    assert authorization["isSecret"]
    container_variables = {variable["name"]: variable for variable in oci["environmentVariables"]}
    assert container_variables[f"{prefix}BEARER_TOKEN"]["isSecret"]
    assert "localhost:8000" in container_variables[f"{prefix}ALLOWED_HOSTS"]["default"]
    assert {f"{prefix}LOG_LEVEL", f"{prefix}TOOL_TIMEOUT_S"} <= set(container_variables)
    if chosen["public_url"]:
        (remote,) = server["remotes"]
        assert remote["type"] == "streamable-http"
        assert remote["url"] == chosen["public_url"]
        assert remote["headers"][0]["isSecret"]
    else:
        assert "remotes" not in server
    # The registry accepts a PyPI package only when its README names the server this way.
    assert f"mcp-name: {server['name']}" in (project / "README.md").read_text(encoding="utf-8")


def test_registry_schema_rejects_an_entry_without_a_version() -> None:
    schema = json.loads(REGISTRY_SCHEMA.read_text(encoding="utf-8"))

    with pytest.raises(jsonschema.ValidationError, match="'version' is a required property"):
        jsonschema.Draft7Validator(schema).validate({"name": "io.github.a/b", "description": "x"})


def dockerfile_labels(dockerfile: Path) -> dict[str, str]:
    """The LABEL pairs of a Dockerfile, unquoted as the builder reads them (continuations joined)."""
    text = dockerfile.read_text(encoding="utf-8").replace("\\\n", " ")
    labels: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("LABEL "):
            for pair in shlex.split(line.removeprefix("LABEL ")):
                key, _, value = pair.partition("=")
                labels[key] = value
    return labels


@pytest.mark.parametrize("entry", ENTRIES)
def test_image_labels_name_the_registry_entry_and_the_project(
    rendered_project: RenderedProject, entry: str
) -> None:
    project = rendered_project(entry)
    chosen = answers(**MATRIX[entry])
    server = json.loads((project / "server.json").read_text(encoding="utf-8"))
    labels = dockerfile_labels(project / "Dockerfile")

    # The registry's ownership proof for an OCI package: the label equals server.json's name.
    assert labels["io.modelcontextprotocol.server.name"] == server["name"]
    assert labels["org.opencontainers.image.title"] == chosen["project_name"]
    assert labels["org.opencontainers.image.description"] == chosen["description"]
    assert labels["org.opencontainers.image.version"] == "${VERSION}", "release.yml passes the version"
    licence = chosen["license"] if chosen["license"] != "Proprietary" else "LicenseRef-Proprietary"
    assert labels["org.opencontainers.image.licenses"] == licence
    assert labels.get("org.opencontainers.image.source", "") == chosen["repository_url"]
    assert '[otel]"' in (project / "Dockerfile").read_text(encoding="utf-8"), "the image can export telemetry"


def kustomize(directory: Path) -> list[dict[str, Any]]:
    """The manifests `kubectl apply -k` would send: kustomize itself, as kubectl carries it.

    kubectl's built-in kustomize (v5 here) rather than a re-implementation of strategic merge:
    the overlay's env list must merge by name, as a cluster would see it.
    """
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: its built-in kustomize renders the base and overlays")
    built = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    assert built.returncode == 0, built.stderr
    return [document for document in yaml.safe_load_all(built.stdout) if document]


def by_kind(manifests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = [manifest["kind"] for manifest in manifests]
    assert len(kinds) == len(set(kinds)), f"one of each kind: {kinds}"
    return {manifest["kind"]: manifest for manifest in manifests}


def container_env(deployment: dict[str, Any]) -> dict[str, dict[str, Any]]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {variable["name"]: variable for variable in container.get("env", [])}


@pytest.mark.parametrize("entry", ENTRIES)
def test_kubernetes_manifests_are_valid_and_drain_before_they_stop(
    rendered_project: RenderedProject, entry: str
) -> None:
    project = rendered_project(entry)
    chosen = answers(**MATRIX[entry])
    prefix, slug = chosen["env_prefix"], chosen["project_slug"]
    server = json.loads((project / "server.json").read_text(encoding="utf-8"))
    kubernetes = project / "deploy" / "kubernetes"
    overlays = sorted(path.name for path in kubernetes.glob("overlays/*"))
    postgres = chosen["idempotency_backend"] == "postgres"
    assert overlays == (["postgres"] if postgres else [])

    base = kustomize(kubernetes / "base")
    for manifest in [*base, *(kustomize(kubernetes / "overlays" / "postgres") if postgres else [])]:
        kubernetes_validate.validate(manifest, "1.37", strict=True)
    resources = by_kind(base)
    expected = {"Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}
    assert set(resources) == expected | (set() if postgres else {"PersistentVolumeClaim"})

    deployment = resources["Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == server["packages"][1]["identifier"], "the image server.json lists"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    pause = int(container["lifecycle"]["preStop"]["exec"]["command"][-1])
    env = container_env(deployment)
    grace = float(env[f"{prefix}SHUTDOWN_GRACE_S"]["value"])
    # The kubelet's clock runs through preStop and then SIGTERM's drain: both must fit.
    assert pod["terminationGracePeriodSeconds"] > pause + grace
    # The restricted Pod Security Standard, and no credentials the server does not use.
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert pod["automountServiceAccountToken"] is False
    assert container["resources"]["requests"]["cpu"], "the autoscaler scales on CPU requests"
    # Secrets by reference only: never a value in the manifests.
    token = env[f"{prefix}BEARER_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {"name": slug, "key": "bearer-token"}
    if chosen["public_url"]:
        assert chosen["public_url"].split("/")[2] in env[f"{prefix}ALLOWED_HOSTS"]["value"].split(",")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert resources["Service"]["spec"]["selector"] == selector
    assert resources["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == selector
    autoscaler = resources["HorizontalPodAutoscaler"]["spec"]
    assert autoscaler["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    if not postgres:
        assert autoscaler["maxReplicas"] == 1, "SQLite is one process"
        assert deployment["spec"]["strategy"]["type"] == "Recreate"
        return

    scaled = by_kind(kustomize(kubernetes / "overlays" / "postgres"))
    assert scaled["Deployment"]["spec"]["replicas"] >= 2
    assert scaled["HorizontalPodAutoscaler"]["spec"]["minReplicas"] >= 2
    scaled_env = container_env(scaled["Deployment"])
    assert scaled_env[f"{prefix}HTTP_STATELESS"]["value"] == "true"
    assert scaled_env[f"{prefix}REQUEST_STATE_KEYS"]["valueFrom"]["secretKeyRef"]["name"] == slug
    assert scaled_env[f"{prefix}DATABASE_URL"]["valueFrom"]["secretKeyRef"]["key"] == "database-url"
    # The base's settings survive the overlay's patch (env merges by name, it is not replaced).
    assert {name: env[name] for name in env} == {name: scaled_env[name] for name in env}


def secret_key_refs(manifests: list[dict[str, Any]]) -> set[tuple[str, str]]:
    """Every (secret, key) the manifests' containers read."""
    refs = set()
    for manifest in manifests:
        for container in manifest.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            for variable in container.get("env", []):
                ref = variable.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    refs.add((ref["name"], ref["key"]))
    return refs


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_readme_kubernetes_commands_make_the_secret_the_manifests_read(
    rendered_project: RenderedProject, entry: str
) -> None:
    """The generated README's commands, run without a cluster: the Secret as `kubectl create`
    makes it (`--dry-run=client`), and the manifests `kubectl apply -k` sends (kustomize)."""
    project = rendered_project(entry)
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: it makes the Secret and renders the manifests")
    create, apply = readme_commands(project / "README.md", "## Run it on Kubernetes")

    assert create[:4] == ["kubectl", "create", "secret", "generic"]
    made = run([kubectl, *create[1:], "--dry-run=client", "-o", "yaml"], project)
    secret = yaml.safe_load(made)
    assert apply[:3] == ["kubectl", "apply", "-k"]
    manifests = kustomize(project / apply[3])

    assert secret_key_refs(manifests) == {(secret["metadata"]["name"], key) for key in secret["data"]}


def test_kubernetes_schemas_reject_a_misspelt_field() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}, "spec": {"prots": []}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, "1.37", strict=True)


# One entry per backend (the manifest's user_config differs), with and without a license and with
# quotes in the description: each run costs two npx starts (about 10 s).
@pytest.mark.parametrize("entry", ["bsd-weather-names", "proprietary-postgres"])
def test_mcpb_bundle_is_validated_and_packed_by_the_mcpb_cli(
    rendered_project: RenderedProject, tmp_path: Path, entry: str
) -> None:
    if shutil.which("npx") is None:
        pytest.skip("npm's npx is not installed: `nox -s mcpb` runs the @anthropic-ai/mcpb CLI with it")
    chosen = answers(**MATRIX[entry])
    prefix = chosen["env_prefix"]
    project = tmp_path / "project"
    shutil.copytree(rendered_project(entry), project)  # the session writes build/ and dist/
    version = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]

    run([tool("nox"), "-s", "mcpb"], project)  # `mcpb validate`, then `mcpb pack`: either fails the session

    bundle = project / "dist" / f"{chosen['project_slug']}-{version}.mcpb"
    with zipfile.ZipFile(bundle) as archive:
        names = set(archive.namelist())
        manifest = json.loads(archive.read("manifest.json"))
    # What uv needs to install the server, and nothing of the project's tests or tooling.
    assert {"manifest.json", "pyproject.toml", "README.md", f"src/{chosen['package_name']}/cli.py"} <= names
    assert not {name for name in names if name.startswith(("tests/", "benchmarks/", ".venv/"))}
    assert (manifest["manifest_version"], manifest["server"]["type"]) == ("0.4", "uv")
    # The icon the server serves (a PNG, which `mcpb validate` checked), its homepage, and what it
    # tells the model as the long description.
    assert manifest["icon"] == f"src/{chosen['package_name']}/icon.png"
    assert manifest["icon"] in names
    assert manifest.get("homepage", "") == chosen["repository_url"]
    instructions = (project / "src" / chosen["package_name"] / "instructions.md").read_text(encoding="utf-8")
    assert manifest["long_description"] == instructions.strip()
    assert chosen["project_name"] in manifest["long_description"]
    assert manifest["version"] == version
    settings = manifest["server"]["mcp_config"]["env"]
    assert all(name.startswith(prefix) for name in settings)
    # Every value a user fills in reaches the server as its setting; a secret is marked sensitive.
    filled = {value.removeprefix("${user_config.").removesuffix("}") for value in settings.values()}
    assert filled == set(manifest["user_config"])
    sensitive = {name for name, spec in manifest["user_config"].items() if spec.get("sensitive")}
    assert sensitive == ({"database_url"} if chosen["idempotency_backend"] == "postgres" else set())


PINNED_ACTION = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def test_release_workflow_pins_its_supply_chain(rendered_project: RenderedProject) -> None:
    path = rendered_project("defaults") / ".github" / "workflows" / "release.yml"
    text = path.read_text(encoding="utf-8")
    release = load_yaml(path)
    steps = [step for job in release["jobs"].values() for step in job["steps"]]

    # An action by commit, never by a tag that can move; the version it is, for the next bump.
    uses = [line.split("uses:", 1)[1].strip() for line in text.splitlines() if "uses:" in line]
    assert uses, "the workflow uses actions"
    assert [action for action in uses if not PINNED_ACTION.match(action)] == []
    # The registry's publisher by version and checksum, checked before it is unpacked.
    assert "/releases/latest/" not in text
    assert re.fullmatch(r"v\d+\.\d+\.\d+", release["env"]["MCP_PUBLISHER_VERSION"])
    assert re.fullmatch(r"[0-9a-f]{64}", release["env"]["MCP_PUBLISHER_SHA256"])
    install = next(step["run"] for step in steps if "mcp-publisher.tar.gz" in step.get("run", ""))
    assert install.index("sha256sum --check") < install.index("tar xzf")
    # A CycloneDX SBOM for the wheel and for the image; provenance for the files and the image.
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "cyclonedx-py environment" in runs
    assert any(step.get("with", {}).get("format") == "cyclonedx-json" for step in steps)
    provenance = "actions/attest-build-provenance@"
    attested = [step["with"] for step in steps if step.get("uses", "").startswith(provenance)]
    assert any("dist/*.mcpb" in attest.get("subject-path", "") for attest in attested)
    assert any(attest.get("push-to-registry") for attest in attested)
    # The bundle goes out with its SHA-256, and the image is told its version for its label.
    assert "nox -s mcpb" in runs
    assert "sha256sum -- *.mcpb" in runs
    (build_args,) = [step["with"]["build-args"] for step in steps if "build-args" in step.get("with", {})]
    assert build_args.startswith("VERSION=")
