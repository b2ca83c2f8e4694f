"""A real agent loop over agent_tools with the OpenAI or the Anthropic SDK.

The model gets every Toolkit tool (schemas from :func:`agent_tools.adapters.tool_schemas`), calls them, reads
the bounded JSON results, and keeps going until it answers without a tool call or ``--max-tool-calls`` is
used up. Long work is safe: a command that outlives its budget comes back ``detached`` with a job id, and the
model follows it with ``job_status(job_id, wait_s=...)``.

Usage::

    export OPENAI_API_KEY=...        # or ANTHROPIC_API_KEY=...
    python examples/agent_loop.py --provider openai --model gpt-4.1 \
        "Run 'sleep 20; uname -a' on local and tell me the kernel version"
    python examples/agent_loop.py --provider anthropic --model claude-sonnet-4-5 \
        --ssh-config ~/.ssh/config "How much GPU memory is free on gpu-node-1?"

Options: ``--provider openai|anthropic`` (required), ``--model NAME`` (required), ``--max-tool-calls N``
(default 20), ``--ssh-config FILE`` (repeatable), ``--policy FILE`` (repeatable; needs agent_tools.policy).
The API key comes from the environment (``OPENAI_API_KEY`` / ``ANTHROPIC_API_KEY``; ``OPENAI_BASE_URL`` works
for OpenAI-compatible servers). The script exits with a message when the key is missing. Importing this
module runs nothing; :func:`openai_loop` and :func:`anthropic_loop` take any client with the SDK's shape
(the tests drive them with scripted models).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import anyio

from agent_tools.adapters import anthropic_tools, handle_anthropic_tool_uses, handle_openai_tool_calls, openai_tools
from agent_tools.tools.toolkit import Toolkit

SYSTEM_PROMPT = (
    "You operate machines through tools. run_command always returns one outcome: 'finished', or 'detached' "
    "when the command outlives its budget (it keeps running as a job: follow it with job_status(job_id, "
    "wait_s=60) until it is no longer running), 'needs_approval' (stop and ask the user), 'denied' (do not "
    "retry), or 'error'. Read the 'next' field of each result. Answer briefly when done.")

Transcript = list[dict[str, Any]]


class ToolBudgetExceeded(RuntimeError):
    """The model asked for more tool calls than allowed."""


async def openai_loop(client: Any, toolkit: Toolkit, *, model: str, prompt: str, max_tool_calls: int = 20,
                      system: str = SYSTEM_PROMPT) -> Transcript:
    """Chat Completions loop. ``client``: an ``openai.AsyncOpenAI`` (or anything with its
    ``chat.completions.create`` shape). Returns the messages, the final assistant message last.

    :raises ToolBudgetExceeded: more than ``max_tool_calls`` tool calls.
    """
    messages: Transcript = [{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    tools = openai_tools(toolkit)
    used = 0
    while True:
        completion = await client.chat.completions.create(model=model, messages=messages, tools=tools)
        message = completion.choices[0].message
        turn: dict[str, Any] = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            turn["tool_calls"] = [{"id": c.id, "type": "function",
                                   "function": {"name": c.function.name, "arguments": c.function.arguments}}
                                  for c in message.tool_calls if c.type == "function"]
        messages.append(turn)
        if not message.tool_calls:
            return messages
        used += len(message.tool_calls)
        if used > max_tool_calls:
            raise ToolBudgetExceeded(f"the model asked for more than {max_tool_calls} tool calls")
        messages.extend(await handle_openai_tool_calls(toolkit, message))


async def anthropic_loop(client: Any, toolkit: Toolkit, *, model: str, prompt: str, max_tool_calls: int = 20,
                         system: str = SYSTEM_PROMPT, max_tokens: int = 2048) -> Transcript:
    """Messages API loop. ``client``: an ``anthropic.AsyncAnthropic`` (or anything with its
    ``messages.create`` shape). Returns the messages, the final assistant message last.

    :raises ToolBudgetExceeded: more than ``max_tool_calls`` tool calls.
    """
    messages: Transcript = [{"role": "user", "content": prompt}]
    tools = anthropic_tools(toolkit)
    used = 0
    while True:
        response = await client.messages.create(model=model, max_tokens=max_tokens, system=system,
                                                messages=messages, tools=tools)
        messages.append({"role": "assistant",
                         "content": [block.model_dump(mode="json", exclude_none=True) for block in response.content]})
        reply = await handle_anthropic_tool_uses(toolkit, response)
        if response.stop_reason != "tool_use" or not reply["content"]:
            return messages
        used += len(reply["content"])
        if used > max_tool_calls:
            raise ToolBudgetExceeded(f"the model asked for more than {max_tool_calls} tool calls")
        messages.append(reply)


def _final_text(transcript: Transcript) -> str:
    content = transcript[-1].get("content")
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) for b in content if b.get("type") == "text")
    return str(content or "")


async def _main(args: argparse.Namespace) -> int:
    from agent_tools.hosts.registry import HostRegistry

    policy = None
    if args.policy:
        from agent_tools.policy import PolicySet

        policy = PolicySet.load(args.policy)
    hosts = HostRegistry(ssh_config=args.ssh_config) if args.ssh_config else HostRegistry()
    async with Toolkit(hosts, policy=policy) as toolkit:
        if args.provider == "openai":
            from openai import AsyncOpenAI

            transcript = await openai_loop(AsyncOpenAI(), toolkit, model=args.model, prompt=args.prompt,
                                           max_tool_calls=args.max_tool_calls)
        else:
            from anthropic import AsyncAnthropic

            transcript = await anthropic_loop(AsyncAnthropic(), toolkit, model=args.model, prompt=args.prompt,
                                              max_tool_calls=args.max_tool_calls)
    for message in transcript[1:-1]:
        print(json.dumps(message, ensure_ascii=False)[:600], file=sys.stderr)
    print(_final_text(transcript))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--provider", choices=["openai", "anthropic"], required=True)
    parser.add_argument("--model", required=True, help="model name, e.g. gpt-4.1 or claude-sonnet-4-5")
    parser.add_argument("--max-tool-calls", type=int, default=20)
    parser.add_argument("--ssh-config", action="append", help="OpenSSH client config file (repeatable)")
    parser.add_argument("--policy", action="append", help="policy file (repeatable)")
    parser.add_argument("prompt")
    args = parser.parse_args(argv)
    key = "OPENAI_API_KEY" if args.provider == "openai" else "ANTHROPIC_API_KEY"
    if not os.environ.get(key):
        print(f"error: {key} is not set; export it to run the {args.provider} loop", file=sys.stderr)
        return 2
    return anyio.run(_main, args)


if __name__ == "__main__":
    sys.exit(main())
