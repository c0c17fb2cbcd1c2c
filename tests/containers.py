"""A container engine for the image tests: podman, its base images, and the README's commands.

The tests build and run a rendered project's image with the commands its README shows,
`docker` spelled `podman` (and `docker compose`, `podman-compose`). Where no registry of images
can be reached, as on the machines CI runs on, the base images the Dockerfile and compose.yaml
name are made here from Debian's packages, under those names (stand-ins; an air-gapped build
does the same), once per machine: the Debian base with debootstrap, uv from the uv on PATH,
PostgreSQL and Caddy from Debian's packages on that base (`tests/data/stand-ins/`).

`MCP_TEMPLATE_CONTAINERS=required` (`.ci/run` sets it) turns "no engine here" from a skip into
a failure, so the place that must run these tests cannot skip them unseen.
"""

from __future__ import annotations

import fcntl
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from .project_env import run, uv_executable
from .readme_walk import readme_steps

STAND_INS = Path(__file__).parent / "data" / "stand-ins"
DEBIAN_BASE = "docker.io/library/python:3.11-slim"  # Debian bookworm's python3 is 3.11
DEBIAN_PACKAGES = "python3,python3-venv,python-is-python3,ca-certificates"
# The compose files' images and the stand-in that replaces each (a folder of STAND_INS).
COMPOSE_STAND_INS = {"postgres": "docker.io/library/postgres", "caddy": "docker.io/library/caddy"}
# Locks shared by every pytest worker on this machine: stand-ins are built once, and the
# README's commands publish port 8000, which only one test at a time may hold.
LOCKS = Path(tempfile.gettempdir()) / "mcp-template-containers"
# crun (podman's default runtime) refuses the hybrid cgroups and the ulimits of a machine
# without systemd, such as a CI container; runc with cgroupfs runs there.
NO_SYSTEMD_CONF = """\
[containers]
default_ulimits = ["nofile=4096:4096", "nproc=4096:4096"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
"""
# uv inside the build reaches PyPI through this machine's certificate authorities, not only
# its own built-in roots (a proxy that re-signs TLS, as CI machines have, needs that).
UV_TOML = "system-certs = true\n"
BUILD_WHEELS = "/mnt/library-wheels"  # where the builds see the library's wheel folder


@contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold a lock that every process on this machine shares, until the block ends."""
    LOCKS.mkdir(exist_ok=True)
    with (LOCKS / f"{name}.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@dataclass(frozen=True)
class Engine:
    """podman, with the settings this machine needs, and the arguments every build takes."""

    podman: str
    compose: str
    environ: dict[str, str]
    build_args: tuple[str, ...]

    def __call__(self, *args: str, cwd: Path | None = None, timeout: float = 600) -> str:
        return run([self.podman, *args], cwd or Path.cwd(), env=self.environ, timeout=timeout)

    def exit_code(self, *args: str) -> int:
        """The exit status of a podman command, for commands whose failure is the answer."""
        return subprocess.run(
            [self.podman, *args], env=self.environ, capture_output=True, timeout=120, check=False
        ).returncode

    def run_readme(self, command: list[str], project: Path, settings: dict[str, str] | None = None) -> str:
        """Run a README command in the project folder, with the variables the user would set."""
        environ = {**self.environ, **(settings or {})}
        return run(self.readme_command(command), project, env=environ, timeout=900)

    @contextmanager
    def explained(self) -> Iterator[None]:
        """A failure in the block also shows every container's state and the end of its log."""
        try:
            yield
        except AssertionError as failure:
            listed = subprocess.run(
                [self.podman, "ps", "-a", "--format", "{{.Names}} {{.Status}}"],
                env=self.environ,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            ).stdout
            logs = [listed]
            for line in listed.splitlines():
                name = line.split(" ", 1)[0]
                shown = subprocess.run(
                    [self.podman, "logs", "--tail", "30", name],
                    env=self.environ,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                logs.append(f"--- {name}\n{shown.stdout}{shown.stderr}")
            raise AssertionError(f"{failure}\n\ncontainers:\n" + "\n".join(logs)) from None

    def has_image(self, name: str) -> bool:
        return self.exit_code("image", "exists", name) == 0

    def readme_command(self, command: list[str]) -> list[str]:
        """A README command with `docker` spelled as this engine is, given this machine's build arguments."""
        match command:
            case ["docker", "build", *rest]:
                return [self.podman, "build", "--pull=never", *self.build_args, *rest]
            case ["docker", "compose", *rest]:
                return [self.compose, "--podman-build-args", " ".join(self.build_args), *rest]
            case ["docker", *rest]:
                return [self.podman, *rest]
        raise AssertionError(f"not a docker command: {shlex.join(command)}")


def find_engine(workdir: Path) -> Engine:
    """podman from PATH, configured for this machine; skip (or fail, where required) without one."""
    podman, compose = shutil.which("podman"), shutil.which("podman-compose")
    if podman is None or compose is None:
        missing = "podman" if podman is None else "podman-compose"
        reason = f"{missing} is not installed (Debian: `apt-get install podman runc`; podman-compose: PyPI)"
        if os.environ.get("MCP_TEMPLATE_CONTAINERS") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    environ = dict(os.environ)
    if not Path("/run/systemd/system").exists() and "CONTAINERS_CONF" not in environ:
        conf = workdir / "containers.conf"
        conf.write_text(NO_SYSTEMD_CONF, encoding="utf-8")
        environ["CONTAINERS_CONF"] = str(conf)
    uv_toml = workdir / "uv.toml"
    # The docker image format keeps HEALTHCHECK (an OCI image drops it), as `docker build` does.
    build_args = ["--network", "host", "--format", "docker", "-v", f"{uv_toml}:/etc/uv/uv.toml:ro"]
    # The runtime library's wheel from the work tree (tests/library_wheel.py), mounted into the
    # build and found by uv there as PyPI would serve it: no generated file names the folder.
    wheels = os.environ.get("UV_FIND_LINKS")
    if wheels:
        build_args += ["-v", f"{wheels}:{BUILD_WHEELS}:ro"]
    uv_toml.write_text(UV_TOML + (f'find-links = ["{BUILD_WHEELS}"]\n' if wheels else ""), encoding="utf-8")
    if Path("/etc/ssl/certs").is_dir():
        build_args += ["-v", "/etc/ssl/certs:/etc/ssl/certs:ro"]
    return Engine(podman, compose, environ, tuple(build_args))


def base_images(project: Path, slug: str) -> list[str]:
    """The images the project's Dockerfile and compose.yaml start from, as the engine names them."""
    text = (project / "Dockerfile").read_text(encoding="utf-8")
    named = re.findall(r"^FROM (\S+)", text, re.MULTILINE) + re.findall(r"--from=(\S+)", text)
    named += re.findall(
        r"^\s+image: (\S+)", (project / "compose.yaml").read_text(encoding="utf-8"), re.MULTILINE
    )
    # `build` is a stage of the Dockerfile; `<slug>:latest` is the image compose builds.
    return sorted({qualified(name) for name in named if name not in {"build", f"{slug}:latest"}})


def qualified(name: str) -> str:
    """`python:3.11-slim` as podman stores it: docker.io/library/python:3.11-slim."""
    if "/" not in name:
        return f"docker.io/library/{name}"
    return name if "." in name.split("/")[0] else f"docker.io/{name}"


def ensure_base_images(engine: Engine, images: list[str], workdir: Path) -> None:
    """Each image present, or a stand-in built for it (once per machine, whichever worker comes first)."""
    with machine_lock("stand-ins"):
        for image in images:
            if not engine.has_image(image):
                build_stand_in(engine, image, workdir)


def build_stand_in(engine: Engine, image: str, workdir: Path) -> None:
    repository, _, _tag = image.rpartition(":")
    if image == DEBIAN_BASE:
        debian_base(engine, workdir / "rootfs")
    elif repository == "ghcr.io/astral-sh/uv":
        folder = workdir / "uv-stand-in"
        folder.mkdir()
        shutil.copy2(uv_executable(), folder / "uv")
        (folder / "Containerfile").write_text("FROM scratch\nCOPY uv /uv\n", encoding="utf-8")
        engine("build", "--quiet", "-t", image, str(folder))
    elif repository in COMPOSE_STAND_INS.values():
        if not engine.has_image(DEBIAN_BASE):
            debian_base(engine, workdir / "rootfs")
        folder = STAND_INS / next(name for name, repo in COMPOSE_STAND_INS.items() if repo == repository)
        engine("build", "--quiet", "--pull=never", "--network", "host", "-t", image, str(folder), timeout=900)
    else:
        pytest.fail(f"{image} cannot be pulled here and has no stand-in (tests/containers.py)")


def debian_base(engine: Engine, rootfs: Path) -> None:
    """Debian bookworm with Python 3.11 as python:3.11-slim: debootstrap, then import the folder."""
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None or os.geteuid() != 0:
        pytest.fail(f"{DEBIAN_BASE} is not here and cannot be pulled; as root, `apt-get install debootstrap`")
    command = [debootstrap, "--variant=minbase", f"--include={DEBIAN_PACKAGES}", "bookworm", str(rootfs)]
    run([*command, debian_mirror()], rootfs.parent, timeout=900)
    archive = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run(
        [engine.podman, "import", "--quiet", "-", DEBIAN_BASE],
        stdin=archive.stdout,
        env=engine.environ,
        check=True,
        capture_output=True,
        timeout=600,
    )
    assert archive.wait(timeout=60) == 0
    shutil.rmtree(rootfs)


def debian_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    for sources in [Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")]:
        if sources.exists():
            found = re.search(r"(?:URIs:|^deb)\s+(\S+/debian)\b", sources.read_text(encoding="utf-8"), re.M)
            if found:
                return found.group(1)
    return "http://deb.debian.org/debian"


def readme_commands(readme: Path, heading: str) -> list[list[str]]:
    """The commands of the first bash block under `heading`, one argv each (comments dropped)."""
    steps = readme_steps(readme, readme.name, after=f"\n{heading}\n", blocks=1)
    return [shlex.split(step.command) for step in steps]


def http_status(
    url: str, *, headers: dict[str, str] | None = None, body: bytes | None = None
) -> tuple[int, str]:
    """Status and body of one request; an HTTP error status is an answer, not an exception."""
    request = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def wait_for(url: str, status: int = 200, *, timeout: float = 180) -> str:
    """Poll `url` until it answers `status` (generously: a busy machine starts slowly)."""
    deadline, last = time.monotonic() + timeout, "no answer"
    while time.monotonic() < deadline:
        try:
            code, body = http_status(url)
            if code == status:
                return body
            last = f"{code} {body}"
        except (OSError, urllib.error.URLError) as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer {status} within {timeout:.0f} s; last: {last}")
