"""Issue 5: tool schemas for every runtime from one source, checked with the vendors' own types (no network), snapshot
tests of the schemas (``AGENT_TOOLS_UPDATE_SNAPSHOTS=1`` rewrites them), bounded results, and the OpenAI/Anthropic
result helpers on SDK objects and plain dicts."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, get_args

import anthropic.types as anthropic_types
import mcp.types as mcp_types
import pytest
from jsonschema import Draft202012Validator
from openai.types.chat import (
    ChatCompletionMessage,
    ChatCompletionMessageCustomToolCall,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionToolMessageParam,
    ChatCompletionToolParam,
)
from openai.types.chat.chat_completion_message_custom_tool_call import Custom
from openai.types.chat.chat_completion_message_function_tool_call import Function
from openai.types.responses import FunctionToolParam, ResponseFunctionToolCall, ResponseOutputMessage
from openai.types.responses.response_input_item_param import FunctionCallOutput
from openai.types.shared_params import FunctionDefinition
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from agent_tools.adapters import (
    DEFAULT_MAX_RESULT_CHARS,
    ToolFormat,
    bound_result,
    clean_schema,
    encode_result,
    handle_anthropic_tool_uses,
    handle_openai_responses_calls,
    handle_openai_tool_calls,
    tool_schemas,
)
from agent_tools.tools.toolkit import Toolkit

SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
FORMATS: tuple[ToolFormat, ...] = get_args(ToolFormat)


@pytest.fixture
def toolkit(state_dir: Path) -> Toolkit:
    return Toolkit()


def keys_of(typed_dict: Any) -> set[str]:
    return set(typed_dict.__required_keys__) | set(typed_dict.__optional_keys__)


# ------------------------------------------------------------------------------------------- vendor types
def test_openai_chat_tools_validate(toolkit: Toolkit) -> None:
    tools = tool_schemas(toolkit, "openai")
    TypeAdapter(list[ChatCompletionToolParam]).validate_python(tools)
    for tool in tools:
        assert set(tool) <= keys_of(ChatCompletionToolParam)  # TypedDicts ignore unknown keys: check them too
        assert set(tool["function"]) <= keys_of(FunctionDefinition)
        assert "strict" not in tool["function"]  # off (the default): see agent_tools.adapters.schemas


def test_openai_responses_tools_validate(toolkit: Toolkit) -> None:
    tools = tool_schemas(toolkit, "openai-responses")
    TypeAdapter(list[FunctionToolParam]).validate_python(tools)
    for tool in tools:
        assert set(tool) <= keys_of(FunctionToolParam)
        assert tool["strict"] is False


def test_anthropic_tools_validate(toolkit: Toolkit) -> None:
    tools = tool_schemas(toolkit, "anthropic")
    TypeAdapter(list[anthropic_types.ToolParam]).validate_python(tools)
    for tool in tools:
        assert set(tool) <= keys_of(anthropic_types.ToolParam)
        assert tool["input_schema"]["type"] == "object"


def test_mcp_tools_validate(toolkit: Toolkit) -> None:
    tools = [mcp_types.Tool.model_validate(t) for t in tool_schemas(toolkit, "mcp")]
    assert [t.name for t in tools] == [s.name for s in toolkit.specs]
    mcp_types.ListToolsResult(tools=tools)


@pytest.mark.parametrize("format", FORMATS)
def test_one_source_for_every_format(toolkit: Toolkit, format: ToolFormat) -> None:
    """Same names, descriptions and parameter schemas everywhere; each a valid, self-contained JSON Schema."""
    tools = tool_schemas(toolkit, format)
    reference = tool_schemas(toolkit, "mcp")
    for tool, ref in zip(tools, reference, strict=True):
        inner = tool.get("function", tool)
        params = inner.get("parameters", inner.get("input_schema", inner.get("inputSchema")))
        assert inner["name"] == ref["name"] and inner["description"] == ref["description"]
        assert params == ref["inputSchema"]
        Draft202012Validator.check_schema(params)
        text = json.dumps(params)
        assert "$ref" not in text and "$defs" not in text and '"title"' not in text


def test_schemas_accept_good_and_reject_bad_arguments(toolkit: Toolkit) -> None:
    schema = {t["name"]: t["inputSchema"] for t in tool_schemas(toolkit, "mcp")}
    run = Draft202012Validator(schema["run_command"])
    assert run.is_valid({"host": "local", "command": "uptime", "budget_s": 5})
    assert not run.is_valid({"host": "local"})  # command missing
    assert not run.is_valid({"host": "local", "command": "x", "budget_s": 0})  # budget must be > 0
    assert not run.is_valid({"host": "local", "command": "x", "extra": 1})  # additionalProperties: false
    assert Draft202012Validator(schema["job_status"]).is_valid({"job_id": "j_1", "wait_s": 60})


# ---------------------------------------------------------------------------------------------- snapshots
@pytest.mark.parametrize("format", FORMATS)
def test_schema_snapshots(toolkit: Toolkit, format: ToolFormat) -> None:
    """The declarations the models see. After a deliberate change: AGENT_TOOLS_UPDATE_SNAPSHOTS=1 pytest ..."""
    path = SNAPSHOTS / f"tools.{format}.json"
    current = json.dumps(tool_schemas(toolkit, format), indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    if os.environ.get("AGENT_TOOLS_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(current)
    assert path.exists(), f"{path.name} missing: run with AGENT_TOOLS_UPDATE_SNAPSHOTS=1 to create it"
    assert path.read_text() == current, (f"{path.name} differs from the generated schemas; if the change is "
                                         "intended, rerun with AGENT_TOOLS_UPDATE_SNAPSHOTS=1 and review the diff")


# ------------------------------------------------------------------------------------------- clean_schema
class Probe(BaseModel):
    kind: str = Field(description="probe kind")
    title: str = Field(default="", description="a property named title is kept")


class Nested(BaseModel):
    model_config = ConfigDict(extra="forbid")
    host: str
    probes: list[Probe] = Field(description="probes to run")
    first: Probe | None = None


class Loop(BaseModel):
    child: Loop | None = None


def test_clean_schema_inlines_definitions() -> None:
    cleaned = clean_schema(Nested.model_json_schema())
    assert "$defs" not in json.dumps(cleaned) and "$ref" not in json.dumps(cleaned)
    item = cleaned["properties"]["probes"]["items"]
    assert item["properties"]["kind"] == {"description": "probe kind", "type": "string"}
    assert "title" in item["properties"] and "title" not in item
    assert cleaned["properties"]["probes"]["description"] == "probes to run"
    Draft202012Validator.check_schema(cleaned)
    assert Draft202012Validator(cleaned).is_valid({"host": "h", "probes": [{"kind": "http"}]})
    # `first: Probe | None = None` is declared as the Probe schema, simply not required (no anyOf with null,
    # no default null: the same meaning in fewer tokens; an explicit null is still accepted by the model class)
    assert cleaned["properties"]["first"]["properties"]["kind"] == {"description": "probe kind", "type": "string"}
    assert "anyOf" not in cleaned["properties"]["first"] and "first" not in cleaned["required"]
    assert Nested.model_validate({"host": "h", "probes": [], "first": None}).first is None


def test_clean_schema_refuses_recursive_models() -> None:
    with pytest.raises(ValueError, match="recursive"):
        clean_schema(Loop.model_json_schema())


# ---------------------------------------------------------------------------------------------- results
def view(text: str) -> dict[str, Any]:
    return {"text": text, "total_bytes": len(text.encode()), "omitted_bytes": 0}


def test_small_results_are_compact_and_unchanged() -> None:
    result = {"outcome": "finished", "exit_status": 0, "stdout": view("ok\n")}
    assert bound_result(result) is result
    assert encode_result(result) == '{"outcome":"finished","exit_status":0,"stdout":{"text":"ok\\n","total_bytes":3,' \
                                    '"omitted_bytes":0}}'


def test_large_output_views_are_shortened_and_say_so() -> None:
    out = "".join(f"line {i}\n" for i in range(3000))
    result: dict[str, Any] = {"outcome": "finished", "exit_status": 1, "job_id": "j_x", "stdout": view(out),
                              "stderr": view("E\n" * 800)}
    text = encode_result(result, max_tokens=10**6)  # the character bound alone (the token bound: test below)
    assert len(text) <= DEFAULT_MAX_RESULT_CHARS
    data = json.loads(text)
    assert data["outcome"] == "finished" and data["exit_status"] == 1
    assert "job_output" in data["shortened"]
    stdout = data["stdout"]
    assert stdout["text"].startswith("line 0\n") and stdout["text"].endswith("line 2999\n")  # head and tail kept
    assert "chars cut to fit the result size" in stdout["text"]
    assert stdout["omitted_bytes"] > 0 and stdout["total_bytes"] == len(out.encode())
    assert len(data["stderr"]["text"]) > 1000  # the shorter stream keeps its share (cuts are balanced)
    assert result["stdout"]["text"] == out  # the input is not modified


def test_large_output_pages_keep_their_head_and_never_skip_bytes() -> None:
    body = "x" * 20000
    page = {"job_id": "j_x", "stream": "stdout", "offset": 100, "next_offset": 20100, "total_bytes": 50000,
            "text": body, "eof": False}
    data = json.loads(encode_result(page, max_chars=4000))
    assert len(json.dumps(data, separators=(",", ":"))) <= 4000
    assert body.startswith(data["text"])
    assert data["next_offset"] == 100 + len(data["text"]) and data["eof"] is False


def test_long_lists_are_cut_with_a_count() -> None:
    jobs = [{"job_id": f"j_{i:04d}", "host": "local", "command": f"echo {i}", "state": "exited"} for i in range(400)]
    data = json.loads(encode_result({"jobs": jobs, "note": ""}, max_chars=3000))
    assert 0 < len(data["jobs"]) < 400
    assert f"showing the first {len(data['jobs'])} of 400" in data["shortened"]


# -------------------------------------------------------------------------------------- result helpers
async def test_openai_tool_calls_from_sdk_objects_and_dicts(toolkit: Toolkit) -> None:
    message = ChatCompletionMessage(role="assistant", content=None, tool_calls=[
        ChatCompletionMessageFunctionToolCall(id="call_1", type="function",
                                              function=Function(name="list_jobs", arguments="{}")),
        ChatCompletionMessageFunctionToolCall(id="call_2", type="function",
                                              function=Function(name="job_status", arguments='{"job_id": ')),
        ChatCompletionMessageCustomToolCall(id="call_3", type="custom", custom=Custom(name="x", input="y")),
    ])
    replies = await handle_openai_tool_calls(toolkit, message)
    TypeAdapter(list[ChatCompletionToolMessageParam]).validate_python(replies)
    assert [r["tool_call_id"] for r in replies] == ["call_1", "call_2", "call_3"]
    first, second, third = (json.loads(r["content"]) for r in replies)
    assert first["jobs"] == []
    assert second["kind"] == "bad_arguments" and "not valid JSON" in second["message"]
    assert third["kind"] == "bad_arguments" and "custom" in third["message"]

    as_dicts = await handle_openai_tool_calls(toolkit, {"role": "assistant", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "nope", "arguments": "{}"}}]})
    assert json.loads(as_dicts[0]["content"])["message"].startswith("unknown tool 'nope'")
    assert await handle_openai_tool_calls(toolkit, ChatCompletionMessage(role="assistant", content="hi")) == []


async def test_openai_responses_function_calls(toolkit: Toolkit) -> None:
    output = [
        ResponseOutputMessage(id="m", type="message", role="assistant", status="completed", content=[]),
        ResponseFunctionToolCall(type="function_call", call_id="fc_1", name="list_jobs", arguments="{}"),
        {"type": "function_call", "call_id": "fc_2", "name": "job_output", "arguments": '{"job_id": "bad id"}'},
    ]
    items = await handle_openai_responses_calls(toolkit, output)
    TypeAdapter(list[FunctionCallOutput]).validate_python(items)
    assert [i["call_id"] for i in items] == ["fc_1", "fc_2"]
    assert json.loads(items[1]["output"])["outcome"] == "error"


async def test_anthropic_tool_uses(toolkit: Toolkit) -> None:
    msg = anthropic_types.Message(
        id="msg", type="message", role="assistant", model="m", stop_reason="tool_use", stop_sequence=None,
        usage=anthropic_types.Usage(input_tokens=1, output_tokens=1),
        content=[anthropic_types.TextBlock(type="text", text="checking"),
                 anthropic_types.ToolUseBlock(type="tool_use", id="tu_1", name="list_jobs", input={}),
                 anthropic_types.ToolUseBlock(type="tool_use", id="tu_2", name="job_status", input={"wait_s": 1})])
    reply = await handle_anthropic_tool_uses(toolkit, msg)
    TypeAdapter(anthropic_types.MessageParam).validate_python(reply)
    assert [(b["tool_use_id"], b["is_error"]) for b in reply["content"]] == [("tu_1", False), ("tu_2", True)]
    assert "job_id" in json.loads(reply["content"][1]["content"])["message"]
    as_dicts = await handle_anthropic_tool_uses(toolkit, [{"type": "tool_use", "id": "t", "name": "list_jobs",
                                                           "input": {}}])
    assert as_dicts["content"][0]["tool_use_id"] == "t"
    assert (await handle_anthropic_tool_uses(toolkit, [{"type": "text", "text": "done"}]))["content"] == []
