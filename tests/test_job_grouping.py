"""Issue 12, items 7-9: cancel finds every process of a job, leftovers are reported, output is complete.

On the nspawn systemd hosts a job runs in a transient systemd scope (a cgroup of its own: ``systemd-run --scope``
as root, ``systemd-run --user --scope`` for a user whose manager lingers), so a process that dropped the job's
environment marker and left its session (``env -i setsid``) is still found and killed. Without a scope (the
loopback sshd: no systemd on this machine; a user without linger) the job is followed by its session, process
group and marker, and every survivor check says what it could not see instead of "no survivors".

Ground truth comes from the host itself (``pool.run`` enters the host's namespaces; /proc on this machine for the
loopback sshd).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from agent_tools.hosts.ssh import SshHost
from agent_tools.jobs.manager import JobRunner
from agent_tools.outcomes import Detached, Finished, result_view

from .conftest import ssh_host_for
from .reliability_harness import on_host, toolkit_for
from .sshd import RealSshd

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool


def _pids_with(token: str) -> list[int]:
    """Pids on this machine whose command line holds ``token`` (ground truth for the loopback sshd)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if token in (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


async def _until(cond: Callable[[], Awaitable[bool]], what: str, limit_s: float = 15) -> None:
    """Bounded polling on a condition on another process or machine."""
    with anyio.move_on_after(limit_s):
        while not await cond():  # noqa: ASYNC110
            await anyio.sleep(0.1)
        return
    raise AssertionError(f"timed out after {limit_s:g} s waiting for {what}")


@pytest.fixture
async def sshd_host(real_sshd: RealSshd) -> AsyncIterator[SshHost]:
    host = ssh_host_for(real_sshd)
    try:
        yield host
    finally:
        await host.aclose()


# ----------------------------------------------------------------------------------- the nspawn systemd hosts
@pytest.mark.parametrize("user", ["root", "agent"])
async def test_cancel_kills_env_stripped_setsid_child_in_scope(systemd_hosts: HostPool, tmp_path: Path,
                                                               user: str) -> None:
    """``(env -i setsid sleep 781 &); sleep 500``: the sleep drops the marker and the session, yet the cancel
    kills it (it is in the job's scope) and says "no survivors" with nothing left unchecked."""
    pool, name = systemd_hosts, "at-h1"
    alias = pool.hosts[name].ssh_alias if user == "root" else pool.hosts[name].ssh_alias_agent
    if user == "agent":
        await on_host(pool, name, "loginctl enable-linger agent")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
            out = await tk.run_command(host=alias, command="(env -i setsid sleep 781 &); sleep 500", budget_s=1)
            assert isinstance(out, Detached), result_view(out)

            async def started() -> bool:
                return bool((await on_host(pool, name, "pgrep -x -f 'sleep 781' || true")).stdout.split())

            await _until(started, "sleep 781 on the host")
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1.0)
            assert res.state == "killed" and res.survivors == [], result_view(res)
            if user == "root":  # the job's own audit session: every process of it is in sight
                assert res.unchecked == "" and "no survivors" in res.message, result_view(res)
            else:  # a user cannot start an audit session of its own: a process that left the scope too is not
                assert "none of those survived" in res.message and "no audit session" in res.unchecked, \
                    result_view(res)
            assert len(res.signalled) >= 2, result_view(res)
            left = (await on_host(pool, name, "pgrep -f '^sleep (781|500)$' || true")).stdout.split()
            assert left == [], f"survivors on the host: {left}"

            # the same sleep left behind by a command that finished: reported, then stopped by job_cancel
            fin = await tk.run_command(host=alias, command="(env -i setsid sleep 782 &); echo ok", budget_s=10)
            assert isinstance(fin, Finished) and fin.exit_status == 0, result_view(fin)
            assert [lo.command for lo in fin.leftovers] == ["sleep 782"], result_view(fin)
            assert f"job_cancel(job_id='{fin.job_id}')" in fin.next
            res = await tk.job_cancel(job_id=fin.job_id, grace_s=1.0)
            assert res.state == "exited" and res.signalled == [fin.leftovers[0].pid], result_view(res)
            assert ("no survivors" in res.message) == (user == "root") and (res.unchecked == "") == (user == "root"), \
                result_view(res)
            assert (await on_host(pool, name, "pgrep -x -f 'sleep 782' || true")).stdout.split() == []
    finally:
        await on_host(pool, name, "pkill -x -f 'sleep (781|782|500)'; loginctl disable-linger agent; true")


async def test_no_scope_says_what_it_could_not_check(systemd_hosts: HostPool, tmp_path: Path) -> None:
    """A user whose systemd manager stops at logout (no linger) gets no scope (the job would die with the user's
    manager): the cancel names what it could not check and why, and never says "no survivors"."""
    pool, name = systemd_hosts, "at-h1"
    await on_host(pool, name, "loginctl disable-linger agent")
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
            out = await tk.run_command(host=pool.hosts[name].ssh_alias_agent,
                                       command="(env -i setsid sleep 783 &); sleep 500", budget_s=1)
            assert isinstance(out, Detached), result_view(out)

            async def started() -> bool:
                return bool((await on_host(pool, name, "pgrep -x -f 'sleep 783' || true")).stdout.split())

            await _until(started, "sleep 783 on the host")
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1.0)
            assert res.state == "killed", result_view(res)
            assert "no survivors" not in res.message and "env -i" in res.unchecked, result_view(res)
            assert "enable-linger agent" in res.unchecked, result_view(res)
    finally:
        await on_host(pool, name, "pkill -x -f 'sleep (783|500)'; true")


# ------------------------------------------------------------------------------- the loopback sshd (no systemd)
async def test_fallback_cancel_says_what_it_could_not_check(sshd_host: SshHost, runner: JobRunner) -> None:
    """No systemd on this machine: the env-stripped setsid sleep is out of sight, and the cancel says so."""
    token = f"sleep 78{secrets.randbelow(10**6)}"
    try:
        out = await runner.run(sshd_host, f"(env -i setsid {token} &); sleep 500", budget_s=1)
        assert isinstance(out, Detached), result_view(out)

        async def started() -> bool:
            return bool(_pids_with(token))

        await _until(started, token)
        res = await runner.cancel(sshd_host, out.job_id, grace_s=1.0)
        assert res.state == "killed" and res.signalled, result_view(res)
        assert "no survivors" not in res.message, result_view(res)
        assert "does not run systemd" in res.unchecked and "env -i" in res.unchecked, result_view(res)
    finally:
        for pid in _pids_with(token):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


async def test_leftovers_are_reported_and_cancel_stops_them(sshd_host: SshHost, runner: JobRunner) -> None:
    """``sleep 30 & echo done`` finishes at once, exit 0, and lists the still running sleep with the call that
    stops it; job_cancel on the finished job kills it and says the command itself had exited."""
    token = f"sleep 30.{secrets.randbelow(10**6)}"
    out = await runner.run(sshd_host, f"{token} & echo done", budget_s=10)
    assert isinstance(out, Finished) and out.exit_status == 0 and out.stdout.text == "done\n", result_view(out)
    assert [lo.command for lo in out.leftovers] == [token], result_view(out)
    assert out.leftovers[0].pid in _pids_with(token)
    assert f"job_cancel(job_id='{out.job_id}')" in out.next
    res = await runner.cancel(sshd_host, out.job_id, grace_s=1.0)
    assert res.state == "exited" and res.signalled == [out.leftovers[0].pid], result_view(res)
    assert "had exited with status 0" in res.message, result_view(res)
    assert _pids_with(token) == []
    again = await runner.run(sshd_host, "echo quiet", budget_s=10)
    assert isinstance(again, Finished) and again.leftovers == [] and again.next == "", result_view(again)


async def test_next_of_a_run_result_is_job_statuses(sshd_host: SshHost, runner: JobRunner) -> None:
    """qa12 #25: a failed command's run result and its job_status name the same next steps (one function,
    jobs.hints.guide): ``exit 3`` said nothing in the result but "it failed: fix the cause" in job_status; ``sleep 1
    & exit 2`` named only its leftovers."""
    failed = await runner.run(sshd_host, "exit 3", budget_s=10)
    assert isinstance(failed, Finished) and failed.exit_status == 3, result_view(failed)
    st = await runner.job_status(sshd_host, failed.job_id)
    assert failed.next and failed.next == st.next and "it failed" in failed.next, (result_view(failed), st)
    token = f"sleep 1.{secrets.randbelow(10**6)}"
    both = await runner.run(sshd_host, f"{token} & exit 2", budget_s=10)
    assert isinstance(both, Finished) and both.exit_status == 2 and both.leftovers, result_view(both)
    assert "it failed" in both.next and f"job_cancel(job_id='{both.job_id}')" in both.next, result_view(both)
    fine = await runner.run(sshd_host, "true", budget_s=10)
    assert isinstance(fine, Finished) and fine.next == "", result_view(fine)


async def test_output_of_a_tee_is_complete(sshd_host: SshHost, runner: JobRunner, tmp_path: Path) -> None:
    """``exec > >(tee -a LOG) 2>&1 && echo ok``: the tee writes ``ok`` to the job's stdout after the command's
    shell exited; the finished result holds it every time (the report waits for the tee to finish)."""
    log_file = tmp_path / "t.log"
    os.chmod(tmp_path, 0o777)  # the sshd login user writes the log
    for i in range(5):
        out = await runner.run(sshd_host, f"exec > >(tee -a {log_file}) 2>&1 && echo ok", budget_s=10)
        assert isinstance(out, Finished) and out.exit_status == 0, result_view(out)
        assert out.stdout.text == "ok\n", (i, result_view(out))
        assert out.leftovers == [], result_view(out)


async def test_output_a_slow_writer_still_holds_is_named(sshd_host: SshHost, runner: JobRunner,
                                                        tmp_path: Path) -> None:
    """qa12 #18: ``exec > >(sleep 0.3; tee -a LOG) 2>&1; echo ok2``: the substitution writes ``ok2`` after the
    command's shell exited, but sleeps first (not waited for): the finished result says that process still holds
    the output open and names job_output, which then shows the line."""
    log_file = tmp_path / "t.log"
    os.chmod(tmp_path, 0o777)  # the sshd login user writes the log
    out = await runner.run(sshd_host, f"exec > >(sleep 0.3; tee -a {log_file}) 2>&1; echo ok2", budget_s=10)
    assert isinstance(out, Finished) and out.exit_status == 0, result_view(out)
    if out.stdout.text == "ok2\n":
        return  # the writer was done before the report (a slow host): nothing left to say
    assert out.leftovers and "still hold its output open" in out.next, result_view(out)
    assert f"job_output(job_id='{out.job_id}')" in out.next, result_view(out)

    async def written() -> bool:
        return (await runner.job_output(sshd_host, out.job_id)).text == "ok2\n"

    await _until(written, "ok2 in the job's output")


@pytest.mark.parametrize("user", ["root", "agent"])
async def test_scope_refused_at_launch_runs_the_command_once_without(systemd_hosts: HostPool, tmp_path: Path,
                                                                     user: str) -> None:
    """A ``systemd-run`` that cannot make the scope (here one earlier in PATH that fails as systemd-run does) is
    found out at launch: the command runs once, without a scope. As root the job's own audit session keeps every
    process of it in sight, so the cancel says "no survivors"; a user (with linger: a scope was asked for) gets no
    audit session of its own, and the cancel names systemd-run's words in what it could not check."""
    pool, name = systemd_hosts, "at-h1"
    alias = pool.hosts[name].ssh_alias if user == "root" else pool.hosts[name].ssh_alias_agent
    fake = "/usr/local/bin/systemd-run"
    await on_host(pool, name, f"printf '#!/bin/sh\\necho \"Failed to start transient scope unit: test refusal\" >&2\\n"
                              f"exit 1\\n' > {fake} && chmod 755 {fake}" + ("; loginctl enable-linger agent"
                                                                            if user == "agent" else ""))
    try:
        async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
            out = await tk.run_command(host=alias, command="echo once; sleep 30 & wait", budget_s=1)
            assert isinstance(out, Detached), result_view(out)
            res = await tk.job_cancel(job_id=out.job_id, grace_s=1.0)
            assert res.state == "killed" and res.survivors == [], result_view(res)
            home = "/root" if user == "root" else "/home/agent"
            cgroup = await on_host(pool, name, f"cat {home}/.local/state/agent-tools/jobs/{out.job_id}/cgroup")
            refusal = "systemd-run could not make a scope: Failed to start transient scope unit: test refusal"
            assert refusal in cgroup.stdout, cgroup.stdout
            if user == "root":
                assert "no survivors" in res.message and res.unchecked == "", result_view(res)
            else:
                assert "no survivors" not in res.message and refusal in res.unchecked, result_view(res)
            page = await tk.job_output(job_id=out.job_id)
            assert page.text == "once\n", page
    finally:
        await on_host(pool, name, f"rm -f {fake}; loginctl disable-linger agent; true")


async def test_signal_from_outside_is_told_from_an_exit(sshd_host: SshHost, runner: JobRunner) -> None:
    """Status 137 from ``exit 137`` is an exit (no signal); a job whose process someone else killed with SIGKILL
    is ``killed`` by a signal from outside, not ``exited``."""
    out = await runner.run(sshd_host, "exit 137", budget_s=10)
    assert isinstance(out, Finished) and out.exit_status == 137 and out.signal is None, result_view(out)
    token = f"sleep 300.{secrets.randbelow(10**6)}"
    job = await runner.run(sshd_host, token, budget_s=0.5)
    assert isinstance(job, Detached), result_view(job)

    async def started() -> bool:
        return bool(_pids_with(token))

    await _until(started, token)
    for pid in _pids_with(token):
        os.kill(pid, signal.SIGKILL)
    st = await runner.job_status(sshd_host, job.job_id, wait_s=10)
    assert st.state == "killed" and st.signal == "KILL" and "from outside" in st.why, st
    ended = await runner.run(sshd_host, "sleep 0.3; exit 143", budget_s=0.1)
    st = await runner.job_status(sshd_host, ended.job_id, wait_s=10) if isinstance(ended, Detached) else None
    assert st is not None and st.state == "exited" and st.exit_status == 143 and st.signal is None, st


async def test_budget_kill_without_cgroup_says_what_it_could_not_check(sshd_host: SshHost,
                                                                       runner: JobRunner) -> None:
    """``on_timeout=kill`` on a host without systemd: the ``killed`` outcome carries what its survivor check could
    not see."""
    out = await runner.run(sshd_host, f"sleep 30.{secrets.randbelow(10**6)}", budget_s=0.5, on_timeout="kill")
    assert out.outcome == "killed" and out.survivors == [], result_view(out)
    assert "does not run systemd" in out.unchecked, result_view(out)
