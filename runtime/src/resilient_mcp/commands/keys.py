"""`<slug> keys`: list idempotency keys, and settle the ones whose outcome is unknown.

A key is in doubt when its call stopped mid-way (a crash, a timeout): the side effect
may or may not have happened, so the server never runs it again by itself. Someone
who can check (the payment provider, the mailbox) settles it: `--done` makes retries
replay a "done" result, `--failed` releases the key so the next retry runs the call.

A key belongs to its caller (the CALLER column): `local` for stdio and HTTP without auth,
`sub:<subject>` or `client:<client id>` for an authenticated caller, `legacy` for keys stored
before keys had a caller. A key whose tool body may still be running is not settled: its
effect may still happen, and a released key's retry would repeat it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import TYPE_CHECKING, cast

import anyio

from resilient_mcp.authoring.errors import FatalError
from resilient_mcp.commands.columns import aligned
from resilient_mcp.project import this_project
from resilient_mcp.server.startup import exit_fatal, load_settings
from resilient_mcp.store import (
    LEGACY_CALLER,
    LOCAL_CALLER,
    IdempotencyStore,
    KeyRecord,
    Outcome,
    create_store,
)

if TYPE_CHECKING:
    from resilient_mcp.server.app import OwnerCode

FINGERPRINT_CHARS = 12
EXIT_NOT_SETTLED = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"{this_project().slug} keys", description="List idempotency keys and settle the ones in doubt."
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser(
        "list", help="the newest keys first: tool, key, caller, state, age, fingerprint, note"
    )
    listing.add_argument("--in-doubt", action="store_true", help="only keys whose outcome is unknown")
    listing.add_argument(
        "--limit", type=positive_int, default=50, help="at most this many keys (default: 50)"
    )
    listing.add_argument("--json", action="store_true", help="one JSON array instead of a table")
    settle = actions.add_parser("settle", help="record what happened to a key in doubt")
    settle.add_argument("tool", help="the tool's name, as `keys list` shows it")
    settle.add_argument("key", help="the idempotency key (quote it if it has spaces)")
    outcome = settle.add_mutually_exclusive_group(required=True)
    outcome.add_argument(
        "--done",
        dest="outcome",
        action="store_const",
        const="done",
        help="it happened: retries replay 'done'",
    )
    outcome.add_argument(
        "--failed",
        dest="outcome",
        action="store_const",
        const="failed",
        help="it did not happen: the next retry runs the call again",
    )
    settle.add_argument("--note", default="", help="why (shown in `keys list` and in the replayed result)")
    settle.add_argument(
        "--caller",
        type=_caller,
        help="whose key, as the CALLER column shows it (a bare SUBJECT means sub:SUBJECT); "
        "default: the one caller that has this key in doubt",
    )
    settle.add_argument(
        "--force",
        action="store_true",
        help="settle even while its tool body may still be running (its effect may still happen)",
    )
    return parser


def main(argv: list[str], owner: OwnerCode) -> int:
    args = build_parser().parse_args(argv)
    try:
        store = create_store(load_settings(owner.settings_class))
        code: int = anyio.run(_run, store, args)
    except FatalError as exc:
        exit_fatal(exc)
    return code


async def _run(store: IdempotencyStore, args: argparse.Namespace) -> int:
    await store.open()
    try:
        if args.action == "list":
            return await _list(store, in_doubt_only=args.in_doubt, limit=args.limit, as_json=args.json)
        outcome = cast(Outcome, args.outcome)
        return await _settle(store, args.tool, args.key, outcome, args.note, args.caller, force=args.force)
    finally:
        await store.close()


async def _list(store: IdempotencyStore, *, in_doubt_only: bool, limit: int, as_json: bool) -> int:
    records = await store.list_keys(in_doubt_only=in_doubt_only, limit=limit)
    if as_json:
        sys.stdout.write(
            json.dumps([dataclasses.asdict(r) for r in records], indent=2, ensure_ascii=False) + "\n"
        )
        return 0
    if not records:
        sys.stdout.write(
            "No idempotency keys in doubt.\n" if in_doubt_only else "No idempotency keys stored.\n"
        )
        return 0
    sys.stdout.write(format_table(records))
    if any(record.state == "in_doubt" for record in records):
        sys.stdout.write(
            "\nA key in doubt is never run again by itself. Once you know whether it happened:\n"
            f"  {this_project().slug} keys settle TOOL KEY --done    it happened: retries replay 'done'\n"
            f"  {this_project().slug} keys settle TOOL KEY --failed  it did not: the next retry runs it\n"
            "(quote a KEY that has spaces; add --caller CALLER when several callers have it in doubt)\n"
        )
    return 0


def format_table(records: list[KeyRecord]) -> str:
    """Aligned columns; the note comes last and is not padded."""
    header = ("TOOL", "KEY", "CALLER", "STATE", "AGE", "FINGERPRINT", "NOTE")
    rows = [header] + [
        (r.tool, r.key, r.caller, r.state, format_age(r.age_s), r.fingerprint[:FINGERPRINT_CHARS], r.note)
        for r in records
    ]
    return aligned(rows)


def format_age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


async def _settle(
    store: IdempotencyStore,
    tool: str,
    key: str,
    outcome: Outcome,
    note: str,
    caller: str | None,
    *,
    force: bool,
) -> int:
    named = f"key {key!r} of tool {tool!r}"
    if caller is None:
        unsettled = [r.caller for r in await store.find(tool, key) if r.state != "completed"]
        if len(unsettled) > 1:
            callers = ", ".join(unsettled)
            sys.stderr.write(
                f"Not settled: {named} is unsettled for several callers ({callers}), each its own key;"
                " name one with --caller CALLER.\n"
            )
            return EXIT_NOT_SETTLED
        caller = unsettled[0] if unsettled else LOCAL_CALLER
    running = await store.still_running(tool, key, caller=caller)
    if running is not None and not force:
        sys.stderr.write(
            f"Not settled: {named} (caller {caller}) may still take effect: {running}. Wait until it"
            " is in doubt with no body running (`keys list` shows it), or stop that server;"
            " --force settles it anyway.\n"
        )
        return EXIT_NOT_SETTLED
    if running is not None:
        sys.stderr.write(f"Warning: settling {named} although {running}; its effect may still happen.\n")
    if await store.settle(tool, key, outcome, note, caller=caller, force=force):
        whose = "" if caller == LOCAL_CALLER else f" of {caller}"
        if outcome == "done":
            sys.stdout.write(
                f"Settled {tool} {key!r}{whose} as done: retries with this key replay a 'done' result.\n"
            )
        else:
            sys.stdout.write(
                f"Settled {tool} {key!r}{whose} as failed: the next retry with this key runs the call.\n"
            )
        return 0
    record = await store.get(tool, key, caller=caller)
    listing = f"`{this_project().slug} keys list --in-doubt` shows the keys that are"
    if record is None:
        why = "no such key is stored (it may have expired, or the tool, key or caller is misspelled)"
    elif record.state == "completed":
        why = "it completed, and retries replay its result: there is nothing to settle"
    else:
        why = "its call is still running: wait for it to finish, or settle it once it shows as in doubt"
    sys.stderr.write(f"Not settled: {named} is not in doubt; {why}. {listing}.\n")
    return EXIT_NOT_SETTLED


def _caller(text: str) -> str:
    """A caller as `keys list` shows it; a bare subject is an authenticated caller's."""
    if text in (LOCAL_CALLER, LEGACY_CALLER) or text.startswith(("sub:", "client:")):
        return text
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return f"sub:{text}"


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value
