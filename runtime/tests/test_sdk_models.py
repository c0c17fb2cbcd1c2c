"""The SDK imported with its models built at their first use (resilient_mcp/sdk_models.py), held
to the SDK imported as it is: every model describes itself the same, and every message reads
the same, whether it was built at import or at its first use.

Each import runs in a fresh interpreter, the twin too: models describing themselves get built,
so two reports of one interpreter would not be alike.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from resilient_mcp.commands.diagnose import LEGACY, open_session, with_envelope
from resilient_mcp.sdk_models import SDK_MODULE, rebuilds_under_a_lock
from sample_server.project import PACKAGE
from support import ANSWER_TIMEOUT_S, StdioSession

# Messages of every kind a server reads or writes, valid and not, read by the SDK's models.
MESSAGES: list[tuple[str, dict[str, Any]]] = [
    (
        "InitializeRequest",
        {
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"elicitation": {}},
                "clientInfo": {"name": "c", "version": "1"},
            },
        },
    ),
    (
        "CallToolRequest",
        {
            "method": "tools/call",
            "params": {"name": "word_count", "arguments": {"text": "a b"}, "_meta": {"progressToken": 7}},
        },
    ),
    ("CallToolRequest", {"method": "tools/call", "params": {"arguments": {}}}),
    (
        "CallToolResult",
        {
            "content": [
                {"type": "text", "text": "3"},
                {"type": "image", "data": "AA==", "mimeType": "image/png"},
            ],
            "structuredContent": {"result": 3},
            "isError": False,
        },
    ),
    ("CallToolResult", {"content": [{"type": "nonsense"}]}),
    (
        "ListToolsResult",
        {
            "tools": [
                {
                    "name": "t",
                    "inputSchema": {"type": "object"},
                    "annotations": {"readOnlyHint": True},
                    "icons": [{"src": "data:image/png;base64,AA=="}],
                }
            ],
            "nextCursor": "x",
        },
    ),
    (
        "ReadResourceResult",
        {"contents": [{"uri": "file:///a", "text": "t"}, {"uri": "file:///b", "blob": "AA=="}]},
    ),
    ("GetPromptResult", {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}]}),
    ("ElicitResult", {"action": "accept", "content": {"ok": True}}),
    ("CreateMessageResult", {"role": "assistant", "content": {"type": "text", "text": "x"}, "model": "m"}),
    (
        "ProgressNotification",
        {"method": "notifications/progress", "params": {"progressToken": "p", "progress": 0.5, "total": 1}},
    ),
    (
        "LoggingMessageNotification",
        {"method": "notifications/message", "params": {"level": "bogus", "data": 1}},
    ),
]

# What one interpreter reports: which SDK models were still unbuilt after the import, how each
# model describes itself (both schemas), and how each message above reads.
REPORT = textwrap.dedent(
    """
    import json, sys
    from pydantic import BaseModel, ValidationError

    def sdk_models():
        found = {}
        for name, module in sorted(sys.modules.items()):
            if not name.startswith(("mcp.", "mcp_types")) or module is None:
                continue
            for value in vars(module).values():
                if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == name:
                    found[f"{name}.{value.__qualname__}"] = value
        return found

    def described(model):
        out = []
        for mode in ("validation", "serialization"):
            try:
                out.append(model.model_json_schema(mode=mode))
            except Exception as exc:
                out.append(type(exc).__name__)
        return out

    def read(model, payload):
        try:
            return model.model_validate(payload).model_dump(mode="json", by_alias=True, exclude_unset=True)
        except ValidationError as exc:
            return sorted((".".join(map(str, e["loc"])), e["type"]) for e in exc.errors())

    def report(messages, describe):
        import mcp_types
        models = sdk_models()
        unbuilt = sorted(name for name, model in models.items() if not model.__pydantic_complete__)
        if not describe:  # describing builds every model: most of the report's time
            return {"unbuilt": unbuilt}
        readings = [read(getattr(mcp_types, name), payload) for name, payload in messages]
        return {
            "unbuilt": unbuilt,
            "described": {name: described(model) for name, model in models.items()},
            "readings": readings,
        }
    """
)


def run_python(script: str, *args: str) -> str:
    """What `python -c script args...` printed, in a fresh interpreter that must exit 0."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


def in_fresh_interpreter(before: str, *, describe: bool = False) -> dict[str, Any]:
    """The report of an interpreter that ran `before`: the unbuilt models, and with `describe`
    also every model's schemas and the messages read."""
    script = (
        REPORT
        + textwrap.dedent(before)
        + "\nprint(json.dumps(report(json.loads(sys.argv[1]), sys.argv[2] == 'describe'), default=repr))\n"
    )
    result: dict[str, Any] = json.loads(
        run_python(script, json.dumps(MESSAGES), "describe" if describe else "list")
    )
    return result


def eager_twin(*, describe: bool = False) -> dict[str, Any]:
    return in_fresh_interpreter(f"import {SDK_MODULE}", describe=describe)


def test_the_sdk_models_are_built_at_first_use_and_read_and_describe_as_when_built_at_import() -> None:
    deferred = in_fresh_interpreter(
        """
        from resilient_mcp.sdk_models import import_sdk_with_deferred_models
        import_sdk_with_deferred_models()
        """,
        describe=True,
    )
    eager = eager_twin(describe=True)

    # Most of the SDK's models were left unbuilt by the import (the point of it; a few are
    # unbuilt either way, waiting for names the SDK resolves later) ...
    assert len(set(deferred["unbuilt"]) - set(eager["unbuilt"])) > 100, deferred["unbuilt"]
    assert "mcp_types._types.CallToolResult" in deferred["unbuilt"]
    assert "mcp_types._types.CallToolResult" not in eager["unbuilt"]
    # ... and, built at their first use, are the same models.
    assert deferred["described"].keys() == eager["described"].keys()
    for name, description in eager["described"].items():
        assert deferred["described"][name] == description, name
    assert deferred["readings"] == eager["readings"]
    # The readings include refusals, so a model built wrong would show.
    assert any(isinstance(reading, list) for reading in eager["readings"])


def test_models_defined_after_the_import_are_built_as_they_are_defined() -> None:
    script = textwrap.dedent(
        """
        from pydantic import BaseModel
        from resilient_mcp.sdk_models import import_sdk_with_deferred_models
        import_sdk_with_deferred_models()
        import mcp_types

        class Owner(BaseModel):
            n: int

        class OwnerResult(mcp_types.CallToolResult):
            extra_note: str = ""

        print(dict(BaseModel.model_config), Owner.__pydantic_complete__, OwnerResult.__pydantic_complete__)
        print(OwnerResult(content=[]).model_dump(by_alias=True, exclude_unset=True))
        """
    )
    printed = run_python(script).splitlines()
    config, owner_built, subclass_built = printed[0].rsplit(" ", 2)
    assert config == "{}"  # pydantic's default config is as it was
    assert owner_built == "True"
    # A subclass of an SDK model takes its config from it: built at first use too, and then works.
    assert subclass_built == "False"
    assert printed[1] == "{'content': []}"


def test_an_sdk_already_imported_or_a_default_already_chosen_is_left_as_it_is() -> None:
    already_imported = in_fresh_interpreter(
        f"""
        import {SDK_MODULE}
        from resilient_mcp.sdk_models import import_sdk_with_deferred_models
        import_sdk_with_deferred_models()
        """
    )
    assert "mcp_types._types.CallToolResult" not in already_imported["unbuilt"]
    assert already_imported["unbuilt"] == eager_twin()["unbuilt"]

    script = textwrap.dedent(
        """
        from pydantic import BaseModel
        BaseModel.model_config["defer_build"] = False
        from resilient_mcp.sdk_models import import_sdk_with_deferred_models
        import_sdk_with_deferred_models()
        import mcp_types
        print(dict(BaseModel.model_config), mcp_types.CallToolResult.__pydantic_complete__)
        """
    )
    assert run_python(script).split() == ["{'defer_build':", "False}", "True"]


def test_a_pydantic_whose_rebuild_takes_no_lock_gets_the_sdk_as_it_is() -> None:
    """Before 2.14 a model first used from two threads at once could validate with its parent's
    validator meanwhile: there, nothing is deferred."""
    assert [rebuilds_under_a_lock(v) for v in ("2.11.0", "2.13.4", "2.14.0", "2.15.0b1", "3.0.0")] == [
        False,
        False,
        True,
        True,
        True,
    ]
    older = in_fresh_interpreter(
        """
        import resilient_mcp.sdk_models as deferral
        deferral.PYDANTIC_VERSION = "2.13.4"
        deferral.import_sdk_with_deferred_models()
        """
    )
    assert older["unbuilt"] == eager_twin()["unbuilt"]


def test_a_served_session_builds_only_the_models_it_used(
    subprocess_env: dict[str, str], tmp_path: Path
) -> None:
    """`serve` imports the SDK deferred: after a session of handshake, tools/list and a call
    (answered as ever), the models it used are built and one it never needed is not."""
    report = tmp_path / "built.json"
    launcher = textwrap.dedent(
        f"""
        import atexit, json, runpy, sys

        def built():
            types = sys.modules["mcp_types"]
            names = ["CallToolResult", "ListToolsResult", "ElicitResult", "CreateMessageResult"]
            with open({str(report)!r}, "w") as out:
                json.dump({{name: getattr(types, name).__pydantic_complete__ for name in names}}, out)

        atexit.register(built)
        sys.argv = ["{PACKAGE}", "serve"]
        runpy.run_module("{PACKAGE}", run_name="__main__")
        """
    )
    with StdioSession([sys.executable, "-c", launcher], env=subprocess_env) as session:
        open_session(session, LEGACY, timeout=ANSWER_TIMEOUT_S)
        listed = session.request("tools/list", with_envelope(LEGACY) or None, timeout=ANSWER_TIMEOUT_S)
        assert "word_count" in {tool["name"] for tool in listed["result"]["tools"]}, listed
        call = {"name": "word_count", "arguments": {"text": "one two three"}}
        called = session.request("tools/call", with_envelope(LEGACY, call), timeout=ANSWER_TIMEOUT_S)
        assert called["result"]["structuredContent"] == {"result": 3}, called
        assert session.close(timeout=ANSWER_TIMEOUT_S) == 0
    assert json.loads(report.read_text()) == {
        "CallToolResult": True,
        "ListToolsResult": True,
        "ElicitResult": False,
        "CreateMessageResult": False,
    }
