"""Issue 2: every command ends in a defined outcome; long work becomes a durable job (local + real sshd)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from agent_tools.errors import BadArguments
from agent_tools.hosts.base import Host, run_on
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import JobRunner, job_id_for_key
from agent_tools.outcomes import Detached, Finished, Killed

from .conftest import ssh_host_for
from .sshd import RealSshd


async def test_finished_reports_status_and_both_streams(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, "echo hi; echo oops >&2; exit 3", budget_s=10)
    assert isinstance(out, Finished)
    assert (out.exit_status, out.stdout.text, out.stderr.text) == (3, "hi\n", "oops\n")


async def test_budget_kill_keeps_last_output_and_is_never_success(any_host: Host, runner: JobRunner) -> None:
    cmd = "for i in $(seq 40); do sleep 0.5; echo job $i; done; echo ALL_DONE"
    out = await runner.run(any_host, cmd, budget_s=2, on_timeout="kill")
    assert isinstance(out, Killed), out
    assert out.by == "budget" and out.survivors == []
    lines = out.stdout.text.split()
    assert "ALL_DONE" not in out.stdout.text
    assert lines[-2:] and lines[-2] == "job", out.stdout.text  # the last line written before the kill is kept
    status = await runner.job_status(any_host, out.job_id)
    assert status.state == "killed"


async def test_detach_then_follow_to_exit(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, "echo start; sleep 6; echo done", budget_s=2)
    assert isinstance(out, Detached), out
    assert out.stdout.text == "start\n"
    assert out.job_id in out.next
    st = await runner.job_status(any_host, out.job_id, wait_s=30)
    assert (st.state, st.exit_status) == ("exited", 0)
    assert st.new_stdout.text == "done\n"  # only what is new since the detached outcome showed "start"


def _unique_seconds() -> int:
    """A sleep length no other test (another xdist worker, the local and sshd variants at once) uses, so a
    machine-wide ``pgrep`` sees only this test's processes."""
    return 100_000 + uuid.uuid4().int % 800_000


async def test_cancel_kills_the_whole_tree(any_host: Host, runner: JobRunner) -> None:
    n = _unique_seconds()
    out = await runner.run(any_host, f"bash -c 'sleep {n} & sleep {n} & wait'", budget_s=1)
    assert isinstance(out, Detached)
    res = await runner.cancel(any_host, out.job_id, grace_s=2)
    assert res.state == "killed" and res.survivors == [] and len(res.signalled) >= 3
    left = await run_on(any_host, f"pgrep -f 'slee[p] {n}' || true")
    assert left.stdout.strip() == b""


async def test_double_forked_and_setsid_children_are_cancelled(any_host: Host, runner: JobRunner) -> None:
    n = _unique_seconds()
    cmd = (f"setsid sleep {n}2 & (sleep {n}3 &) ; "
           f"python3 -c \"import subprocess,time;[subprocess.Popen(['sleep','{n}4']) for _ in range(3)];"
           "time.sleep(600)\"")
    out = await runner.run(any_host, cmd, budget_s=1.5)
    assert isinstance(out, Detached)
    res = await runner.cancel(any_host, out.job_id, grace_s=1)
    assert res.survivors == []
    left = await run_on(any_host, f"pgrep -f 'slee[p] {n}[234]' || true")
    assert left.stdout.strip() == b""


async def test_grandchild_holding_the_pipe_does_not_hang(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, "exec > >(tee -a /tmp/agent-tools-t.log) 2>&1 && echo ok", budget_s=10)
    assert isinstance(out, Finished) and out.exit_status == 0
    out = await runner.run(any_host, "sleep 600 & echo bg-started", budget_s=10)
    assert isinstance(out, Finished) and out.stdout.text == "bg-started\n"
    await runner.cancel(any_host, out.job_id, grace_s=1)


async def test_huge_output_gives_bounded_view_with_exact_count(any_host: Host, runner: JobRunner) -> None:
    n = 5_000_000
    out = await runner.run(any_host, f"seq 1 {n}", budget_s=60)
    assert isinstance(out, Finished) and out.exit_status == 0
    expected = sum(len(str(i)) + 1 for i in range(1, n + 1))
    assert out.stdout.total_bytes == expected
    assert out.stdout.omitted_bytes > 0 and len(out.stdout.text) < 8000
    assert out.stdout.text.startswith("1\n2\n3\n") and out.stdout.text.endswith(f"{n}\n")
    assert "bytes omitted" in out.stdout.text
    page = await runner.job_output(any_host, out.job_id, offset=expected - 8, limit=100)
    assert page.text == f"{n}\n"[-8:] and page.eof


async def test_bad_bytes_are_shown_safely(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, r"printf 'a\000b\377c\033[31mred\033[0m\n 10%%\r50%%\r100%%\n'", budget_s=10)
    assert isinstance(out, Finished)
    assert out.stdout.text == "a\\0b\ufffdcred\n100%\n"  # NUL, bad UTF-8, ANSI colour, \r redraws
    assert out.stdout.total_bytes == 32


async def test_noninteractive_environment(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, 'echo "$PAGER|$GIT_PAGER|$TERM|$AGENT_TOOLS_JOB"; read x; echo "rc=$?"',
                           budget_s=10)
    assert isinstance(out, Finished)
    pager, git_pager, term, job = out.stdout.text.splitlines()[0].split("|")
    assert (pager, git_pager, term, job) == ("cat", "cat", "dumb", out.job_id)
    assert out.stdout.text.splitlines()[1] == "rc=1"  # stdin is /dev/null: read hits EOF at once


async def test_missing_cwd_is_an_error_not_a_hang(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, "pwd", budget_s=10, cwd="/nonexistent/dir")
    assert out.outcome == "error" and "working directory" in out.message  # type: ignore[union-attr]


async def test_idempotency_key_starts_one_job(any_host: Host, runner: JobRunner) -> None:
    a = await runner.run(any_host, "sleep 30", budget_s=0.5, idempotency_key="restart-1")
    b = await runner.run(any_host, "sleep 30", budget_s=0.5, idempotency_key="restart-1")
    assert isinstance(a, Detached) and isinstance(b, Detached)
    assert a.job_id == b.job_id
    await runner.cancel(any_host, a.job_id, grace_s=1)


async def test_key_on_host_finds_the_job_from_another_journal(any_host: Host, runner: JobRunner,
                                                               tmp_path: Path) -> None:
    """A keyed launch claimed on the host: callers with journals of their own (another worker process or
    machine retrying the same step), concurrently and after the fact, start the command once and all follow
    that job."""
    run = uuid.uuid4().hex  # a host keeps its job directories: a key (and a mark file) of this run only
    mark = f"$HOME/.at-key-on-host-{run}"  # the host user's own home (sshd: another user)
    cmd = f"echo run >> {mark}; sleep 30"
    key = f"wf-{run}/restart"
    journals = [Journal(tmp_path / f"worker{i}.sqlite3") for i in range(4)]
    outs: list[object] = [None] * len(journals)
    try:
        async def launch(i: int) -> None:
            outs[i] = await JobRunner(journals[i]).run(any_host, cmd, budget_s=1.0, idempotency_key=key,
                                                       key_on_host=True)

        async with anyio.create_task_group() as tg:
            for i in range(len(journals) - 1):
                tg.start_soon(launch, i)
        await launch(len(journals) - 1)  # later, from yet another journal
        assert all(isinstance(o, Detached) for o in outs), outs
        ids = {o.job_id for o in outs}  # type: ignore[attr-defined]
        assert ids == {job_id_for_key(any_host.name, key)}
        seen = await run_on(any_host, f"cat {mark}; rm -f {mark}")
        assert seen.stdout.decode().splitlines() == ["run"], (seen, outs)
        again = await runner.run(any_host, cmd, budget_s=1.0, idempotency_key=key, key_on_host=True)
        assert isinstance(again, Detached) and "already started" in again.why
    finally:
        for j in journals:
            j.close()
    res = await runner.cancel(any_host, next(iter(ids)), grace_s=1)
    assert res.survivors == []


# ---------------------------------------------------------------- SSH-specific (real OpenSSH sshd)

async def test_sudo_prompt_fails_fast_as_needs_input(real_sshd: RealSshd, runner: JobRunner) -> None:
    host = ssh_host_for(real_sshd)
    try:
        have = await run_on(host, "command -v sudo")
        if have.exit_status != 0:
            pytest.fail("sudo is not installed on the test machine (.ci/run installs it)")
        out = await runner.run(host, "sudo -k; sudo true", budget_s=10)
        assert out.outcome == "needs_input", out
        assert "password" in out.prompt.lower() or "terminal" in out.prompt.lower()  # type: ignore[union-attr]
    finally:
        await host.aclose()


async def test_job_survives_connection_close_and_new_process_finds_it(
        real_sshd: RealSshd, state_dir: object, journal: Journal) -> None:
    host = ssh_host_for(real_sshd)
    runner = JobRunner(journal)
    out = await runner.run(host, "sleep 3; echo survived; exit 7", budget_s=1)
    assert isinstance(out, Detached)
    await host.aclose()  # the SSH connection is gone; the job must keep running on the host
    env = dict(os.environ, AGENT_TOOLS_STATE_DIR=str(state_dir))
    proc = await anyio.run_process(
        [sys.executable, "-m", "agent_tools.cli", "status", out.job_id, "--wait", "20", "--json",
         "--ssh-config", str(real_sshd.config_path)], env=env, check=False)
    data = json.loads(proc.stdout)
    assert (data["state"], data["exit_status"]) == ("exited", 7), data
    assert "survived" in data["new_stdout"]["text"]


async def test_unreachable_host_is_an_error_within_the_budget(real_sshd: RealSshd, runner: JobRunner) -> None:
    host = ssh_host_for(real_sshd, real_sshd.dead_alias)
    t0 = anyio.current_time()
    out = await runner.run(host, "true", budget_s=5)
    assert out.outcome == "error" and out.kind == "unreachable", out  # type: ignore[union-attr]
    assert anyio.current_time() - t0 < 5 + 1  # the contract: returns by budget + ~1 s


async def test_blackholed_host_returns_by_the_budget(runner: JobRunner) -> None:
    # 127.0.0.1 with a listening socket that never speaks SSH: connect succeeds, the handshake never ends
    import socket

    from agent_tools.hosts import SshHost, SshSettings

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    host = SshHost(SshSettings("silent", hostname="127.0.0.1", port=srv.getsockname()[1], config_paths=[],
                               connect_timeout_s=30))
    try:
        t0 = anyio.current_time()
        out = await runner.run(host, "true", budget_s=2)
        # the TCP connection was made (the kernel completes it for the backlog): the budget ran out while
        # connecting, which is what the error says, not that the host is unreachable
        assert out.outcome == "error" and out.kind == "connecting", out  # type: ignore[union-attr]
        assert "TCP connected" in out.message and out.retryable, out  # type: ignore[union-attr]
        assert anyio.current_time() - t0 < 2 + 1
    finally:
        srv.close()


async def test_host_key_mismatch_is_refused(real_sshd: RealSshd, runner: JobRunner) -> None:
    host = ssh_host_for(real_sshd, real_sshd.badkey_alias)
    out = await runner.run(host, "true", budget_s=5)
    assert out.outcome == "error" and out.kind == "host_key", out  # type: ignore[union-attr]
    assert "host key" in out.message  # type: ignore[union-attr]


def test_cli_detach_then_status_by_alias(real_sshd: RealSshd, state_dir: object) -> None:
    env = dict(os.environ, AGENT_TOOLS_STATE_DIR=str(state_dir))
    for host, extra in (("local", []), (real_sshd.alias, ["--ssh-config", str(real_sshd.config_path)])):
        run = subprocess.run([sys.executable, "-m", "agent_tools.cli", "run", host, "--budget", "2", "--json",
                              *extra, "--", "sleep 5; echo done"], env=env, capture_output=True, text=True,
                             check=False)
        d = json.loads(run.stdout)
        assert d["outcome"] == "detached", d
        st = subprocess.run([sys.executable, "-m", "agent_tools.cli", "status", d["job_id"], "--wait", "10",
                             "--json", *extra], env=env, capture_output=True, text=True, check=False)
        s = json.loads(st.stdout)
        assert (s["state"], s["exit_status"]) == ("exited", 0) and "done" in s["new_stdout"]["text"], s


async def test_cwd_home_and_env(any_host: Host, runner: JobRunner) -> None:
    out = await runner.run(any_host, 'pwd; echo "$GREETING"', budget_s=10, cwd="~", env={"GREETING": "hi there"})
    assert isinstance(out, Finished) and out.exit_status == 0, out
    home = (await run_on(any_host, "cd && pwd")).stdout.decode()
    assert out.stdout.text == home + "hi there\n"
    with pytest.raises(BadArguments):
        await runner.run(any_host, "true", env={"BAD-NAME": "x"})
