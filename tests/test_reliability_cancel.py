"""Issue 7, cancel: nothing a cancelled job started survives.

One fault family of the reliability suite (its conventions: ``tests/reliability_harness.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .reliability_harness import (
    LONG,
    Rel,
    bounded,
    dump,
    on_host,
    toolkit_for,
    wait_until,
)

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool


# ================================================================================================ 7. cancel
CANCEL_CASES = {
    "process tree": ("python3 -c \"import subprocess,time;[subprocess.Popen(['sleep','701']) for _ in range(3)];"
                     "time.sleep(600)\"", 4, False),
    "double-forked daemons": ("(sleep 702 &) ; (setsid sh -c 'sleep 703 & sleep 704 &' &) ; sleep 600", 4, False),
    "setsid children": ("setsid sleep 705 & setsid sh -c 'sleep 706' & wait", 4, False),
    "ignores TERM": ("sh -c \"trap '' TERM; sleep 707\" & trap '' TERM; sleep 708 & wait", 4, True),
    # no marker, another session: only the job's cgroup (its systemd scope) still holds it
    "env-stripped double fork": ("(env -i setsid sleep 709 &); sleep 600", 1, False),
}


@pytest.mark.parametrize("round_", range(3 if LONG else 1))
async def test_cancel_leaves_no_survivors(systemd_hosts: HostPool, tmp_path: Path, rel: Rel, round_: int) -> None:
    """Fault: jobs whose processes escape the process group (setsid, double fork) or ignore SIGTERM.

    Protections: cancel signals every process of the job's cgroup (its transient systemd scope), of its process
    group and session, and every process carrying ``AGENT_TOOLS_JOB=<id>`` in its environment, escalates to KILL
    after the grace, then verifies (``jobs/scripts.py`` cancel script, ``JobRunner.cancel``).
    """
    pool, name = systemd_hosts, "at-h1"
    rel.set(fault="cancel of process trees, double-forked daemons, setsid children, a TERM-ignoring child, an "
                  "env-stripped double fork (env -i setsid)",
            trials=len(CANCEL_CASES), checked="0 survivors (host-side /proc scan for the job marker and the "
                                              "sleeps), what was signalled is reported, KILL escalation reported")
    survivors = 0
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        for label, (cmd, min_procs, needs_kill) in CANCEL_CASES.items():
            out = dump(await tk.run_command(host=name, command=cmd, budget_s=0.5))
            assert out["outcome"] == "detached", (label, out)
            job_id = out["job_id"]
            marker = f"grep -lzxF AGENT_TOOLS_JOB={job_id} /proc/[0-9]*/environ 2>/dev/null | wc -l"

            async def ready(marker: str = marker, min_procs: int = min_procs) -> bool:
                return int((await on_host(pool, name, marker)).stdout.strip() or 0) >= min_procs

            await wait_until(ready, 15, f"{label}: the job's processes")
            res = dump(await bounded(rel, tk.job_cancel(job_id=job_id, grace_s=1.0), 30, f"job_cancel {label}"))
            assert res["state"] == "killed", (label, res)
            assert len(res["signalled"]) >= min_procs, (label, res)
            assert "TERM" in res["message"], res
            if needs_kill:
                assert res["escalated"] and "KILL" in res["message"], (label, res)
            left = int((await on_host(pool, name, marker)).stdout.strip() or 0)
            sleeps = (await on_host(pool, name, "pgrep -f '^sleep 70[0-9]$' || true")).stdout.split()
            survivors += left + len(sleeps) + len(res["survivors"])
            assert left == 0 and not sleeps and res["survivors"] == [], (label, left, sleeps, res)
            st = dump(await tk.job_status(job_id=job_id))
            assert st["state"] == "killed", (label, st)
    rel.add("survivors", survivors)
