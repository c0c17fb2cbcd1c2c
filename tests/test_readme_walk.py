"""A newcomer's walk: this README's way to a new server, then the generated README top to bottom.

One shell runs every command in order, as written (tests/readme_walk.py says how each one runs,
and names the longer test that runs the few it leaves out), on a fresh copy: copier, uv sync,
git init and commit, the servers answering, nox, the client configs, pre-commit, the update.
The demo that opens this README runs in a copy of this repository.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from . import readme_walk
from .answers import MATRIX, answers
from .containers import LOCKS
from .gitrepo import REPO_ROOT, TemplateRepo
from .project_env import quick_start_environ, run
from .rendering import render

NEW_SERVER = "To create your own server without nox:"
SHELL = r"""
set -euo pipefail
INITIALIZE='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"readme-walk","version":"1"}}}'
step() { printf '\n### %s\n' "$*"; }
probe_stdio() {  # a stdio server answers initialize, then ends once stdin closes
    local answer
    answer=$(printf '%s\n' "$INITIALIZE" | timeout 120 "$@")
    case "$answer" in
        *'"result"'*) echo "answered initialize" ;;
        *) echo "no answer to initialize from $*: $answer" >&2; return 1 ;;
    esac
}
probe_http() {  # URL COMMAND...: the server answers URL, then SIGTERM ends it with exit 0
    local url=$1; shift
    mkdir -p "$WALK_LOCKS"
    exec 9>"$WALK_LOCKS/port-8000.lock"; flock 9  # the port the image tests publish too
    "$@" & local pid=$!
    python - "$url" <<'EOF'
import sys, time, urllib.request
deadline = time.monotonic() + 120
while True:
    try:
        urllib.request.urlopen(sys.argv[1], timeout=5)
        break
    except Exception as exc:
        if time.monotonic() > deadline:
            sys.exit(f"{sys.argv[1]} did not answer: {exc}")
        time.sleep(0.5)
EOF
    kill -TERM "$pid"
    wait "$pid"
    flock -u 9
    echo "answered $url, then stopped"
}
"""


def walk_steps(project_readme: Path) -> list[readme_walk.Step]:
    return [
        *readme_walk.readme_steps(REPO_ROOT / "README.md", "README.md", after=NEW_SERVER, blocks=1),
        *readme_walk.readme_steps(project_readme, "the generated README.md"),
    ]


def walk_script(steps: list[readme_walk.Step], slug: str, prefix: str) -> tuple[str, list[str]]:
    """The shell script of the walk, and the commands it leaves to other tests (with why)."""
    lines, left = [SHELL], []
    for step in steps:
        action = readme_walk.action_for(step.command, slug, prefix)
        lines.append(f"step {shlex.quote(f'{step.readme}: {step.command}')}")
        if isinstance(action, readme_walk.Covered):
            assert readme_walk.covered_test_exists(action), f"{step.command}: {action.test} does not exist"
            left.append(f"{step.command}: {action.test} ({action.why})")
            lines.append(f"echo {shlex.quote(f'run by {action.test}')}")
        elif isinstance(action, str):
            lines.append(f"echo {shlex.quote(action)}")
        else:
            lines.append(action(step.command))
    return "\n".join(lines) + "\n", left


def test_every_readme_command_has_a_rule_and_each_test_it_names_exists(
    rendered_project: Callable[[str], Path],
) -> None:
    """Cheap: a new README command without a rule fails here first, before the walk's minutes."""
    project = rendered_project("defaults")
    steps = walk_steps(project / "README.md")
    script, left = walk_script(steps, answers()["project_slug"], answers()["env_prefix"])
    assert "copier copy --defaults" in script
    assert any("docker build" in line for line in left)


@pytest.mark.generated(minutes=3)
@pytest.mark.parametrize("entry", ["defaults", "proprietary-postgres"])
def test_a_newcomer_walks_the_readmes_in_order(release_repo: Path, open_tmp: Path, entry: str) -> None:
    # A folder others may traverse: as root, the postgres project's PostgreSQL runs as another user.
    tmp_path = open_tmp / f"walk-{entry}"
    tmp_path.mkdir()
    chosen = answers(**MATRIX[entry])
    slug = chosen["project_slug"]
    data = " ".join(f"--data {shlex.quote(f'{key}={value}')}" for key, value in MATRIX[entry].items())
    # The generated README of these answers, as the walk will find it after `copier copy`.
    preview = render(release_repo, tmp_path / "preview", chosen, "HEAD")
    script, left = walk_script(walk_steps(preview / "README.md"), slug, chosen["env_prefix"])
    shutil.rmtree(preview)
    (tmp_path / "walk.sh").write_text(script, encoding="utf-8")
    environ = quick_start_environ()
    environ.update(
        {
            "PATH": f"{Path(sys.executable).parent}:{environ['PATH']}",
            "WALK_TEMPLATE": str(release_repo),
            "WALK_ANSWERS": data,
            "WALK_SLUG": slug,
            "WALK_HOME": str(tmp_path / "home"),
            "WALK_LOCKS": str(LOCKS),
            # The server's state directory (platformdirs) in the walk's folder, not the user's.
            "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_DATA_HOME": str(tmp_path / "share"),
        }
    )
    # Not the test session's venv: under nox, uv would sync the walk's project into it.
    for variable in ("VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "CONDA_PREFIX"):
        environ.pop(variable, None)

    output = run(["bash", str(tmp_path / "walk.sh")], tmp_path, env=environ, timeout=1500)

    project = tmp_path / "my-server"
    assert output.count("answered initialize") == 1, output[-3000:]
    assert "answered http://127.0.0.1:8000/livez, then stopped" in output
    assert "Already at template" in output, "the update of a project made from HEAD"
    assert (project / "uv.lock").exists()
    assert (
        "uv.lock"
        in subprocess.run(["git", "ls-files"], cwd=project, capture_output=True, text=True, check=True).stdout
    )
    assert (project / ".mcp.json").exists(), "client-config claude-code --install"
    assert (project / ".git" / "hooks" / "pre-commit").exists()
    assert (project / "contract.json").exists()
    assert left, "the commands other tests run are listed"


@pytest.mark.generated(minutes=2)
def test_the_demo_that_opens_the_readme(template_repo: TemplateRepo, tmp_path: Path) -> None:
    """`nox -s demo` from a copy of this repository: the server made, checked, diagnosed and
    talked to, and the last lines the README describes."""
    checkout = tmp_path / "checkout"
    shutil.copytree(template_repo.path, checkout, symlinks=True)
    demo = tmp_path / "demo-server"

    output = run(
        [sys.executable, "-m", "nox", "--non-interactive", "-s", "demo", "--", str(demo)],
        checkout,
        env=quick_start_environ(),
        timeout=900,
    )

    assert "the retry was replayed: True; same answer, note written once: True" in output
    printed = [line for line in output.splitlines() if line.strip() and not line.startswith("nox >")]
    assert printed[-1].endswith(" diagnose"), printed[-4:]
    assert printed[-3].strip().startswith("npx @modelcontextprotocol/inspector"), printed[-4:]
