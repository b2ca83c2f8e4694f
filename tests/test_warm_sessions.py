"""Warm sessions (``SshHost.take_warm`` + the launcher's warm mode) on a real OpenSSH sshd.

A warm session is a launcher started ahead of time that made the next job's directory and waits on stdin; a
call only writes its request to it. These tests check what a user relies on: the command runs exactly as on a
fresh session (same job id, output, exit status, detach), nothing is left on the host when a session goes
unused, sessions of a dropped connection are never used, and warm sessions never starve other calls of
channels. The core behaviours (budgets, cancel, trees, output) also run through warm sessions in
``tests/test_core_jobs.py`` (the ``sshd-warm`` host).
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from agent_tools.errors import BadArguments
from agent_tools.hosts import SshHost
from agent_tools.hosts.base import run_on
from agent_tools.jobs.discover import discover_script
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import JobRunner
from agent_tools.outcomes import Detached, Finished
from agent_tools.testing import wait_until

from .conftest import ssh_host_for
from .sshd import RealSshd


@pytest.fixture
async def jobs_dir(real_sshd: RealSshd) -> AsyncIterator[str]:
    """A jobs directory of this test's own in the login user's home (removed afterwards)."""
    d = f"$HOME/.local/state/agent-tools/test-warm-{secrets.token_hex(4)}"
    yield d
    host = ssh_host_for(real_sshd, warm_sessions=0)
    try:
        await run_on(host, f'rm -rf "{d}"')
    finally:
        await host.aclose()


async def listing(host: SshHost, jobs_dir: str) -> dict[str, bool]:
    """Job directories under ``jobs_dir`` on the host -> whether each has a ``command`` file."""
    res = await run_on(host, f'cd "{jobs_dir}" 2>/dev/null && for d in j_*; do [ -d "$d" ] || continue; '
                             'if [ -e "$d/command" ]; then echo "$d 1"; else echo "$d 0"; fi; done')
    out: dict[str, bool] = {}
    for line in res.stdout.decode().split("\n"):
        if line.strip():
            name, has = line.split()
            out[name] = has == "1"
    return out


@asynccontextmanager
async def warmed(server: RealSshd, journal: Journal, jobs_dir: str,
                 **settings: object) -> AsyncIterator[tuple[SshHost, JobRunner]]:
    """A host and runner after one call, with the warm session for the next call ready; closed at the end."""
    host = ssh_host_for(server, **settings)
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    try:
        first = await runner.run(host, "true", budget_s=10)
        assert isinstance(first, Finished) and first.exit_status == 0, first
        await host.wait_warm()
        yield host, runner
    finally:
        await host.aclose()


async def test_the_next_command_runs_on_the_warm_session(real_sshd: RealSshd, journal: Journal,
                                                         jobs_dir: str) -> None:
    host = ssh_host_for(real_sshd)
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    try:
        first = await runner.run(host, "true", budget_s=10)
        assert isinstance(first, Finished) and first.exit_status == 0
        await host.wait_warm()
        reserved = [j for j, has_command in (await listing(host, jobs_dir)).items() if not has_command]
        assert len(reserved) == 1, "one warm session, with the next job's directory made ahead of time"
        out = await runner.run(host, "echo out; echo err >&2; exit 3", budget_s=10)
        assert isinstance(out, Finished), out
        assert (out.exit_status, out.stdout.text, out.stderr.text) == (3, "out\n", "err\n")
        assert out.job_id == reserved[0], "the command ran as the warm session's reserved job"
        st = await runner.job_status(host, out.job_id)
        assert (st.state, st.exit_status) == ("exited", 3)
        # the warm session of the next call is made once this one was closed
        await host.wait_warm()
        assert host.warm_count("agent_tools.jobs:" + jobs_dir) == 1
    finally:
        await host.aclose()


async def test_detach_and_follow_through_a_warm_session(real_sshd: RealSshd, journal: Journal,
                                                        jobs_dir: str) -> None:
    async with warmed(real_sshd, journal, jobs_dir) as (host, runner):
        out = await runner.run(host, "sleep 2; echo late; exit 4", budget_s=0.5)
        assert isinstance(out, Detached), out
        st = await runner.job_status(host, out.job_id, wait_s=15)
        assert (st.state, st.exit_status) == ("exited", 4), st
        assert "late" in st.new_stdout.text
        bg = await runner.run(host, "sleep 1; echo bg", budget_s=10, detach_immediately=True)
        assert isinstance(bg, Detached)
        st = await runner.job_status(host, bg.job_id, wait_s=15)
        assert (st.state, st.exit_status) == ("exited", 0) and "bg" in st.new_stdout.text, st


async def test_an_unused_warm_session_leaves_nothing_and_is_no_job(real_sshd: RealSshd, journal: Journal,
                                                                    jobs_dir: str) -> None:
    host = ssh_host_for(real_sshd)
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    await runner.run(host, "true", budget_s=10)
    await host.wait_warm()
    reserved = [j for j, has in (await listing(host, jobs_dir)).items() if not has]
    assert len(reserved) == 1
    # rediscovery (a lost journal) lists jobs, not reserved directories
    res = await run_on(host, discover_script(jobs_dir, []))
    assert reserved[0].encode() not in res.stdout, res.stdout
    added = await runner.refresh_host(host)
    assert reserved[0] not in added
    await host.aclose()  # EOF to the warm session: it removes its empty directory and exits
    checker = ssh_host_for(real_sshd, warm_sessions=0)
    try:
        async def gone() -> bool:
            return reserved[0] not in await listing(checker, jobs_dir)

        await wait_until(gone, "the unused warm session's directory to be removed", timeout_s=10)
        assert all(has for has in (await listing(checker, jobs_dir)).values()), "only real jobs are left"
    finally:
        await checker.aclose()


async def test_warm_sessions_can_be_turned_off(real_sshd: RealSshd, journal: Journal, jobs_dir: str) -> None:
    for host, runner in ((ssh_host_for(real_sshd, warm_sessions=0), JobRunner(journal, jobs_dir=jobs_dir)),
                         (ssh_host_for(real_sshd), JobRunner(journal, jobs_dir=jobs_dir, warm=False))):
        try:
            for _ in range(3):
                out = await runner.run(host, "true", budget_s=10)
                assert isinstance(out, Finished)
            await host.wait_warm()
            assert host.warm_count("agent_tools.jobs:" + jobs_dir) == 0
            assert all((await listing(host, jobs_dir)).values()), "no reserved directories"
        finally:
            await host.aclose()


async def test_a_dropped_connection_never_hands_out_its_warm_session(journal: Journal, jobs_dir: str,
                                                                     real_sshd: RealSshd) -> None:
    key = "agent_tools.jobs:" + jobs_dir
    async with warmed(real_sshd, journal, jobs_dir) as (host, runner):
        assert host.warm_count(key) == 1
        assert real_sshd.drop_connections() > 0

        async def noticed() -> bool:
            return host.warm_count(key) == 0

        await wait_until(noticed, "the client to notice the dropped connection", timeout_s=10)
        out = await runner.run(host, "echo after-drop", budget_s=10)
        assert isinstance(out, Finished) and out.stdout.text == "after-drop\n", out


async def test_warm_sessions_never_starve_other_calls_of_channels(real_sshd: RealSshd, journal: Journal,
                                                                  jobs_dir: str) -> None:
    # two channel slots, one of them taken by a warm session: concurrent calls still all run
    async with warmed(real_sshd, journal, jobs_dir, max_channels=2, warm_sessions=1) as (host, runner):
        outs: list[object] = []

        async def one(i: int) -> None:
            outs.append(await runner.run(host, f"sleep 0.3; echo {i}", budget_s=20))

        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(one, i)
        assert sorted(o.stdout.text for o in outs if isinstance(o, Finished)) == [f"{i}\n" for i in range(5)], outs


async def test_a_killed_warm_session_never_fails_or_doubles_the_next_command(real_sshd: RealSshd, journal: Journal,
                                                                              jobs_dir: str) -> None:
    host = ssh_host_for(real_sshd)
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    checker = ssh_host_for(real_sshd, warm_sessions=0)
    pattern = f"[a]t-warm .*{jobs_dir.rsplit('/', 1)[-1]} "
    try:
        await runner.run(host, "true", budget_s=10)
        for i in range(4):
            await host.wait_warm()
            reserved = [j for j, has in (await listing(checker, jobs_dir)).items() if not has]
            # SIGKILL (no EXIT trap: the reserved directory stays), blocking on purpose: the event loop cannot see
            # the channel close before the next call takes the session
            killed = subprocess.run(["pkill", "-KILL", "-f", pattern], check=False)  # noqa: ASYNC221
            assert killed.returncode == 0, "there was a warm session to kill"
            if i % 2 == 1:  # the client notices before the next call: it gets a fresh session
                await wait_until(lambda: _no_warm(host, jobs_dir), "the client to notice the closed warm session",
                                 timeout_s=10)
            out = await runner.run(host, f"echo run-{i} >> \"{jobs_dir}/runs\"; echo ok-{i}", budget_s=10)
            assert isinstance(out, Finished) and out.stdout.text == f"ok-{i}\n", out
            if i % 2 == 0:
                assert out.job_id in reserved, "the retry used the reserved job id (its directory was left)"
        runs = await run_on(checker, f'cat "{jobs_dir}/runs"')
        assert runs.stdout.decode().split() == [f"run-{i}" for i in range(4)], "each command ran exactly once"
    finally:
        await host.aclose()
        await checker.aclose()


async def _no_warm(host: SshHost, jobs_dir: str) -> bool:
    return host.warm_count("agent_tools.jobs:" + jobs_dir) == 0


async def test_a_drop_the_client_has_not_noticed_yet_costs_nothing(real_sshd: RealSshd, journal: Journal,
                                                                  jobs_dir: str) -> None:
    # the drop happens while the event loop looks away (blocking calls), so each call takes a warm session of a
    # connection that is already dead: it must start once more on a fresh connection, transparently
    host = ssh_host_for(real_sshd)
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    try:
        out = await runner.run(host, "echo first", budget_s=10)
        assert isinstance(out, Finished)
        for i in range(2):
            await host.wait_warm()
            assert real_sshd.drop_connections() > 0
            out = await runner.run(host, f"echo ran-{i} >> \"{jobs_dir}/runs\"; echo ok-{i}", budget_s=10)
            assert isinstance(out, Finished) and out.stdout.text == f"ok-{i}\n", out
        await host.wait_warm()
        assert real_sshd.drop_connections() > 0
        st = await runner.job_status(host, out.job_id)  # a status call recovers the same way
        assert (st.state, st.exit_status) == ("exited", 0)
        await host.wait_warm()
        runs = await run_on(host, f'cat "{jobs_dir}/runs"')
        assert runs.stdout.decode().split() == ["ran-0", "ran-1"], "each command ran exactly once"
    finally:
        await host.aclose()


async def test_a_reserved_directory_removed_meanwhile_is_made_again(real_sshd: RealSshd, journal: Journal,
                                                                   jobs_dir: str) -> None:
    checker = ssh_host_for(real_sshd, warm_sessions=0)
    try:
        async with warmed(real_sshd, journal, jobs_dir) as (host, runner):
            # housekeeping on the host deletes empty directories
            await run_on(checker, f'find "{jobs_dir}" -mindepth 1 -type d -empty -delete')
            out = await runner.run(host, "echo still-fine", budget_s=10)
            assert isinstance(out, Finished) and out.stdout.text == "still-fine\n", out
    finally:
        await checker.aclose()


async def test_closing_right_after_a_call_leaves_no_reserved_directory(real_sshd: RealSshd, journal: Journal,
                                                                      jobs_dir: str) -> None:
    # aclose() lands while the replacement warm session is starting (before or while it says `ready`)
    for i in range(8):
        host = ssh_host_for(real_sshd)
        out = await JobRunner(journal, jobs_dir=jobs_dir).run(host, "true", budget_s=10)
        assert isinstance(out, Finished)
        await anyio.sleep(i * 0.002)  # vary where the close lands (a timing sweep, not synchronisation)
        await host.aclose()
    checker = ssh_host_for(real_sshd, warm_sessions=0)
    try:
        async def tidy() -> bool:
            return all((await listing(checker, jobs_dir)).values())

        await wait_until(tidy, "every unused reserved directory to be removed", timeout_s=10)
    finally:
        await checker.aclose()


async def test_a_command_too_long_for_the_hosts_shell_is_refused_up_front(real_sshd: RealSshd, journal: Journal,
                                                                         jobs_dir: str) -> None:
    # 80 KB of text that quoting for the shell grows past Linux's 128 KiB per-argument limit
    host = ssh_host_for(real_sshd)
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    try:
        with pytest.raises(BadArguments, match="write_file"):
            await runner.run(host, "true " + "'x' " * 20000, budget_s=10)
    finally:
        await host.aclose()


async def test_an_unused_warm_session_ends_by_itself(real_sshd: RealSshd, jobs_dir: str) -> None:
    """qa12 #21: a warm session whose client vanished (a partition: the host's sshd keeps the session until TCP gives
    up, hours) exits after its idle time, removing its reserved directory; a request in time stops that clock."""
    from agent_tools.jobs.scripts import status_request, warm_script

    host = ssh_host_for(real_sshd, warm_sessions=0)
    try:
        idle = await host.start(warm_script(jobs_dir, "j_idleidleidle0001", idle_s=1.5))
        used = await host.start(warm_script(jobs_dir, "j_idleidleidle0002", idle_s=1.5))
        for proc in (idle, used):
            assert b"@@AT ready" in await proc.read_stdout()
        assert set(await listing(host, jobs_dir)) == {"j_idleidleidle0001", "j_idleidleidle0002"}
        await anyio.sleep(0.5)
        await used.write_stdin(status_request(jobs_dir, [("j_idleidleidle0002", 0, 0, 0, 0)]))

        async def idle_gone() -> bool:
            return "j_idleidleidle0001" not in await listing(host, jobs_dir)

        await wait_until(idle_gone, "the unused warm session to remove its directory", timeout_s=10)
        seen = b""
        while b"@@AT end" not in seen:  # the used one answered its request, after the idle time too
            chunk = await used.read_stdout()
            assert chunk, seen
            seen += chunk
        for proc in (idle, used):
            await proc.close()
    finally:
        await host.aclose()
