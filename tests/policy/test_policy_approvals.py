"""Approvals: single use, bound to host + exact command + rule, expiring on an injected clock."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent_tools.policy import ApprovalRefused, ApprovalStore
from agent_tools.policy.approvals import call_digest, command_sha256


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> ApprovalStore:
    return ApprovalStore(clock=clock, ttl_s=60)


CMD = "systemctl restart sglang"


def refused(code: str) -> pytest.RaisesExc[ApprovalRefused]:
    return pytest.raises(ApprovalRefused, check=lambda e: e.code == code)


def test_ids_are_unguessable(store: ApprovalStore) -> None:
    ids = {store.request("h", CMD, "r").id for _ in range(50)}
    assert len(ids) == 50
    assert all(i.startswith("a_") and len(i) >= 24 for i in ids)


def test_approve_then_consume_once(store: ApprovalStore, clock: Clock) -> None:
    a = store.request("gpu-1", CMD, "restart-sglang")
    assert a.status == "pending" and a.expires_at == clock.now + 60
    with refused("not_approved"):
        store.consume("gpu-1", CMD)
    assert store.approve(a.id, by="alice").status == "approved"
    used = store.consume("gpu-1", CMD, rule_id="restart-sglang")
    assert used.id == a.id and used.status == "used"
    with refused("used"):
        store.consume("gpu-1", CMD)
    with refused("used"):
        store.approve(a.id)


def test_mismatches_are_refused(store: ApprovalStore) -> None:
    a = store.request("gpu-1", CMD, "restart-sglang")
    store.approve(a.id)
    with refused("no_approval"):
        store.consume("gpu-1", CMD + " ")
    with refused("no_approval"):
        store.consume("gpu-2", CMD)
    with refused("mismatch"):
        store.consume("gpu-1", "reboot", approval_id=a.id)
    with refused("mismatch"):
        store.consume("gpu-1", CMD, approval_id=a.id, rule_id="other-rule")
    with refused("unknown"):
        store.consume("gpu-1", CMD, approval_id="a_nope")
    assert store.consume("gpu-1", CMD, approval_id=a.id).status == "used"


def test_expiry(store: ApprovalStore, clock: Clock) -> None:
    a = store.request("h", CMD, "r", ttl_s=10)
    clock.now += 5
    store.approve(a.id)
    clock.now += 5
    with refused("expired"):
        store.consume("h", CMD)
    b = store.request("h", CMD, "r")
    clock.now += 61
    with refused("expired"):
        store.approve(b.id)
    assert store.pending() == []


def test_reject(store: ApprovalStore) -> None:
    a = store.request("h", CMD, "r")
    store.reject(a.id, by="bob")
    with refused("rejected"):
        store.consume("h", CMD)


def test_sqlite_file_survives_a_restart(tmp_path: Path, clock: Clock) -> None:
    path = tmp_path / "approvals.sqlite3"
    first = ApprovalStore(path, clock=clock)
    a = first.request("h", CMD, "r")
    first.approve(a.id)
    first.close()
    second = ApprovalStore(path, clock=clock)
    assert second.consume("h", CMD).id == a.id
    second.close()
    third = ApprovalStore(path, clock=clock)
    with refused("used"):
        third.consume("h", CMD)
    third.close()


def _present(path: str, ids: list[str], barrier: Any, results: Any) -> None:
    """One process presenting approvals: for each id, at the same moment as the other process (barrier), approve
    it and use it for the command, as ``agent-tools run --approve ID`` does."""
    store = ApprovalStore(path)
    won = []
    for approval_id in ids:
        barrier.wait()
        try:
            store.approve(approval_id, by=f"pid-{os.getpid()}")
            store.consume("gpu-1", CMD, approval_id=approval_id)
            won.append(approval_id)
        except ApprovalRefused as exc:
            assert exc.code in ("used", "expired"), exc
    results.put(won)
    store.close()


def test_two_processes_presenting_one_approval_run_it_once(tmp_path: Path) -> None:
    path = str(tmp_path / "approvals.sqlite3")
    store = ApprovalStore(path)
    ids = [store.request("gpu-1", CMD, "restart-sglang").id for _ in range(150)]
    store.close()
    ctx = multiprocessing.get_context("spawn")  # two real processes, each with its own connection
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_present, args=(path, ids, barrier, results)) for _ in range(2)]
    for p in procs:
        p.start()
    won = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    winners = Counter(approval_id for w in won for approval_id in w)
    assert set(winners) == set(ids), "an approval was used by nobody"
    assert max(winners.values()) == 1, f"{sum(n > 1 for n in winners.values())} approvals were used twice"
    after = ApprovalStore(path)
    assert {after.get(i).status for i in ids} == {"used"}  # type: ignore[union-attr]
    after.close()


def test_bound_to_the_digest_and_stored_redacted(tmp_path: Path) -> None:
    token = "hf_" + "k" * 34
    cmd = f"HF_TOKEN={token} systemctl restart sglang"
    store = ApprovalStore(tmp_path / "a.sqlite3")
    a = store.request("gpu-1", cmd, "restart-sglang")
    assert a.command == "HF_TOKEN=[REDACTED] systemctl restart sglang"
    with refused("mismatch"):  # the person was shown another command's digest
        store.approve(a.id, digest=call_digest("gpu-1", "systemctl restart sglang"))
    store.approve(a.id, digest=call_digest("gpu-1", cmd))
    with refused("mismatch"):  # the same text once redacted is another command
        store.consume("gpu-1", a.command, approval_id=a.id)
    assert store.consume("gpu-1", cmd, approval_id=a.id).status == "used"
    store.close()
    assert token.encode() not in (tmp_path / "a.sqlite3").read_bytes()


def test_a_store_of_the_previous_version_is_migrated(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE approvals (id TEXT PRIMARY KEY, host TEXT NOT NULL, command TEXT NOT NULL, "
                     "rule_id TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL, status TEXT NOT NULL, "
                     "decided_by TEXT, decided_at REAL, used_at REAL);")
    secret_cmd = "GITHUB_TOKEN=ghp_" + "q" * 36 + " git push"
    db.execute("INSERT INTO approvals VALUES ('a_old', 'h', ?, 'r', 0, 1e12, 'approved', 'x', 0, NULL)", (secret_cmd,))
    db.commit()
    db.close()
    store = ApprovalStore(path)
    assert store.get("a_old").command == "GITHUB_TOKEN=[REDACTED] git push"  # type: ignore[union-attr]
    assert store.consume("h", secret_cmd, approval_id="a_old").status == "used"
    store.close()
    assert b"ghp_qqqq" not in b"".join(p.read_bytes() for p in tmp_path.iterdir())


def test_bound_to_cwd_and_env_as_well(tmp_path: Path) -> None:
    """The digest binds host, command, cwd and env: an approval of `rm -rf *` in /tmp/scratch runs nowhere else and
    with no other environment; what the request was for is kept (redacted) to be shown."""
    store = ApprovalStore(tmp_path / "a.sqlite3")
    env = {"LC_ALL": "C", "API_TOKEN": "tok-" + "z" * 20}
    a = store.request("h", "rm -rf *", "r", cwd="/tmp/scratch", env=env)
    assert (a.cwd, a.env) == ("/tmp/scratch", {"LC_ALL": "C", "API_TOKEN": "[REDACTED]"})
    assert store.get(a.id) == a
    for wrong in ({"digest": call_digest("h", "rm -rf *")},
                  {"digest": call_digest("h", "rm -rf *", cwd="/", env=env)},
                  {"digest": call_digest("h", "rm -rf *", cwd="/tmp/scratch", env={"LC_ALL": "C"})},
                  {"digest": a.command_sha256[:6]}):  # too short to bind anything
        with refused("mismatch"):
            store.approve(a.id, **wrong)
    store.approve(a.id, digest=call_digest("h", "rm -rf *", cwd="/tmp/scratch", env=dict(reversed(env.items()))))
    for cwd, e in ((None, env), ("/", env), ("/tmp/scratch", None), ("/tmp/scratch", {**env, "X": "1"})):
        with refused("mismatch"):
            store.consume("h", "rm -rf *", cwd=cwd, env=e, approval_id=a.id)
        with refused("no_approval"):
            store.consume("h", "rm -rf *", cwd=cwd, env=e)
    assert store.consume("h", "rm -rf *", cwd="/tmp/scratch", env=env).id == a.id
    store.close()
    assert b"zzzzzzzzzz" not in b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert {oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == {"0o600"}


def test_an_approval_of_the_version_before_cwd_binding_still_works_without_cwd_and_env(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "mid.sqlite3"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE approvals (id TEXT PRIMARY KEY, host TEXT NOT NULL, command TEXT NOT NULL, "
                     "rule_id TEXT NOT NULL, created_at REAL NOT NULL, expires_at REAL NOT NULL, status TEXT NOT NULL, "
                     "decided_by TEXT, decided_at REAL, used_at REAL, command_sha256 TEXT);")
    for aid in ("a_mid1", "a_mid2"):
        db.execute("INSERT INTO approvals VALUES (?, 'h', 'ls x', 'r', 0, 1e12, 'approved', 'x', 0, NULL, ?)",
                   (aid, command_sha256("ls x")))
    db.commit()
    db.close()
    store = ApprovalStore(path)
    assert store.get("a_mid1").binding is None  # type: ignore[union-attr]
    with refused("mismatch"):
        store.consume("h", "ls x", cwd="/", approval_id="a_mid1")
    assert store.consume("h", "ls x", approval_id="a_mid1").status == "used"
    assert store.consume("h", "ls x").id == "a_mid2"
    store.close()
