"""Issue 6 on a real systemd test host: record the hicache walkthrough against ``at-h1`` (real sshd, real
systemd running the simulated SGLang unit), replay the new cassette on the virtual clock with identical
outcomes, and replay the committed cassette recorded the same way."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from agent_tools.demo.hicache import WalkthroughResult, run_walkthrough
from agent_tools.hosts.registry import HostRegistry
from agent_tools.recording import CassetteSession

from .test_systemd_services import _install_sim

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
HOST = "at-h1"
COMMITTED = Path(__file__).parent / "cassettes" / "hicache_walkthrough_systemd.jsonl"


def _scenario(session: CassetteSession, out: list[WalkthroughResult]) -> object:
    async def go() -> None:
        out.append(await run_walkthrough(session.toolkit, HOST, emit=lambda line: None))

    return go


def test_record_on_systemd_then_replay_identically(systemd_hosts: HostPool, tmp_path: Path) -> None:
    _install_sim(systemd_hosts, HOST, "default")

    @asynccontextmanager
    async def hosts() -> AsyncIterator[HostRegistry]:
        registry = HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)])
        try:
            yield registry
        finally:
            await registry.aclose()

    path = tmp_path / "walk.jsonl"
    recorded: list[WalkthroughResult] = []
    rec = CassetteSession(path, "all", hosts=hosts, state_dir=tmp_path / "rec")
    rec.run(_scenario(rec, recorded))  # type: ignore[arg-type]
    assert recorded[0].result == "verified", recorded[0].summary
    if not COMMITTED.exists():  # first recording: keep it (commit tests/cassettes/...systemd.jsonl)
        shutil.copy(path, COMMITTED)

    replayed: list[WalkthroughResult] = []
    rep = CassetteSession(path, "none", state_dir=tmp_path / "rep")
    rep.run(_scenario(rep, replayed))  # type: ignore[arg-type]
    assert [s["tool"] for s in replayed[0].steps] == [s["tool"] for s in recorded[0].steps]
    assert [s["result"].get("outcome") or s["result"].get("readiness") for s in replayed[0].steps] == \
           [s["result"].get("outcome") or s["result"].get("readiness") for s in recorded[0].steps]
    assert replayed[0].result == "verified" and rep.last_run_s < rec.last_run_s


def test_committed_systemd_cassette_replays(tmp_path: Path) -> None:
    shutil.copy(COMMITTED, tmp_path / "c.jsonl")
    out: list[WalkthroughResult] = []
    rep = CassetteSession(tmp_path / "c.jsonl", "none", state_dir=tmp_path / "rep")
    rep.run(_scenario(rep, out))  # type: ignore[arg-type]
    assert out[0].result == "verified"
    assert rep.replay is not None and not rep.replay.failures
