"""Unknown `<PREFIX>` variables: a misspelt setting is refused, not silently left at its default.

Every variable (and `.env` entry) that starts with the project's prefix must be a setting of the
owner's class (the core's fields and theirs) or one of the few names read elsewhere. One pass over
the environment on every start: `difflib` runs only when something is unknown.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from pydantic import AliasChoices, AliasPath
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.project import this_project

# Read with the prefix, but not settings of the server.
READ_ELSEWHERE = (
    "DIAGNOSE_TOKEN",  # `<slug> diagnose`: the token it sends (host entries may carry it to the server)
    "TEST_DATABASE_URL",  # the project's tests (resilient_mcp.testing.postgres) and its CI job
)


def check_setting_names(settings_class: type[BaseSettings], environ: Mapping[str, str] | None = None) -> None:
    """Raise FatalError naming every `<PREFIX>` variable of the environment or `.env` that nothing reads."""
    prefix = this_project().env_prefix.upper()
    environment = os.environ if environ is None else environ
    given = sorted(name for name in environment if name.upper().startswith(prefix))
    in_dotenv = [name for name in _dotenv_names(settings_class) if name.upper().startswith(prefix)]
    if not given and not in_dotenv:
        return
    known, nested = _known_names(settings_class, prefix)
    unknown = [
        (name, source)
        for names, source in ((given, ""), (in_dotenv, " (in .env)"))
        for name in names
        if name.upper() not in known and not name.upper().startswith(nested)
    ]
    if unknown:
        raise _unknown_error(unknown, sorted(name.removeprefix(prefix) for name in known), prefix)


def _known_names(settings_class: type[BaseSettings], prefix: str) -> tuple[set[str], tuple[str, ...]]:
    """The variable names that are read (upper case), and the prefixes of nested fields' names."""
    known = {prefix + name for name in READ_ELSEWHERE}
    nested: list[str] = []
    delimiter = settings_class.model_config.get("env_nested_delimiter")
    for field_name, field in settings_class.model_fields.items():
        names = _alias_names(field) or [prefix + field_name.upper()]
        known.update(names)
        if delimiter:
            nested.extend(name + delimiter.upper() for name in names)
    return known, tuple(nested)


def _alias_names(field: FieldInfo) -> list[str]:
    """A field with an alias is read under the alias alone, without the prefix (pydantic-settings)."""
    alias = field.validation_alias or field.alias
    choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
    return [choice.upper() for choice in choices if isinstance(choice, str)] + [
        str(choice.path[0]).upper() for choice in choices if isinstance(choice, AliasPath)
    ]


def _dotenv_names(settings_class: type[BaseSettings]) -> Iterable[str]:
    """The names in the `.env` files the settings read, if any exist (python-dotenv parses them)."""
    configured = settings_class.model_config.get("env_file")
    files = [configured] if isinstance(configured, str | Path) else list(configured or ())
    existing = [Path(file).expanduser() for file in files if Path(file).expanduser().is_file()]
    if not existing:
        return []
    from dotenv import dotenv_values

    encoding = settings_class.model_config.get("env_file_encoding")
    return [name for file in existing for name in dotenv_values(file, encoding=encoding)]


def _unknown_error(unknown: list[tuple[str, str]], known: list[str], prefix: str) -> FatalError:
    import difflib  # only when something is unknown: not on every start

    several = len(unknown) > 1
    hints: list[str] = []
    unlike: list[str] = []
    for name, _ in unknown:
        # Compared without the prefix, which every name shares and would make anything look close.
        close = difflib.get_close_matches(name.upper().removeprefix(prefix), known, n=1)
        if close:
            hints.append(f"did you mean {prefix}{close[0]}" + (f" for {name}?" if several else "?"))
        else:
            unlike.append(name)
    if unlike:
        package = this_project().package
        hints.append(
            f"no setting has a name like {' or '.join(unlike) if several else 'it'}: the settings are "
            f"listed in the README's Settings table, your own in src/{package}/settings.py."
        )
    hints.append("Rename or unset each" if several else "Rename it, or unset it to use the default")
    names = ", ".join(name + source for name, source in unknown)
    return FatalError(f"unknown setting{'s' if several else ''} {names}", " ".join(hints))
