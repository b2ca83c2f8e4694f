"""Issue 3 on real systemd (nspawn test hosts): restart readiness, start timeouts, health deadlines, and the
hicache walkthrough with a real Type=notify unit (both endings)."""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import gpusim
from agent_tools.demo.hicache import run_walkthrough
from agent_tools.hosts.base import run_on
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .reliability_harness import evidence_of

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
SIM_DIR = Path(gpusim.__file__).resolve().parent


@pytest.fixture
async def tk(systemd_hosts: HostPool, tmp_path: Path) -> AsyncIterator[Toolkit]:
    toolkit = Toolkit(HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)]),
                      journal=Journal(tmp_path / "journal.sqlite3"))
    try:
        yield toolkit
    finally:
        await toolkit.aclose()


async def _unit(tk: Toolkit, host: str, name: str, service: str) -> None:
    text = f"[Unit]\nDescription=agent-tools test {name}\n\n[Service]\n{service}\n"
    wrote = await tk.dispatch("write_file", {"host": host, "path": f"/etc/systemd/system/{name}", "content": text})
    assert wrote.get("bytes_written") == len(text.encode()), wrote


async def _follow(tk: Toolkit, job_id: str, limit_s: float = 120) -> dict[str, Any]:
    statuses = []
    for _ in range(int(limit_s / 5) + 2):
        st = await tk.dispatch("job_status", {"job_id": job_id, "wait_s": 5})
        statuses.append(st)
        if st.get("readiness") in ("ready", "failed", "deadline_exceeded"):
            return st
    raise AssertionError(f"readiness never settled: {statuses[-1]}")


async def test_slow_notify_unit_detaches_at_once_and_becomes_ready(tk: Toolkit, systemd_hosts: HostPool) -> None:
    host = "at-h1"
    await _unit(tk, host, "at-slow.service", "Type=notify\nNotifyAccess=all\nTimeoutStartSec=90\n"
                "ExecStart=/bin/sh -c 'sleep 20; systemd-notify --ready; exec sleep infinity'")
    out = await tk.dispatch("restart_service", {"host": host, "unit": "at-slow.service"})
    assert out["outcome"] == "detached", out
    assert out["deadline_s"] == 120.0  # TimeoutStartSec=90 from the unit + 30 s margin
    assert out["elapsed_s"] < 20  # returned without waiting for READY=1 (20 s in); it detached at once (no budget_s)
    assert "budget_s" not in out
    first = await tk.dispatch("job_status", {"job_id": out["job_id"], "wait_s": 2})
    # (why names the probes waited for; their evidence is in probes, said once)
    assert first["readiness"] == "pending" and "systemd_unit at-slow.service" in first["why"], first
    assert "activating" in first["probes"][0]["evidence"], first
    st = await _follow(tk, out["job_id"])
    assert st["readiness"] == "ready", st
    assert st["elapsed_s"] >= 19.0  # ready only once the unit sent READY=1 after its 20 s
    assert any(p["kind"] == "systemd_unit" and p["state"] == "passed" for p in st["probes"])


async def test_start_timeout_fails_with_journal_evidence(tk: Toolkit) -> None:
    host = "at-h2"
    await _unit(tk, host, "at-timeout.service", "Type=notify\nNotifyAccess=all\nTimeoutStartSec=5\n"
                "ExecStart=/bin/sh -c 'echo loading weights; sleep 60; systemd-notify --ready'")
    out = await tk.dispatch("restart_service", {"host": host, "unit": "at-timeout.service"})
    assert out["outcome"] == "detached" and out["deadline_s"] == 35.0, out
    st = await _follow(tk, out["job_id"])
    assert st["readiness"] == "failed", st
    assert "result=timeout" in evidence_of(st), st
    assert "loading weights" in st["why"], st  # the unit's own journal lines are the evidence


async def test_unit_that_never_answers_health_hits_its_deadline(tk: Toolkit) -> None:
    host = "at-h1"
    await _unit(tk, host, "at-mute.service", "Type=simple\nExecStart=/bin/sleep infinity")
    out = await tk.dispatch("restart_service", {
        "host": host, "unit": "at-mute.service", "deadline_s": 6,
        "probes": [{"kind": "http", "url": "http://127.0.0.1:39999/health"}]})
    assert out["outcome"] == "detached", out
    st = await _follow(tk, out["job_id"], limit_s=40)
    assert st["readiness"] == "deadline_exceeded", st
    assert "connection refused" in evidence_of(st), st
    await run_on(tk.hosts.get(host), "systemctl stop at-mute.service at-slow.service")


def _install_sim(pool: HostPool, name: str, profile: str) -> None:
    for f in SIM_DIR.iterdir():
        if f.is_file() and f.suffix in (".py", ".json", ".in"):
            pool.install_file(name, f, f"/opt/sglang-sim-src/{f.name}")
    res = pool.run(name, "python3 /opt/sglang-sim-src/install.py --root / --profile "
                   f"{shlex.quote(profile)} --load-s 3 && systemctl daemon-reload && systemctl restart sglang.service")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(("host", "profile", "expected"),
                         [("at-h1", "default", "verified"), ("at-h2", "small_ram", "rolled_back")])
async def test_hicache_walkthrough_on_real_systemd(tk: Toolkit, systemd_hosts: HostPool, host: str, profile: str,
                                                   expected: str) -> None:
    _install_sim(systemd_hosts, host, profile)
    lines: list[str] = []
    res = await run_walkthrough(tk, host, emit=lines.append)
    transcript = "\n".join(lines)
    assert res.result == expected, transcript
    restart = next(s for s in res.steps if s["tool"] == "restart_service")["result"]
    assert restart["outcome"] == "detached" and restart["deadline_s"] == 930.0, restart
    if expected == "rolled_back":
        assert "Not enough host memory" in transcript
        final = await run_on(tk.hosts.get(host), "systemctl is-active sglang.service; cat /proc/1/comm")
        assert final.stdout.split()[:2] == [b"active", b"systemd"]  # really systemd, serving again
    await run_on(tk.hosts.get(host), "systemctl stop sglang.service")
