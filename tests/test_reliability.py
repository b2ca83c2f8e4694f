"""Issue 7: reliability under faults, on real hosts — nothing an agent starts is lost or misreported.

Each test injects one fault into real parts (the nspawn systemd hosts ``at-h1``/``at-h2`` in their own network
namespaces, or a private OpenSSH ``sshd`` on loopback) and checks the outcome against ground truth taken on
the host itself (``pool.run`` enters the host's namespaces, so it works while the host is partitioned). The
docstring of each test names the protection it covers: remove that protection and the test fails.

Every test records what it measured (``fault``, ``trials``, ``checked``, ``lost_jobs``, ``lost_bytes``,
``survivors``, ``hangs``) as pytest user properties; ``scripts/reliability_report.py`` turns them into
``docs/reliability.md``.

``AGENT_TOOLS_LONG=1`` runs the long variants: 20 controller-crash trials instead of 5, 3x the load, and
repeated rounds (``round_``) of the partition, sshd-restart, reboot, cancel, duplicate and slow-open faults.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.abc
import pytest
from pydantic import BaseModel

from agent_tools.errors import JournalError
from agent_tools.hosts.registry import HostRegistry
from agent_tools.hosts.ssh import SshHost, SshSettings
from agent_tools.jobs.journal import JobRecord, Journal
from agent_tools.jobs.manager import JobRunner, new_job_id
from agent_tools.output import clean_text
from agent_tools.tools.toolkit import Toolkit

from .sshd import RealSshd, require_real_sshd

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

LONG = os.environ.get("AGENT_TOOLS_LONG") == "1"
REPO = Path(__file__).resolve().parents[1]
ROOT_JOBS = "/root/.local/state/agent-tools/jobs"
AGENT_JOBS = "/home/agent/.local/state/agent-tools/jobs"
T = TypeVar("T")


# ----------------------------------------------------------------------------------------------- recording
class Rel:
    """What one fault test measured; written as user properties (junit XML / the report's JSON plugin)."""

    def __init__(self, record: Callable[[str, object], None]) -> None:
        self._record = record
        self.counts = {"lost_jobs": 0, "lost_bytes": 0, "survivors": 0, "hangs": 0}
        for k, v in self.counts.items():
            record(k, v)

    def set(self, **kw: object) -> None:
        for k, v in kw.items():
            self._record(k, v)

    def add(self, key: str, n: int) -> None:
        self.counts[key] += n
        self._record(key, self.counts[key])


@pytest.fixture
def rel(record_property: Callable[[str, object], None]) -> Rel:
    return Rel(record_property)


async def bounded(rel: Rel, aw: Awaitable[T], limit_s: float, what: str) -> T:
    """Await ``aw`` but fail (and count a hang) if it takes longer than ``limit_s`` seconds."""
    try:
        with anyio.fail_after(limit_s):
            return await aw
    except TimeoutError:
        rel.add("hangs", 1)
        raise AssertionError(f"HANG: {what} did not return within {limit_s:g} s") from None


# ----------------------------------------------------------------------------------------------- helpers
def dump(m: BaseModel) -> dict[str, Any]:
    return m.model_dump(mode="json")


@asynccontextmanager
async def toolkit_for(config: Path | str, journal_path: Path, **ssh: Any) -> AsyncIterator[Toolkit]:
    """A Toolkit over the hosts of an OpenSSH client config, with SshSettings overrides for every alias."""
    overrides = dict(ssh)
    tk = Toolkit(HostRegistry(ssh_config=[str(config)], settings_for=lambda _alias: dict(overrides)),
                 journal=Journal(journal_path))
    try:
        yield tk
    finally:
        await tk.aclose()
        tk.journal.close()


async def on_host(pool: HostPool, name: str, cmd: str, *, user: str = "root",
                  limit_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Ground truth from inside the host (nsenter: works while the host is partitioned)."""
    return await anyio.to_thread.run_sync(functools.partial(pool.run, name, cmd, user=user, timeout=limit_s))


async def wait_until(cond: Callable[[], Awaitable[bool]], limit_s: float, what: str, step_s: float = 0.1) -> None:
    """Bounded polling on a condition (not a sleep-as-synchronisation)."""
    with anyio.move_on_after(limit_s):
        while not await cond():  # noqa: ASYNC110  (the condition lives on another machine: poll it)
            await anyio.sleep(step_s)
        return
    raise AssertionError(f"timed out after {limit_s:g} s waiting for {what}")


async def settle(rel: Rel, tk: Toolkit, job_id: str, limit_s: float) -> dict[str, Any]:
    """Follow a job with long-polls until it is no longer running; tolerates one transient host error."""
    end = anyio.current_time() + limit_s
    errors = 0
    while True:
        left = end - anyio.current_time()
        if left <= 0:
            rel.add("hangs", 1)
            raise AssertionError(f"HANG: job {job_id} still not settled after {limit_s:g} s")
        st = dump(await bounded(rel, tk.job_status(job_id=job_id, wait_s=min(5.0, left)), min(5.0, left) + 15,
                                f"job_status({job_id})"))
        if st.get("outcome") == "error":
            errors += 1
            assert errors <= 2, f"job_status keeps failing: {st}"
            continue
        if st["state"] != "running":
            return st


async def read_all(rel: Rel, tk: Toolkit, job_id: str, *, stream: str = "stdout",
                   limit: int = 1 << 20) -> tuple[str, int]:
    """Page a stream from offset 0 to its end; returns (text, total_bytes)."""
    parts: list[str] = []
    off = 0
    while True:
        page = dump(await bounded(rel, tk.job_output(job_id=job_id, stream=stream, offset=off, limit=limit), 30,
                                  "job_output"))
        assert "text" in page, page
        parts.append(page["text"])
        assert page["next_offset"] >= off
        if page["next_offset"] == off and not page["eof"]:
            raise AssertionError(f"job_output made no progress at offset {off}: {page}")
        off = page["next_offset"]
        if page["eof"]:
            return "".join(parts), int(page["total_bytes"])


def same(got: T, want: T, what: str) -> None:
    """Assert equality of two long texts with a short message (pytest's own diff of megabytes takes minutes)."""
    if got == want:
        return
    assert isinstance(got, str | bytes) and isinstance(want, str | bytes)
    i = next((k for k, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    raise AssertionError(f"{what}: differs at index {i} (lengths {len(got)} vs {len(want)}): "
                         f"got {got[max(0, i - 20):i + 20]!r}, want {want[max(0, i - 20):i + 20]!r}")


def runs_of(log: Path, tag: str) -> int:
    """How many times a job wrote ``tag`` to a run log (ground truth for "did it start")."""
    return log.read_text().split().count(tag)


def seq_bytes(first: int, last: int) -> bytes:
    return "".join(f"{i}\n" for i in range(first, last + 1)).encode()


async def conn_pids(pool: HostPool, name: str) -> list[int]:
    """Pids of the host's sshd processes serving connections from the controller (the pool's bridge address)."""
    res = await on_host(pool, name, "ss -Htnp state established '( sport = :22 )'")
    return sorted({int(p) for line in res.stdout.splitlines() if f"{pool.bridge_address}:" in line
                   for p in re.findall(r"pid=(\d+)", line)})


async def job_pid_alive(pool: HostPool, name: str, job_id: str, base: str = ROOT_JOBS) -> tuple[bool, bool, int]:
    """(command alive, exit file present, stdout bytes) read inside the host."""
    d = f"{base}/{job_id}"
    res = await on_host(pool, name, f"read p rest < {d}/pid; kill -0 $p 2>/dev/null && echo alive; "
                                    f"[ -f {d}/exit ] && echo exit; wc -c < {d}/stdout")
    words = res.stdout.split()
    return "alive" in words, "exit" in words, int(words[-1]) if words and words[-1].isdigit() else -1


# Child controller process for the crash and cross-process duplicate tests: a small script using the library.
CHILD = r'''
import json, sys, time
from pathlib import Path
import anyio
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

async def main() -> None:
    cfg = json.loads(sys.argv[1])
    tk = Toolkit(HostRegistry(ssh_config=[cfg["ssh_config"]]), journal=Journal(cfg["journal"]))
    print("READY", flush=True)
    go = cfg.get("go_file")
    while go and not Path(go).exists():
        time.sleep(0.002)
    async def one(job):
        out = await tk.run_command(host=cfg["host"], command=job["command"], budget_s=job["budget_s"],
                                   idempotency_key=job.get("key"))
        print(json.dumps({"tag": job["tag"], "outcome": out.outcome, "job_id": getattr(out, "job_id", None),
                          "kind": getattr(out, "kind", None)}), flush=True)
    async with anyio.create_task_group() as tg:
        for job in cfg["jobs"]:
            tg.start_soon(one, job)
    print("ALLDONE", flush=True)
    if cfg.get("hold"):
        await anyio.sleep(3600)
    await tk.aclose()

anyio.run(main)
'''


@pytest.fixture
def child_script(tmp_path: Path) -> Path:
    p = tmp_path / "controller.py"
    p.write_text(CHILD)
    return p


def child_env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


@pytest.fixture
def private_sshd() -> Iterator[RealSshd]:
    """An sshd of our own (MaxSessions 10) that a test may stop, restart and cut."""
    require_real_sshd()
    server = RealSshd(max_sessions=10)
    server.start()
    try:
        yield server
    finally:
        server.cleanup()


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
        rel.set(evidence=st["why"])
        again = dump(await tk.job_status(job_id=done["job_id"]))
        assert (again["state"], again["exit_status"]) == ("exited", 0), again
        lst = dump(await tk.list_jobs(host=name))
        states = {j["job_id"]: j["state"] for j in lst["jobs"]}
        assert states[job_id] == st["state"] and states[done["job_id"]] == "exited", lst


# ================================================================================================ 6. duplicate launch
@pytest.fixture
def run_log() -> Iterator[Path]:
    """A run log the sshd login user can append to (``tmp_path``'s parents are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="agent-tools-rel-"))
    d.chmod(0o777)
    log = d / "runs"
    log.touch()
    log.chmod(0o666)
    try:
        yield log
    finally:
        shutil.rmtree(d, ignore_errors=True)


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
        assert first["outcome"] == "detached" and "connection" in first["why"], first
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


# ================================================================================================ 8. floods
FLOOD = r'''
import json, resource, sys
import anyio
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

async def main() -> None:
    cfg = json.loads(sys.argv[1])
    res = {}
    async with Toolkit(HostRegistry(ssh_config=[cfg["ssh_config"]]), journal=Journal(cfg["journal"])) as tk:
        for tag, cmd in cfg["cases"].items():
            out = (await tk.run_command(host=cfg["host"], command=cmd, budget_s=120)).model_dump(mode="json")
            pages = []
            if out.get("job_id"):
                total = out["stdout"]["total_bytes"]
                for off in sorted({0, total // 2, max(0, total - 5000)}):
                    p = (await tk.job_output(job_id=out["job_id"], offset=off, limit=1 << 20)).model_dump()
                    pages.append({k: p.get(k) for k in ("offset", "next_offset", "total_bytes", "eof")})
            res[tag] = {"outcome": out["outcome"], "job_id": out.get("job_id"), "exit": out.get("exit_status"),
                        "total": out.get("stdout", {}).get("total_bytes"), "text": out.get("stdout", {}).get("text"),
                        "pages": pages}
    res["self_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(res))

anyio.run(main)
'''

GEN_BAD = ("import sys; w=sys.stdout.buffer.write\n"
           "for i in range(2000):\n"
           "    w(bytes(range(256)) + 'é€😀 ünïcödé\\n'.encode() + b'\\x1b[31mred\\x1b[0m\\r 10%\\r100%\\n')")


def repeated_sha256(byte: bytes, n: int) -> str:
    """sha256 of ``byte * n`` without holding it in memory."""
    h = hashlib.sha256()
    chunk = byte * (1 << 20)
    for _ in range(n >> 20):
        h.update(chunk)
    h.update(byte * (n & ((1 << 20) - 1)))
    return h.hexdigest()


def _bad_bytes() -> bytes:
    out = bytearray()
    for _ in range(2000):
        out += bytes(range(256)) + "é€😀 ünïcödé\n".encode() + b"\x1b[31mred\x1b[0m\r 10%\r100%\n"
    return bytes(out)


async def test_floods_and_bad_bytes(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: 1 GiB of output, NUL and invalid UTF-8, ANSI/CR progress bars, a 100 MB line without newline.

    Protections: all bytes stay in files on the host; the controller only ever receives head + tail views and
    bounded pages (``jobs/scripts.py`` views, ``JobRunner.job_output``), so its memory is bounded; byte counts
    come from the host; pages never split a UTF-8 character.
    """
    pool, name = systemd_hosts, "at-h2"
    gib = 1 << 30
    line_bytes = 100_000_000
    rel.set(fault="output floods and bad bytes (1 GiB, NUL/invalid UTF-8, ANSI/CR bars, 100 MB line)", trials=4,
            checked="controller peak RSS < 200 MB (RUSAGE_CHILDREN of a wrapper), exact byte counts, sha256 of the "
                    "raw bytes on the host, pages concatenate to the cleaned text")
    (tmp_path / "gen_bad.py").write_text(GEN_BAD)
    pool.install_file(name, tmp_path / "gen_bad.py", "/opt/rel/gen_bad.py")
    cases = {
        "gib": f"head -c {gib} /dev/zero",
        "bad": "python3 /opt/rel/gen_bad.py",
        "bars": "for i in $(seq 1 100); do printf '\\r[%-50s] %3d%%' $(printf '#%.0s' $(seq 1 $((i/2+1)))) $i; "
                "done; printf '\\n'",
        "line": f"head -c {line_bytes} /dev/zero | tr '\\000' x",
        "utf8": "python3 -c \"import sys; sys.stdout.write('é€😀\\\\n' * 20000)\"",
    }
    (tmp_path / "flood.py").write_text(FLOOD)
    cfg = {"ssh_config": str(pool.ssh_config), "journal": str(tmp_path / "journal.sqlite3"), "host": name,
           "cases": cases}
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
               "sys.stderr.buffer.write(r.stderr); sys.stdout.buffer.write(r.stdout); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = await bounded(rel, anyio.run_process(
        [sys.executable, "-c", wrapper, sys.executable, str(tmp_path / "flood.py"), json.dumps(cfg)],
        env=child_env(), check=False), 300, "flood controller")
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) >= 2, proc.stderr.decode()[-3000:]
    res = json.loads(lines[-2])
    peak_mib = int(lines[-1]) / 1024
    rel.set(controller_peak_rss_mib=round(peak_mib, 1))
    assert peak_mib < 200, f"controller peak RSS {peak_mib:.0f} MiB"
    bad = _bad_bytes()
    want = {"gib": (gib, repeated_sha256(b"\0", gib)), "bad": (len(bad), hashlib.sha256(bad).hexdigest()),
            "line": (line_bytes, repeated_sha256(b"x", line_bytes))}
    lost_bytes = 0
    for tag, (size, digest) in want.items():
        r = res[tag]
        assert (r["outcome"], r["exit"]) == ("finished", 0), (tag, r)
        assert r["total"] == size, (tag, r["total"], size)
        for p in r["pages"]:
            assert p["total_bytes"] == size and p["next_offset"] <= size, (tag, p)
        got = (await on_host(pool, name, f"sha256sum {ROOT_JOBS}/{r['job_id']}/stdout; "
                                         f"wc -c < {ROOT_JOBS}/{r['job_id']}/stdout")).stdout.split()
        lost_bytes += abs(size - int(got[-1]))
        assert got[0] == digest, f"{tag}: raw bytes differ on the host"
    assert "\\0" in res["bad"]["text"] and "\x1b[" not in res["bad"]["text"] and "\ufffd" in res["bad"]["text"]
    assert res["bars"]["text"].strip().endswith("100%") and "\r" not in res["bars"]["text"], res["bars"]
    rel.add("lost_bytes", lost_bytes)
    # pages concatenate to exactly the cleaned whole: page size 9997 cuts "é€😀\n" (10 bytes) inside the emoji
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        text, total = await read_all(rel, tk, res["bad"]["job_id"], limit=99_999)
        assert total == len(bad)
        same(text, clean_text(bad), "paged text of the bad bytes")
        text, total = await read_all(rel, tk, res["utf8"]["job_id"], limit=9997)
        assert total == 200_000
        same(text, "é€😀\n" * 20_000, "paged UTF-8 text (a character split across two pages?)")
    await on_host(pool, name, f"rm -rf {ROOT_JOBS}/{res['gib']['job_id']} {ROOT_JOBS}/{res['line']['job_id']}")


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


# ================================================================================================ 10. security
async def test_security(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: a host key that is unknown or changed; another user poking at job directories; guessed job ids.

    Protections: strict known_hosts checking by default (``SshHost``); job directories created under umask 077
    (0700 dirs, 0600 files); job ids from :mod:`secrets` (80 bits).
    """
    pool, name = systemd_hosts, "at-h1"
    rel.set(fault="security: unknown/changed host key, another user reading job dirs, guessable job ids", trials=4,
            checked="host_key errors by default; nothing of root's job readable by `agent`, agent's job dirs 0700 "
                    "and files 0600 and unreadable by `nobody`; ids j_ + 16 chars from 32, unique, uniform")
    cfg = pool.ssh_config.read_text()
    empty_kh = tmp_path / "known_hosts_empty"
    empty_kh.write_text("")
    other = [ln for ln in pool.known_hosts.read_text().splitlines() if ln.startswith("at-h2,")]
    changed_kh = tmp_path / "known_hosts_changed"
    h1, h2 = pool.hosts["at-h1"].address, pool.hosts["at-h2"].address
    changed_kh.write_text("".join(ln.replace(f"at-h2,{h2}", f"at-h1,{h1}") + "\n" for ln in other))
    for label, kh in (("unknown", empty_kh), ("changed", changed_kh)):
        c = tmp_path / f"ssh_config_{label}"
        c.write_text(cfg.replace(str(pool.known_hosts), str(kh)))
        async with toolkit_for(c, tmp_path / f"j-{label}.sqlite3") as tk:
            out = dump(await tk.run_command(host=name, command="echo should-not-run", budget_s=10))
            assert out["outcome"] == "error" and out["kind"] == "host_key", (label, out)
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        secret = secrets.token_hex(8)
        out = dump(await tk.run_command(host=name, command=f"echo {secret}", budget_s=10))
        assert out["outcome"] == "finished", out
        d = f"{ROOT_JOBS}/{out['job_id']}"
        peek = dump(await tk.run_command(host=f"{name}-agent", budget_s=10, command=(
            f"ls -la {ROOT_JOBS} {d}; cat {d}/stdout {d}/command; "
            f"grep -rs {secret} {ROOT_JOBS} /root; echo rc=$?")))
        assert peek["outcome"] == "finished", peek
        seen = peek["stdout"]["text"] + peek["stderr"]["text"]
        assert secret not in seen and "Permission denied" in seen, seen
        mine = dump(await tk.run_command(host=f"{name}-agent", command=f"echo agent-{secret}", budget_s=10))
        assert mine["outcome"] == "finished", mine
        ad = f"{AGENT_JOBS}/{mine['job_id']}"
        modes = (await on_host(pool, name, f"stat -c '%a %U %n' {ad} {ad}/*")).stdout.split("\n")
        for line in filter(None, modes):
            mode, owner, path = line.split(" ", 2)
            assert owner == "agent" and mode == ("700" if path == ad else "600"), line
        nob = await on_host(pool, name, f"cat {ad}/stdout; ls {ad}", user="nobody")
        assert f"agent-{secret}" not in nob.stdout and nob.returncode != 0, nob
    ids = [new_job_id() for _ in range(20000)]
    assert all(re.fullmatch(r"j_[a-z2-7]{16}", i) for i in ids) and len(set(ids)) == len(ids)
    counts = Counter(c for i in ids for c in i[2:])
    expected = len(ids) * 16 / 32
    chi2 = sum((counts.get(c, 0) - expected) ** 2 / expected for c in "abcdefghijklmnopqrstuvwxyz234567")  # base32
    assert len(counts) == 32 and chi2 < 80, (len(counts), chi2)  # 31 dof: p(chi2 > 80) < 1e-5
    bits = 16 * math.log2(len(counts))
    rel.set(job_id_entropy_bits=bits)
    assert bits >= 80
    child = await anyio.run_process([sys.executable, "-c", "from agent_tools.jobs.manager import new_job_id as n; "
                                     "print(' '.join(n() for _ in range(100)))"], env=child_env())
    assert not set(child.stdout.decode().split()) & set(ids)
