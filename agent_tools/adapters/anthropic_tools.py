"""Run the ``tool_use`` blocks of an Anthropic Messages turn and build the ``tool_result`` reply.

The assistant message's ``content`` holds ``{"type": "tool_use", "id", "name", "input": {...}}`` blocks
(``stop_reason == "tool_use"``); the next message is a ``user`` message whose ``content`` starts with one
``{"type": "tool_result", "tool_use_id", "content", "is_error"}`` block per ``tool_use``, in order.
``is_error`` is set for ``error`` and ``denied`` outcomes; every other outcome (``detached``, ``killed``,
``needs_approval``, a non-zero exit) is a successful call whose content the model reads.

SDK objects (``anthropic.types.Message``, its ``ToolUseBlock`` items) and plain dicts are both accepted. Calls
of one turn run concurrently; results keep the call order. Contents are compact JSON bounded by
:func:`~agent_tools.adapters.schemas.encode_result`.
"""

from __future__ import annotations

from typing import Any

from ..tools.toolkit import Toolkit
from .schemas import DEFAULT_MAX_RESULT_CHARS, attr_or_key, dispatch_all, encode_result, is_error_result

__all__ = ["handle_anthropic_tool_uses"]


async def handle_anthropic_tool_uses(
    toolkit: Toolkit,
    content_blocks: Any,
    *,
    max_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> dict[str, Any]:
    """Run every ``tool_use`` block; return the ``user`` message carrying the ``tool_result`` blocks.

    :param toolkit: the tools to call.
    :param content_blocks: a ``Message`` (or its dict; its ``content`` is read) or the list of content blocks
        (SDK objects or dicts). Blocks other than ``tool_use`` (text, thinking) are skipped.
    :param max_chars: bound on each result's JSON text (characters; 600 estimated tokens bound it too).
    :returns: ``{"role": "user", "content": [{"type": "tool_result", "tool_use_id", "content", "is_error"},
        ...]}``; ``content`` is empty when there was no ``tool_use`` block (then there is nothing to send).
    """
    blocks = content_blocks
    if not isinstance(blocks, list | tuple):
        blocks = attr_or_key(blocks, "content") or []
    uses = [b for b in blocks if attr_or_key(b, "type") == "tool_use"]
    results = await dispatch_all(toolkit, [(str(attr_or_key(u, "name") or ""), attr_or_key(u, "input"))
                                           for u in uses])
    return {"role": "user",
            "content": [{"type": "tool_result", "tool_use_id": str(attr_or_key(u, "id") or ""),
                         "content": encode_result(r, max_chars=max_chars), "is_error": is_error_result(r)}
                        for u, r in zip(uses, results, strict=True)]}
