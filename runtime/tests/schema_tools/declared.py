"""A tool whose input schema is declared, one that mirrors a parameter into a header, and a
side-effecting one with a declared schema (the core adds its idempotency key)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from resilient_mcp import tool

# Keys in an order pydantic would never write, and keywords it never makes: served byte for byte.
SHIPMENT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "parcel": {
            "$anchor": "parcel",
            "type": "object",
            "properties": {"kg": {"type": "number", "description": "Weight"}},
        }
    },
    "properties": {
        "mode": {"type": "string", "enum": ["air", "sea"], "description": "How it travels"},
        "parcel": {"$ref": "#/$defs/parcel", "description": "What travels"},
        "port": {"type": "string", "description": "The port of a sea shipment"},
    },
    "required": ["mode", "parcel"],
    "if": {"properties": {"mode": {"const": "sea"}}},
    "then": {"required": ["port"]},
    "additionalProperties": False,
}
RECEIPT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 1, "description": "Cents"}},
    "required": ["amount"],
}


@tool(read_only=True, input_schema=SHIPMENT_SCHEMA)
def ship(mode: str, parcel: dict[str, float], port: str | None = None) -> str:
    """Quote a shipment."""
    return f"{mode} {parcel['kg']} kg via {port or 'any port'}"


@tool(read_only=True, headers={"region": "Region"})
def route(
    region: Annotated[str, Field(description="Where to route the call")],
    note: Annotated[str, Field(description="Anything")] = "",
) -> str:
    """Route a call to a region."""
    return f"routed to {region}"


@tool(side_effect=True, input_schema=RECEIPT_SCHEMA)
def charge(amount: int) -> str:
    """Charge an amount once."""
    return f"charged {amount}"
