"""`<slug> keys`: an operator lists the keys in doubt and settles them, on this project's backend."""

from __future__ import annotations

import json
import socket
import subprocess
from pathlib import Path

import anyio
import pytest

from idempotency_support import new_store, release_worker, start_worker, wait_for_line
from resilient_mcp.commands import keys
from resilient_mcp.commands.cli import owner_code
from resilient_mcp.store import LOCAL_CALLER, Claim, IdempotencyStore, fingerprint
from sample_server.project import ENV_PREFIX, IDEMPOTENCY_BACKEND, SLUG
from support import server_argv, server_env

pytest_plugins = ["conftest_idempotency"]

TOOL = "send_email"
FP = fingerprint({"to": "ana@example.com"})


async def open_table(table: str) -> IdempotencyStore:
    store = new_store(IDEMPOTENCY_BACKEND, table)
    await store.open()
    return store


async def claim(table: str, key: str, caller: str = LOCAL_CALLER) -> Claim:
    """What a retry of the call with this key gets now."""
    store = await open_table(table)
    try:
        return await store.claim(TOOL, key, FP, 60.0, caller=caller)
    finally:
        await store.close()


async def add_keys(table: str) -> None:
    """A completed key, a key in doubt, and one whose server is gone (in doubt once swept)."""
    store = await open_table(table)
    await store.claim(TOOL, "done-1", FP, 60.0)
    await store.complete(TOOL, "done-1", {"content": [], "isError": False})
    await store.claim(TOOL, "run 7:step 2", FP, 60.0)
    await store.mark_started(TOOL, "run 7:step 2")
    await store.mark_in_doubt(TOOL, "run 7:step 2", "timed out after 60 s")
    await store.claim(TOOL, "crashed", FP, 60.0)
    await store.mark_started(TOOL, "crashed")
    await store.close()  # stopping with a call running leaves that key in doubt


async def add_in_doubt(table: str, key: str, *callers: str) -> None:
    """The key in doubt for each of these callers (a call that timed out)."""
    store = await open_table(table)
    for caller in callers:
        await store.claim(TOOL, key, FP, 60.0, caller=caller)
        await store.mark_started(TOOL, key, caller=caller)
        await store.mark_in_doubt(TOOL, key, "timed out after 60 s", caller=caller)
    await store.close()


def run_keys(*args: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = keys.main(list(args), owner_code())
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_shows_every_key_as_a_table(project_table: str, capsys: pytest.CaptureFixture[str]) -> None:
    anyio.run(add_keys, project_table)

    code, out, _ = run_keys("list", capsys=capsys)

    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["TOOL", "KEY", "CALLER", "STATE", "AGE", "FINGERPRINT", "NOTE"]
    rows = {line.split("  ")[1].strip(): line for line in lines[1:4]}
    assert set(rows) == {"done-1", "run 7:step 2", "crashed"}
    assert "completed" in rows["done-1"]
    assert rows["done-1"].split()[2] == "local"
    assert "in_doubt" in rows["run 7:step 2"]
    assert "timed out after 60 s" in rows["run 7:step 2"]
    assert FP[:12] in rows["crashed"]
    assert f"{SLUG} keys settle TOOL KEY --done" in out


def test_list_in_doubt_as_json(project_table: str, capsys: pytest.CaptureFixture[str]) -> None:
    anyio.run(add_keys, project_table)

    code, out, _ = run_keys("list", "--in-doubt", "--json", capsys=capsys)

    assert code == 0
    records = json.loads(out)
    assert sorted(r["key"] for r in records) == ["crashed", "run 7:step 2"]
    assert {r["state"] for r in records} == {"in_doubt"}
    assert all(r["fingerprint"] == FP and r["tool"] == TOOL for r in records)


@pytest.mark.usefixtures("project_table")
def test_list_of_an_empty_table_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_keys("list", capsys=capsys)[:2] == (0, "No idempotency keys stored.\n")
    assert run_keys("list", "--in-doubt", capsys=capsys)[:2] == (0, "No idempotency keys in doubt.\n")


def test_settle_done_then_retries_replay_done_with_the_note(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(add_keys, project_table)

    code, out, _ = run_keys(
        "settle", TOOL, "run 7:step 2", "--done", "--note", "mail log shows it sent", capsys=capsys
    )

    assert code == 0
    assert "as done" in out
    replay = anyio.run(claim, project_table, "run 7:step 2")
    assert replay.kind == "replay"
    assert replay.result is not None
    assert "mail log shows it sent" in replay.result["content"][0]["text"]


def test_settle_failed_lets_the_next_retry_run(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(add_keys, project_table)

    code, out, _ = run_keys("settle", TOOL, "crashed", "--failed", capsys=capsys)

    assert code == 0
    assert "as failed" in out
    assert anyio.run(claim, project_table, "crashed").kind == "new"


@pytest.mark.parametrize(
    ("key", "why"), [("no-such-key", "no such key is stored"), ("done-1", "it completed")]
)
def test_settle_of_a_key_not_in_doubt_exits_1_and_says_what_to_do(
    project_table: str, capsys: pytest.CaptureFixture[str], key: str, why: str
) -> None:
    anyio.run(add_keys, project_table)

    code, out, err = run_keys("settle", TOOL, key, "--done", capsys=capsys)

    assert (code, out) == (1, "")
    assert why in err
    assert f"{SLUG} keys list --in-doubt" in err


def test_settle_needs_done_or_failed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        keys.main(["settle", TOOL, "k"], owner_code())

    assert caught.value.code == 2
    assert "--done" in capsys.readouterr().err


def test_keys_command_end_to_end_with_an_unusable_table_is_fatal(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    settings = {"data_dir": str(blocker / "data"), "database_url": "postgresql://u:pw@127.0.0.1:1/db"}

    result = subprocess.run(
        server_argv("keys", "list"), env=server_env(**settings), capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 78  # EX_CONFIG, written out: a changed constant fails here
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    variable = "DATA_DIR" if IDEMPOTENCY_BACKEND == "sqlite" else "DATABASE_URL"
    assert line.startswith("FATAL: ")
    assert f"{ENV_PREFIX}{variable}" in line


def test_settle_of_a_key_several_callers_have_in_doubt_names_them_and_settles_only_the_one_named(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(add_in_doubt, project_table, "order-1", "sub:ana", "sub:ben")

    refused = run_keys("settle", TOOL, "order-1", "--failed", capsys=capsys)
    settled = run_keys("settle", TOOL, "order-1", "--failed", "--caller", "ben", capsys=capsys)

    assert refused[:2] == (1, "")
    assert "several callers (sub:ana, sub:ben)" in refused[2]
    assert "--caller" in refused[2]
    assert settled[0] == 0
    assert "of sub:ben as failed" in settled[1]
    assert anyio.run(claim, project_table, "order-1", "sub:ben").kind == "new"
    assert anyio.run(claim, project_table, "order-1", "sub:ana").kind == "in_doubt"


def test_settle_without_caller_settles_the_one_caller_that_has_the_key_in_doubt(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    anyio.run(add_in_doubt, project_table, "order-2", "sub:ana")

    code, out, _ = run_keys("settle", TOOL, "order-2", "--done", capsys=capsys)

    assert code == 0
    assert "of sub:ana as done" in out
    assert anyio.run(claim, project_table, "order-2", "sub:ana").kind == "replay"


def test_settle_refuses_a_key_whose_call_still_runs_and_force_settles_it_with_a_warning(
    project_table: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real server process holds the key: its body has begun and may still have its effect.
    process = start_worker(IDEMPOTENCY_BACKEND, project_table, TOOL, FP, "5", "started", "order-3")
    try:
        assert wait_for_line(process) == "ready"
        release_worker(process)
        assert json.loads(wait_for_line(process)) == ["new"]

        refused = run_keys("settle", TOOL, "order-3", "--failed", capsys=capsys)
        forced = run_keys("settle", TOOL, "order-3", "--failed", "--force", capsys=capsys)
    finally:
        process.kill()
        process.communicate(timeout=30)

    assert refused[:2] == (1, "")
    where = f"the server on {socket.gethostname()} (pid {process.pid})"
    assert f"its call is still running in {where}" in refused[2]
    assert "--force" in refused[2]
    assert forced[0] == 0
    assert forced[2].startswith("Warning: ")
    assert "its effect may still happen" in forced[2]
    assert anyio.run(claim, project_table, "order-3").kind == "new"
