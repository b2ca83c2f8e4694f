"""Adapters: the Toolkit spoken to agent runtimes — MCP, OpenAI (Chat Completions and Responses), Anthropic.

Public API::

    tool_schemas(toolkit, format)         tool declarations for "mcp" | "openai" | "openai-responses" | "anthropic"
    openai_tools / openai_responses_tools / anthropic_tools / mcp_tools (toolkit)   shorthands of the above
    handle_openai_tool_calls(toolkit, message_or_tool_calls)   -> [{"role": "tool", ...}]
    handle_openai_responses_calls(toolkit, response_or_items)  -> [{"type": "function_call_output", ...}]
    handle_anthropic_tool_uses(toolkit, content_blocks)        -> {"role": "user", "content": [tool_result...]}
    encode_result(result) / bound_result(result)   compact JSON of a result, bounded (600 tokens by default)
    build_mcp_server(toolkit) -> mcp.server.Server;  serve_stdio(server), serve_http(server, host=, port=)

Schemas come from each tool's args model and description only (no per-vendor copies); see
:mod:`agent_tools.adapters.schemas` for why OpenAI ``strict`` is off. The MCP server imports the MCP SDK, so
it is imported lazily here (``from agent_tools.adapters.mcp_server import build_mcp_server`` also works).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .anthropic_tools import handle_anthropic_tool_uses
from .openai_tools import handle_openai_responses_calls, handle_openai_tool_calls
from .schemas import (
    DEFAULT_MAX_RESULT_CHARS,
    DEFAULT_MAX_RESULT_TOKENS,
    ToolFormat,
    anthropic_tools,
    bound_result,
    clean_schema,
    encode_result,
    estimate_tokens,
    is_error_result,
    mcp_tools,
    openai_responses_tools,
    openai_tools,
    tool_schema,
    tool_schemas,
)

if TYPE_CHECKING:
    from .mcp_server import build_mcp_server, serve_http, serve_stdio

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_MAX_RESULT_TOKENS",
    "ToolFormat",
    "anthropic_tools",
    "bound_result",
    "build_mcp_server",
    "clean_schema",
    "encode_result",
    "estimate_tokens",
    "handle_anthropic_tool_uses",
    "handle_openai_responses_calls",
    "handle_openai_tool_calls",
    "is_error_result",
    "mcp_tools",
    "openai_responses_tools",
    "openai_tools",
    "serve_http",
    "serve_stdio",
    "tool_schema",
    "tool_schemas",
]

_LAZY = {"build_mcp_server", "serve_http", "serve_stdio"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import mcp_server

        return getattr(mcp_server, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
