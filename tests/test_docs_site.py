"""The documentation site (mkdocs.yml, docs/) builds with `mkdocs build --strict` and no warning,
and reads well in a real browser: Debian's Chromium, driven by Playwright, opens every page of
the built site (no console error, a title and a heading), follows no broken internal link, and
finds a setting through Material's search box. The READMEs' links to the site name built pages.

Playwright's own browser download is not reachable everywhere: the browser is Debian's
`chromium` (`.ci/run` installs it). Without it the test is skipped, or fails where
`MCP_TEMPLATE_CONTAINERS=required` (CI) says every outside tool must be there.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import sys
import threading
import time
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urldefrag, urljoin, urlsplit

import pytest
import yaml
from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from .gitrepo import REPO_ROOT
from .library_wheel import RUNTIME
from .project_env import run, uv_executable

MKDOCS_YML = REPO_ROOT / "mkdocs.yml"
DOCS = REPO_ROOT / "docs"
SETTING = "SHUTDOWN_GRACE_S"  # searched for: it must lead to the settings reference
SETTINGS_PAGE = "reference/settings/"
LOAD_TIMEOUT_MS = 30_000  # a loaded machine renders slowly; nothing here measures time
SEARCH_DEADLINE_S = 60.0


def docs_requirements() -> list[str]:
    """The pinned site tools: the repository's `docs` dependency group."""
    pyproject = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    group: list[str] = pyproject["dependency-groups"]["docs"]
    return group


@pytest.fixture(scope="module")
def chromium() -> str:
    """Debian's Chromium; asked for before the site is built, so that a skip costs nothing."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        reason = "chromium is not installed (Debian: `apt-get install chromium`; .ci/run installs it)"
        if os.environ.get("MCP_TEMPLATE_CONTAINERS") == "required":
            pytest.fail(reason)
        pytest.skip(reason)
    return found


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built once, as `nox -s docs` builds it: the runtime library beside MkDocs."""
    work = tmp_path_factory.mktemp("docs-site")
    venv, uv = work / "venv", uv_executable()
    run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], cwd=work)
    python = str(venv / "bin" / "python")
    packages = ["-e", str(RUNTIME), *docs_requirements()]
    run([uv, "pip", "install", "--quiet", "--python", python, *packages], cwd=work)
    built = work / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    output = run(
        [python, "-m", "mkdocs", "build", "--strict", "-f", str(MKDOCS_YML), "-d", str(built)],
        cwd=REPO_ROOT,
        env=env,
        timeout=300,
    )
    warnings = [line for line in output.splitlines() if re.match(r"\s*WARNING\b", line)]
    assert not warnings, "mkdocs build --strict warned:\n" + "\n".join(warnings)
    return built


@pytest.fixture(scope="module")
def served(site: Path) -> Iterator[str]:
    """The built site over HTTP on a free loopback port, as a static host would serve it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def search(page: Page, words: str) -> list[str]:
    """The addresses Material's search box lists for `words` (none within the deadline: none).

    The search index loads in a web worker after the page: words typed before it is ready go
    unanswered, so until results show they are deleted and typed again, key by key as a reader
    types them (Material does not answer a value set without key presses a second time)."""
    box = page.locator("input.md-search__input")  # the header's box, on a desktop-wide page
    results = page.locator(".md-search-result__item a")
    deadline = time.monotonic() + SEARCH_DEADLINE_S
    while time.monotonic() < deadline:
        box.press("Control+a")
        box.press("Backspace")
        box.press_sequentially(words)
        try:
            results.first.wait_for(timeout=5000)
        except PlaywrightTimeout:
            continue
        found: list[str] = results.evaluate_all("nodes => nodes.map(node => node.getAttribute('href'))")
        return found
    return []


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_every_page_renders_links_resolve_and_search_finds_a_setting(
    chromium: str, site: Path, served: str
) -> None:
    folders = [path.parent.relative_to(site).as_posix() for path in site.rglob("index.html")]
    pages = {served + ("" if folder == "." else f"{folder}/") for folder in folders}
    problems: list[str] = []
    anchors: dict[str, set[str]] = {}
    links: set[tuple[str, str]] = set()  # (page, href)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium)
        page = browser.new_page()
        page.set_default_timeout(LOAD_TIMEOUT_MS)
        errors: list[str] = []
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.on("pageerror", lambda error: errors.append(str(error)))
        for url in sorted(pages):
            errors.clear()
            page.goto(url, wait_until="load")
            title, heading = page.title(), page.locator("article h1").first
            if not title.strip():
                problems.append(f"{url}: no <title>")
            if heading.count() == 0 or not heading.inner_text().strip():
                problems.append(f"{url}: no h1 in the article")
            problems += [f"{url}: console error: {text}" for text in errors]
            anchors[url] = set(page.eval_on_selector_all("[id]", "nodes => nodes.map(node => node.id)"))
            hrefs = page.eval_on_selector_all("a[href]", "nodes => nodes.map(node => node.href)")
            links |= {(url, href) for href in hrefs if href.startswith(served)}

        # Material's search box: the setting's name leads to the settings reference.
        page.goto(served, wait_until="load")
        hrefs = search(page, SETTING)
        # A result's address is its page, `?h=` (the words to highlight) and a section's anchor.
        found = [urljoin(served, urlsplit(href).path) for href in hrefs]
        browser.close()

    if served + SETTINGS_PAGE not in found:
        problems.append(f"searching {SETTING} found {sorted(set(found))}, not the settings reference")
    for page_url, href in sorted(links):
        target, fragment = urldefrag(href)
        if target in anchors:
            if fragment and fragment not in anchors[target]:
                problems.append(f"{page_url}: link to #{fragment}, which {target} does not have")
        elif (code := status_of(target)) != 200:
            problems.append(f"{page_url}: link to {target} answers {code}")
    assert not problems, "\n".join(problems)
    assert {urlsplit(url).path for url in anchors} >= {"/", "/" + SETTINGS_PAGE}


def test_the_readmes_link_to_pages_the_site_has() -> None:
    """The generated README's site links are `{{ docs_site }}path/`, its base read from mkdocs.yml's
    site_url, and each names a page of docs/ (`path.md`: the strict build, which warns of a page
    left out of the nav, builds each one at `path/`); the repository's README names that site_url."""
    site_url = yaml.safe_load(MKDOCS_YML.read_text(encoding="utf-8"))["site_url"]
    generated = (REPO_ROOT / "template" / "README.md.jinja").read_text(encoding="utf-8")
    paths = [urldefrag(path)[0] for path in re.findall(r"\{\{ docs_site \}\}([^)\s]*)", generated)]

    assert paths, "the generated README links to no page of the site"
    missing = [path for path in paths if not (DOCS / f"{path.rstrip('/') or 'index'}.md").is_file()]
    assert not missing, f"the generated README links to pages the site does not have: {missing}"
    assert site_url in (REPO_ROOT / "README.md").read_text(encoding="utf-8")


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lowercase, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_generated_readmes_contents_name_its_sections() -> None:
    generated = (REPO_ROOT / "template" / "README.md.jinja").read_text(encoding="utf-8")
    sections = {github_anchor(heading) for heading in re.findall(r"^## (.+)$", generated, re.MULTILINE)}
    contents = re.findall(r"\]\(#([^)]+)\)", generated)

    assert contents, "the generated README has no contents"
    assert sorted(set(contents) - sections) == [], "contents entries without their section"
    assert sorted(sections - set(contents)) == [], "sections missing from the contents"
