"""Issue 7, load: many sessions and long-polls at once, and a budget that expires while a session opens on a slow link.

One fault family of the reliability suite (its conventions: ``tests/reliability_harness.py``).
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import pytest

from agent_tools.hosts.ssh import SshHost, SshSettings
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import JobRunner

from .reliability_harness import (
    LONG,
    Rel,
    dump,
    runs_of,
    settle,
    toolkit_for,
    wait_until,
)
from .sshd import RealSshd, require_real_sshd

if TYPE_CHECKING:
    pass


# ================================================================================================ 9. load
async def test_load_many_sessions_and_long_polls(tmp_path: Path, run_log: Path, rel: Rel) -> None:
    """Fault: far more concurrent calls than the server's ``MaxSessions 10``.

    Protections: one pooled connection per host with a channel semaphore below MaxSessions, whose slot is only
    freed once the server has closed the channel, and a session open that the server refuses anyway ("no more
    sessions") is retried with backoff: nothing ran (``ssh.SshHost.start``, ``ssh._SshProcess.close``); a call
    that cannot get a channel within its budget says so (``busy``: nothing was started) instead of claiming the
    host is unreachable.
    """
    require_real_sshd()
    n_run, n_jobs, pollers = (150, 100, 4) if LONG else (50, 50, 4)
    rel.set(fault=f"load: {n_run} concurrent run_command, a burst of {n_jobs} detaching starts and "
                  f"{n_jobs * pollers} concurrent job_status long-polls on one host with MaxSessions 10; 30 "
                  "concurrent run_command against MaxSessions 4", trials=4,
            checked="all complete with the right output and exit status; a start that found every channel busy "
                    "says `busy` and really started nothing; 0 channel-open failures seen by any call (server-side "
                    "refusals absorbed by the retry are counted)")

    def ran() -> Counter[str]:
        return Counter(run_log.read_text().split())

    with RealSshd(max_sessions=10) as server:
        async with toolkit_for(server.config_path, tmp_path / "journal.sqlite3") as tk:
            outs: dict[int, dict[str, Any]] = {}

            async def run(i: int) -> None:
                outs[i] = dump(await tk.run_command(host=server.alias, command=f"sleep 0.2; echo n={i}",
                                                    budget_s=60))

            t0 = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for i in range(n_run):
                    tg.start_soon(run, i)
            run_s = anyio.current_time() - t0
            bad = {i: o for i, o in outs.items() if o["outcome"] != "finished" or o["stdout"]["text"] != f"n={i}\n"}
            assert not bad, list(bad.items())[:3]

            # a burst of starts that detach after 0.3 s: channels run out; the ones that could not start say so
            burst: dict[int, dict[str, Any]] = {}

            async def start(i: int, tag: str, into: dict[int, dict[str, Any]]) -> None:
                into[i] = dump(await tk.run_command(
                    host=server.alias, command=f"echo {tag}{i} >> {run_log}; sleep 3; echo j={i}; exit {i % 4}",
                    budget_s=0.3))

            async with anyio.create_task_group() as tg:
                for i in range(n_jobs):
                    tg.start_soon(start, i, "b", burst)
            kinds = Counter(o["outcome"] if o["outcome"] != "error" else o["kind"] for o in burst.values())
            assert set(kinds) <= {"detached", "busy", "start_unconfirmed"}, kinds
            # an unconfirmed start (the launcher's answer came after the budget) is settled by the host
            for o in burst.values():
                if o["outcome"] == "error" and o["kind"] == "start_unconfirmed":
                    st = await settle(rel, tk, o["job_id"], 30)
                    o["outcome"] = "detached" if st["state"] == "exited" else st["state"]
            counts = ran()
            started_wrongly = [i for i, o in burst.items() if (o["outcome"] == "detached") != (counts[f"b{i}"] == 1)]
            assert not started_wrongly, [burst[i] for i in started_wrongly[:3]]

            # the same number of jobs started at the pace of the channels, then followed by many long-polls
            ids: dict[int, str] = {}
            paced: dict[int, dict[str, Any]] = {}
            limiter = anyio.CapacityLimiter(8)

            async def paced_start(i: int) -> None:
                async with limiter:
                    await start(i, "p", paced)
                assert paced[i]["outcome"] == "detached", paced[i]
                ids[i] = paced[i]["job_id"]

            async with anyio.create_task_group() as tg:
                for i in range(n_jobs):
                    tg.start_soon(paced_start, i)
            polls: list[tuple[int, dict[str, Any], float]] = []

            async def poll(i: int) -> None:
                st = dump(await tk.job_status(job_id=ids[i], wait_s=30))
                polls.append((i, st, anyio.current_time()))

            t1 = anyio.current_time()
            async with anyio.create_task_group() as tg:
                for i in range(n_jobs):
                    for _ in range(pollers):
                        tg.start_soon(poll, i)
            poll_s = anyio.current_time() - t1
            wrong = [(i, st) for i, st, _ in polls if (st.get("state"), st.get("exit_status")) != ("exited", i % 4)]
            assert not wrong, wrong[:3]
            seen = {i for i, st, _ in polls if st["new_stdout"]["text"] == f"j={i}\n"}
            assert seen == set(range(n_jobs)), "some job's output was never shown"
            assert all(ran()[f"p{i}"] == 1 for i in range(n_jobs))
        refused = [ln for ln in server.log_text().splitlines() if "no more sessions" in ln]
    # a server allowing fewer sessions (MaxSessions 4) than the client's default channel limit (8)
    with RealSshd(max_sessions=4) as small:
        async with toolkit_for(small.config_path, tmp_path / "journal-small.sqlite3") as tk:
            few: dict[int, dict[str, Any]] = {}

            async def run_small(i: int) -> None:
                few[i] = dump(await tk.run_command(host=small.alias, command=f"sleep 0.3; echo s={i}", budget_s=60))

            async with anyio.create_task_group() as tg:
                for i in range(30):
                    tg.start_soon(run_small, i)
            bad = {i: o for i, o in few.items() if o["outcome"] != "finished" or o["stdout"]["text"] != f"s={i}\n"}
            assert not bad, list(bad.items())[:3]
        refused_small = [ln for ln in small.log_text().splitlines() if "no more sessions" in ln]
        assert refused_small, "expected the server to refuse sessions beyond its MaxSessions 4"
    # OpenSSH frees a session only after it has seen our channel close, so an open sent right behind that close
    # can still be refused: SshHost retries such refusals (nothing ran), so no call may fail because of them.
    rel.set(run_burst_s=round(run_s, 2), poll_burst_s=round(poll_s, 2), burst_outcomes=dict(kinds),
            server_refusals_absorbed=len(refused) + len(refused_small))
    assert poll_s < 15, f"{n_jobs * pollers} long-polls took {poll_s:.1f} s for jobs ending ~3 s after their start"


@asynccontextmanager
async def delay_proxy(target_port: int, delay_s: float) -> AsyncIterator[int]:
    """A loopback TCP proxy that delivers the server's bytes ``delay_s`` late: a long, slow link."""

    async def pipe(src: anyio.abc.ByteStream, dst: anyio.abc.ByteStream, delay: float) -> None:
        send, recv = anyio.create_memory_object_stream[tuple[float, bytes]](math.inf)

        async def reader() -> None:
            async with send:
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    async for chunk in src:
                        await send.send((anyio.current_time() + delay, chunk))

        async def writer() -> None:
            async with recv:
                async for due, chunk in recv:
                    await anyio.sleep(max(0.0, due - anyio.current_time()))  # the injected latency
                    try:
                        await dst.send(chunk)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                        return
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                await dst.send_eof()

        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)

    async def handle(client: anyio.abc.SocketStream) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", target_port) as server:
            async with anyio.create_task_group() as tg:
                tg.start_soon(pipe, client, server, 0.0)
                tg.start_soon(pipe, server, client, delay_s)

    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, handle)
        yield port
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("round_", range(2 if LONG else 1))
async def test_budget_expires_mid_session_open(private_sshd: RealSshd, tmp_path: Path, run_log: Path,
                                               rel: Rel, round_: int) -> None:
    """Fault: a slow link (0.5 s one way) where the budget runs out while the session is being opened, after
    the exec request went out.

    Protection: a caller cancelled half-way through a session open waits (shielded, bounded) for the open to
    finish, so the launch is reported as sent (``detached``, followed to its exit) instead of "nothing was
    started", and no session is left open on the server (``ssh._open_process``).
    """
    server = private_sshd
    rel.set(fault="budget expires mid session open (0.5 s one-way latency, 0.7 s budget)", trials=3,
            checked="a command that started is never reported as not started; it is followed to its exit; no "
                    "session is left open on the server")
    async with delay_proxy(server.port, 0.5) as port:
        kh = tmp_path / "known_hosts"
        kh.write_text(server.known_hosts_path.read_text().replace(f"]:{server.port} ", f"]:{port} "))
        host = SshHost(SshSettings(server.alias, config_paths=[str(server.config_path)], port=port,
                                   known_hosts=str(kh), connect_timeout_s=20))
        journal = Journal(tmp_path / "journal.sqlite3")
        runner = JobRunner(journal)
        try:
            warm = await runner.run(host, "true", budget_s=30)  # connect once (several slow round trips)
            assert warm.outcome == "finished", warm
            wrong = 0
            for i in range(3):
                t0 = anyio.current_time()
                out = await runner.run(host, f"echo m{i} >> {run_log}; sleep 2; echo done-{i}", budget_s=0.7)
                took = anyio.current_time() - t0
                assert took < 0.7 + 3.0 + 2.5, f"returned after {took:.1f} s"
                started = runs_of(run_log, f"m{i}")
                if out.outcome == "error":
                    wrong += started  # "nothing was started", yet it ran
                    continue
                assert out.outcome == "detached", out
                st = await runner.job_status(host, out.job_id, wait_s=30)
                assert (st.state, st.exit_status, st.new_stdout.text.splitlines()[-1:]) == ("exited", 0, [f"done-{i}"])
            rel.set(misreported=wrong)
            assert wrong == 0, "a command that ran was reported as never started"
        finally:
            await host.aclose()
            journal.close()

    async def all_closed() -> bool:  # sessions close once their commands exit; a leaked one never does
        lg = server.log_text()
        return lg.count("Starting session") <= lg.count("Close session")

    await wait_until(all_closed, 10, "every session to be closed on the server")
