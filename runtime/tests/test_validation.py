"""Bad arguments are refused before the tool runs, with a message that names the field."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp import Client
from mcp.server.mcpserver.utilities.func_metadata import func_metadata
from mcp.types import CallToolResult
from pydantic import BaseModel

from resilient_mcp.calls.validation import (
    ArgumentValidator,
    harden_schema,
    unknown_name_message,
    unknown_tool_message,
    without_titles,
)
from resilient_mcp.server.resilient_server import ResilientServer
from sample_server.project import STRICT_ARGUMENTS
from support import error_of

ORDER = {"item": "tea", "quantity": 2, "address": {"street": "Rua A 1", "zip_code": "1000-001"}}


def refusal(result: CallToolResult) -> str:
    text, error = error_of(result)
    assert error["category"] == "invalid_input"
    assert error["retryable"] is False
    return text


async def call(server: ResilientServer, name: str, arguments: dict[str, Any]) -> CallToolResult:
    async with Client(server) as client:
        return await client.call_tool(name, arguments)


@pytest.fixture
def strict_server(make_server: Callable[..., ResilientServer]) -> ResilientServer:
    return make_server(strict=True)


@pytest.fixture
def lax_server(make_server: Callable[..., ResilientServer]) -> ResilientServer:
    return make_server(strict=False)


@pytest.mark.anyio
async def test_extra_argument_is_rejected_with_did_you_mean(strict_server: ResilientServer) -> None:
    text = refusal(await call(strict_server, "tag", {"tags": ["a"], "limt": 1}))
    assert "unknown argument 'limt' (did you mean 'limit'?)" in text


@pytest.mark.anyio
async def test_extra_nested_key_is_rejected_with_its_path(strict_server: ResilientServer) -> None:
    order = {**ORDER, "address": {**ORDER["address"], "zip": "x"}}  # type: ignore[dict-item]
    text = refusal(await call(strict_server, "place_order", {"order": order}))
    assert "unknown argument 'order.address.zip' (did you mean 'zip_code'?)" in text


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"tags": ["a"], "limit": "3"}, "'limit': Input should be a valid integer, got string '3'"),
        ({"tags": ["a"], "limit": True}, "'limit': Input should be a valid integer, got boolean True"),
        ({"tags": ["a"], "limit": 3.0}, "'limit': Input should be a valid integer, got number 3.0"),
        ({"limit": 3}, "'tags' is required but missing"),
        ({"tags": '["a", "b"]'}, "not a string holding JSON"),
    ],
)
async def test_types_are_not_coerced(
    strict_server: ResilientServer, arguments: dict[str, Any], expected: str
) -> None:
    assert expected in refusal(await call(strict_server, "tag", arguments))


@pytest.mark.anyio
async def test_nested_type_error_names_the_path(strict_server: ResilientServer) -> None:
    order = {**ORDER, "quantity": "two"}
    text = refusal(await call(strict_server, "place_order", {"order": order}))
    assert "'order.quantity': Input should be a valid integer, got string 'two'" in text


@pytest.mark.anyio
async def test_long_values_are_shortened_in_the_message(strict_server: ResilientServer) -> None:
    text = refusal(await call(strict_server, "tag", {"tags": ["a"], "limit": "9" * 10_000}))
    assert len(text) < 300
    assert "..." in text


@pytest.mark.anyio
async def test_valid_arguments_pass(strict_server: ResilientServer) -> None:
    result = await call(strict_server, "place_order", {"order": ORDER})
    assert not result.is_error, result.content


@pytest.mark.anyio
async def test_advertised_schemas_forbid_additional_properties(strict_server: ResilientServer) -> None:
    async with Client(strict_server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    schema = tools["place_order"].input_schema
    assert schema["additionalProperties"] is False
    assert all(d.get("additionalProperties") is False for d in schema["$defs"].values())


@pytest.mark.anyio
async def test_lax_mode_keeps_the_sdk_behaviour(lax_server: ResilientServer) -> None:
    coerced = await call(lax_server, "tag", {"tags": '["b", "a"]', "limit": "1", "extra": 1})
    assert not coerced.is_error
    assert coerced.structured_content == {"result": ["a"]}
    async with Client(lax_server) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
    assert "additionalProperties" not in tools["tag"].input_schema
    text = refusal(await call(lax_server, "tag", {"limit": 1}))
    assert "'tags' is required but missing" in text


@pytest.mark.anyio
async def test_this_project_validates_as_configured(server: ResilientServer) -> None:
    result = await call(server, "tag", {"tags": ["a"], "limit": "1"})
    assert result.is_error is STRICT_ARGUMENTS


# --- the validator itself, in-process: no server -------------------------------------------


class Guest(BaseModel):
    name: str
    age: int


def book(city: str, nights: int, guest: Guest | None = None, tags: list[Guest] | None = None) -> str:
    return city


def validator(*, strict: bool = True) -> ArgumentValidator:
    metadata = func_metadata(book)
    schema = metadata.arg_model.model_json_schema(by_alias=True)
    return ArgumentValidator(schema, metadata, strict=strict)


def test_direct_valid_arguments_are_validated_once() -> None:
    problem, model = validator().check({"city": "Lisbon", "nights": 2, "guest": {"name": "Ada", "age": 36}})
    assert problem is None
    assert model is not None
    assert model.model_dump()["guest"] == {"name": "Ada", "age": 36}


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"city": "Lisbon", "nigths": 2}, "unknown argument 'nigths' (did you mean 'nights'?)"),
        ({"city": "Lisbon", "nights": 2, "guest": {"name": "Ada", "age": 3, "ag": 1}}, "'guest.ag'"),
        ({"city": "Lisbon", "nights": 2, "tags": [{"name": "A", "age": 1, "x": 0}]}, "'tags[0].x'"),
        ({"city": "Lisbon", "nights": "2"}, "'nights': Input should be a valid integer, got string '2'"),
        ({"city": "Lisbon"}, "'nights' is required but missing"),
        ({"city": "Lisbon", "nights": 2, "guest": '{"name": "Ada"}'}, "not a string holding JSON"),
    ],
)
def test_direct_strict_refusals_name_the_path_and_the_fix(arguments: dict[str, Any], expected: str) -> None:
    problem, model = validator().check(arguments)
    assert model is None
    assert problem is not None
    assert expected in problem


def test_direct_many_unknown_names_get_a_short_answer() -> None:
    arguments = {"city": "Lisbon", "nights": 2, **{f"extra_{i}": i for i in range(10_000)}}
    problem, _ = validator().check(arguments)
    assert problem is not None
    assert problem.endswith("; and 9997 more unknown")
    assert len(problem) < 1000


def test_direct_lax_mode_coerces_and_drops_as_the_sdk_does() -> None:
    problem, model = validator(strict=False).check({"city": "Lisbon", "nights": "2", "extra": 1})
    assert problem is None
    assert model is not None
    assert model.model_dump()["nights"] == 2


def test_direct_long_values_and_names_are_shortened() -> None:
    problem, _ = validator().check({"city": "Lisbon", "nights": "9" * 500, "x" * 500: 1})
    assert problem is not None
    assert "9" * 100 not in problem
    assert "x" * 100 not in problem


def test_unknown_tool_names_the_closest_and_the_declared_ones() -> None:
    message = unknown_tool_message("serch", ["search", "fetch"])
    assert message == "no tool named 'serch'; did you mean 'search'? declared tools: fetch, search"
    assert unknown_name_message("prompt", "p", [f"p{i}" for i in range(30)], listed_at_most=3).endswith(
        "declared prompts: p0, p1, p10, ..."
    )


def test_hardened_schema_forbids_extra_keys_on_every_listed_object_and_keeps_the_original() -> None:
    schema = validator().schema
    hardened = harden_schema(schema)
    assert hardened["additionalProperties"] is False
    assert hardened["$defs"]["Guest"]["additionalProperties"] is False
    assert "additionalProperties" not in schema


def test_titles_go_except_a_property_called_title_and_data() -> None:
    schema = {
        "title": "bookArguments",
        "type": "object",
        "properties": {"title": {"title": "Title", "type": "string", "default": {"title": "kept"}}},
    }
    assert without_titles(schema) == {
        "type": "object",
        "properties": {"title": {"type": "string", "default": {"title": "kept"}}},
    }
