"""Issue 7, host and network faults: a partition, an sshd restart and a host reboot while a job runs.

One fault family of the reliability suite (its conventions: ``tests/reliability_harness.py``).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import pytest

from .reliability_harness import (
    LONG,
    Rel,
    bounded,
    conn_pids,
    dump,
    job_pid_alive,
    on_host,
    read_all,
    same,
    seq_bytes,
    settle,
    toolkit_for,
)

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool


# ================================================================================================ 1. partition
@pytest.mark.parametrize("round_", range(2 if LONG else 1))
async def test_partition_mid_job(systemd_hosts: HostPool, tmp_path: Path, rel: Rel, round_: int) -> None:
    """Fault: iptables DROP inside the host's netns 2 s into a 30 s job.

    Protections: SSH keepalive on the pooled connection (1 s × 3 here) and one connect deadline
    (``SshSettings``) bound every call; a channel open on a connection that dies is ``connection_lost``, not
    "the host refused a session" (``ssh.SshHost.start``); the host-side monitor keeps the job, its output and
    its exit status while the controller cannot reach it (``jobs/scripts.py``).
    """
    pool, name = systemd_hosts, "at-h1"
    job_s = 30
    rel.set(fault="network partition mid-job (iptables DROP in the host's netns, 2 s into a 30 s job)", trials=1,
            checked="next call errors (unreachable/connection_lost) within 5.5 s, never hangs; job alive on the "
                    "host during the partition; after heal: real exit status 7 and every byte of `seq` output")
    cmd = f"for i in $(seq 1 {job_s}); do seq $((i*1000-999)) $((i*1000)); sleep 1; done; exit 7"
    expected = seq_bytes(1, job_s * 1000)
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3", keepalive_interval_s=1,
                           keepalive_count_max=3, connect_timeout_s=3) as tk:
        t0 = anyio.current_time()
        out = dump(await bounded(rel, tk.run_command(host=name, command=cmd, budget_s=1), 10, "run_command"))
        assert out["outcome"] == "detached", out
        job_id = out["job_id"]
        await anyio.sleep(max(0.0, t0 + 2 - anyio.current_time()))  # the fault's timing: 2 s into the job
        await anyio.to_thread.run_sync(pool.partition, name)
        try:
            kinds = []
            for _ in range(2):
                t = anyio.current_time()
                st = dump(await bounded(rel, tk.job_status(job_id=job_id), 15, "job_status while partitioned"))
                took = anyio.current_time() - t
                assert st["outcome"] == "error" and st["kind"] in ("unreachable", "connection_lost"), st
                assert st["retryable"] is True
                assert took <= 5.5, f"the error took {took:.1f} s (keepalive 1 s x 3, connect deadline 3 s)"
                kinds.append(st["kind"])
            alive, has_exit, size = await job_pid_alive(pool, name, job_id)
            assert alive and not has_exit, "the job must keep running on the partitioned host"
            assert size > 0
        finally:
            await anyio.to_thread.run_sync(pool.heal, name)
        rel.set(error_kinds=",".join(kinds))
        st = await settle(rel, tk, job_id, job_s + 30)
        assert (st["state"], st["exit_status"]) == ("exited", 7), st
        text, total = await read_all(rel, tk, job_id)
        got = text.encode()
        if got != expected:
            rel.add("lost_bytes", abs(len(expected) - len(got)) or 1)
        assert total == len(expected)
        same(got, expected, "job output after the partition")


# ================================================================================================ 4. sshd restart
@pytest.mark.parametrize("round_", range(3 if LONG else 1))
async def test_sshd_restart_mid_job(systemd_hosts: HostPool, tmp_path: Path, rel: Rel, round_: int) -> None:
    """Fault: ``systemctl restart ssh`` on the host mid-job, then the controller's own connection cut.

    Protections: jobs run in their own session under a monitor, outside sshd's control (Debian's ssh.service has
    KillMode=process, and the job does not depend on the session either); ``SshHost`` notices a closed pooled
    connection and reconnects, and reopens once when a channel open fails on a connection that was already
    gone (nothing was executed then), so at most one call sees ``connection_lost``.
    """
    pool, name = systemd_hosts, "at-h1"
    rel.set(fault="sshd restarted on the host mid-job (systemctl restart ssh), then the pooled connection cut",
            trials=2, checked="job survives; the next call works (reconnect) or at most one in-flight call gets "
                              "connection_lost; exit status and every byte")
    n = 8
    cmd = f"for i in $(seq 1 {n}); do echo line $i; sleep 1; done; exit 0"
    expected = "".join(f"line {i}\n" for i in range(1, n + 1))
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3", keepalive_interval_s=1,
                           keepalive_count_max=3, connect_timeout_s=3) as tk:
        out = dump(await tk.run_command(host=name, command=cmd, budget_s=1))
        assert out["outcome"] == "detached", out
        job_id = out["job_id"]
        before = await conn_pids(pool, name)
        assert before, "the controller's connection should be visible on the host"
        res = await on_host(pool, name, "systemctl restart ssh && systemctl is-active ssh")
        assert res.stdout.strip() == "active", res
        errors = 0
        for _ in range(3):
            st = dump(await bounded(rel, tk.job_status(job_id=job_id), 15, "job_status after sshd restart"))
            if st.get("outcome") == "error":
                errors += 1
                assert st["kind"] == "connection_lost", st
            else:
                assert st["state"] == "running", st
        assert errors <= 1
        # now cut the controller's connection itself (the sshd processes serving it), as a restart with
        # KillMode=control-group or an sshd crash would
        pids = await conn_pids(pool, name)
        assert pids
        await on_host(pool, name, "kill -TERM " + " ".join(map(str, pids)))
        errors = 0
        for _ in range(3):
            st = dump(await bounded(rel, tk.job_status(job_id=job_id), 15, "job_status after the cut"))
            if st.get("outcome") == "error":
                errors += 1
                assert st["kind"] == "connection_lost", st
            else:
                assert st["state"] in ("running", "exited"), st
        assert errors <= 1, "only a call in flight may fail; the next one must reconnect"
        rel.set(calls_failed_after_cut=errors)
        alive, _, _ = await job_pid_alive(pool, name, job_id)
        assert alive, "the job must survive sshd restarting and its session being cut"
        st = await settle(rel, tk, job_id, n + 20)
        assert (st["state"], st["exit_status"]) == ("exited", 0), st
        text, total = await read_all(rel, tk, job_id)
        if text != expected:
            rel.add("lost_bytes", abs(len(expected) - len(text)) or 1)
        assert total == len(expected)
        same(text, expected, "job output after the sshd restart")


# ================================================================================================ 5. reboot
@pytest.mark.parametrize("round_", range(3 if LONG else 1))
async def test_host_reboot_mid_job(systemd_hosts: HostPool, tmp_path: Path, rel: Rel, round_: int) -> None:
    """Fault: the host reboots while a job runs.

    Protections: the pid file records the boot id and the process start time; "pid gone and no exit file" or
    "boot id changed" is ``lost`` (``killed`` when the job's systemd scope was stopped at shutdown) with that
    evidence, never success (``JobRunner.apply_state``); a job that had finished before the reboot keeps its
    recorded exit status.
    """
    pool, name = systemd_hosts, "at-h2"
    rel.set(fault="host reboot mid-job (systemctl reboot in the container)", trials=1,
            checked="the running job reads lost with the boot-id evidence, never exited/success; a job finished "
                    "before the reboot still reads exited 0; the pooled connection recovers")
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3", keepalive_interval_s=1,
                           keepalive_count_max=3, connect_timeout_s=5) as tk:
        done = dump(await tk.run_command(host=name, command="echo before-reboot", budget_s=10))
        assert done["outcome"] == "finished", done
        out = dump(await tk.run_command(host=name, command="echo started; sleep 120; echo never; exit 0",
                                        budget_s=1))
        assert out["outcome"] == "detached", out
        job_id = out["job_id"]
        boot_before = (await on_host(pool, name, "cat /proc/sys/kernel/random/boot_id")).stdout.strip()
        await anyio.to_thread.run_sync(functools.partial(pool.reboot, name, timeout=120))
        boot_after = (await on_host(pool, name, "cat /proc/sys/kernel/random/boot_id")).stdout.strip()
        assert boot_before != boot_after
        st: dict[str, Any] = {}
        for _ in range(3):  # the first call may meet the dead pooled connection
            st = dump(await bounded(rel, tk.job_status(job_id=job_id), 20, "job_status after reboot"))
            if st.get("outcome") != "error":
                break
            assert st["kind"] in ("connection_lost", "unreachable"), st
        # lost (the monitor died with the host before writing an exit status) or killed (the job's systemd scope
        # was stopped at shutdown and the monitor recorded the signal): never exited, always with the boot ids
        assert st.get("state") in ("lost", "killed"), st
        assert "reboot" in st["why"] and boot_before[:8] in st["why"], st
        assert st["exit_status"] is None if st["state"] == "lost" else st["exit_status"] > 128, st
        assert st["by"] is None, st  # nobody of agent-tools killed it (it read "by: cancel")
        rel.set(evidence=st["why"])
        again = dump(await tk.job_status(job_id=done["job_id"]))
        assert (again["state"], again["exit_status"]) == ("exited", 0), again
        lst = dump(await tk.list_jobs(host=name))
        states = {j["job_id"]: j["state"] for j in lst["jobs"]}
        assert states[job_id] == st["state"] and states[done["job_id"]] == "exited", lst
