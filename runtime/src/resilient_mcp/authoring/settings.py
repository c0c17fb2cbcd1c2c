"""The settings every server has, read from `<PREFIX>*` variables (`project.ENV_PREFIX`) and `.env`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.project import this_project

LogLevel = Literal["debug", "info", "warning", "error"]
AuthMode = Literal["none", "bearer", "oauth"]
HttpExchange = Literal["core", "sdk"]
CacheScope = Literal["private", "public"]
MAKE_A_REQUEST_STATE_KEY = '`python -c "import secrets; print(secrets.token_urlsafe(48))"`'
# Comma-separated in the environment ("a,b"), not JSON.
CommaList = Annotated[list[str], NoDecode]


def default_data_dir() -> Path:
    """The per-user state directory; platformdirs loads only when no DATA_DIR is set."""
    from platformdirs import user_state_path

    return user_state_path(this_project().slug)


class CoreSettings(BaseSettings):
    """Settings the core reads; subclass it (in settings.py) to add your own."""

    model_config = SettingsConfigDict(
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        validate_default=True,
        # Built when first instantiated: serving builds only the owner's subclass (`Settings`).
        defer_build=True,
    )

    def __init__(self, **values: Any) -> None:
        # The prefix is the served project's, known at run time (`<PREFIX>LOG_LEVEL`, ...).
        values.setdefault("_env_prefix", this_project().env_prefix)
        super().__init__(**values)

    log_level: LogLevel = Field("info", description="debug, info, warning or error")
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="where the SQLite idempotency table lives",
    )
    database_url: str | None = Field(None, description="PostgreSQL DSN (postgres backend)")
    tool_timeout_s: float = Field(60.0, gt=0, description="default per-call time limit")
    idempotency_ttl_s: int = Field(86400, gt=0, description="how long idempotency keys are kept")
    task_ttl_s: int = Field(86400, gt=0, description="how long a finished task is kept (its ttlMs)")
    task_poll_interval_ms: int = Field(1000, gt=0, description="the poll interval tasks tell clients")
    max_tasks_per_caller: int = Field(
        100, gt=0, description="unfinished tasks per caller (input_required included); more are rate_limited"
    )
    retry_max_attempts: int = Field(4, ge=1, le=20, description="attempts in all for a transient failure")
    retry_max_s: float = Field(10.0, gt=0, description="time bound for those attempts")
    max_result_bytes: int = Field(
        100_000, ge=1000, description="largest tool result: text is cut, structured is too_large"
    )
    progress_interval_s: float = Field(
        15.0, gt=0, description="heartbeat progress for calls that carry a progressToken"
    )
    rate_limit: float = Field(0.0, ge=0, description="calls per minute per caller (token bucket; 0: off)")
    max_concurrent_calls: int = Field(64, gt=0, description="calls running at once; more are rate_limited")
    metrics: bool = Field(False, description="serve Prometheus metrics (/metrics) on METRICS_ADDRESS")
    metrics_address: str = Field(
        "127.0.0.1:9464", description="host:port of the metrics listener (its own; never the MCP port)"
    )

    # HTTP (serve --transport http): who may reach the server and how much it takes.
    allowed_hosts: CommaList = Field(
        default_factory=list, description="Host values accepted (name or name:port; name:* for any port)"
    )
    allowed_origins: CommaList = Field(
        default_factory=list, description="browser Origin values accepted (scheme://name[:port])"
    )
    auth: AuthMode = Field("none", description="none, bearer or oauth")
    bearer_token: SecretStr | None = Field(None, description="bearer: the token (32+ characters)")
    bearer_tokens_file: Path | None = Field(None, description="bearer: a file of `subject token` lines")
    oauth_issuer: str | None = Field(None, description="oauth: the authorization server's issuer URL")
    oauth_audience: str | None = Field(None, description="oauth: this server's resource URL (RFC 8707)")
    oauth_jwks_url: str | None = Field(None, description="oauth: the key set (default: issuer metadata)")
    oauth_required_scopes: CommaList = Field(
        default_factory=list, description="oauth: scopes every call needs"
    )
    allow_unauthenticated: bool = Field(False, description="let AUTH=none bind a non-loopback address")
    http_stateless: bool = Field(False, description="serve without sessions, so any replica answers")
    http_exchange: HttpExchange = Field(
        "core", description="who answers requests: the core, with fewer tasks a call, or the SDK as it is"
    )
    max_request_bytes: int = Field(4 * 1024 * 1024, gt=0, description="largest HTTP request body (413 above)")
    shutdown_grace_s: float = Field(
        10.0, ge=0, description="on SIGTERM, SIGINT or SIGHUP, how long in-flight calls may finish"
    )
    max_connections: int = Field(1000, gt=0, description="open HTTP connections; more get 503")
    max_sessions: int = Field(
        1000, gt=0, description="open MCP sessions (2025-11-25 era); a new one closes the least recently used"
    )
    max_sessions_per_caller: int = Field(
        100, gt=0, description="open MCP sessions per caller (token subject; with auth only)"
    )
    session_idle_timeout_s: float = Field(
        600.0, gt=0, description="an MCP session without requests is closed after this (open streams too)"
    )
    http_read_timeout_s: float = Field(
        30.0, gt=0, description="a request's headers and body must arrive within this"
    )
    request_state_keys: Annotated[list[SecretStr], NoDecode] = Field(
        default_factory=list,
        description="secrets sealing MRTR requestState (32+ bytes each; the first seals, all unseal)",
    )
    list_ttl_ms: int = Field(60_000, ge=0, description="2026-07-28: how long list results stay fresh")
    cache_scope: CacheScope = Field(
        "private", description="2026-07-28: list results cached per caller or shared"
    )

    # Which tools this deployment declares (health_check always), and what else stays secret.
    read_only: bool = Field(False, description="declare only read_only tools (and health_check)")
    tools_allow: CommaList = Field(
        default_factory=list, description="tool names or globs to declare (empty: all)"
    )
    tools_deny: CommaList = Field(default_factory=list, description="tool names or globs to hide")
    redact_keys: CommaList = Field(
        default_factory=list, description="more field names whose values are secrets (log keys, name=value)"
    )
    redact_patterns: CommaList = Field(
        default_factory=list, description="more regexes whose matches are redacted (write a comma as \\x2c)"
    )

    @field_validator(
        "tools_allow", "tools_deny", "redact_keys", "redact_patterns", "request_state_keys", mode="before"
    )
    @classmethod
    def _split_owner_lists(cls, value: object) -> object:
        return cls._split_commas(value)

    @field_validator("redact_patterns", mode="after")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
        return patterns

    @field_validator("allowed_hosts", "allowed_origins", "oauth_required_scopes", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("bearer_token", mode="after")
    @classmethod
    def _long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("a bearer token needs 32+ characters; make one with `openssl rand -hex 32`")
        return value

    @field_validator("request_state_keys", mode="after")
    @classmethod
    def _keys_long_enough(cls, keys: list[SecretStr]) -> list[SecretStr]:
        for position, key in enumerate(keys, start=1):
            if len(key.get_secret_value().encode()) < 32:
                raise ValueError(
                    f"key {position} is shorter than 32 bytes; make one with {MAKE_A_REQUEST_STATE_KEY}"
                )
        if len({key.get_secret_value() for key in keys}) < len(keys):
            raise ValueError("a key is listed twice; each key must be a different secret")
        return keys

    @field_validator("auth", "cache_scope", mode="before")
    @classmethod
    def _lowercase_choice(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("log_level", mode="before")
    @classmethod
    def _lowercase_level(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("data_dir", mode="after")
    @classmethod
    def _expand_user(cls, value: Path) -> Path:
        return value.expanduser()


def no_database_url() -> FatalError:
    return FatalError(
        f"{this_project().env_prefix}DATABASE_URL is not set",
        f"set {this_project().env_prefix}DATABASE_URL to a PostgreSQL DSN, e.g. "
        "postgresql://user@host/dbname (for local development, `nox -s db` starts one and prints "
        "the URL to export)",
    )


# The start-up checks and the store, which may find the same fault later, say the same.
def data_dir_fix() -> str:
    return f"set {this_project().env_prefix}DATA_DIR to a writable directory or fix its permissions"
