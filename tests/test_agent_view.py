"""Issue 14: what the model sees. Every test reads the result as an MCP client receives it through the official
SDK client (``mcp.Client`` over the SDK's in-memory transport, or ``stdio_client`` against ``agent-tools mcp``):
the one text content, which is also, byte for byte, the JSON of ``structuredContent``.

Hosts: the embedded simulated GPU node (``run_node``: asyncssh server on loopback running the simulated SGLang
unit under the systemctl/journalctl shims), the real OpenSSH sshd (``real_sshd``) and this machine (``local``).
The real-systemd parts are in ``test_agent_view_systemd.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client

import agent_tools
from agent_tools.adapters import tool_schemas
from agent_tools.adapters.mcp_server import build_mcp_server
from agent_tools.demo.hicache import hicache_edit
from agent_tools.demo.node import EmbeddedNode, run_node
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.probes.checks import advance, check_probe
from agent_tools.testing import free_port
from agent_tools.tools.toolkit import Toolkit

from .sshd import RealSshd

REPO = Path(agent_tools.__file__).resolve().parent.parent
UNIT = "sglang.service"


# ---------------------------------------------------------------------------------------------- helpers
class Model:
    """An MCP client session over the official SDK, and the text the model reads of each result."""

    def __init__(self, client: Client) -> None:
        self.client = client

    async def read(self, name: str, args: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``(text, data)``: the result's one text content and its JSON (checked equal to structuredContent)."""
        with anyio.fail_after(120):
            result = await self.client.call_tool(name, args or {})
        assert len(result.content) == 1 and result.content[0].type == "text", result
        text = result.content[0].text
        data = json.loads(text)
        assert result.structured_content == data
        # compact, integral numbers as integers: the text a JavaScript client's JSON.stringify gives
        assert text == json.dumps(data, separators=(",", ":"), ensure_ascii=False)
        return text, data


@asynccontextmanager
async def model_for(tk: Toolkit, **server_options: Any) -> AsyncIterator[Model]:
    async with Client(build_mcp_server(tk, **server_options)) as client:
        yield Model(client)


@asynccontextmanager
async def node_model(tmp_path: Path, profile: str = "default", load_s: float = 2.0
                     ) -> AsyncIterator[tuple[EmbeddedNode, Model]]:
    async with run_node(profile, load_s=load_s, workdir=tmp_path / "node") as node:
        async with model_for(Toolkit(node.registry, journal=node.journal)) as model:
            yield node, model


async def follow(model: Model, job_id: str, limit: int = 20) -> dict[str, Any]:
    for _ in range(limit):
        _, st = await model.read("job_status", {"job_id": job_id, "wait_s": 10})
        if st.get("readiness") in ("ready", "failed", "deadline_exceeded"):
            return st
    raise AssertionError(f"readiness never settled: {st}")


# ---------------------------------------------------------------------------------------------- 1, 2: hosts
async def test_list_hosts_names_config_and_policy_aliases_with_jobs_and_reachability(
        real_sshd: RealSshd, tmp_path: Path) -> None:
    extra = tmp_path / "more.conf"
    extra.write_text("Host *.example.net\n  User ops\n\nHost gpu-node-7 !gpu-node-8\n  HostName 127.0.0.1\n"
                     f"  Port {free_port()}\n")
    main = tmp_path / "config"
    main.write_text(f"Include {extra}\nInclude {real_sshd.config_path}\n")
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nhosts: [train-box, 'gpu-*']\n")
    from agent_tools.tools.factory import load_policies

    journal = Journal(tmp_path / "j.sqlite3")
    tk = Toolkit(HostRegistry(ssh_config=[str(main)]), journal=journal, policy=load_policies([policy]))
    async with tk, model_for(tk) as model:
        job = await tk.runner.run(tk.hosts.get(real_sshd.alias), "sleep 30", budget_s=1)  # (no policy covers it)
        assert job.outcome == "detached", job
        text, listing = await model.read("list_hosts")
        hosts = {h["host"]: h for h in listing["hosts"]}
        assert set(hosts) == {"local", "gpu-node-7", real_sshd.alias, real_sshd.badkey_alias, real_sshd.dead_alias,
                              "train-box"}, text  # no pattern (*.example.net, gpu-*, !gpu-node-8) is an alias
        assert hosts[real_sshd.alias] == {"host": real_sshd.alias, "source": "ssh_config", "hostname": "127.0.0.1",
                                          "user": real_sshd.user, "jobs_running": 1}
        assert hosts["train-box"] == {"host": "train-box", "source": "policy"}
        assert hosts["local"] == {"host": "local", "source": "local"}
        _, checked = await model.read("list_hosts", {"check": True})
        state = {h["host"]: (h.get("reachable"), h.get("error", "")) for h in checked["hosts"]}
        assert state[real_sshd.alias] == (True, "") and state["local"] == (True, "")
        assert state[real_sshd.dead_alias][0] is False and "connect" in state[real_sshd.dead_alias][1]
        assert state[real_sshd.badkey_alias][0] is False and "host key" in state[real_sshd.badkey_alias][1]
        await model.read("job_cancel", {"job_id": job.job_id, "grace_s": 1})
    journal.close()


async def test_a_misspelt_alias_is_unknown_host_naming_the_closest_aliases(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text("Host gpu-node-1\n  HostName 127.0.0.1\n\nHost gpu-node-2\n  HostName 127.0.0.1\n")
    tk = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as model:
        # a name in the .invalid top-level domain never resolves (RFC 6761); it is in no config either
        text, err = await model.read("run_command", {"host": "gpu-node1.invalid", "command": "uptime"})
        assert (err["outcome"], err["kind"], err["retryable"]) == ("error", "unknown_host", False), text
        assert err["host"] == "gpu-node1.invalid"
        assert "does not resolve" in err["message"] and "in no SSH config or policy file" in err["message"]
        assert "did you mean 'gpu-node-1'?" in err["message"] and "list_hosts" in err["message"]
        # every tool says the same, not only run_command
        _, mem = await model.read("host_memory", {"host": "gpu-node1.invalid"})
        assert mem["kind"] == "unknown_host" and "gpu-node-1" in mem["message"]



async def test_an_alias_in_the_config_whose_hostname_does_not_resolve_is_told_once(tmp_path: Path) -> None:
    config = tmp_path / "config"  # ssh -G: hostname short (no canonical name resolves; it falls back to the name)
    config.write_text("Host short\n  HostName short.invalid\n  CanonicalizeHostname yes\n  CanonicalDomains "
                      "localdomain\n  CanonicalizeFallbackLocal yes\nMatch canonical host short.localdomain\n"
                      "  HostName 127.0.0.1\n")
    tk = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as model:
        text, err = await model.read("run_command", {"host": "short", "command": "uptime"})
        assert err["kind"] == "unknown_host", text
        assert err["message"].count("it is in the SSH config: check its HostName") == 1, err["message"]

# ---------------------------------------------------------------------------------------------- 3: http_get
async def test_http_get_refused_and_timeout_are_retryable_with_the_units_state(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=3) as (node, model):
        _, status = await model.read("service_status", {"host": node.alias, "unit": UNIT, "journal_lines": 0})
        unit_text = (await model.read("read_file", {"host": node.alias, "path": status["unit_file"]}))[1]["text"]
        port = int(re.search(r"--port (\d+)", unit_text).group(1))  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/health"
        _, restart = await model.read("restart_service", {"host": node.alias, "unit": UNIT,
                                                          "probes": [{"kind": "http", "url": url}]})
        assert restart["outcome"] == "detached", restart
        # while the new server loads, its port refuses: a network kind, retryable, saying what the unit does
        for _ in range(50):
            text, err = await model.read("http_get", {"host": node.alias, "url": url})
            if err.get("kind") == "connection_refused":
                break
        assert (err["outcome"], err["kind"], err["retryable"]) == ("error", "connection_refused", True), text
        assert f"nothing listens on 127.0.0.1:{port}" in err["message"]
        assert re.search(rf"; {UNIT} is \w+/[\w-]+: a restart is under way \(job {restart['job_id']} follows it: "
                         rf"job_status\(job_id='{restart['job_id']}', wait_s=60\)\)$", err["message"]), text
        assert (await follow(model, restart["job_id"]))["readiness"] == "ready"
        _, ok = await model.read("http_get", {"host": node.alias, "url": url})
        assert ok["status"] == 200

        # a stopped unit: refused, with the unit's state and where to look
        await model.read("run_command", {"host": node.alias, "command": f"systemctl stop {UNIT}", "budget_s": 30})
        text, err = await model.read("http_get", {"host": node.alias, "url": url})
        assert err["kind"] == "connection_refused" and f"{UNIT} is inactive/dead" in err["message"], text
        assert f"service_status(host='{node.alias}', unit='{UNIT}')" in err["message"]

        # a port nobody's job knows: refused, retryable, no unit named
        text, err = await model.read("http_get", {"host": node.alias, "url": f"http://127.0.0.1:{free_port()}/"})
        assert (err["kind"], err["retryable"]) == ("connection_refused", True) and UNIT not in err["message"], text

        # accepted but never answered: timeout, retryable
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(1)
            quiet = f"http://127.0.0.1:{silent.getsockname()[1]}/"
            text, err = await model.read("http_get", {"host": node.alias, "url": quiet, "timeout_s": 1})
        assert (err["kind"], err["retryable"]) == ("timeout", True) and "no answer within 1 s" in err["message"], text

        # bad_arguments only for a malformed URL; https is a feature the tool lacks: unsupported
        for bad in ("127.0.0.1:30000/health", "http://127.0.0.1:99999/"):
            text, err = await model.read("http_get", {"host": node.alias, "url": bad})
            assert (err["kind"], err["retryable"]) == ("bad_arguments", False), text
        _, err = await model.read("http_get", {"host": node.alias, "url": "https://127.0.0.1:1/"})
        assert (err["kind"], err["retryable"]) == ("unsupported", False) and "https is not supported" in err["message"]


# ---------------------------------------------------------------------------------------------- 4, 8: status
async def test_service_status_says_a_missing_unit_does_not_exist_and_is_compact(tmp_path: Path) -> None:
    async with node_model(tmp_path) as (node, model):
        text, missing = await model.read("service_status", {"host": node.alias, "unit": "sglang2"})
        assert list(missing)[:4] == ["host", "unit", "state", "note"], text  # at the top
        assert missing["state"] == "not-found" and "sglang2.service does not exist" in missing["note"]
        assert "result" not in missing and "journal" not in missing, text  # not dressed up as a stopped unit

        text, st = await model.read("service_status", {"host": node.alias, "unit": UNIT, "grep": "kv cache is",
                                                       "journal_lines": 3})
        assert st["state"] == "active/running" and st["unit_file"].endswith("/etc/systemd/system/sglang.service")
        assert st["timeout_start_s"] == 900 and st["main_pid"] > 0
        # one copy of each fact: no props dict next to the same values, nothing at its usual value
        assert "props" not in st and "result" not in st and "restarts" not in st and "drop_ins" not in st, text
        lines = st["journal"].splitlines()
        assert len(lines) == 1 and "KV Cache is allocated. #tokens:" in lines[0], st  # grep -iE, newest last
        assert len(text) < 400, text


async def test_host_memory_in_gib_next_to_bytes_and_no_duplicates(tmp_path: Path) -> None:
    async with node_model(tmp_path) as (node, model):
        text, mem = await model.read("host_memory", {"host": node.alias})
    assert set(mem) == {"host", "total_bytes", "total_gib", "used_bytes", "used_gib", "available_bytes",
                        "available_gib", "buff_cache_bytes"}, text
    assert mem["total_gib"] == round(mem["total_bytes"] / 2**30, 1) == 2048
    assert mem["available_gib"] == round(mem["available_bytes"] / 2**30, 1)


async def test_a_detached_result_without_output_is_short(state_dir: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, out = await model.read("run_command", {"host": "local", "command": "sleep 5", "budget_s": 0.5})
        assert out["outcome"] == "detached", text
        assert "stdout" not in out and "stderr" not in out and "probes" not in out and "deadline_s" not in out, text
        assert out["budget_s"] == 0.5 and isinstance(out["elapsed_s"], float)
        assert len(text) < 340, (len(text), text)  # was ~530 characters with empty stdout/stderr objects
        text, fin = await model.read("run_command", {"host": "local", "command": "echo hi", "budget_s": 10})
        assert fin["stdout"] == {"text": "hi\n"} and "stderr" not in fin and "signal" not in fin, text
        _, st = await model.read("job_status", {"job_id": out["job_id"], "wait_s": 10})
        assert "new_stdout" not in st and "readiness" not in st and st["exit_status"] == 0, st
        # receipts and advice stay even at their defaults: no survivors, and what to do after a denial
        _, killed = await model.read("run_command", {"host": "local", "command": "sleep 30", "budget_s": 0.5,
                                                     "on_timeout": "kill"})
        assert killed["outcome"] == "killed" and killed["survivors"] == [], killed
    from agent_tools.tools.factory import load_policies

    guarded = Toolkit(policy=load_policies([REPO / "policies" / "default.yaml"]))
    async with guarded, model_for(guarded) as model:
        _, denied = await model.read("run_command", {"host": "local", "command": "rm -rf / --no-preserve-root"})
        assert denied["outcome"] == "denied" and denied["next"].startswith("do not retry"), denied
    async with model_for(Toolkit(), structured_content=False) as model:
        result = await model.client.call_tool("run_command", {"host": "local", "command": "echo one", "budget_s": 10})
        assert result.structured_content is None  # for a client that would pass both: one copy
        assert json.loads(result.content[0].text)["stdout"] == {"text": "one\n"}


# ---------------------------------------------------------------------------------------------- 5: probe schema
@pytest.mark.parametrize("format", ["mcp", "openai", "openai-responses", "anthropic"])
def test_probes_have_one_schema_variant_per_kind_with_every_field_described(format: str, state_dir: Path) -> None:
    tools = tool_schemas(Toolkit(), format)  # type: ignore[arg-type]

    def params(name: str) -> dict[str, Any]:
        t = next(t for t in tools if t.get("name", t.get("function", {}).get("name")) == name)
        inner = t.get("function", t)
        return inner.get("inputSchema") or inner.get("parameters") or inner["input_schema"]  # type: ignore[no-any-return]

    kinds = ["systemd_unit", "http", "log", "port", "gpu_memory", "host_memory"]
    for tool in ("restart_service", "wait_for"):
        variants = params(tool)["properties"]["probes"]["items"]["anyOf"]
        assert [v["properties"]["kind"]["const"] for v in variants] == kinds
        for v in variants:
            assert v["description"] and v["required"][0] == "kind"
            for field, prop in v["properties"].items():
                if field != "kind":
                    assert prop.get("description"), (tool, v["properties"]["kind"], field)
        http = variants[kinds.index("http")]["properties"]
        assert http["expect_status"]["default"] == 200 and http["timeout_s"]["default"] == 5
        assert "seconds" in http["timeout_s"]["description"]
        log = variants[kinds.index("log")]["properties"]
        assert {"unit", "path", "pattern", "fail_pattern"} == set(log) - {"kind"}  # cursor/offset: set by the tools
        assert "MiB" in variants[kinds.index("gpu_memory")]["properties"]["min_used_mib"]["description"]


async def test_a_misspelt_probe_field_or_kind_gets_the_nearest_name(state_dir: Path) -> None:
    async with model_for(Toolkit()) as model:
        text, err = await model.read("restart_service", {
            "host": "gpu-node-1", "unit": UNIT,
            "probes": [{"kind": "http", "url": "http://127.0.0.1:1/", "timeout": 3}, {"kind": "htpp"}]})
    assert (err["kind"], err["retryable"], err["host"]) == ("bad_arguments", False, "gpu-node-1"), text
    assert "probes.0.http.timeout: unknown argument; did you mean 'timeout_s'?" in err["message"]
    assert "probes.1: unknown kind 'htpp'; did you mean 'http'?" in err["message"]


# ---------------------------------------------------------------------------------------------- 10
async def test_argument_errors_suggest_the_nearest_name_and_keep_the_host(state_dir: Path) -> None:
    async with model_for(Toolkit()) as model:
        text, err = await model.read("run_command", {"host": "gpu-node-1", "command": "uptime", "budget": 5})
        assert err["host"] == "gpu-node-1", text  # was null
        assert "budget: unknown argument; did you mean 'budget_s'?" in err["message"], text
        text, err = await model.read("restart_service", {"host": "gpu-node-1"})
        assert "unit: required" in err["message"] and err["host"] == "gpu-node-1", text


# ---------------------------------------------------------------------------------------------- 6
async def test_the_log_probe_shows_the_newest_line_and_the_count_while_loading(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=6) as (node, model):
        probes = [{"kind": "log", "unit": UNIT, "pattern": "ready to roll"}]
        _, restart = await model.read("restart_service", {"host": node.alias, "unit": UNIT, "probes": probes})
        seen: list[str] = []
        for _ in range(40):
            _, st = await model.read("job_status", {"job_id": restart["job_id"], "wait_s": 1})
            log = next(p for p in st["probes"] if p["kind"] == "log")
            seen.append(log["evidence"])
            if "Loading safetensors checkpoint shards" in log["evidence"] or st["readiness"] != "pending":
                break
        evidence = seen[-1]
        m = re.fullmatch(r"no line matching 'ready to roll' yet; (\d+) lines since the start, newest: (.+)", evidence)
        assert m, seen  # the agent's progress bar, not "0 new lines"
        assert int(m.group(1)) > 3 and "Loading safetensors checkpoint shards:" in m.group(2)
        _, st = await model.read("job_status", {"job_id": restart["job_id"], "wait_s": 1})
        later = next(p for p in st["probes"] if p["kind"] == "log")["evidence"]
        # a check that read no new line still shows the count since the start and the newest line
        assert st["readiness"] != "pending" or (later.startswith("no line matching")
                                                and "lines since the start" in later), later
        assert (await follow(model, restart["job_id"]))["readiness"] == "ready"


# ---------------------------------------------------------------------------------------------- 14
async def test_a_failure_names_the_line_that_explains_it(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("loading\n[2026-11-30 10:00:00 TP0] Scheduler hit an exception: Traceback (most recent call "
                   "last):\n  File \"scheduler.py\", line 2914, in run_scheduler_process\nValueError: Not enough "
                   "host memory available. Requesting 11.19 GB but only have 8.02 GB free.\n")
    tk = Toolkit(journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as model:
        text, res = await model.read("wait_for", {"host": "local", "deadline_s": 5, "probes": [
            {"kind": "log", "path": str(log), "pattern": "ready to roll", "fail_pattern": "Traceback|Not enough"}]})
    assert res["outcome"] == "failed", text
    assert res["probes"][0]["evidence"].startswith("ValueError: Not enough host memory available."), text


async def test_a_traceback_still_being_written_is_reported_with_its_exception_line(tmp_path: Path) -> None:
    from agent_tools.hosts.local import LocalHost

    log = tmp_path / "server.log"
    log.write_text("Scheduler hit an exception: Traceback (most recent call last):\n")
    spec: dict[str, Any] = {"kind": "log", "path": str(log), "pattern": "ready", "fail_pattern": "Traceback"}
    host = LocalHost()
    first = await check_probe(host, spec)
    assert first.state == "not_yet" and first.evidence.startswith("a failure is being logged"), first
    with log.open("a") as fh:
        fh.write('  File "x.py", line 1\ntorch.OutOfMemoryError: CUDA out of memory.\n')
    second = await check_probe(host, advance([spec], [first])[0])
    assert (second.state, second.evidence) == ("failed", "torch.OutOfMemoryError: CUDA out of memory."), second


async def test_small_ram_walkthrough_names_the_value_error_as_the_cause(tmp_path: Path) -> None:
    from agent_tools.demo.hicache import run_walkthrough

    lines: list[str] = []
    async with run_node("small_ram", load_s=2, workdir=tmp_path / "node") as node:
        res = await run_walkthrough(Toolkit(node.registry, journal=node.journal), node.alias, emit=lines.append)
    assert res.result == "rolled_back", "\n".join(lines)
    assert "the restart failed (ValueError: Not enough host memory available. Requesting" in res.summary, res.summary
    assert "Traceback" not in res.summary


# ---------------------------------------------------------------------------------------------- 7
async def test_a_restart_that_detaches_points_at_restart_service_and_a_unit_edit_at_daemon_reload(
        tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=4) as (node, model):
        _, st = await model.read("service_status", {"host": node.alias, "unit": UNIT, "journal_lines": 0})
        path = st["unit_file"]
        text, out = await model.read("run_command", {"host": node.alias, "budget_s": 1,
                                                     "command": f"systemctl restart {UNIT}"})
        assert out["outcome"] == "detached", text
        assert f"next time restart_service(host='{node.alias}', unit='{UNIT}') returns at once" in out["next"], text
        assert f"job_status(job_id='{out['job_id']}', wait_s=60)" in out["next"]
        await model.read("job_status", {"job_id": out["job_id"], "wait_s": 30})

        unit_text = (await model.read("read_file", {"host": node.alias, "path": path}))[1]["text"]
        old, new = hicache_edit(unit_text)
        text, edited = await model.read("edit_file", {"host": node.alias, "path": path, "old": old, "new": new})
        assert edited["next"].startswith(f"restart_service(host='{node.alias}', unit='{UNIT}', daemon_reload=true) "
                                         "applies it"), text
        assert f"backup_id='{edited['backup_id']}') undoes it" in edited["next"]
        text, wrote = await model.read("write_file", {"host": node.alias, "path": path, "content": unit_text})
        assert "daemon_reload=true" in wrote["next"], text
        notes = tmp_path / "notes.txt"
        _, plain = await model.read("write_file", {"host": node.alias, "path": str(notes), "content": "x\n"})
        assert "restart_service" not in plain.get("next", ""), plain


# ---------------------------------------------------------------------------------------------- 9
async def test_programs_that_need_a_terminal_say_what_to_run_instead(state_dir: Path, tmp_path: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, top = await model.read("run_command", {"host": "local", "command": "top", "budget_s": 20})
        assert (top["outcome"], top["prompt"]) == ("needs_input", "needs a terminal: top: failed tty get"), text
        assert "top -b -n 1" in top["next"], text
        if shutil.which("vim") is None:
            pytest.skip("vim is not installed here (top was checked)")
        text, vim = await model.read("run_command", {"host": "local", "budget_s": 20,
                                                     "command": f"vim {tmp_path / 'unit.conf'}"})
        assert vim["outcome"] == "needs_input" and "Output is not to a terminal" in vim["prompt"], text
        assert "edit_file" in vim["next"], text
        # the screen vim drew (escape sequences, `~` lines) is left out; its size stays
        assert vim["stdout"]["text"] == "" and vim["stdout"]["omitted_bytes"] == vim["stdout"]["total_bytes"] > 500
        assert "~" not in text and len(text) < 900, text


# ---------------------------------------------------------------------------------------------- 11
async def test_a_large_output_says_at_which_offset_to_read_on(state_dir: Path) -> None:
    full = "".join(f"{i}\n" for i in range(1, 200001))
    tk = Toolkit()
    async with tk, model_for(tk) as model, model_for(tk, max_result_tokens=10_000) as wide:
        # one large stream: the view's own marker (head + tail of 6 KiB fit a result of 10,000 tokens)
        _, out = await wide.read("run_command", {"host": "local", "command": "seq 1 200000", "budget_s": 20})
        m = re.search(rf"\n… \[(\d+) bytes omitted; job_output\(job_id='{out['job_id']}', offset=(\d+)\) reads on "
                      r"from there\] …\n", out["stdout"]["text"])
        assert m, out["stdout"]["text"][:2000]
        offset = int(m.group(2))
        head = out["stdout"]["text"][:m.start() + 1]
        assert full.startswith(head) and offset == len(head.encode())  # the first byte left out
        _, page = await model.read("job_output", {"job_id": out["job_id"], "offset": offset, "limit": 64})
        assert page["text"] == full[offset:offset + 64]

        # two large streams: the result is shortened further; the adapter's marker gives the offset instead
        _, out = await model.read("run_command", {"host": "local", "budget_s": 20,
                                                  "command": "seq 1 200000; seq 1 50000 >&2"})
        for stream, extra in (("stdout", ""), ("stderr", ", stream='stderr'")):
            shown = out[stream]["text"]
            # (the view's own marker was cut out with the middle: the adapter's says the whole gap in bytes)
            m = re.search(rf"… \[(?:\d+ chars cut to fit the result size|\d+ bytes omitted \(\d+ of them to fit "
                          rf"the result size\)); job_output\(job_id='{out['job_id']}', offset=(\d+){extra}\) reads on "
                          r"from there\] …\n", shown)
            assert m, shown[:1500]
            kept = shown[:m.start()]
            assert kept.endswith("\n") and full.startswith(kept) and int(m.group(1)) == len(kept.encode()), shown
            _, page = await model.read("job_output", {"job_id": out["job_id"], "stream": stream,
                                                      "offset": int(m.group(1)), "limit": 32})
            assert page["text"] == full[len(kept):len(kept) + 32]
        assert "markers say where job_output reads on" in out["shortened"]


# ---------------------------------------------------------------------------------------------- 12
async def test_edit_file_replaces_one_exact_occurrence_with_diff_backup_and_mode(state_dir: Path,
                                                                                 tmp_path: Path) -> None:
    f = tmp_path / "app.service"
    f.write_text("[Service]\nExecStart=/usr/bin/app \\\n    --port 8000\nEnvironment=A=1\nEnvironment=A=1\n")
    f.chmod(0o640)
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, ed = await model.read("edit_file", {"host": "local", "path": str(f), "old": "    --port 8000\n",
                                                  "new": "    --port 8000 --workers 4\n"})
        assert ed["bytes_written"] == len(f.read_bytes()) and "--workers 4" in f.read_text(), text
        assert "-    --port 8000\n+    --port 8000 --workers 4\n" in ed["diff"]
        assert ed["diff"].startswith("--- app.service (before)\n+++ app.service (after)\n"), ed["diff"]
        assert (f.stat().st_mode & 0o777) == 0o640  # mode kept (temp file made by cp -p, renamed over)
        text, none = await model.read("edit_file", {"host": "local", "path": str(f), "old": "--port 9000",
                                                    "new": "--port 9001"})
        assert (none["kind"], none["retryable"]) == ("bad_arguments", False), text
        assert "old does not occur" in none["message"] and "closest line is 3" in none["message"], text
        text, many = await model.read("edit_file", {"host": "local", "path": str(f), "old": "Environment=A=1",
                                                    "new": "Environment=A=2"})
        assert "old occurs 2 times" in many["message"] and "lines 4, 5" in many["message"], text
        assert f.read_text().count("Environment=A=1") == 2  # nothing written
        _, back = await model.read("restore_file", {"host": "local", "path": str(f), "backup_id": ed["backup_id"]})
        assert "--workers" not in f.read_text() and "+    --port 8000\n" in back["diff"]
        _, gone = await model.read("edit_file", {"host": "local", "path": str(tmp_path / "nope"), "old": "a",
                                                 "new": "b"})
        assert "write_file creates one" in gone["message"]


# ---------------------------------------------------------------------------------------------- 15
def test_demo_node_runs_for_an_mcp_client_and_keeps_its_jobs_to_itself(tmp_path: Path) -> None:
    state = tmp_path / "user-state"
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state), "PYTHONUNBUFFERED": "1"}
    node = subprocess.Popen([sys.executable, "-m", "agent_tools.cli", "demo", "node", "--json", "--load-s", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        assert node.stdout is not None
        facts = json.loads(node.stdout.readline())
        assert facts["alias"] == "gpu-node-1" and Path(facts["ssh_config"]).is_file()
        assert facts["mcp_command"][1:] == ["mcp", "-F", facts["ssh_config"]]

        async def drive() -> list[str]:
            params = StdioServerParameters(command=sys.executable,
                                           args=["-m", "agent_tools.cli", *facts["mcp_command"][1:]],
                                           env={**env, **facts["mcp_env"]})
            async with stdio_client(params) as (r, w), ClientSession(r, w) as session:
                with anyio.fail_after(60):
                    await session.initialize()
                    listed = json.loads((await session.call_tool("list_hosts", {})).content[0].text)
                    st = json.loads((await session.call_tool("service_status", {
                        "host": "gpu-node-1", "unit": UNIT})).content[0].text)
                    assert st["state"] == "active/running", st
            return [h["host"] for h in listed["hosts"]]

        assert anyio.run(drive) == ["local", "gpu-node-1"]  # only the node: no -badkey/-dead test aliases
        node.send_signal(signal.SIGINT)
        assert node.wait(timeout=60) == 0
        assert not Path(facts["state_dir"]).exists()  # the node and its journal are gone
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()
    journal = state / "journal.sqlite3"
    assert not journal.exists() or Journal(journal).list() == []  # nothing of the node in the user's journal


def test_demo_hicache_leaves_no_job_in_the_users_journal(tmp_path: Path) -> None:
    state = tmp_path / "user-state"
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state)}
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "demo", "hicache", "--load-s", "1"],
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0 and "RESULT: verified" in res.stdout, res.stdout[-2000:] + res.stderr[-2000:]
    journal = state / "journal.sqlite3"
    assert not journal.exists() or Journal(journal).list() == []


def test_demo_json_into_head_stops_quietly_and_finishes(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state")}
    res = subprocess.run(f"{sys.executable} -m agent_tools.cli demo hicache --json --load-s 1 | head -3",
                         shell=True, env=env, capture_output=True, text=True, timeout=300, check=False,
                         executable="/bin/bash")
    lines = res.stdout.splitlines()
    assert len(lines) == 3 and all(json.loads(line) for line in lines), res.stdout
    assert "stdout was closed early (broken pipe)" in res.stderr and "ran to its end: verified" in res.stderr, \
        res.stderr
    status = subprocess.run(f"{sys.executable} -m agent_tools.cli demo hicache --json --load-s 1 | head -1; "
                            "exit ${PIPESTATUS[0]}", shell=True, env=env, capture_output=True, text=True,
                            timeout=300, check=False, executable="/bin/bash")
    assert status.returncode == 0, status.stderr  # was 1, silently


# ---------------------------------------------------------------------------------------------- 13
def cli(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"),
           "COLUMNS": "250"}
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], env=env, capture_output=True,
                          text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)


def test_cli_hints_are_cli_commands(tmp_path: Path) -> None:
    res = cli("run", "local", "--budget", "0.5", "--", "sleep", "3", tmp_path=tmp_path)
    job = re.search(r"job (j_\w+)", res.stdout)
    assert res.returncode == 0 and job, res.stdout + res.stderr
    j = job.group(1)
    assert f"next: agent-tools status {j} --wait 60 to keep following; agent-tools cancel {j} to stop it" \
           in res.stdout, res.stdout
    assert "job_status(" not in res.stdout and "job_id=" not in res.stdout
    done = cli("status", job.group(1), "--wait", "10", tmp_path=tmp_path)
    assert "done" in done.stdout and "agent-tools output" not in done.stdout, done.stdout  # (it wrote nothing)


def test_policy_explain_never_prints_none_and_check_names_the_unknown_key(tmp_path: Path) -> None:
    plain_cmd = cli("policy", "explain", "gpu-node-1", "--", "uptime", tmp_path=tmp_path)
    assert plain_cmd.returncode == 0 and "None" not in plain_cmd.stdout, plain_cmd.stdout
    assert "no readiness deadline" in plain_cmd.stdout  # (the kill deadline is said next to it)
    restart = cli("policy", "explain", "gpu-node-1", "--", "systemctl", "restart", "sglang", tmp_path=tmp_path)
    assert "deadline: the unit's TimeoutStartSec + 30 s" in restart.stdout and "None" not in restart.stdout, \
        restart.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nhosts: [gpu-*]\nrules:\n  - id: up\n    match: uptime\n    decison: allow\n")
    res = cli("policy", "check", str(bad), tmp_path=tmp_path)
    assert res.returncode == 1, res.stdout
    assert f"{bad}:6: rules.0.decison: unknown key 'decison'; did you mean 'decision'" in res.stdout, res.stdout
