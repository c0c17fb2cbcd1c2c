"""The template's files that a project ships beside the library (its Dockerfile, its alert rules),
read from this repository: the library's tests check them against what the library serves, so a
change on either side that breaks the other fails here."""

from __future__ import annotations

from pathlib import Path

import jinja2

from sample_server.project import ENV_PREFIX, SLUG

TEMPLATE = Path(__file__).resolve().parents[2] / "template"


def template_source(relative: str) -> str:
    """The file as the template holds it, Jinja and all (`Dockerfile.jinja` for `Dockerfile`)."""
    path = TEMPLATE / relative
    jinja = path.with_name(path.name + ".jinja")
    return (jinja if jinja.exists() else path).read_text(encoding="utf-8")


def rendered_for_the_sample_project(relative: str) -> str:
    """The file as `copier copy` writes it for a project of the stand-in's slug and prefix; a file
    that asks for any other answer fails here, naming it, rather than render half-filled."""
    environment = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    template = environment.from_string(template_source(relative))
    return template.render(project_slug=SLUG, env_prefix=ENV_PREFIX)
