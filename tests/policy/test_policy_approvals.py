"""Approvals: single use, bound to host + exact command + rule, expiring on an injected clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_tools.policy import ApprovalRefused, ApprovalStore


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
