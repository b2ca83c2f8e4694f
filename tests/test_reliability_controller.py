"""Issue 7, controller faults: the controller crashes, its journal is damaged, the same launch is sent twice.

One fault family of the reliability suite (its conventions: ``tests/reliability_harness.py``).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import pytest

from agent_tools.errors import JournalError
from agent_tools.jobs.journal import JobRecord, Journal
from agent_tools.jobs.manager import new_job_id
from agent_tools.tools.toolkit import Toolkit

from .reliability_harness import (
    LONG,
    Rel,
    bounded,
    child_env,
    dump,
    on_host,
    read_all,
    seq_bytes,
    settle,
    toolkit_for,
    wait_until,
)
from .sshd import RealSshd

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool


# ================================================================================================ 2. controller crash
def _crash_jobs(trial: int, runs: str) -> list[dict[str, Any]]:
    """Jobs of various lengths: finished within the budget, detached then done, still running at reattach,
    and in flight (waiting for their exit report) when the controller is killed."""
    k = trial % 3
    spec = [("fin", 0.1, 0, 6.0), ("det", 1.5 + k, 3, 1.0), ("long", 5.0 + k, 0, 1.0), ("fly", 1.5 + k, 5, 4.0),
            ("many", 0.5, 9, 1.0)]
    jobs = []
    for tag, secs, code, budget in spec:
        t = f"t{trial}-{tag}"
        n = 1000 * (trial + 1)
        jobs.append({"tag": t, "budget_s": budget, "code": code, "n": n,
                     "command": f"echo {t} >> {runs}; seq 1 {n}; sleep {secs}; exit {code}"})
    return jobs


async def _crash_trial(rel: Rel, pool: HostPool, child: Path, tmp: Path, trial: int) -> dict[str, int]:
    name = "at-h1"
    runs = f"/tmp/rel-crash-{os.getpid()}-{trial}.runs"
    await on_host(pool, name, f"rm -f {runs}")
    jobs = _crash_jobs(trial, runs)
    journal_path = tmp / f"crash-{trial}.sqlite3"
    cfg = {"ssh_config": str(pool.ssh_config), "journal": str(journal_path), "host": name, "jobs": jobs,
           "hold": True}
    kill_after = [0.05, 0.4, 0.9, 1.6, 2.5][trial % 5]  # before connect, mid-launch, after detaching, ...
    proc = await anyio.open_process([sys.executable, str(child), json.dumps(cfg)], env=child_env())
    printed: dict[str, dict[str, Any]] = {}
    try:
        assert proc.stdout is not None
        buf = b""
        with anyio.fail_after(30):
            while b"READY\n" not in buf:
                buf += await proc.stdout.receive()
        await anyio.sleep(kill_after)  # the fault's timing: kill -9 at a chosen point of the run
        proc.send_signal(signal.SIGKILL)
        await proc.wait()
        with anyio.move_on_after(2):
            async for chunk in proc.stdout:
                buf += chunk
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    for line in buf.decode().splitlines():
        if line.startswith("{"):
            d = json.loads(line)
            printed[d["tag"]] = d
    # A new process (this one) reattaches from the journal.
    tally = {"lost": 0, "dup": 0, "wrong": 0}
    async with toolkit_for(pool.ssh_config, journal_path) as tk:
        recs = tk.journal.list(name)
        by_tag: dict[str, list[JobRecord]] = {}
        for r in recs:
            by_tag.setdefault(r.command.split()[1], []).append(r)
        # settle every job the journal knows first: a launch the killed controller had sent may start its command
        # later (a systemd scope is made first), so the host's run log is read once they have ended
        settled = {r.job_id: await settle(rel, tk, r.job_id, 30) for rs in by_tag.values() for r in rs[:1]}
        ran = Counter((await on_host(pool, name, f"cat {runs} 2>/dev/null; rm -f {runs}")).stdout.split())
        for job in jobs:
            tag = job["tag"]
            mine = by_tag.get(tag, [])
            if ran[tag] > 1 or len(mine) > 1:
                tally["dup"] += 1
            if ran[tag] and not mine:
                tally["lost"] += 1  # it runs on the host and no journal knows it
                continue
            said = printed.get(tag)
            if said is not None and said["outcome"] == "error":
                if ran[tag]:  # "nothing was started", yet it ran
                    tally["wrong"] += 1
                    print(f"trial {trial}: {tag} said {said} but ran")
            elif said is not None and (not mine or said["job_id"] != mine[0].job_id):
                tally["wrong"] += 1
                print(f"trial {trial}: {tag} said {said}, journal has {[r.job_id for r in mine]}")
            if not mine:
                continue
            st = settled[mine[0].job_id]
            if ran[tag]:
                ok = (st["state"], st["exit_status"]) == ("exited", job["code"])
                if ok:
                    text, _ = await read_all(rel, tk, mine[0].job_id)
                    ok = text.encode() == seq_bytes(1, job["n"])
                if not ok:
                    tally["wrong"] += 1
                    print(f"trial {trial}: {tag} misreported: {st}")
            elif st["state"] not in ("lost", "not_started"):
                tally["wrong"] += 1  # never started: must read lost (unknown) or not_started, never running/exited
                print(f"trial {trial}: {tag} never ran but reads {st}")
    return tally


async def test_controller_crash_reattach(systemd_hosts: HostPool, child_script: Path, tmp_path: Path,
                                         rel: Rel) -> None:
    """Fault: ``kill -9`` of a controller process while its jobs launch, run and detach.

    Protections: the job is in the SQLite journal (WAL) *before* the launcher is sent; jobs run under a host-side
    monitor in their own session, so the controller's death (SSH EOF) does not touch them; a new process
    reattaches from the journal; a journalled job whose directory never appeared reads ``lost`` (after its
    launch window), never ``running`` or ``exited``.
    """
    trials = 20 if LONG else 5
    rel.set(fault="controller crash (kill -9 of a separate controller process at 5 points of its run)",
            trials=trials, checked="a new process reattaches from the journal: every job that ran is reported with "
                                   "its real exit status and complete output; never-started ones read lost or "
                                   "not_started; 0 lost, 0 duplicated (host-side run log + journal)")
    totals = Counter[str]()
    batch = 5
    for start in range(0, trials, batch):
        results: list[dict[str, int]] = []

        async def run_one(i: int, results: list[dict[str, int]] = results) -> None:
            results.append(await _crash_trial(rel, systemd_hosts, child_script, tmp_path, i))

        async with anyio.create_task_group() as tg:
            for i in range(start, min(trials, start + batch)):
                tg.start_soon(run_one, i)
        for r in results:
            totals.update(r)
    rel.add("lost_jobs", totals["lost"])
    rel.set(duplicated=totals["dup"], misreported=totals["wrong"])
    assert (totals["lost"], totals["dup"], totals["wrong"]) == (0, 0, 0), dict(totals)


# ================================================================================================ 3. journal damage
async def test_journal_damage_and_rediscovery(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: the journal is corrupted (garbage bytes) or deleted between controller runs, or while one runs.

    Protections: ``Journal`` detects a damaged file at open (SQLite header / quick_check), moves it aside to
    ``journal.sqlite3.corrupt-<time>`` and starts a fresh one with a warning (``on_damage="raise"`` gives a
    ``JournalError`` naming the file and what to do); damage found later is an ``error`` outcome of kind
    ``journal``, never a traceback; ``list_jobs(host)`` rediscovers every job from the host's job directories
    in one round trip and puts them back into the journal.
    """
    pool, name = systemd_hosts, "at-h2"
    rel.set(fault="journal damage (garbage bytes, deleted file, corruption under a running controller)", trials=3,
            checked="clear JournalError / journal error outcome naming the file; damaged file moved aside; "
                    "list_jobs(host) rediscovers every job with state, exit status and output")
    jpath = tmp_path / "state" / "journal.sqlite3"
    cmds = {"ok": "echo fine; exit 0", "bad": "echo broken >&2; exit 4", "slow": "sleep 4; echo slow-done"}
    ids: dict[str, str] = {}
    async with toolkit_for(pool.ssh_config, jpath) as tk:
        for tag, cmd in cmds.items():
            out = dump(await tk.run_command(host=name, command=cmd, budget_s=1))
            assert out["outcome"] in ("finished", "detached"), out
            ids[tag] = out["job_id"]

    async def check_rediscovered(tk: Toolkit) -> None:
        lst = dump(await bounded(rel, tk.list_jobs(host=name), 30, "list_jobs"))
        assert "jobs" in lst, lst
        found = {j["job_id"]: j for j in lst["jobs"]}
        missing = [t for t, j in ids.items() if j not in found]
        rel.add("lost_jobs", len(missing))
        assert not missing, f"not rediscovered: {missing}; note: {lst['note']}"
        assert "rediscovered" in lst["note"], lst["note"]
        assert found[ids["ok"]]["command"] == cmds["ok"]
        assert (found[ids["ok"]]["state"], found[ids["ok"]]["exit_status"]) == ("exited", 0)
        assert (found[ids["bad"]]["state"], found[ids["bad"]]["exit_status"]) == ("exited", 4)
        st = await settle(rel, tk, ids["slow"], 30)
        assert (st["state"], st["exit_status"]) == ("exited", 0), st
        text, _ = await read_all(rel, tk, ids["slow"])
        assert text == "slow-done\n"
        err, _ = await read_all(rel, tk, ids["bad"], stream="stderr")
        assert err == "broken\n"

    # (a) garbage bytes over the whole file (and its WAL) between runs: strict mode raises a clear error ...
    for p in jpath.parent.glob("journal.sqlite3*"):
        p.write_bytes(secrets.token_bytes(4096))
    with pytest.raises(JournalError) as info:
        Journal(jpath, on_damage="raise")
    msg = str(info.value)
    assert str(jpath) in msg and "move" in msg.lower() and "list_jobs" in msg, msg
    # ... the default moves it aside, starts fresh, and says so; list_jobs(host) rediscovers the jobs.
    async with toolkit_for(pool.ssh_config, jpath) as tk:
        assert tk.journal.recovered_from is not None
        aside = list(jpath.parent.glob("journal.sqlite3.corrupt-*"))
        assert aside and aside[0] == tk.journal.recovered_from, aside
        lost = dump(await tk.job_status(job_id=ids["ok"]))
        assert lost["outcome"] == "error" and lost["kind"] == "job_not_found" and "list_jobs" in lost["message"]
        await check_rediscovered(tk)
        note = dump(await tk.list_jobs(host=name))["note"]
        assert "moved aside" in note, note

    # (b) the file deleted between runs (WAL files too): a fresh journal, jobs rediscovered.
    for p in jpath.parent.glob("journal.sqlite3*"):
        p.unlink()
    async with toolkit_for(pool.ssh_config, jpath) as tk:
        await check_rediscovered(tk)

    # (c) corrupted under a running controller: an error outcome naming the file, no traceback.
    async with toolkit_for(pool.ssh_config, jpath) as tk:
        for p in jpath.parent.glob("journal.sqlite3*"):
            if not p.name.endswith("-lock"):
                p.write_bytes(b"this is not an SQLite file" * 200)
        res = await tk.dispatch("list_jobs", {"host": name})
        assert res["outcome"] == "error" and res["kind"] == "journal", res
        assert str(jpath) in res["message"], res
    async with toolkit_for(pool.ssh_config, jpath) as tk:  # the next start recovers
        assert tk.journal.recovered_from is not None
        await check_rediscovered(tk)


# ================================================================================================ 6. duplicate launch
@pytest.mark.parametrize("round_", range(2 if LONG else 1))
async def test_duplicate_launch_with_idempotency_key(private_sshd: RealSshd, child_script: Path, tmp_path: Path,
                                                     run_log: Path, rel: Rel, round_: int) -> None:
    """Fault: the same ``run_command`` with an idempotency key sent twice — concurrently, as a retry after the
    connection dropped mid-call, from two processes sharing the journal, and after a first try that never
    reached the host.

    Protections: the unique (host, key) index of the journal with insert-or-return-existing (a lost race returns
    the winner's job instead of an error); a job still launching (journalled, no job directory yet, inside its
    launch window) reads ``running`` (starting), never ``lost``; a key whose first attempt never reached the
    host is released (after checking the host has no such job), so the retry really starts the job.
    """
    server = private_sshd
    rel.set(fault="duplicate launch (same idempotency key: concurrent, retry after a drop, two processes, retry "
                  "after unreachable, retry while another process is still launching)", trials=5,
            checked="exactly one job started per key (host-side run log) and every call returns that job id")
    runs = run_log
    jpath = tmp_path / "journal.sqlite3"

    def ran(tag: str) -> int:
        return runs.read_text().split().count(tag)

    dups = 0
    async with toolkit_for(server.config_path, jpath) as tk:
        # (a) two concurrent calls, same key
        cmd = f"echo a >> {runs}; sleep 3; echo done-a"
        outs: list[dict[str, Any]] = []

        async def call(key: str, command: str, budget: float) -> None:
            outs.append(dump(await tk.run_command(host=server.alias, command=command, budget_s=budget,
                                                  idempotency_key=key)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "key-a", cmd, 1.0)
            tg.start_soon(call, "key-a", cmd, 1.0)
        assert {o["outcome"] for o in outs} == {"detached"}, outs
        assert len({o["job_id"] for o in outs}) == 1, outs
        assert all("lost" not in o["why"] for o in outs), outs
        st = await settle(rel, tk, outs[0]["job_id"], 20)
        assert (st["state"], st["exit_status"]) == ("exited", 0), st
        dups += max(0, ran("a") - 1)

        # (b) the connection drops after the command was sent; the client retries with the same key
        cmd = f"echo b >> {runs}; sleep 2; echo done-b"
        first: dict[str, Any] = {}

        async def first_call() -> None:
            first.update(dump(await tk.run_command(host=server.alias, command=cmd, budget_s=8,
                                                   idempotency_key="key-b")))

        async with anyio.create_task_group() as tg:
            tg.start_soon(first_call)

            async def started() -> bool:
                return ran("b") > 0

            await wait_until(started, 10, "job b to start")
            assert server.drop_connections() > 0
        # the first call rides out the drop: it follows its job on a new connection within its budget (qa12c #5)
        assert first["outcome"] == "finished" and first["stdout"]["text"] == "done-b\n", first
        retry = dump(await tk.run_command(host=server.alias, command=cmd, budget_s=8, idempotency_key="key-b"))
        assert retry.get("job_id") == first["job_id"], (first, retry)
        assert retry["outcome"] in ("finished", "detached"), retry
        st = await settle(rel, tk, first["job_id"], 20)
        assert (st["state"], st["exit_status"]) == ("exited", 0), st
        dups += max(0, ran("b") - 1)

        # (d) the first attempt never reaches the host (sshd down): the retry must start the job
        cmd = f"echo d >> {runs}; echo done-d"
        server.stop()
        try:
            err = dump(await tk.run_command(host=server.alias, command=cmd, budget_s=3, idempotency_key="key-d"))
            assert err["outcome"] == "error" and err["kind"] in ("unreachable", "connection_lost"), err
        finally:
            server.start()
        again = dump(await tk.run_command(host=server.alias, command=cmd, budget_s=8, idempotency_key="key-d"))
        assert again["outcome"] == "finished" and again["stdout"]["text"] == "done-d\n", again
        assert ran("d") == 1
        once_more = dump(await tk.run_command(host=server.alias, command=cmd, budget_s=8, idempotency_key="key-d"))
        assert once_more["job_id"] == again["job_id"] and ran("d") == 1, once_more

        # (e) another controller journalled a keyed job and is still launching it (no job directory yet): the
        # retry returns that job as running/starting, never lost; one whose launch window passed reads lost
        for key, age_s, want in (("key-e1", 0.0, "running"), ("key-e2", 60.0, "lost")):
            rec = JobRecord(job_id=new_job_id(), host=server.alias, command="echo e", base=tk.runner.jobs_dir,
                            created_at=time.time() - age_s, budget_s=5.0, idempotency_key=key)
            tk.journal.add(rec)
            hit = dump(await tk.run_command(host=server.alias, command="echo e", budget_s=5, idempotency_key=key))
            assert hit.get("job_id") == rec.job_id and f"(state: {want})" in hit["why"], (key, hit)
            assert tk.journal.get(rec.job_id).state == want

    # (c) two processes sharing the journal, released at the same instant
    go = tmp_path / "go"
    cmd = f"echo c >> {runs}; sleep 2; echo done-c"
    cfg = {"ssh_config": str(server.config_path), "journal": str(jpath), "host": server.alias, "go_file": str(go),
           "jobs": [{"tag": "c", "command": cmd, "budget_s": 1.0, "key": "key-c"}]}
    procs = [await anyio.open_process([sys.executable, str(child_script), json.dumps(cfg)], env=child_env())
             for _ in range(2)]
    outputs: list[str] = []
    try:
        for p in procs:
            assert p.stdout is not None
            buf = b""
            with anyio.fail_after(30):
                while b"READY\n" not in buf:
                    buf += await p.stdout.receive()
        go.touch()
        for p in procs:
            assert p.stdout is not None
            with anyio.fail_after(30):
                data = b"".join([chunk async for chunk in p.stdout])
            outputs.append(data.decode())
            await p.wait()
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
    results = [json.loads(line) for o in outputs for line in o.splitlines() if line.startswith("{")]
    assert len(results) == 2 and all(r["outcome"] == "detached" for r in results), outputs
    assert results[0]["job_id"] == results[1]["job_id"], results
    async with toolkit_for(server.config_path, jpath) as tk:
        st = await settle(rel, tk, results[0]["job_id"], 20)
        assert (st["state"], st["exit_status"]) == ("exited", 0), st
    dups += max(0, ran("c") - 1)

    # the journal-level race (two journals on one file, both past their lookup): the loser gets the winner's job
    j1, j2 = Journal(jpath), Journal(jpath)
    try:
        recs = [JobRecord(job_id=new_job_id(), host="h", command="x", base="b", created_at=time.time(),
                          idempotency_key="key-race") for _ in range(2)]
        assert j1.find_idempotent("h", "key-race") is None and j2.find_idempotent("h", "key-race") is None
        assert j1.add_idempotent(recs[0]).job_id == recs[0].job_id
        assert j2.add_idempotent(recs[1]).job_id == recs[0].job_id
    finally:
        j1.close()
        j2.close()
    rel.set(duplicated=dups)
    assert dups == 0 and all(ran(t) == 1 for t in "abcd"), runs.read_text()
