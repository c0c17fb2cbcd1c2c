"""A tool's declared input schema is served as written and enforced; a parameter mirrored into an
`Mcp-Param-*` header is checked against the body (SEP-2243); a schema that cannot be served stops
the server at start-up."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from http_support import json_rpc_answer, post
from resilient_mcp.commands.diagnose import MODERN, open_session, with_envelope
from schema_tools.declared import RECEIPT_SCHEMA, SHIPMENT_SCHEMA
from support import ANSWER_TIMEOUT_S, HERE, StdioSession, http_server, server_argv
from test_startup import assert_one_fatal_line, run

SCHEMA_TOOLS = HERE / "schema_tools"


def call(session: StdioSession, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
    params = with_envelope(MODERN, {"name": name, "arguments": arguments})
    result = session.request("tools/call", params)["result"]
    return bool(result.get("isError")), result["content"][0]["text"]


def test_a_declared_schema_is_served_as_written_and_a_violating_call_never_runs(
    subprocess_env: dict[str, str],
) -> None:
    with StdioSession(server_argv("serve", extra_tools=SCHEMA_TOOLS), env=subprocess_env) as session:
        open_session(session, MODERN, timeout=ANSWER_TIMEOUT_S)
        listed = session.request("tools/list", with_envelope(MODERN))["result"]["tools"]
        schemas = {tool["name"]: tool["inputSchema"] for tool in listed}
        # Byte for byte: every keyword kept, in the owner's order, nothing added.
        assert json.dumps(schemas["ship"]) == json.dumps(SHIPMENT_SCHEMA)
        # A side-effecting tool's schema gains the key the core takes from every such call.
        assert schemas["charge"]["required"] == [*RECEIPT_SCHEMA["required"], "idempotency_key"]
        assert set(schemas["charge"]["properties"]) == {"amount", "idempotency_key"}

        refused = [
            call(session, "ship", {"mode": "sea", "parcel": {"kg": 2}}),  # `then` requires a port
            call(session, "ship", {"mode": "air", "parcel": {"kg": "2"}}),  # through `$ref`
            call(session, "ship", {"mode": "rail", "parcel": {"kg": 2}, "prot": "x"}),
        ]
        assert all(is_error for is_error, _ in refused)
        texts = [text for _, text in refused]
        assert all(text.startswith("invalid_input: ") for text in texts), texts
        assert "'port' is required but missing" in texts[0]
        assert "'parcel.kg': expected number, got string '2'" in texts[1]
        assert "unknown argument 'prot' (did you mean 'port'?)" in texts[2]
        assert "'mode': expected one of \"air\", \"sea\", got string 'rail'" in texts[2]

        assert call(session, "ship", {"mode": "sea", "parcel": {"kg": 2}, "port": "Lisbon"}) == (
            False,
            "sea 2 kg via Lisbon",
        )
        charged = {"amount": 5, "idempotency_key": "order-1"}
        assert call(session, "charge", charged) == call(session, "charge", charged) == (False, "charged 5")


def routed(url: str, region: str, header: str | None) -> tuple[int, Any]:
    """A raw 2026-07-28 call of `route`, with `Mcp-Param-Region: header` (None: no such header)."""
    params = with_envelope(MODERN, {"name": "route", "arguments": {"region": region}})
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "route"}
    if header is not None:
        headers["Mcp-Param-Region"] = header
    status, _, text = post(url, body, **headers)
    return status, json_rpc_answer(text)


def test_a_mirrored_header_must_match_the_argument_over_http(subprocess_env: dict[str, str]) -> None:
    with http_server(subprocess_env, extra_tools=SCHEMA_TOOLS) as (url, _):
        listed = post(
            url,
            {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": with_envelope(MODERN)},
            **{"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"},
        )
        tools = json_rpc_answer(listed[2])["result"]["tools"]
        region = next(t for t in tools if t["name"] == "route")["inputSchema"]["properties"]["region"]
        assert region["x-mcp-header"] == "Region"

        for header in ("eu-east", None, "=?base64?ZXUtd2VzdA?="):  # another, missing, bad padding
            status, answer = routed(url, "eu-west", header)
            assert (status, answer["error"]["code"]) == (400, -32020), (header, answer)
        encoded = base64.b64encode("é-west".encode()).decode()
        for region_name, header in (("eu-west", "eu-west"), ("é-west", f"=?base64?{encoded}?=")):
            status, answer = routed(url, region_name, header)
            assert status == 200, answer
            assert answer["result"]["content"][0]["text"] == f"routed to {region_name}"


UNSERVABLE_SCHEMAS = '''
from typing import Annotated
from pydantic import Field
from resilient_mcp import tool


@tool(input_schema={"type": "object", "properties": {"city": {"type": "text"}}})
def core_test_bad_type(city: str = "") -> str:
    """A schema JSON Schema refuses."""
    return city


@tool(input_schema={"type": "object", "properties": {"town": {"type": "string"}}})
def core_test_other_names(city: str) -> str:
    """A schema that names other parameters."""
    return city
'''
UNSERVABLE_HEADER = '''
from resilient_mcp import tool


@tool(headers={"city": "City Name"})
def core_test_bad_header(city: str) -> str:
    """A header name with a space."""
    return city
'''


@pytest.mark.parametrize(
    ("module", "fragments"),
    [
        (
            UNSERVABLE_SCHEMAS,
            [
                "core_test_bad_type has an invalid input_schema at properties/city/type",
                "core_test_other_names takes 'city' that its input_schema's properties do not list, "
                "has input_schema properties 'town' that it does not take, needs a default for 'city'",
                "- make input_schema a valid JSON Schema",
            ],
        ),
        (UNSERVABLE_HEADER, ["core_test_bad_header cannot mirror", "is not an RFC 9110 token"]),
    ],
    ids=["schema", "header"],
)
def test_a_schema_or_header_that_cannot_be_served_stops_the_server(
    tmp_path: Path, data_dir: Path, module: str, fragments: list[str]
) -> None:
    tools = tmp_path / "unservable_schema_tools"
    tools.mkdir()
    (tools / "core_test_unservable_schema.py").write_text(module, encoding="utf-8")
    result = run("check", extra_tools=tools, data_dir=str(data_dir))
    assert_one_fatal_line(result, "sample_server.tools.core_test_unservable_schema:", *fragments)
