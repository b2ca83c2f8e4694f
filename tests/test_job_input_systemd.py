"""Issue 17 on the real systemd test hosts (Debian bookworm under systemd-nspawn: real sshd, real systemd): a pipe-fed
``python3 -i`` across a dropped connection and a new controller process, ``read a; read b`` fed by two calls, ``tty``
jobs (util-linux ``script`` started by ``env --default-signal``: ``test -t 0``, ``top -b -n1``, Ctrl-C, a curses
program quit with ``q``), as the unprivileged user and as root (whose jobs run in a transient scope of their own),
and ``sudo`` on a user without NOPASSWD whose password a person types with ``agent-tools input --secret``: the
password is in no result, log, journal or file of the run, on the controller or on the host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from structlog.testing import capture_logs

import agent_tools
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .hosts.nspawn import HostPool
from .terminal import files_holding, typed_on_a_terminal

REPO = Path(agent_tools.__file__).resolve().parent.parent
pytestmark = pytest.mark.systemd
AGENT = "at-h1-agent"
ROOT = "at-h1"
CURSES_PROGRAM = ("import curses\n"
                  "def main(s):\n"
                  "    s.addstr(0, 0, 'rows %d cols %d; q quits' % s.getmaxyx())\n"
                  "    s.refresh()\n"
                  "    while s.getch() != ord('q'):\n"
                  "        pass\n"
                  "curses.wrapper(main)\n"
                  "print('curses-done')\n")


def _toolkit(pool: HostPool, state_dir: Path) -> Toolkit:
    return Toolkit(HostRegistry(ssh_config=[str(pool.ssh_config)]), journal=Journal(state_dir / "journal.sqlite3"))


async def _cancel_running(toolkit: Toolkit) -> None:
    """A test failing midway leaves no job of it running on the host."""
    for rec in toolkit.journal.list():
        if rec.state in ("running", "unconfirmed"):
            await toolkit.dispatch("job_cancel", {"job_id": rec.job_id, "grace_s": 1})


@pytest.fixture
async def tk(systemd_hosts: HostPool, tmp_path: Path) -> AsyncIterator[Toolkit]:
    toolkit = _toolkit(systemd_hosts, tmp_path)
    try:
        yield toolkit
    finally:
        await _cancel_running(toolkit)
        await toolkit.aclose()


def _text(view: Any) -> str:
    return "" if view is None else view if isinstance(view, str) else str(view.get("text", ""))


async def _start(tk: Toolkit, host: str, command: str, stdin: str) -> str:
    d = await tk.dispatch("run_command", {"host": host, "command": command, "stdin": stdin, "budget_s": 2})
    assert d["outcome"] == "detached", d
    return str(d["job_id"])


@pytest.mark.parametrize("host", [AGENT, ROOT])
async def test_pipe_and_tty_jobs_on_a_systemd_host(tk: Toolkit, host: str) -> None:
    job = await _start(tk, host, "python3 -i", "pipe")
    await tk.dispatch("job_input", {"job_id": job, "text": "import os"})
    a = await tk.dispatch("job_input", {"job_id": job, "text": "print(os.getuid(), 6 * 7)"})
    assert _text(a.get("new_stdout")) == f"{0 if host == ROOT else 1000} 42\n", a
    end = await tk.dispatch("job_input", {"job_id": job, "text": "", "eof": True})
    assert end["input"] == "written", end
    st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
    assert st["state"] == "exited" and st["exit_status"] == 0, st
    if host == ROOT:  # root's jobs run in a transient scope of their own, the pipe and the terminal too
        cg = await tk.dispatch("run_command", {"host": host,
                                               "command": f"cat ~/.local/state/agent-tools/jobs/{job}/cgroup"})
        assert _text(cg["stdout"]).strip().endswith(f"/agent-tools-{job}.scope"), cg

    t = await tk.dispatch("run_command", {"host": host, "stdin": "tty", "budget_s": 10,
                                          "command": "test -t 0 && echo tty-yes; stty size; top -b -n1 | head -1"})
    assert t["outcome"] == "finished" and t["exit_status"] == 0, t
    out = _text(t["stdout"])
    assert "tty-yes" in out and "24 80" in out and "load average" in out, out
    s = await tk.dispatch("run_command", {"host": host, "stdin": "tty", "budget_s": 1, "command": "sleep 600"})
    assert s["outcome"] == "detached", s
    await tk.dispatch("job_input", {"job_id": s["job_id"], "text": "\x03"})  # Ctrl-C, through the terminal
    st = await tk.dispatch("job_status", {"job_id": s["job_id"], "wait_s": 10})
    assert st["state"] == "exited" and st["exit_status"] == 130, st


async def test_read_a_read_b_fed_by_two_calls_and_a_curses_program_quit_with_q(tk: Toolkit) -> None:
    job = await _start(tk, AGENT, 'read a; echo "a=$a"; read b; echo "b=$b"', "pipe")
    one = await tk.dispatch("job_input", {"job_id": job, "text": "first"})
    assert _text(one.get("new_stdout")) == "a=first\n", one
    two = await tk.dispatch("job_input", {"job_id": job, "text": "second"})
    assert _text(two.get("new_stdout")) == "b=second\n", two
    st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
    assert st["state"] == "exited" and st["exit_status"] == 0, st

    import shlex

    curses = await _start(tk, AGENT, f"python3 -c {shlex.quote(CURSES_PROGRAM)}", "tty")
    page = await tk.dispatch("job_output", {"job_id": curses})
    for _ in range(20):  # a loaded host may take a moment to draw
        if "rows 24 cols 80; q quits" in page["text"]:
            break
        await anyio.sleep(0.5)
        page = await tk.dispatch("job_output", {"job_id": curses})
    assert "rows 24 cols 80; q quits" in page["text"], page
    x = await tk.dispatch("job_input", {"job_id": curses, "text": "x"})  # a key it ignores (then Enter)
    assert x["state"] == "running", x
    await tk.dispatch("job_input", {"job_id": curses, "text": "q"})
    st = await tk.dispatch("job_status", {"job_id": curses, "wait_s": 10})
    assert st["state"] == "exited" and st["exit_status"] == 0, st
    assert "curses-done" in (await tk.dispatch("job_output", {"job_id": curses}))["text"]


async def test_python_repl_across_a_dropped_connection_and_a_new_controller_process(
        systemd_hosts: HostPool, tk: Toolkit, tmp_path: Path) -> None:
    job = await _start(tk, AGENT, "python3 -i", "pipe")
    await tk.dispatch("job_input", {"job_id": job, "text": "x = 6 * 7"})
    b = await tk.dispatch("job_input", {"job_id": job, "text": "print(x)"})
    assert _text(b.get("new_stdout")) == "42\n", b
    # every SSH connection of the user is cut on the host (its sshd session processes killed): the job, held by
    # its monitor and not by any session, reads on
    assert systemd_hosts.run("at-h1", "pkill -KILL -u agent -x sshd").returncode == 0  # (1: none matched)
    c = await tk.dispatch("job_input", {"job_id": job, "text": "print(x + 1)"})
    assert _text(c.get("new_stdout")) == "43\n", c
    await tk.aclose()
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path)}
    cli = await anyio.run_process([sys.executable, "-m", "agent_tools.cli", "input", "-F",
                                   str(systemd_hosts.ssh_config), job, "print(x * 2)", "--json"], env=env, check=False)
    d = json.loads(cli.stdout)  # another process, with nothing but the journal file in common
    assert cli.returncode == 0 and _text(d.get("new_stdout")) == "84\n", cli.stdout + cli.stderr
    tk2 = _toolkit(systemd_hosts, tmp_path)
    try:
        e = await tk2.dispatch("job_input", {"job_id": job, "text": "print(x - 2)"})
        assert _text(e.get("new_stdout")) == "40\n", e
        await tk2.dispatch("job_input", {"job_id": job, "text": "raise SystemExit(3)"})
        st = await tk2.dispatch("job_status", {"job_id": job, "wait_s": 10})
        assert st["state"] == "exited" and st["exit_status"] == 3, st
    finally:
        await _cancel_running(tk2)
        await tk2.aclose()


# ---------------------------------------------------------------- sudo with a password a person types
SUDO_HOST = "at-h2"
SUDO_ALIAS = "at-h2-agent"
PASSWORD = "Sud0-pw-" + os.urandom(6).hex()


def _install_sudo(pool: HostPool, name: str) -> None:
    """sudo on test host ``name``, whose base image has none: the files of this machine's own sudo package (Debian
    bookworm, as the hosts; ``.ci/run`` installs it), a minimal ``/etc/sudoers``, and a rule for the unprivileged
    user ``agent`` *without* NOPASSWD; the user gets ``PASSWORD``."""
    if not Path("/usr/bin/sudo").exists():
        pytest.fail("sudo is not installed on this machine (apt-get install -y sudo; .ci/run installs it)")
    listed = subprocess.run(["dpkg", "-L", "sudo"], capture_output=True, text=True, check=True).stdout.split("\n")
    files = [f.lstrip("/") for f in listed if f.startswith(("/usr/", "/etc/"))
             and (os.path.isfile(f) or os.path.islink(f))]
    root = pool.hosts[name].root_dir
    packed = subprocess.run(["tar", "-C", "/", "-cpf", "-", *files], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-C", root, "--keep-directory-symlink", "-xpf", "-"], input=packed, check=True)
    sudoers = Path(root) / "etc/sudoers"
    sudoers.write_text("Defaults env_reset\nroot ALL=(ALL:ALL) ALL\n@includedir /etc/sudoers.d\n")
    sudoers.chmod(0o440)
    (Path(root) / "etc/sudoers.d").mkdir(exist_ok=True)
    rule = Path(root) / "etc/sudoers.d/agent-tools-test"
    rule.write_text("agent ALL=(ALL:ALL) ALL\n")  # a password is asked: no NOPASSWD
    rule.chmod(0o440)
    pool.run(name, ["chpasswd"], input_text=f"agent:{PASSWORD}\n", check=True)


def _remove_sudo_rule(pool: HostPool, name: str) -> None:
    (Path(pool.hosts[name].root_dir) / "etc/sudoers.d/agent-tools-test").unlink(missing_ok=True)
    pool.run(name, ["usermod", "--password", "*", "agent"], check=False)  # key login only again


@pytest.mark.parametrize("stdin,command", [("tty", "sudo -k; sudo id -u"), ("pipe", "sudo -k; sudo -S id -u")])
async def test_sudo_with_a_password_typed_by_a_person_with_input_secret(
        systemd_hosts: HostPool, tk: Toolkit, tmp_path: Path, stdin: str, command: str) -> None:
    _install_sudo(systemd_hosts, SUDO_HOST)
    results: list[dict[str, Any]] = []
    try:
        with capture_logs() as logs:
            refused = await tk.dispatch("run_command", {"host": SUDO_ALIAS, "command": "sudo -n true"})
            results.append(refused)  # no NOPASSWD: without a person it cannot run
            assert refused["outcome"] == "needs_input" and "password is required" in refused["prompt"], refused
            d = await tk.dispatch("run_command", {"host": SUDO_ALIAS, "command": command, "stdin": stdin,
                                                  "budget_s": 3})
            results.append(d)
            assert d["outcome"] == "needs_input" and d["secret"] is True, d
            assert d["prompt"].startswith("[sudo] password for agent") and "--secret" in d["next"], d
            job = d["job_id"]
            env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(tmp_path)}
            code, out, err, shown = await anyio.to_thread.run_sync(lambda: typed_on_a_terminal(
                [sys.executable, "-m", "agent_tools.cli", "-vv", "input", "-F", str(systemd_hosts.ssh_config), job,
                 "--secret", "--json"], env, PASSWORD.encode() + b"\n"))
            assert code == 0, (out, err)
            typed = json.loads(out)
            results.append(typed)
            assert typed["input"] == "written", typed
            done = await tk.dispatch("job_status", {"job_id": job, "wait_s": 15})
            results.append(done)
            assert done["state"] == "exited" and done["exit_status"] == 0, done
            page = await tk.dispatch("job_output", {"job_id": job})
            results.append(page)
            assert page["text"].rstrip().endswith("0"), page  # sudo ran id -u as root
    finally:
        _remove_sudo_rule(systemd_hosts, SUDO_HOST)
    secret = PASSWORD.encode()
    assert secret not in out + err + shown  # not echoed, not printed by the CLI (its -vv logs included)
    assert PASSWORD not in json.dumps(results) and PASSWORD not in repr(logs)
    assert files_holding(tmp_path, secret) == []  # the journal and anything else of the controller
    upper = systemd_hosts.state_dir / "hosts" / SUDO_HOST / "upper"  # every file the host wrote since it booted
    assert files_holding(upper, secret) == []
    journal = systemd_hosts.run(SUDO_HOST, "journalctl -b --no-pager -o export", timeout=120)
    assert journal.returncode == 0 and "sudo" in journal.stdout and PASSWORD not in journal.stdout
