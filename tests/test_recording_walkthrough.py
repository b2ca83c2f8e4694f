"""Issue 6: the hicache walkthrough, recorded once against the embedded simulated node, replayed on a virtual
clock in the normal suite.

Re-record (real time: ~30 s for the short load, ~2.5 min for the 120 s load)::

    python3 -m pytest tests/test_recording_walkthrough.py --agent-tools-record=all
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from agent_tools.demo.hicache import WalkthroughResult, run_walkthrough
from agent_tools.demo.node import embedded_node
from agent_tools.errors import ReplayError
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.recording import Cassette, CassetteSession, HostsFactory
from agent_tools.tools.toolkit import Toolkit

HOST = "gpu-node-1"
CASSETTES = Path(__file__).parent / "cassettes"


@pytest.fixture
def agent_tools_hosts(request: pytest.FixtureRequest, tmp_path: Path) -> HostsFactory:
    """Recording only: the embedded simulated GPU node, with the load time the test's marker asks for."""
    marker = request.node.get_closest_marker("agent_tools_cassette")
    load_s = float(marker.kwargs.get("load_s", 2.0)) if marker is not None else 2.0

    @asynccontextmanager
    async def hosts() -> AsyncIterator[HostRegistry]:
        async with embedded_node("default", load_s=load_s) as (alias, registry):
            assert alias == HOST
            # the node's own start waits 60 s at most: let a long first load finish (not recorded)
            ready = await Toolkit(registry, journal=Journal(tmp_path / "setup.sqlite3")).dispatch(
                "wait_for", {"host": alias, "probes": [{"kind": "systemd_unit", "unit": "sglang.service"}],
                             "deadline_s": load_s + 60})
            assert ready["outcome"] == "ready", ready
            yield registry

    return hosts


def _walk(tk: Toolkit, lines: list[str], clock: dict[str, float]) -> Any:
    async def scenario() -> WalkthroughResult:
        t0 = anyio.current_time()
        res = await run_walkthrough(tk, HOST, emit=lines.append)
        clock["loop_s"] = anyio.current_time() - t0
        return res

    return scenario


def _check(session: CassetteSession, res: WalkthroughResult, lines: list[str]) -> None:
    assert res.result == "verified", "\n".join(lines)
    tools = [s["tool"] for s in res.steps]
    assert tools[:3] == ["gpu_memory", "host_memory", "service_status"]
    restart = next(s for s in res.steps if s["tool"] == "restart_service")["result"]
    assert restart["outcome"] == "detached"
    assert res.steps[-2]["result"]["readiness"] == "ready"
    if session.cassette is not None:  # replayed: the same tool sequence as recorded
        assert tools == [c.name for c in session.cassette.tool_calls()]


@pytest.mark.agent_tools_cassette("hicache_walkthrough", load_s=2)
def test_walkthrough_replays_from_its_cassette(agent_tools_cassette: CassetteSession,
                                              agent_tools_toolkit: Toolkit) -> None:
    lines: list[str] = []
    clock: dict[str, float] = {}
    res = agent_tools_cassette.run(_walk(agent_tools_toolkit, lines, clock))
    _check(agent_tools_cassette, res, lines)
    print(f"\nhicache walkthrough ({'recorded' if agent_tools_cassette.recording else 'replayed'}): "
          f"{clock['loop_s']:.1f} s loop time in {agent_tools_cassette.last_run_s:.3f} s wall time")


@pytest.mark.agent_tools_cassette("hicache_walkthrough_long_restart", load_s=120)
def test_minutes_long_restart_replays_in_virtual_time(agent_tools_cassette: CassetteSession,
                                                      agent_tools_toolkit: Toolkit) -> None:
    lines: list[str] = []
    clock: dict[str, float] = {}
    res = agent_tools_cassette.run(_walk(agent_tools_toolkit, lines, clock))
    _check(agent_tools_cassette, res, lines)
    follow = [s for s in res.steps if s["tool"] == "job_status"]
    assert len(follow) >= 4  # the restart was followed over several long polls
    assert clock["loop_s"] > 120  # minutes of (virtual) loop time
    assert follow[-1]["result"]["elapsed_s"] > 120  # and of wall time, as the journal saw it
    print(f"\nlong restart ({'recorded' if agent_tools_cassette.recording else 'replayed'}): "
          f"{clock['loop_s']:.1f} s loop time in {agent_tools_cassette.last_run_s:.3f} s wall time")


def _replay(path: Path, tmp_path: Path) -> tuple[CassetteSession, list[str]]:
    session = CassetteSession(path, "none", state_dir=tmp_path / "state")
    lines: list[str] = []
    session.run(_walk(session.toolkit, lines, {}))
    return session, lines


def test_a_tampered_cassette_fails_with_a_clear_message(tmp_path: Path) -> None:
    cassette = Cassette.load(CASSETTES / "hicache_walkthrough.jsonl")
    smi = next(e["id"] for e in cassette.events if e["ev"] == "exec" and e["command"].startswith("nvidia-smi"))
    chunk = next(e for e in cassette.events if e["ev"] == "stdout" and e["id"] == smi)
    used = chunk["text"].split(",")[1].strip()  # GPU 0's used MiB
    chunk["text"] = chunk["text"].replace(f", {used},", f", {int(used) - 1},", 1)  # one edited output
    cassette.save(tmp_path / "tampered.jsonl")
    with pytest.raises(ReplayError) as err:
        _replay(tmp_path / "tampered.jsonl", tmp_path)
    msg = err.value.message
    assert "tool call #1 gpu_memory: the result differs from the recording" in msg
    assert re.search(rf'-\s+"used_mib": {used}\n', msg) and re.search(rf'\+\s+"used_mib": {int(used) - 1}\n', msg), msg


def test_a_cassette_missing_a_request_fails_with_a_diff(tmp_path: Path) -> None:
    src = CASSETTES / "hicache_walkthrough.jsonl"
    cassette = Cassette.load(src)
    free = next(e["id"] for e in cassette.events if e["ev"] == "exec" and e["command"] == "free -b")
    cassette.events = [e for e in cassette.events if e.get("id") != free]
    dst = tmp_path / "cut.jsonl"
    cassette.save(dst)
    with pytest.raises(ReplayError, match=r"(?s)unmatched exec request #\d+ on gpu-node-1.*free -b.*closest unused"):
        _replay(dst, tmp_path)


def test_unused_recorded_interactions_fail(tmp_path: Path) -> None:
    session = CassetteSession(CASSETTES / "hicache_walkthrough.jsonl", "none", state_dir=tmp_path / "state")

    async def only_two() -> None:
        await session.toolkit.dispatch("gpu_memory", {"host": HOST})
        await session.toolkit.dispatch("host_memory", {"host": HOST})

    with pytest.raises(ReplayError, match=r"(?s)recorded interaction\(s\) were never requested:.*systemctl show"):
        session.run(only_two)


def test_replay_is_fast_and_repeatable(tmp_path: Path) -> None:
    src = CASSETTES / "hicache_walkthrough_long_restart.jsonl"
    for i in range(2):
        shutil.copy(src, tmp_path / f"c{i}.jsonl")
        t0 = time.perf_counter()
        session, lines = _replay(tmp_path / f"c{i}.jsonl", tmp_path / str(i))
        print(f"\nreplay {i}: {time.perf_counter() - t0:.3f} s wall for {len(lines)} transcript lines")
        assert session.replay is not None and not session.replay.failures
