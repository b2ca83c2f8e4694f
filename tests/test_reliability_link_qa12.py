"""Fault suite (``scripts/reliability_report.py``), qa12 findings 13, 19, 22, 23: when the host stops answering, calls
say so, in their own time, about the call itself (not a launch, not the target).

Real parts: the nspawn systemd hosts (iptables partitions and stalls of the sshd port in the host's netns), a
long-lived Toolkit and the CLI as a process; ground truth read inside the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from .reliability_harness import REPO, Rel, dump, on_host, rel, toolkit_for, wait_until

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
__all__ = ["rel"]  # the fixture, imported for its use here

#: what the host seam says of a command it could not start or confirm: never said of a call that is no launch
LAUNCH_WORDS = ("nothing was started", "it may be running")


async def test_probes_through_a_partition_blame_the_link_not_the_target(systemd_hosts: HostPool, tmp_path: Path,
                                                                        rel: Rel) -> None:
    """Fault: the host is partitioned while a long-lived Toolkit waits for a port probe and GETs a URL. Protection:
    a probe or GET whose host does not answer is an error naming the host (``unreachable``/``connection_lost``),
    not ``deadline_exceeded`` on the probe or a timeout blamed on the server; each within its own time + 5 s."""
    rel.set(fault="partition during wait_for(port) and http_get", trials=2,
            checked="error kinds unreachable/connection_lost, within own time + 5 s")
    pool, host = systemd_hosts, "at-h1"
    async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
        assert dump(await tk.run_command(host=host, command="true", budget_s=10))["outcome"] == "finished"
        await anyio.to_thread.run_sync(pool.partition, host)
        try:
            t0 = time.monotonic()
            got = await tk.dispatch("wait_for", {"host": host, "probes": [{"kind": "port", "port": 22}],
                                                 "deadline_s": 2})
            took = time.monotonic() - t0
            assert got.get("outcome") == "error" and got["kind"] in ("unreachable", "connection_lost"), got
            assert took < 2 + 5, took
            assert "port port" not in str(got), got
            t0 = time.monotonic()
            got = await tk.dispatch("http_get", {"host": host, "url": "http://127.0.0.1:22/", "timeout_s": 2})
            took = time.monotonic() - t0
            assert got.get("outcome") == "error" and got["kind"] in ("unreachable", "connection_lost"), got
            assert took < 2 + 5, took
        finally:
            await anyio.to_thread.run_sync(pool.heal, host)



def _cli(pool: HostPool, state: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AGENT_TOOLS_STATE_DIR": str(state), "COLUMNS": "250"}
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", args[0], "-F", str(pool.ssh_config), *args[1:]],
                         env=env,
                         capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)
    return res, time.monotonic() - t0


async def test_cli_calls_during_a_partition_answer_in_their_time(systemd_hosts: HostPool, tmp_path: Path,
                                                                  rel: Rel) -> None:
    """Fault: the host is partitioned while a person runs the CLI (a process of its own: no pooled connection).
    Protection: the check that the alias still reaches the job's machine is bounded by the call's own time:
    ``status --wait 2`` answers within 2 + 5 s (it waited for the config's ConnectTimeout, 10 s), says nothing
    of a connect attempt going on after the process is gone, and ``jobs HOST`` prints its error as text."""
    rel.set(fault="CLI status/jobs during a partition", trials=2,
            checked="status --wait 2 within 7 s, no 'background' claim; jobs HOST error as text")
    pool, host = systemd_hosts, "at-h1"
    state = tmp_path / "state"
    started, _ = await anyio.to_thread.run_sync(
        lambda: _cli(pool, state, "run", host, "--budget", "1", "--json", "--", "sleep 30"))
    job = json.loads(started.stdout)["job_id"]
    _, startup = await anyio.to_thread.run_sync(lambda: _cli(pool, state, "jobs", "--json"))  # no host: the CLI's
    await anyio.to_thread.run_sync(pool.partition, host)                                    # own start-up time
    try:
        res, took = await anyio.to_thread.run_sync(lambda: _cli(pool, state, "status", job, "--wait", "2"))
        assert res.returncode == 1 and took - startup < 2 + 5, (took, startup, res.stdout, res.stderr)
        assert "background" not in res.stdout and not any(w in res.stdout for w in LAUNCH_WORDS), res.stdout
        res, took = await anyio.to_thread.run_sync(lambda: _cli(pool, state, "jobs", host))
        assert res.returncode == 1 and not res.stdout.lstrip().startswith("{"), res.stdout
        assert took - startup < 4 + 5, (took, startup)
    finally:
        await anyio.to_thread.run_sync(pool.heal, host)
        await on_host(pool, host, "pkill -x -f 'sleep 30'; true")


async def test_cancel_and_restart_cut_by_a_stall_say_what_may_have_happened(systemd_hosts: HostPool,
                                                                            tmp_path: Path, rel: Rel) -> None:
    """Fault: the host's answers stop (its sshd port stalls outbound) during job_status, job_cancel and
    restart_service's first step. Protection: the errors speak of the call that was cut, never in a launch's words:
    job_status's says the job is untouched; job_cancel's that the cancel may have taken effect (it had, on the
    host) and job_status tells; restart_service's that only the unit's state was being read and no restart was
    sent (the unit's InvocationID is unchanged)."""
    rel.set(fault="answers-only stall during job_status, job_cancel and restart_service's first step", trials=3,
            checked="no 'nothing was started'/'it may be running' for them; the cancel ran; no restart ran")
    pool, host = systemd_hosts, "at-h1"
    await on_host(pool, host, "printf '[Service]\\nExecStart=/bin/sleep 1000\\n' > /etc/systemd/system/rl-good.service"
                              " && systemctl daemon-reload && systemctl restart rl-good.service")
    inv = (await on_host(pool, host, "systemctl show -p InvocationID --value rl-good.service")).stdout.strip()
    async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
        out = dump(await tk.run_command(host=host, command="sleep 4321", budget_s=1))
        assert out["outcome"] == "detached", out
        await anyio.to_thread.run_sync(lambda: pool.stall_port(host, 22, inbound=False))
        try:
            got = await tk.dispatch("job_cancel", {"job_id": out["job_id"], "grace_s": 1})
            assert got.get("outcome") == "error", got
            sent = "may have reached the host" in got["message"]
            assert sent or "was not sent" in got["message"] or got["kind"] == "unreachable", got
            status = await tk.dispatch("job_status", {"job_id": out["job_id"], "wait_s": 1})
            assert status.get("outcome") == "error" and not any(w in status["message"] for w in LAUNCH_WORDS), \
                status
            restart = await tk.dispatch("restart_service", {"host": host, "unit": "rl-good.service"})
            assert restart.get("outcome") == "error" and not any(w in restart["message"] for w in LAUNCH_WORDS), \
                restart
        finally:
            await anyio.to_thread.run_sync(pool.heal, host)

        async def answers() -> bool:
            return dump(await tk.job_status(job_id=out["job_id"])).get("state") in ("killed", "running")

        await wait_until(answers, 30, "the host to answer again")
        st = dump(await tk.job_status(job_id=out["job_id"]))
        assert st["state"] == ("killed" if sent else "running"), (st, got)  # what the cancel's error said
    now = (await on_host(pool, host, "systemctl show -p InvocationID --value rl-good.service")).stdout.strip()
    assert now == inv, "a restart ran though the call said none was sent"
    await on_host(pool, host, "systemctl stop rl-good.service; pkill -x -f 'sleep 4321'; true")


async def _fault(pool: HostPool, host: str, start_s: float, for_s: float, how: str = "partition") -> None:
    """``how`` (partition, or stall: sshd's port drops packets both ways) ``start_s`` seconds from now, healed
    ``for_s`` seconds later."""
    await anyio.sleep(start_s)
    cut = pool.partition if how == "partition" else (lambda name: pool.stall_port(name, 22))
    await anyio.to_thread.run_sync(cut, host)
    try:
        await anyio.sleep(for_s)
    finally:
        await anyio.to_thread.run_sync(pool.heal, host)


@pytest.mark.parametrize("how", ["stall", "partition"])
async def test_a_launch_cut_off_says_the_jobs_state_is_unknown(systemd_hosts: HostPool, tmp_path: Path, rel: Rel,
                                                               how: str) -> None:
    """Fault (qa12c #3): the host goes silent just after it confirmed a launch; the job exits 0 within the
    budget, unheard. Protection: only a look that got an answer says a job still runs: the result says when the host
    last spoke and that the job's state is not known, names job_status to settle it, and never says it keeps
    running; after the heal job_status says exited 0."""
    rel.set(fault=f"{how} 0.4 s into a launch whose job ends within its budget", trials=1,
            checked="detached without 'keeps running'; 'not known' and job_status in next; exited 0 after the heal")
    pool, host = systemd_hosts, "at-h1"
    async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
        assert dump(await tk.run_command(host=host, command="true", budget_s=10))["outcome"] == "finished"
        async with anyio.create_task_group() as tg:
            tg.start_soon(_fault, pool, host, 0.4, 7.0, how)
            t0 = time.monotonic()
            out = dump(await tk.run_command(host=host, command="sleep 1; echo quick-done", budget_s=3))
            took = time.monotonic() - t0
        assert out["outcome"] == "detached" and took < 3 + 5, (out, took)
        assert "keeps running" not in out["why"] and "still running" not in out["why"], out
        assert "not known" in out["why"] and f"job_status(job_id='{out['job_id']}'" in out["next"], out
        assert "job_cancel" not in out["next"], out
        st = dump(await tk.job_status(job_id=out["job_id"], wait_s=10))
        assert st["state"] == "exited" and st["exit_status"] == 0, st


async def test_a_long_poll_rides_out_a_blip(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault (qa12c #5): a 4 s partition (longer than the 3 s liveness timeout: the connection is found dead) in the
    middle of job_status(wait_s=30). Protection: within wait_s the long-poll looks again on a new connection: it
    ends when the job does, with its output, not with connection_lost just after the link came back."""
    rel.set(fault="4 s partition during a 30 s long-poll", trials=1,
            checked="the long-poll returns the job's end (exited 0, all output) within wait_s")
    pool, host = systemd_hosts, "at-h1"
    async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
        out = dump(await tk.run_command(host=host, budget_s=0.5,
                                        command="for i in $(seq 1 12); do echo L$i; sleep 1; done; echo fin"))
        assert out["outcome"] == "detached", out
        async with anyio.create_task_group() as tg:
            tg.start_soon(_fault, pool, host, 2.0, 4.0)
            t0 = time.monotonic()
            st = dump(await tk.job_status(job_id=out["job_id"], wait_s=30))
            took = time.monotonic() - t0
        assert st.get("state") == "exited" and st["exit_status"] == 0, st
        assert "fin" in st["new_stdout"]["text"] and took < 30, (st, took)


async def test_a_launch_rides_out_a_blip_within_its_budget(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault (qa12c #5): a 4 s partition (the connection is found dead) 1 s into run_command(budget_s=15) of a
    6 s command. Protection: the launch follows its job on a new connection for the rest of its budget: finished,
    exit 0, with all its output (it used to return detached as soon as the connection was found dead)."""
    rel.set(fault="4 s partition during a launch whose job ends within its budget", trials=1,
            checked="finished exit 0 with all output within the budget")
    pool, host = systemd_hosts, "at-h1"
    async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
        assert dump(await tk.run_command(host=host, command="true", budget_s=10))["outcome"] == "finished"
        async with anyio.create_task_group() as tg:
            tg.start_soon(_fault, pool, host, 1.0, 4.0)
            t0 = time.monotonic()
            out = dump(await tk.run_command(host=host, budget_s=15,
                                            command="for i in 1 2 3 4 5 6; do echo R$i; sleep 1; done"))
            took = time.monotonic() - t0
        assert out["outcome"] == "finished" and out["exit_status"] == 0, out
        assert out["stdout"]["text"] == "".join(f"R{i}\n" for i in range(1, 7)) and took < 15 + 5, (out, took)


async def test_list_hosts_check_during_a_partition_answers_in_5_s(systemd_hosts: HostPool, tmp_path: Path,
                                                                  rel: Rel) -> None:
    """Fault (qa12c #4): at-h1 is partitioned; a long-lived Toolkit holds a connection to at-h1 but none to
    at-h1-agent yet (its first connect would wait the config's ConnectTimeout, 10 s). Protection: list_hosts has no
    time of its own, so each host gets a few seconds: the call answers within 5 s, both aliases unreachable with
    the reason, the other host reachable."""
    rel.set(fault="list_hosts(check=true) during a partition", trials=1,
            checked="within 5 s; at-h1 and at-h1-agent reachable false with an error, at-h2 reachable")
    pool, host = systemd_hosts, "at-h1"
    async with toolkit_for(pool.ssh_config, tmp_path / "j.sqlite3") as tk:
        assert dump(await tk.run_command(host=host, command="true", budget_s=10))["outcome"] == "finished"
        await anyio.to_thread.run_sync(pool.partition, host)
        try:
            t0 = time.monotonic()
            got = await tk.dispatch("list_hosts", {"check": True})
            took = time.monotonic() - t0
        finally:
            await anyio.to_thread.run_sync(pool.heal, host)
        by = {h["host"]: h for h in got["hosts"]}
        assert took < 5, (took, got)
        for alias in (host, pool.hosts[host].ssh_alias_agent):
            assert by[alias]["reachable"] is False and by[alias]["error"], by[alias]
        assert by["at-h2"]["reachable"] is True, by["at-h2"]
