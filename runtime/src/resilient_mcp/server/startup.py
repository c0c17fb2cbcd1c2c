"""Start-up checks: everything that would make every call fail is found before serving."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Literal, NoReturn, TypeVar, get_args, get_origin

from pydantic import SecretStr, ValidationError
from pydantic.fields import FieldInfo

from resilient_mcp.authoring.errors import EXIT_FATAL_AT_STARTUP, FatalError
from resilient_mcp.authoring.setting_names import check_setting_names
from resilient_mcp.authoring.settings import CoreSettings, data_dir_fix, no_database_url
from resilient_mcp.project import this_project
from resilient_mcp.telemetry.redaction import is_secret_name
from resilient_mcp.telemetry.text import clip

_MAX_VALUE_CHARS = 40
SettingsT = TypeVar("SettingsT", bound=CoreSettings)


def load_settings(settings_class: type[SettingsT]) -> SettingsT:
    """Read the owner's settings class (handed in by the entry point), a validation error or an
    unknown `<PREFIX>` variable as one FatalError line."""
    # First: a misspelt name may be why a required setting is missing.
    check_setting_names(settings_class)
    try:
        return settings_class()
    except ValidationError as exc:
        raise _settings_error(exc, settings_class) from None


def _holds_no_secret(field: FieldInfo | None) -> bool:
    """A choice, a number or a flag (`AUTH`, `SESSION_IDLE_TIMEOUT_S`): showing a wrong one helps."""
    annotation = field.annotation if field is not None else None
    return get_origin(annotation) is Literal or annotation in (int, float, bool)


def _typed_secret(annotation: object) -> bool:
    """`SecretStr` anywhere in the type (`REQUEST_STATE_KEYS`: `list[SecretStr]`), whatever the name."""
    return annotation is SecretStr or any(_typed_secret(arg) for arg in get_args(annotation))


def _settings_error(exc: ValidationError, settings: type[CoreSettings]) -> FatalError:
    problems = []
    for error in exc.errors():
        variable = this_project().env_prefix + "_".join(str(part) for part in error["loc"]).upper()
        field = settings.model_fields.get(str(error["loc"][0])) if error["loc"] else None
        # A secret (a short bearer token, a DSN's password) is named, never shown.
        named_secret = is_secret_name(variable.lower()) and not _holds_no_secret(field)
        secret = named_secret or (field is not None and _typed_secret(field.annotation))
        value = "[redacted]" if secret else repr(error["input"])
        problems.append(f"{variable}={clip(value, _MAX_VALUE_CHARS)} is invalid ({error['msg']})")
    return FatalError("; ".join(problems), "fix the value or unset the variable to use the default")


def check_data_dir(data_dir: Path) -> None:
    """The data directory exists (it is created) and a file can be written in it."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=data_dir, prefix=".write-check-"):
            pass
    except OSError as exc:
        raise FatalError(
            f"data directory {data_dir} is not writable ({exc.strerror or exc})", data_dir_fix()
        ) from None


def check_database_url(settings: CoreSettings) -> None:
    if this_project().idempotency_backend == "postgres" and not settings.database_url:
        raise no_database_url()


def run_startup_checks(settings: CoreSettings) -> None:
    """Every check that needs no server; raises the first FatalError found."""
    check_database_url(settings)
    check_data_dir(settings.data_dir)


def write_fatal(error: FatalError) -> None:
    """The one-line verdict on stderr, `FATAL: <what> - <fix>`: the server's, and every command's."""
    sys.stderr.write(f"FATAL: {error}\n")
    sys.stderr.flush()


def exit_fatal(error: FatalError, code: int = EXIT_FATAL_AT_STARTUP) -> NoReturn:
    """Print the one-line verdict to stderr and leave at once, without a traceback."""
    write_fatal(error)
    # os._exit: a stdio server may still have a worker thread blocked on stdin.
    os._exit(code)
