"""A destructive tool that asks the user to confirm before it runs.

The SDK's `Resolve` fills the `confirmation` parameter by asking the client, in the way the
call's protocol era has: an `elicitation/create` request during the call (2025-11-25), or an
`InputRequiredResult` the client answers by calling again (2026-07-28). The tool body runs
only once the user answered; a user who declines gets nothing deleted. A side-effecting
tool asks before it claims its key for good: the key is free again while the user decides.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Elicit, Resolve
from pydantic import BaseModel, Field

from resilient_mcp import TerminalError, tool
from resilient_mcp.server.startup import load_settings
from sample_server.settings import Settings

from .effects import Account, Cents, effect


class Confirmation(BaseModel):
    confirm: bool = Field(description="true to delete the file for good")


async def ask_to_confirm(name: str) -> Elicit[Confirmation]:
    return Elicit(f"Delete {name} for good? This cannot be undone.", Confirmation)


async def ask_to_confirm_charge(account: str, cents: int) -> Elicit[Confirmation]:
    return Elicit(f"Charge {cents} cents to {account}?", Confirmation)


@tool(destructive=True)
async def delete_file(
    name: Annotated[str, Field(description="Name of a file in the data directory")],
    confirmation: Annotated[Confirmation, Resolve(ask_to_confirm)],
) -> str:
    """Delete a file from the data directory, once the user confirmed it."""
    if not confirmation.confirm:
        raise TerminalError(f"the user did not confirm; {name} was not deleted")
    (load_settings(Settings).data_dir / name).unlink()
    return f"deleted {name}"


@tool(side_effect=True)
async def charge_after_confirming(
    account: Account,
    cents: Cents,
    confirmation: Annotated[Confirmation, Resolve(ask_to_confirm_charge)],
) -> str:
    """Charge an account once the user confirmed; a retry with the same key replays the answer."""
    if not confirmation.confirm:
        raise TerminalError("the user did not confirm; nothing was charged")
    return f"charged {cents} to {account} (effect #{effect(account, cents)})"
