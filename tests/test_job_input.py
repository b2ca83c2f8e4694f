"""Issue 17, item 1: a job's stdin as a named pipe held open on the host (``run_command(stdin="pipe")``), written by
``job_input`` from any later call, connection or controller. Real OpenSSH sshd on loopback."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import agent_tools
from agent_tools.hosts.base import run_on
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import DEFAULT_JOBS_DIR
from agent_tools.jobs.scripts import cancel_script
from agent_tools.tools.toolkit import Toolkit

from .conftest import ssh_host_for
from .sshd import RealSshd

REPO = Path(agent_tools.__file__).resolve().parent.parent
pytestmark = pytest.mark.sshd


#: jobs the running test started on the sshd (see _no_job_left)
_STARTED: list[str] = []


@pytest.fixture(autouse=True)
async def _no_job_left(real_sshd: RealSshd) -> AsyncIterator[None]:
    """A test that fails midway leaves no job running on the host: the job scripts' own cancel, for every job it
    started (a no-op for the ones that ended)."""
    _STARTED.clear()
    yield
    host = ssh_host_for(real_sshd)
    try:
        for job_id in _STARTED:
            await run_on(host, cancel_script(DEFAULT_JOBS_DIR, job_id, grace_s=1, reason="test cleanup"))
    finally:
        await host.aclose()


def _toolkit(server: RealSshd, state_dir: Path) -> Toolkit:
    return Toolkit(HostRegistry(ssh_config=[str(server.config_path)]), journal=Journal(state_dir / "journal.sqlite3"))


def _text(view: Any) -> str:
    """An output view of a result as text (a view that holds its whole stream is shown as its text)."""
    if view is None:
        return ""
    return view if isinstance(view, str) else str(view.get("text", ""))


async def _start(tk: Toolkit, server: RealSshd, command: str, **kw: Any) -> str:
    d = await tk.dispatch("run_command", {"host": server.alias, "command": command, "budget_s": 1, **kw})
    assert d["outcome"] == "detached", d
    _STARTED.append(str(d["job_id"]))
    return str(d["job_id"])


async def test_python_repl_across_a_dropped_connection_a_new_toolkit_and_another_process(
        real_sshd: RealSshd, state_dir: Path) -> None:
    tk = _toolkit(real_sshd, state_dir)
    job = await _start(tk, real_sshd, "python3 -i", stdin="pipe")
    a = await tk.dispatch("job_input", {"job_id": job, "text": "x = 6 * 7"})
    assert a["input"] == "written" and a["state"] == "running", a
    b = await tk.dispatch("job_input", {"job_id": job, "text": "print(x)"})
    assert _text(b.get("new_stdout")) == "42\n", b
    assert real_sshd.drop_connections() >= 1
    c = await tk.dispatch("job_input", {"job_id": job, "text": "print(x + 1)"})  # the connection it had is gone
    assert _text(c.get("new_stdout")) == "43\n", c
    await tk.aclose()
    tk2 = _toolkit(real_sshd, state_dir)  # a new controller: the journal file is all it shares with the first
    d = await tk2.dispatch("job_input", {"job_id": job, "text": "print(x * 2)"})
    assert _text(d.get("new_stdout")) == "84\n", d
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state_dir)}
    cli = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "input", "-F", str(real_sshd.config_path),
                                   job, "print(x - 2)", "--json"], env=env, check=False)
    e = json.loads(cli.stdout)
    assert cli.returncode == 0 and _text(e.get("new_stdout")) == "40\n", cli.stdout + cli.stderr
    f = await tk2.dispatch("job_input", {"job_id": job, "text": "raise SystemExit(3)"})
    assert f["input"] == "written", f
    g = await tk2.dispatch("job_status", {"job_id": job, "wait_s": 10})
    assert g["state"] == "exited" and g["exit_status"] == 3, g
    h = await tk2.dispatch("job_input", {"job_id": job, "text": "print(1)"})
    assert h["outcome"] == "error" and h["kind"] == "input_refused", h
    await tk2.aclose()


async def test_read_a_read_b_fed_by_two_calls_and_eof(real_sshd: RealSshd, state_dir: Path) -> None:
    async with _toolkit(real_sshd, state_dir) as tk:
        job = await _start(tk, real_sshd, 'read a; echo "a=$a"; read b; echo "b=$b"; cat; echo rest-done',
                           stdin="pipe")
        one = await tk.dispatch("job_input", {"job_id": job, "text": "first"})
        assert _text(one.get("new_stdout")) == "a=first\n", one
        two = await tk.dispatch("job_input", {"job_id": job, "text": "second"})
        assert _text(two.get("new_stdout")) == "b=second\n", two
        end = await tk.dispatch("job_input", {"job_id": job, "text": "tail", "eof": True})
        assert end["input"] == "written", end
        st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
        assert st["state"] == "exited" and st["exit_status"] == 0, st
        out = await tk.dispatch("job_output", {"job_id": job})
        assert out["text"] == "a=first\nb=second\ntail\nrest-done\n", out


async def test_a_retried_write_is_not_typed_twice_and_writes_keep_their_order(real_sshd: RealSshd,
                                                                             state_dir: Path) -> None:
    go = f"$HOME/go-{os.getpid()}"
    async with _toolkit(real_sshd, state_dir) as tk:
        # the job reads nothing until the flag file appears, so the second write fills the pipe (64 KiB) and waits
        job = await _start(tk, real_sshd, f"while [ ! -e {go} ]; do sleep 0.05; done; cat", stdin="pipe")
        big = "x" * 60000
        first = await tk.dispatch("job_input", {"job_id": job, "text": big, "idempotency_key": "k1"})
        assert first["input"] == "written", first
        again = await tk.dispatch("job_input", {"job_id": job, "text": big, "idempotency_key": "k1"})
        assert again["input"] == "duplicate", again
        second = await tk.dispatch("job_input", {"job_id": job, "text": "y" * 60000, "idempotency_key": "k2"})
        assert second["input"] == "queued", second
        last = await tk.dispatch("job_input", {"job_id": job, "text": "end", "eof": True})
        assert last["input"] == "queued", last
        touched = await tk.dispatch("run_command", {"host": real_sshd.alias, "command": f"touch {go}"})
        assert touched["outcome"] == "finished", touched
        st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 20})
        assert st["state"] == "exited" and st["exit_status"] == 0, st
        page = await tk.dispatch("job_output", {"job_id": job, "limit": 200000})
        assert page["text"] == big + "\n" + "y" * 60000 + "\nend\n", page["total_bytes"]
        left = await tk.dispatch("run_command", {"host": real_sshd.alias, "command": (
            f"rm {go}; cd ${{XDG_STATE_HOME:-$HOME/.local/state}}/agent-tools/jobs/{job}/input && ls && cat ./*")})
        assert left["outcome"] == "finished", left  # the queue keeps keys only: what was typed is gone once written
        names = _text(left["stdout"]).split()
        assert [n.split(".", 1)[1] for n in names] == ["k1.done", "k2.done", names[2].split(".", 1)[1]], names
        assert names[2].endswith(".e.done"), names


async def test_input_to_a_job_without_a_pipe_is_refused_and_a_write_is_bounded(real_sshd: RealSshd,
                                                                              state_dir: Path) -> None:
    async with _toolkit(real_sshd, state_dir) as tk:
        job = await _start(tk, real_sshd, "sleep 30")
        d = await tk.dispatch("job_input", {"job_id": job, "text": "hello"})
        assert d["outcome"] == "error" and d["kind"] == "input_refused" and "stdin='pipe'" in d["message"], d
        piped = await _start(tk, real_sshd, "cat", stdin="pipe")
        big = await tk.dispatch("job_input", {"job_id": piped, "text": "z" * 70000})
        assert big["outcome"] == "error" and big["kind"] == "bad_arguments", big
        for j in (job, piped):
            await tk.dispatch("job_cancel", {"job_id": j, "grace_s": 1})


# ---------------------------------------------------------------- item 2: a terminal (tty)
CURSES_PROGRAM = ("import curses\n"
                  "def main(s):\n"
                  "    s.addstr(0, 0, 'rows %d cols %d; q quits' % s.getmaxyx())\n"
                  "    s.refresh()\n"
                  "    while s.getch() != ord('q'):\n"
                  "        pass\n"
                  "curses.wrapper(main)\n"
                  "print('curses-done')\n")


async def test_a_tty_job_has_a_terminal_of_80x24_and_control_keys(real_sshd: RealSshd, state_dir: Path) -> None:
    async with _toolkit(real_sshd, state_dir) as tk:
        d = await tk.dispatch("run_command", {"host": real_sshd.alias, "stdin": "tty", "budget_s": 10,
                                              "command": "test -t 0 && test -t 1 && echo tty-yes; stty size; "
                                                         "echo TERM=$TERM; top -b -n1 | head -3"})
        assert d["outcome"] == "finished" and d["exit_status"] == 0, d
        out = _text(d["stdout"])
        assert "tty-yes" in out and "24 80" in out and "TERM=xterm" in out and "load average" in out, out
        env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state_dir)}
        cli = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "run", "-F", str(real_sshd.config_path),
                                       real_sshd.alias, "--tty", "--json", "--", "test -t 0 && echo cli-tty-yes"],
                                      env=env, check=False)
        assert cli.returncode == 0 and "cli-tty-yes" in _text(json.loads(cli.stdout)["stdout"]), cli.stdout
        # Ctrl-C reaches the foreground program through the terminal (its line discipline sends SIGINT)
        job = await _start(tk, real_sshd, "sleep 600; echo not-interrupted", stdin="tty")
        c = await tk.dispatch("job_input", {"job_id": job, "text": "\x03"})  # as a model types it (then Enter)
        assert c.get("input") == "written", c
        st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
        assert st["state"] == "exited" and st["exit_status"] == 130, st  # bash: 128 + SIGINT


async def test_curses_programs_in_a_tty_quit_with_q(real_sshd: RealSshd, state_dir: Path) -> None:
    async with _toolkit(real_sshd, state_dir) as tk:
        job = await _start(tk, real_sshd, f"python3 -c {_sh_quote(CURSES_PROGRAM)}", stdin="tty")
        first = await tk.dispatch("job_output", {"job_id": job})
        assert "rows 24 cols 80; q quits" in first["text"], first
        await tk.runner.job_input(tk.hosts.get(real_sshd.alias), job, "x", newline=False)  # ignored key
        q = await tk.runner.job_input(tk.hosts.get(real_sshd.alias), job, "q", newline=False)
        assert q.input == "written"
        st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
        assert st["state"] == "exited" and st["exit_status"] == 0, st
        out = await tk.dispatch("job_output", {"job_id": job})
        assert "curses-done" in out["text"], out
        top = await _start(tk, real_sshd, "top -d 0.5", stdin="tty")  # interactive top (ncurses) quits with q too
        await tk.runner.job_input(tk.hosts.get(real_sshd.alias), top, "q", newline=False)
        st = await tk.dispatch("job_status", {"job_id": top, "wait_s": 10})
        assert st["state"] == "exited" and st["exit_status"] == 0, st


def _sh_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _path_without(tmp_path: Path, name: str, missing: set[str], extra: dict[str, str]) -> str:
    """A PATH directory with every program of /usr/bin and /bin linked in except ``missing`` (plus ``extra``)."""
    d = tmp_path / name
    d.mkdir()
    for src in (Path("/usr/bin"), Path("/bin")):
        for prog in src.iterdir():
            target = d / prog.name
            if prog.name not in missing and not prog.name.startswith("python") and not target.exists():
                target.symlink_to(prog)
    for prog_name, path in extra.items():
        (d / prog_name).symlink_to(path)
    return str(d)


async def test_a_tty_falls_back_to_python3_and_is_unsupported_without_either(tmp_path: Path) -> None:
    from agent_tools.jobs.scripts import launch_script

    base = str(tmp_path / "jobs")
    python = _path_without(tmp_path, "py", {"script"}, {"python3": sys.executable})
    out = await _launch_fg(launch_script(
        base, "j_pyfallback000000", "test -t 0 && echo tty-yes; stty size; kill -INT $$; echo no",
        cwd=None, mode="fg", head_bytes=4096, tail_bytes=0, stdin="tty"), {"PATH": python, "HOME": str(tmp_path)})
    assert "@@AT exit 130" in out and "tty-yes" in out and "24 80" in out and "no\r\n" not in out, out
    bare = _path_without(tmp_path, "bare", {"script"}, {})
    refused = await anyio.run_process(["/bin/sh", "-c", launch_script(
        base, "j_nopty00000000000", "echo ran", cwd=None, mode="fg", head_bytes=4096, tail_bytes=0, stdin="tty")],
        env={"PATH": bare, "HOME": str(tmp_path)}, check=False)
    assert refused.stdout.decode().startswith("@@AT error unsupported: tty=true needs"), refused.stdout
    assert not (tmp_path / "jobs" / "j_nopty00000000000" / "stdout").exists()  # nothing ran


async def _launch_fg(script: str, env: dict[str, str]) -> str:
    """Run a launcher in ``fg`` mode with its stdin held open (EOF would detach it) until it reports the end."""
    import subprocess

    async with await anyio.open_process(["/bin/sh", "-c", script], stdin=subprocess.PIPE, env=env) as proc:
        assert proc.stdout is not None
        out = b""
        with anyio.fail_after(30):
            async for chunk in proc.stdout:
                out += chunk
                if b"@@AT end" in out:
                    break
        return out.decode()
