"""Issue 5: a full agent loop (examples/agent_loop.py) against scripted models built from the vendors' own SDK
types, running a restart-like scenario on ``local``: a long command detaches, is followed to its exit, its output
is paged, and the model answers — within 8 tool calls. Every request the loop sends is validated against the
SDK's request types (messages and tools), so the wire shapes are checked, not just the happy path."""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Literal

import pytest
from anthropic.types import Message, MessageParam, TextBlock, ToolParam, ToolUseBlock, Usage
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessage,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.chat.chat_completion import Choice
from openai.types.chat.chat_completion_message_function_tool_call import Function
from pydantic import TypeAdapter

from agent_tools.tools.toolkit import Toolkit

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agent_loop.py"
COMMAND = "echo restarting; sleep 2.5; echo ready"  # stands in for `systemctl restart` of a slow service
MAX_TOOL_CALLS = 8


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_loop_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


class Operator:
    """The scripted model's brain, shared by both vendors: reads the last tool result and picks the next call.

    Records every (tool, arguments, result) so the test can assert the outcome at each step.
    """

    def __init__(self) -> None:
        self.steps: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        self.job_id: str | None = None

    def observe(self, result_json: str) -> None:
        name, args, _ = self.steps[-1]
        self.steps[-1] = (name, args, json.loads(result_json))

    def next_call(self) -> tuple[str, dict[str, Any]] | None:
        """The next (tool, arguments), or None when the work is done."""
        if not self.steps:
            call = ("run_command", {"host": "local", "command": COMMAND, "budget_s": 0.5})
        else:
            name, _, result = self.steps[-1]
            assert result is not None
            if name == "run_command":
                assert result["outcome"] == "detached", result
                self.job_id = result["job_id"]
                call = ("job_status", {"job_id": self.job_id, "wait_s": 10})
            elif name == "job_status" and result["state"] == "running":
                call = ("job_status", {"job_id": self.job_id, "wait_s": 10})
            elif name == "job_status":
                call = ("job_output", {"job_id": self.job_id})
            else:
                return None
        self.steps.append((call[0], call[1], None))
        return call


# ------------------------------------------------------------------------------------------------- OpenAI
class ScriptedOpenAI:
    """``client.chat.completions.create(model=, messages=, tools=)`` answered with ``ChatCompletion`` objects."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator
        self.ids = itertools.count(1)
        self.last_id = 0
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self.create))

    async def create(self, *, model: str, messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]]) -> ChatCompletion:
        TypeAdapter(list[ChatCompletionMessageParam]).validate_python(messages)
        TypeAdapter(list[ChatCompletionToolUnionParam]).validate_python(tools)
        if messages[-1]["role"] == "tool":
            assert messages[-1]["tool_call_id"] == f"call_{self.last_id}"
            self.operator.observe(messages[-1]["content"])
        call = self.operator.next_call()
        finish: Literal["stop", "tool_calls"]
        if call is None:
            message = ChatCompletionMessage(role="assistant", content="the service is ready")
            finish = "stop"
        else:
            self.last_id = next(self.ids)
            message = ChatCompletionMessage(role="assistant", content=None, tool_calls=[
                ChatCompletionMessageFunctionToolCall(id=f"call_{self.last_id}", type="function",
                                                      function=Function(name=call[0], arguments=json.dumps(call[1])))])
            finish = "tool_calls"
        return ChatCompletion(id="chatcmpl-1", object="chat.completion", created=0, model=model,
                              choices=[Choice(index=0, finish_reason=finish, message=message)])


# ------------------------------------------------------------------------------------------------- Anthropic
class ScriptedAnthropic:
    """``client.messages.create(model=, max_tokens=, system=, messages=, tools=)`` answered with ``Message``."""

    def __init__(self, operator: Operator) -> None:
        self.operator = operator
        self.ids = itertools.count(1)
        self.last_id = ""
        self.messages = SimpleNamespace(create=self.create)

    async def create(self, *, model: str, max_tokens: int, system: str, messages: list[dict[str, Any]],
                     tools: list[dict[str, Any]]) -> Message:
        TypeAdapter(list[MessageParam]).validate_python(messages)
        TypeAdapter(list[ToolParam]).validate_python(tools)
        last = messages[-1]
        if last["role"] == "user" and isinstance(last["content"], list):
            (block,) = last["content"]
            assert block["type"] == "tool_result" and block["tool_use_id"] == self.last_id
            assert block["is_error"] is False
            self.operator.observe(block["content"])
        call = self.operator.next_call()
        usage = Usage(input_tokens=1, output_tokens=1)
        if call is None:
            return Message(id="msg_end", type="message", role="assistant", model=model, stop_reason="end_turn",
                           stop_sequence=None, usage=usage,
                           content=[TextBlock(type="text", text="the service is ready")])
        self.last_id = f"toolu_{next(self.ids)}"
        return Message(id="msg_1", type="message", role="assistant", model=model, stop_reason="tool_use",
                       stop_sequence=None, usage=usage,
                       content=[TextBlock(type="text", text=f"calling {call[0]}"),
                                ToolUseBlock(type="tool_use", id=self.last_id, name=call[0], input=call[1])])


def check_scenario(operator: Operator) -> None:
    """The outcome at each step of the restart-like scenario."""
    names = [name for name, _, _ in operator.steps]
    assert names[0] == "run_command" and names[-1] == "job_output", names
    assert set(names[1:-1]) == {"job_status"}
    assert len(names) <= MAX_TOOL_CALLS
    first = operator.steps[0][2]
    assert first is not None and first["outcome"] == "detached" and first["stdout"]["text"] == "restarting\n", first
    final_status = operator.steps[-2][2]
    assert final_status is not None
    assert (final_status["state"], final_status["exit_status"]) == ("exited", 0), final_status
    assert final_status["new_stdout"]["text"] == "ready\n"
    page = operator.steps[-1][2]
    assert page is not None and page["text"] == "restarting\nready\n" and page["eof"] is True, page


@pytest.fixture
def example() -> ModuleType:
    return load_example()


@pytest.fixture(autouse=True)
def private_job_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Job directories of ``local`` under the test's tmp dir (the launcher inherits the environment)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))


async def test_openai_agent_loop_follows_a_detached_job(state_dir: Path, example: ModuleType) -> None:
    operator = Operator()
    async with Toolkit() as toolkit:
        transcript = await example.openai_loop(ScriptedOpenAI(operator), toolkit, model="scripted",
                                               prompt="restart the service and tell me when it is ready",
                                               max_tool_calls=MAX_TOOL_CALLS)
    check_scenario(operator)
    assert transcript[-1] == {"role": "assistant", "content": "the service is ready"}
    tool_messages = [m for m in transcript if m["role"] == "tool"]
    assert len(tool_messages) == len(operator.steps)
    assert all(len(m["content"]) <= 8000 and ", " not in m["content"][:40] for m in tool_messages)  # compact JSON


async def test_anthropic_agent_loop_follows_a_detached_job(state_dir: Path, example: ModuleType) -> None:
    operator = Operator()
    async with Toolkit() as toolkit:
        transcript = await example.anthropic_loop(ScriptedAnthropic(operator), toolkit, model="scripted",
                                                  prompt="restart the service and tell me when it is ready",
                                                  max_tool_calls=MAX_TOOL_CALLS)
    check_scenario(operator)
    assert transcript[-1]["content"] == [{"type": "text", "text": "the service is ready"}]


async def test_tool_budget_is_enforced(state_dir: Path, example: ModuleType) -> None:
    operator = Operator()
    async with Toolkit() as toolkit:
        with pytest.raises(example.ToolBudgetExceeded):
            await example.openai_loop(ScriptedOpenAI(operator), toolkit, model="scripted", prompt="go",
                                      max_tool_calls=0)
    assert [name for name, _, _ in operator.steps] == ["run_command"]  # asked for, never run


def test_example_needs_an_api_key(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                  example: ModuleType) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert example.main(["--provider", "anthropic", "--model", "m", "hello"]) == 2
    assert "ANTHROPIC_API_KEY is not set" in capsys.readouterr().err


class HicacheOperator(Operator):
    """The hicache scenario's tool calls, as a model would emit them, on the embedded simulated GPU node:
    unit status → read the unit → write it with the hicache flags → restart (detached) → follow readiness →
    verify /get_server_info."""

    def __init__(self, host: str) -> None:
        super().__init__()
        self.host = host
        self.path = ""
        self.port = 30000

    def next_call(self) -> tuple[str, dict[str, Any]] | None:
        from agent_tools.demo.hicache import _port_of, hicache_edit

        h = self.host
        if not self.steps:
            call: tuple[str, dict[str, Any]] = ("service_status", {"host": h, "unit": "sglang.service"})
        else:
            name, _, result = self.steps[-1]
            assert result is not None and result.get("outcome") not in ("error", "denied"), result
            if name == "service_status":
                self.path = result["unit_file"]
                call = ("read_file", {"host": h, "path": self.path})
            elif name == "read_file":
                self.port = _port_of(result["text"])
                old, new = hicache_edit(result["text"])
                call = ("edit_file", {"host": h, "path": self.path, "old": old, "new": new})
            elif name == "edit_file":
                call = ("restart_service", {"host": h, "unit": "sglang.service", "probes": [
                    {"kind": "http", "url": f"http://127.0.0.1:{self.port}/health"}]})
            elif name == "restart_service":
                assert result["outcome"] == "detached", result
                self.job_id = result["job_id"]
                call = ("job_status", {"job_id": self.job_id, "wait_s": 30})
            elif name == "job_status" and result["readiness"] == "pending":
                call = ("job_status", {"job_id": self.job_id, "wait_s": 30})
            elif name == "job_status":
                assert result["readiness"] == "ready", result
                call = ("http_get", {"host": h, "url": f"http://127.0.0.1:{self.port}/get_server_info"})
            else:
                return None
        self.steps.append((call[0], call[1], None))
        return call


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_scripted_model_completes_the_hicache_restart(state_dir: Path, example: ModuleType, tmp_path: Path,
                                                           vendor: str) -> None:
    from agent_tools.demo.node import embedded_node
    from agent_tools.jobs.journal import Journal

    async with embedded_node("default", load_s=2) as (alias, registry):
        operator = HicacheOperator(alias)
        toolkit = Toolkit(registry, journal=Journal(tmp_path / "j.sqlite3"))
        if vendor == "openai":
            await example.openai_loop(ScriptedOpenAI(operator), toolkit, model="scripted",
                                      prompt="enable hicache on sglang", max_tool_calls=MAX_TOOL_CALLS)
        else:
            await example.anthropic_loop(ScriptedAnthropic(operator), toolkit, model="scripted",
                                         prompt="enable hicache on sglang", max_tool_calls=MAX_TOOL_CALLS)
    names = [n for n, _, _ in operator.steps]
    assert len(names) <= MAX_TOOL_CALLS, names
    info = operator.steps[-1][2]
    assert names[-1] == "http_get" and info is not None
    assert info["data"]["enable_hierarchical_cache"] is True
