"""Run the tool calls of an OpenAI model turn and build the messages that carry the results back.

Chat Completions: the assistant message has ``tool_calls`` (``[{"id", "type": "function", "function":
{"name", "arguments": "<JSON text>"}}]``); each result goes back as ``{"role": "tool", "tool_call_id",
"content": "<JSON text>"}``, in the order of the calls. Responses API: the response ``output`` holds
``{"type": "function_call", "call_id", "name", "arguments"}`` items; each result goes back as an input item
``{"type": "function_call_output", "call_id", "output": "<JSON text>"}``.

SDK objects (``openai.types.chat.ChatCompletionMessage``, ``openai.types.responses.Response`` and their
items) and plain dicts are both accepted. Calls of one turn run concurrently; results keep the call order.
Contents are compact JSON bounded by :func:`~agent_tools.adapters.schemas.encode_result`. Nothing here
raises for bad tool input: an unknown tool, malformed arguments or a non-function tool call become an
``error`` outcome the model can read (``kind="bad_arguments"``: fix and retry).
"""

from __future__ import annotations

from typing import Any

import structlog

from ..outcomes import ErrorOutcome, result_view
from ..tools.toolkit import Toolkit
from .schemas import DEFAULT_MAX_RESULT_CHARS, attr_or_key, dispatch_all, encode_result

__all__ = ["handle_openai_responses_calls", "handle_openai_tool_calls"]

log = structlog.get_logger(__name__)


def _not_a_function(kind: object) -> dict[str, Any]:
    return result_view(ErrorOutcome(kind="bad_arguments", retryable=False,
                                    message=f"tool call of type {kind!r} is not supported; call one of the "
                                            "function tools"))


async def handle_openai_tool_calls(
    toolkit: Toolkit,
    message_or_tool_calls: Any,
    *,
    max_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> list[dict[str, Any]]:
    """Run the tool calls of a Chat Completions assistant message; return the ``tool`` messages to append.

    :param toolkit: the tools to call.
    :param message_or_tool_calls: a ``ChatCompletionMessage`` (or its dict) with ``tool_calls``, or the
        list of tool calls itself (SDK objects or dicts). No tool calls: returns ``[]``.
    :param max_chars: bound on each result's JSON text (characters; 600 estimated tokens bound it too).
    :returns: ``[{"role": "tool", "tool_call_id": ..., "content": "<compact JSON>"}, ...]`` in call order.
    """
    calls = message_or_tool_calls
    if not isinstance(calls, list | tuple):
        calls = attr_or_key(calls, "tool_calls") or []
    pending: list[tuple[str, Any]] = []
    plan: list[tuple[str, dict[str, Any] | None]] = []  # (tool_call_id, ready result or None = dispatch)
    for call in calls:
        call_id = str(attr_or_key(call, "id") or "")
        kind = attr_or_key(call, "type") or "function"
        function = attr_or_key(call, "function")
        if kind != "function" or function is None:
            plan.append((call_id, _not_a_function(kind)))
            continue
        plan.append((call_id, None))
        pending.append((str(attr_or_key(function, "name") or ""), attr_or_key(function, "arguments")))
    dispatched = iter(await dispatch_all(toolkit, pending))
    return [{"role": "tool", "tool_call_id": call_id,
             "content": encode_result(ready if ready is not None else next(dispatched), max_chars=max_chars)}
            for call_id, ready in plan]


async def handle_openai_responses_calls(
    toolkit: Toolkit,
    response_or_items: Any,
    *,
    max_chars: int = DEFAULT_MAX_RESULT_CHARS,
) -> list[dict[str, Any]]:
    """Run the ``function_call`` items of a Responses API turn; return the ``function_call_output`` items.

    :param toolkit: the tools to call.
    :param response_or_items: a ``Response`` (its ``output`` is read) or a list of output items (SDK objects
        or dicts); items other than ``function_call`` (messages, reasoning) are skipped.
    :param max_chars: bound on each result's JSON text (characters; 600 estimated tokens bound it too).
    :returns: ``[{"type": "function_call_output", "call_id": ..., "output": "<compact JSON>"}, ...]`` in call
        order, ready to add to the next request's ``input`` (after the model's own output items).
    """
    items = response_or_items
    if not isinstance(items, list | tuple):
        items = attr_or_key(items, "output") or []
    calls = [it for it in items if attr_or_key(it, "type") == "function_call"]
    results = await dispatch_all(toolkit, [(str(attr_or_key(c, "name") or ""), attr_or_key(c, "arguments"))
                                           for c in calls])
    return [{"type": "function_call_output", "call_id": str(attr_or_key(c, "call_id") or ""),
             "output": encode_result(r, max_chars=max_chars)} for c, r in zip(calls, results, strict=True)]
