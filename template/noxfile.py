# Template-owned: `copier update` replaces this file.
"""Checks for this server: `nox` runs lint, typecheck and tests (yours and the smoke tests).

The server's behaviour is the resilient-mcp library's: its own suite, benchmarks and protocol
conformance run where it is released, not here.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|virtualenv"
nox.options.sessions = ["lint", "typecheck", "tests"]

# The project's command (`[project.scripts]`), so this file needs no rendering.
PROJECT = tomllib.loads(Path(__file__).with_name("pyproject.toml").read_text(encoding="utf-8"))["project"]
COMMAND = next(iter(PROJECT["scripts"]))
DEV_TOOLS = ("-r", "dev-tools.txt")  # the pinned ruff and mypy, the same pre-commit and CI use


@nox.session
def lint(session: nox.Session) -> None:
    """Ruff lint and format check."""
    session.install(*DEV_TOOLS)
    session.run("ruff", "check", ".", *session.posargs)
    session.run("ruff", "format", "--check", ".")


@nox.session(default=False)
def fmt(session: nox.Session) -> None:
    """Fix what ruff can (imports, upgrades, then formatting); fails on what is left for your hand."""
    session.install(*DEV_TOOLS)
    paths = session.posargs or ["."]
    session.run("ruff", "check", "--fix", "--exit-zero", "--silent", *paths)
    session.run("ruff", "format", *paths)
    session.run("ruff", "check", *paths)


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over src, tests and this file."""
    session.install("-e", ".[dev]", *DEV_TOOLS)
    session.run("mypy", "--strict", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """Your tests (tests/tools) and the smoke tests (the command as a host starts it): the quick loop."""
    session.install("-e", ".[dev]")
    session.run("pytest", *session.posargs)


@nox.session(default=False)
def dev(session: nox.Session) -> None:
    """Serve with the MCP Inspector, data in .nox/dev-data; `-- --http`: HTTP, restarted on each edit."""
    session.install("-e", ".")
    data_dir = Path(".nox", "dev-data").resolve()
    # Ctrl+C reaches both: wait for the command to stop its children rather than kill it at 0.3 s.
    session.run(COMMAND, "dev", "--data-dir", str(data_dir), *session.posargs, interrupt_timeout=30)


@nox.session(default=False)
def diagnose(session: nox.Session) -> None:
    """Start the server as an MCP host would and print the handshake report (JSON); args go to diagnose."""
    session.install("-e", ".")
    session.run(COMMAND, "diagnose", *session.posargs)


@nox.session(default=False)
def budget(session: nox.Session) -> None:
    """Print the tools/list budget table; fails when over budget or a tool has a problem."""
    session.install("-e", ".")
    session.run(COMMAND, "budget", *session.posargs)


@nox.session(default=False)
def contract(session: nox.Session) -> None:
    """Check the tools, resources and prompts against contract.json: a change that breaks clients fails.

    Record a change with `<command> contract` (compatible ones) or `<command> contract --accept`.
    """
    session.install("-e", ".")
    session.run(COMMAND, "contract", *(session.posargs or ["--check"]))


# The postgres backend's projects depend on the library's postgres extra.
POSTGRES = any(re.match(r"resilient-mcp\[postgres\]", dependency) for dependency in PROJECT["dependencies"])


@nox.session(default=False, venv_backend=None if POSTGRES else "none")
def db(session: nox.Session) -> None:
    """A local PostgreSQL (postgres backend), kept in .nox/postgres: prints the URL to export; `-- stop`."""
    if not POSTGRES:
        session.error("this project keeps its idempotency keys in SQLite: it needs no database server")
    # The project names the variables; pgserver's PostgreSQL where it has wheels, else the system's.
    session.install("-e", ".", "pgserver>=0.1.4; python_version < '3.13'")
    session.run("python", "-m", "resilient_mcp.testing.local_postgres", *session.posargs)


# The bundle's CLI from npm (npx), pinned: `pack` writes the format that version knows.
MCPB_CLI = "@anthropic-ai/mcpb@2.1.2"


@nox.session(python=False, default=False)
def mcpb(session: nox.Session) -> None:
    """The MCP bundle for desktop clients: dist/<slug>-<version>.mcpb (manifest 0.4, `uv` server type).

    Only what uv needs to install the server goes in (pyproject.toml, README, LICENSE, src/), with
    mcpb/manifest.json at the version pyproject.toml says and the server's instructions.md as its
    long description; the mcpb CLI (npx) validates and packs it (the icon: src/<package>/icon.png).
    """
    version = PROJECT["version"]
    stage = Path("build", "mcpb")
    shutil.rmtree(stage, ignore_errors=True)
    shutil.copytree("src", stage / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if Path(name).exists():
            shutil.copy2(name, stage / name)
    manifest = json.loads(Path("mcpb", "manifest.json").read_text(encoding="utf-8"))
    manifest["version"] = version
    # What the server tells the model is the bundle's long description, as the server reads it now.
    instructions = Path(manifest["server"]["entry_point"]).with_name("instructions.md")
    text = instructions.read_text(encoding="utf-8").strip() if instructions.is_file() else ""
    if text:
        manifest["long_description"] = text
    (stage / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    bundle = Path("dist", f"{PROJECT['name']}-{version}.mcpb")
    bundle.parent.mkdir(exist_ok=True)
    session.run("npx", "--yes", MCPB_CLI, "validate", str(stage / "manifest.json"), external=True)
    session.run("npx", "--yes", MCPB_CLI, "pack", str(stage), str(bundle), external=True)


@nox.session(default=False, venv_backend="none")
def lock(session: nox.Session) -> None:
    """`uv lock`: uv.lock brought up to date with pyproject.toml (`-- --upgrade`: every pin to the newest)."""
    session.run("uv", "lock", *session.posargs, external=True)


@nox.session(default=False)
def update(session: nox.Session) -> None:
    """`copier update` (arguments go to copier; default --defaults), then list what needs your hand.

    Where the template's tags did not travel (a clone of a clone), a release is found by the
    commit its CHANGELOG.md names: no arguments mean its newest release, `--vcs-ref vX.Y.Z` that
    one. After a `copier update` run by hand (a project made before this session existed), it
    checks that update instead of making another. A file the new version removes that you had
    changed (a file of the vendored core, before 0.4.0) is listed with your change, never dropped
    quietly: run it again after a `copier update` or an older version's `nox -s update`.
    """
    session.install("copier>=9.19,<10")
    try:
        before = answers(committed=True)
    except RuntimeError:
        session.error("commit the project first (git add -A && git commit): copier updates what git tracks")
    runs_copier = answers().get("_commit") == before.get("_commit")
    if not runs_copier:
        session.log("copier update has already run here (not committed yet): checking its result")
    else:
        source = TemplateSource(before.get("_src_path", ""))
        try:
            current = before.get("_commit", "")
            arguments, said = source.copier_arguments(session.posargs or ["--defaults"], current)
        except LookupError as exc:
            session.error(str(exc))
        if said:
            session.log(said)
        session.run("copier", "update", *arguments)
    after = answers()
    old, new = before.get("_commit", ""), after.get("_commit", "")
    if old == new:
        if not git("status", "--porcelain"):
            session.log(f"Already at template {old}: nothing to update.")
            return
        session.log(f"Still at template {old} (no Upgrading notes): the answers you changed are applied.")
    elif runs_copier and copier_places(old) and not QUIET.intersection(session.posargs):
        session.log(f"Template {old} to {new}: the Upgrading notes are above, where copier printed them.")
    else:
        source = TemplateSource(after.get("_src_path", ""))
        notes = upgrading_notes(Path("TEMPLATE_CHANGELOG.md"), source.version_of(old), source.version_of(new))
        if notes:
            session.log("What to do by hand, from TEMPLATE_CHANGELOG.md:\n" + notes)
    old_backend, new_backend = before.get("idempotency_backend"), after.get("idempotency_backend")
    if old_backend != new_backend:
        session.warn(
            f"idempotency_backend changed from {old_backend} to {new_backend}: the keys recorded in "
            f"{old_backend} are not moved, so a retry of an old key runs the tool again. Before you "
            f"deploy, settle the keys in doubt with the old build (`{COMMAND} keys list --in-doubt`)."
        )
    problems = removed_with_your_changes(session, before)
    problems += [f"unmerged: {path}" for path in git("diff", "--name-only", "--diff-filter=U")]
    problems += [f"conflict marker: {line}" for line in git("grep", "-n", "-I", "--untracked", "-E", MARKERS)]
    problems += [f"rejected part: {path}" for path in git("ls-files", "--others", "--", "*.rej")]
    if problems:
        session.error(
            "copier update needs your hand; resolve each of these, then `git add` and commit:\n  "
            + "\n  ".join(dict.fromkeys(problems))
        )
    if Path("uv.lock").exists():  # the new version's dependencies, locked
        if shutil.which("uv"):
            session.run("uv", "lock", "--quiet", external=True)
        else:
            session.warn("uv is not on the PATH: run `uv lock` before you commit, or CI finds uv.lock stale")
    session.log("Updated cleanly: review `git diff`, run `nox`, then commit.")


# copier's options that keep its messages (the Upgrading notes among them) from printing.
QUIET = {"--quiet", "-q"}


def copier_places(commit: str) -> bool:
    """Whether the message copier prints after an update finds the notes since `commit`.

    It reads a tag or `git describe` past one, or a commit TEMPLATE_CHANGELOG.md names; a
    commit placed by git ancestry alone (a template whose tags did not travel) is this file's to read.
    """
    if template_version(commit)[0]:
        return True
    released = TemplateSource("").releases().values()
    return any(commit.startswith(sha) or sha.startswith(commit) for sha in released if commit)


def removed_with_your_changes(session: nox.Session, before: dict[str, str]) -> list[str]:
    """The files the update removed that you had changed, as problems; the others are only named.

    copier removes every file the new template version no longer has, changed or not (release
    0.4.0 removed the vendored core: it is the resilient-mcp library now). Each removed file is
    compared with the old version's own render: a change of yours is shown, never dropped quietly.
    """
    removed = git("diff", "--name-only", "--diff-filter=D", "HEAD")
    if not removed:
        return []
    old = render_before(session, before)
    if old is None:
        session.warn(
            "The new template version no longer has these files, and the old version could not be "
            "rendered to tell which you changed (`git show HEAD:<path>` shows each):\n  "
            + "\n  ".join(removed)
        )
        return []
    yours = {path: committed(path) for path in removed}
    changed = [path for path in removed if rendered(old / path) != yours[path]]
    unchanged = [path for path in removed if path not in changed]
    if unchanged:
        session.log(
            "The new template version no longer has these files, which you had not changed: removed.\n  "
            + "\n  ".join(by_folder(unchanged))
        )
    added = kept_beside(removed, old)
    if added:
        session.warn(
            "Your own files in folders the template no longer fills are kept; check they import "
            "nothing it removed:\n  " + "\n  ".join(added)
        )
    for path in changed:
        diff = difflib.unified_diff(
            rendered(old / path).decode(errors="replace").splitlines(keepends=True),
            yours[path].decode(errors="replace").splitlines(keepends=True),
            fromfile=f"{path} (template {before.get('_commit', '')})",
            tofile=f"{path} (yours)",
        )
        session.log(f"You changed {path}, which the new template version removes:\n" + "".join(diff))
    return [
        f"removed, with your change in it: {path} (`git show HEAD:{path}`): {MOVE_IT}" for path in changed
    ]


# What to do with a change to a template file that the library now holds.
MOVE_IT = (
    "move the change into your own code (a @lifespan, @dependency or Check from <package>.core, "
    "a setting in settings.py, a module in tools/), as the Upgrading notes say, or drop it"
)


def render_before(session: nox.Session, before: dict[str, str]) -> Path | None:
    """The template version the project was at, rendered with its committed answers (None: it cannot be)."""
    target = Path(session.create_tmp()) / "template-before"
    shutil.rmtree(target, ignore_errors=True)
    data = target.with_name("answers-before.yml")
    lines = git("show", "HEAD:.copier-answers.yml")
    kept = [f"{line}\n" for line in lines if not line.startswith(("_", "#"))]  # copier's own keys go
    data.write_text("".join(kept), encoding="utf-8")
    copier = shutil.which("copier", path=session.bin) or "copier"
    source, commit = before.get("_src_path", ""), before.get("_commit", "")
    command = [copier, "copy", "--quiet", "--defaults", "--skip-tasks", "--vcs-ref", commit]
    result = subprocess.run(
        [*command, "--data-file", str(data), source, str(target)], capture_output=True, text=True, check=False
    )
    if result.returncode != 0 or not source or not commit:
        session.log(f"copier could not render template {commit} of {source}: {result.stderr.strip()[-2000:]}")
        return None
    return target


def rendered(path: Path) -> bytes:
    """A file of a render, empty where the render has none."""
    return path.read_bytes() if path.is_file() else b""


def committed(path: str) -> bytes:
    """A file's bytes as last committed."""
    return subprocess.run(["git", "show", f"HEAD:{path}"], capture_output=True, check=True).stdout


def by_folder(paths: list[str]) -> list[str]:
    """Paths, a folder with more than one of them as `folder/ (N files)`."""
    folders: dict[str, list[str]] = {}
    for path in paths:
        folders.setdefault(str(Path(path).parent), []).append(path)
    return [
        group[0] if len(group) == 1 else f"{folder}/ ({len(group)} files)"
        for folder, group in folders.items()
    ]


def kept_beside(removed: list[str], old: Path) -> list[str]:
    """Committed files of the owner's (not in the old version's render) in the folders of removed files."""
    folders = sorted({str(Path(path).parent) for path in removed})
    tracked = git("ls-tree", "-r", "--name-only", "HEAD", "--", *folders)
    return [
        path
        for path in tracked
        if str(Path(path).parent) in folders and path not in removed and not (old / path).exists()
    ]


# The lines git merge and copier update write around a conflict.
MARKERS = r"^(<<<<<<<|>>>>>>>)( |$)"


def git(*args: str) -> list[str]:
    """Lines of a git command's output (`git grep` finding nothing is not an error)."""
    result = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
    if result.returncode not in (0, 1):
        raise RuntimeError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
    return [line for line in result.stdout.splitlines() if line]


def answers(*, committed: bool = False) -> dict[str, str]:
    """The top-level answers in .copier-answers.yml (plain `key: value` lines), or as last committed."""
    if committed:
        text = "\n".join(git("show", "HEAD:.copier-answers.yml"))
    else:
        text = Path(".copier-answers.yml").read_text(encoding="utf-8")
    return dict(re.findall(r"^(\w+): ['\"]?(.*?)['\"]?$", text, flags=re.MULTILINE))


# A CHANGELOG entry (`## [0.2.0] - 2026-12-01`) and the commit it names (`Commit: `<sha>``).
RELEASE_ENTRY = r"^## \[(\d+(?:\.\d+)*)\][^\n]*\n(?:(?!^## ).*\n)*?^Commit: `([0-9a-f]{7,40})`$"


class TemplateSource:
    """The template a project was made from (`_src_path`), read where it is a git repository here.

    Tags do not travel with every clone: there a release is the commit its CHANGELOG.md names,
    and a `_commit` that is a bare hash is placed after the newest release it descends from.
    """

    def __init__(self, path: str) -> None:
        local = Path(path).expanduser()
        self.path = local if path and (local / ".git").exists() else None

    def _git(self, *args: str) -> list[str]:
        assert self.path is not None
        return git("-C", str(self.path), *args)

    def tags(self) -> list[str]:
        """The source's release tags, `vX.Y.Z`."""
        return [tag for tag in self._git("tag", "--list", "v*") if re.fullmatch(r"v\d+(?:\.\d+)*", tag)]

    def releases(self) -> dict[str, str]:
        """Each release's commit by version, newest first: the source's CHANGELOG.md, then the project's."""
        texts = []
        if self.path is not None:
            with contextlib.suppress(RuntimeError):  # a template without a CHANGELOG.md names none
                texts.append("\n".join(self._git("show", "HEAD:CHANGELOG.md")) + "\n")
        if Path("TEMPLATE_CHANGELOG.md").exists():
            texts.append(Path("TEMPLATE_CHANGELOG.md").read_text(encoding="utf-8"))
        found: dict[str, str] = {}
        for text in texts:
            for version, commit in re.findall(RELEASE_ENTRY, text, flags=re.MULTILINE):
                found.setdefault(version, commit)
        return dict(sorted(found.items(), key=lambda item: version_key(item[0]), reverse=True))

    def copier_arguments(self, arguments: list[str], current: str) -> tuple[list[str], str]:
        """The arguments for copier, and what was changed in them (empty: nothing).

        Without a `--vcs-ref`: the newest release (copier finds its tag; where tags did not
        travel, its commit), or HEAD for a project already past it, as one made from HEAD is.
        A release named by a tag the source lacks becomes the commit CHANGELOG.md names.
        """
        if self.path is None:
            return arguments, ""  # a remote template: copier reads its tags itself
        tags, releases = self.tags(), self.releases()
        at = [i for i, arg in enumerate(arguments) if arg == "--vcs-ref" or arg.startswith("--vcs-ref=")]
        if not at:
            versions = [version_key(tag[1:]) for tag in tags] + [version_key(version) for version in releases]
            if not versions or template_version(self.version_of(current)) > (max(versions), False):
                return [*arguments, "--vcs-ref", "HEAD"], f"no release of {self.path} is newer: its HEAD"
            if tags:
                return arguments, ""
            version, commit = next(iter(releases.items()))
            said = f"{self.path} has no tags: updating to its newest release, {version} ({commit[:12]})"
            return [*arguments, "--vcs-ref", commit], said
        i = at[-1]
        joined = arguments[i] != "--vcs-ref"
        ref = arguments[i].split("=", 1)[1] if joined else arguments[i + 1] if i + 1 < len(arguments) else ""
        wanted = ref.removeprefix("v")
        if ref in tags or f"v{wanted}" in tags or not re.fullmatch(r"\d+(?:\.\d+)*", wanted):
            return arguments, ""  # a tag, a commit or a branch: copier takes it as it is
        if wanted not in releases:
            known = ", ".join(releases) or "none"
            raise LookupError(f"{ref} is not a tag of {self.path} nor a release in its CHANGELOG.md: {known}")
        commit = releases[wanted]
        replaced = [*arguments]
        replaced[i : i + (1 if joined else 2)] = ["--vcs-ref", commit]
        return replaced, f"{self.path} has no tag {ref}: using its commit {commit[:12]} (CHANGELOG.md)"

    def version_of(self, commit: str) -> str:
        """A `_commit` as `upgrading_notes` reads it: a bare hash as its release, or past the last one."""
        if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            return commit
        releases = self.releases()
        for version, released in releases.items():
            if released.startswith(commit) or commit.startswith(released):
                return f"v{version}"
        for version, released in releases.items() if self.path is not None else []:
            is_ancestor = ["git", "-C", str(self.path), "merge-base", "--is-ancestor", released, commit]
            if subprocess.run(is_ancestor, capture_output=True, check=False).returncode == 0:
                return f"v{version}-0-g{commit}"
        return commit


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def template_version(commit: str) -> tuple[tuple[int, ...], bool]:
    """A template `_commit` as (release, past it): `v0.2.0` is ((0, 2, 0), False), `v0.2.0-3-gabc` True."""
    # A release has a dot (`0.4.0`): a short hash of only digits (`1234567`) is a commit.
    found = re.match(r"v?(\d+(?:\.\d+)+)(-\d+-g[0-9a-f]+)?$", commit)
    if found is None:
        return (), True
    return tuple(int(part) for part in found[1].split(".")), found[2] is not None


def upgrading_notes(changelog: Path, old: str, new: str) -> str:
    """The "Upgrading" parts of the versions after `old` up to `new` (Unreleased too, past a tag)."""
    if not changelog.exists():
        return ""
    (old_release, _), (new_release, past_new) = template_version(old), template_version(new)
    notes = []
    for heading, body in re.findall(
        r"^## \[([^\]]+)\][^\n]*\n(.*?)(?=^## \[|\Z)",
        changelog.read_text(encoding="utf-8"),
        flags=re.MULTILINE | re.DOTALL,
    ):
        release = template_version(heading)[0] if heading != "Unreleased" else None
        wanted = past_new if release is None else old_release < release <= new_release
        upgrading = re.search(r"^### Upgrading\n(.*?)(?=^##|\Z)", body, flags=re.MULTILINE | re.DOTALL)
        if wanted and upgrading:
            notes.append(f"[{heading}]\n{upgrading[1].strip()}")
    return "\n\n".join(notes)
