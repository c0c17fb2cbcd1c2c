"""A tool as the core serves it: built once from its spec, then one attempt at a time.

`build_tool` makes the SDK Tool (the schema hardened) and what each call needs of it: the
argument validator and the output adapter, looked up once. `ServedTool.attempt` is one
attempt at the call, what the SDK's `Tool.run` does with the arguments the core validated,
the result cut to its size limit; `calls.tool_call` hands it to the retries.
"""

from __future__ import annotations

import inspect
from dataclasses import field
from typing import Any, cast

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ToolError,
    UnexpectedResourceError,
    UnexpectedToolError,
)
from mcp.server.mcpserver.tools import Tool
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, InputRequiredResult
from pydantic import BaseModel, TypeAdapter

from resilient_mcp.authoring.errors import TransientError
from resilient_mcp.authoring.outcomes import Failure
from resilient_mcp.authoring.tool import ToolSpec
from resilient_mcp.calls.entrypoints import entrypoint
from resilient_mcp.calls.input_schema import DeclaredSchemaValidator, mirror_headers, served_declared_schema
from resilient_mcp.calls.result_size import fit_result
from resilient_mcp.calls.validation import ArgumentValidator, harden_schema, without_titles
from resilient_mcp.records import record
from resilient_mcp.sdk_fence import convert_to_content, output_adapter


@record
class ServedTool:
    spec: ToolSpec
    validator: ArgumentValidator | DeclaredSchemaValidator
    tool: Tool
    # Nothing comes between a side-effecting call's claim and its body (an async function
    # whose parameters the client is not asked for first): the claim records the start.
    start_with_claim: bool
    # The output model and its TypeAdapter, which FuncMetadata keeps as a pydantic private
    # attribute: reading one costs three `__getattr__` fallbacks on every call.
    _output: list[tuple[Any, TypeAdapter[Any]]] = field(default_factory=list, compare=False)

    @property
    def takes_context(self) -> bool:
        """Whether the body needs the SDK's Context (a `ctx` parameter, or `Resolve(...)` ones)."""
        return self.tool.context_kwarg is not None or bool(self.tool.resolved_params)

    async def attempt(
        self,
        arguments: dict[str, Any],
        validated: BaseModel,
        context: Context[Any, Any] | None,
        max_result_bytes: int,
    ) -> CallToolResult | InputRequiredResult:
        """One attempt: what the SDK's `Tool.run` does, with the arguments the core validated,
        and the result cut to `max_result_bytes`.

        Failures are raised as `Tool.run` raises them (ToolError, or UnexpectedToolError
        for a crash, with the tool's exception as `__cause__`), so `classify` reads both alike.
        """
        tool, spec = self.tool, self.spec
        if tool.resolved_params:  # Resolve(...) parameters: only the SDK's own path fills them
            result = await tool.run(arguments, cast(Context[Any, Any], context), convert_result=True)
        else:
            kwargs = validated.model_dump_one_level()  # type: ignore[attr-defined]
            if tool.context_kwarg is not None:
                kwargs[tool.context_kwarg] = context
            try:
                result = self.convert_result(await tool.fn(**kwargs))
            except MCPError:
                raise  # a protocol error the tool raised on purpose
            except (UnexpectedToolError, UnexpectedResourceError) as exc:  # a nested call crashed
                raise UnexpectedToolError(f"Error executing tool {tool.name}: {exc}") from exc
            except (ToolError, ResourceError) as exc:
                raise ToolError(f"Error executing tool {tool.name}: {exc}") from exc
            except Exception as exc:
                raise UnexpectedToolError(f"Error executing tool {tool.name}") from exc
        if isinstance(result, InputRequiredResult):  # asks the client (2026-07-28): the next round runs it
            return result
        return fit_result(result, max_result_bytes, spec.name, side_effect=spec.side_effect)

    def convert_result(self, value: Any) -> CallToolResult | InputRequiredResult:
        """What `FuncMetadata.convert_result` makes of a return value, its adapter looked up once."""
        metadata = self.tool.fn_metadata
        model = metadata.output_model
        if (
            model is None
            or metadata.output_schema is None
            or isinstance(value, CallToolResult | InputRequiredResult)
        ):
            return metadata.convert_result(value)
        if not self._output or self._output[0][0] is not model:  # rebuilt if the model is reassigned
            self._output[:] = [(model, output_adapter(metadata, model))]
        adapter = self._output[0][1]
        content = convert_to_content(value)
        validated = adapter.validate_python(
            {"result": value} if metadata.wrap_output else value, by_alias=True, by_name=True
        )
        if isinstance(validated, BaseModel):  # dumped via the instance: a subclass keeps its fields
            structured = validated.model_dump(mode="json", by_alias=True)
        else:
            structured = adapter.dump_python(validated, mode="json", by_alias=True)
        return CallToolResult(content=content, structured_content=structured)

    def may_retry(self, failure: Failure) -> bool:
        if failure.category != "transient":
            return False
        # A side-effecting tool's own TransientError promises nothing was applied.
        spec = self.spec
        return spec.safe_to_repeat or (spec.side_effect and isinstance(failure.error, TransientError))


def build_tool(spec: ToolSpec, *, strict: bool) -> tuple[Tool, ServedTool]:
    """The SDK Tool for a spec (schema hardened when strict) and what the seam needs to serve it.

    Advertised schemas lose pydantic's generated titles: they cost bytes on every tools/list.
    A schema the owner declared is served as written (`calls.input_schema`).
    """
    tool = Tool.from_function(
        entrypoint(spec),
        name=spec.name,
        title=spec.title,
        description=spec.description,
        annotations=spec.annotations(),
    )
    validator: ArgumentValidator | DeclaredSchemaValidator
    if spec.input_schema is not None:  # the owner's own schema: served as written, validated as such
        tool.parameters = mirror_headers(served_declared_schema(spec), spec)
        validator = DeclaredSchemaValidator(tool.parameters, tool.fn_metadata)
    else:
        tool.parameters = without_titles(tool.parameters)
        if strict:
            tool.parameters = harden_schema(tool.parameters)
        tool.parameters = mirror_headers(tool.parameters, spec)
        validator = ArgumentValidator(tool.parameters, tool.fn_metadata, strict=strict)
    if spec.output_schema is not None:  # read live by tools/list (Tool.output_schema)
        tool.fn_metadata.output_schema = dict(spec.output_schema)
    elif tool.fn_metadata.output_schema is not None:
        tool.fn_metadata.output_schema = without_titles(tool.fn_metadata.output_schema)
    start_with_claim = inspect.iscoroutinefunction(spec.fn) and not tool.resolved_params
    return tool, ServedTool(spec, validator, tool, start_with_claim)
