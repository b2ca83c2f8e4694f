"""The scenarios: each returns result rows, A = agent_tools, B = the baseline, measured interleaved."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import shutil
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import asyncssh
from pydantic import BaseModel

from agent_tools.errors import ChannelOpenFailed
from agent_tools.hosts.registry import HostRegistry
from agent_tools.hosts.ssh import SshHost, SshSettings
from agent_tools.jobs.manager import JobRunner
from agent_tools.outcomes import Detached, Finished
from agent_tools.tools.toolkit import Toolkit

from .agent_view import agent_view
from .env import REPO_ROOT, BenchEnv, child_env
from .fleet_rollout import fleet_rollout
from .stats import CpuMeter, Row, Side, Target, interleave, progress

__all__ = ["SCENARIO_FUNCS", "Params"]


class BenchError(RuntimeError):
    """A side did not do what it is measured doing (so its timing would be meaningless)."""


@dataclass(frozen=True)
class Params:
    """Iteration counts; ``quick`` uses the smaller ones."""

    quick: bool

    def pick(self, full: int, quick: int) -> int:
        return quick if self.quick else full


def _finished_ok(out: BaseModel) -> None:
    if not isinstance(out, Finished) or out.exit_status != 0:
        raise BenchError(f"expected finished/0, got {out.model_dump_json()[:400]}")


def _exit_ok(res: asyncssh.SSHCompletedProcess) -> None:
    if res.exit_status != 0:
        raise BenchError(f"baseline exited with {res.exit_status}: {res.stderr!r}")


def _conn_true(conn: asyncssh.SSHClientConnection) -> Callable[[], Awaitable[None]]:
    async def b() -> None:
        _exit_ok(await conn.run("true"))

    return b


# ---------------------------------------------------------------------------------------------- 1
async def run_command(env: BenchEnv, p: Params) -> list[Row]:
    host, conn, runner = await env.host(), await env.conn(), env.runner()
    calls = p.pick(500, 50)

    async def a() -> None:
        _finished_ok(await runner.run(host, "true", budget_s=30))

    ca, cb = CpuMeter(), CpuMeter()
    progress(f"run_command: {calls} calls per side, interleaved in rounds of 10")
    sa, sb = await interleave(ca.wrap(a), cb.wrap(_conn_true(conn)), rounds=calls // 10, per_round=10, warmup=3,
                              settle=host.wait_warm)
    env.notes.append(f"run_command: client CPU per call {ca.per_call_ms:.2f} ms (A) vs {cb.per_call_ms:.2f} ms (B); "
                     "the rest of A's time is spent waiting for the host")
    # back to back: the next call starts while the previous call's warm session is still being started
    n2 = p.pick(200, 30)
    progress(f"run_command_b2b: {n2} calls per side, back to back")
    sa2, sb2 = await interleave(a, _conn_true(conn), rounds=n2 // 10, per_round=10, warmup=3)
    return [Row("run_command", "run_command(host, 'true') on an open connection (JobRunner.run over SshHost)",
                Side("JobRunner.run 'true'", "ms", sa), Side("asyncssh conn.run('true')", "ms", sb),
                Target("max_ratio", 1.15), note="real OpenSSH sshd on loopback; per call; untimed settle between "
                                                "calls (the warm session of the next call gets ready)"),
            Row("run_command_b2b", "the same, calls back to back (no pause for the warm session)",
                Side("JobRunner.run 'true'", "ms", sa2), Side("asyncssh conn.run('true')", "ms", sb2),
                Target("report"), note="the replacement warm session starts during the next call")]


# ---------------------------------------------------------------------------------------------- 2
async def dispatch(env: BenchEnv, p: Params) -> list[Row]:
    host, conn, runner = await env.host(), await env.conn(), env.runner()
    tk = Toolkit(HostRegistry({host.name: host}), journal=env.journal, runner=runner)
    args = json.dumps({"host": host.name, "command": "true", "budget_s": 30})
    calls = p.pick(500, 50)

    async def a() -> None:
        d = await tk.dispatch("run_command", args)
        text = json.dumps(d)
        if d.get("outcome") != "finished" or d.get("exit_status") != 0:
            raise BenchError(f"expected finished/0, got {text[:400]}")

    progress(f"dispatch: {calls} calls per side")
    sa, sb = await interleave(a, _conn_true(conn), rounds=calls // 10, per_round=10, warmup=3,
                              settle=host.wait_warm)
    return [Row("dispatch", "Toolkit.dispatch('run_command', JSON text) -> json.dumps(result)",
                Side("Toolkit.dispatch JSON in/out", "ms", sa), Side("asyncssh conn.run('true')", "ms", sb),
                Target("max_ratio", 1.3), note="same connection and sshd as run_command")]


# ---------------------------------------------------------------------------------------------- 3
def _cli_argv() -> list[str]:
    # The console script next to this interpreter: a pyenv shim (a bash script running `pyenv exec`) would
    # add ~100 ms that is not ours.
    exe = Path(sys.executable).parent / "agent-tools"
    if exe.exists():
        return [str(exe)]
    found = shutil.which("agent-tools")
    return [found] if found else [sys.executable, "-m", "agent_tools.cli"]


async def cli(env: BenchEnv, p: Params) -> list[Row]:
    cfg, alias = env.ssh_config, env.alias
    ssh = shutil.which("ssh")
    if ssh is None:
        raise BenchError("the OpenSSH client `ssh` is not installed")
    state = env.run_dir / "cli-state"
    state.mkdir(mode=0o700, exist_ok=True)
    cenv = child_env(AGENT_TOOLS_STATE_DIR=str(state))
    argv_a = [*_cli_argv(), "run", alias, "--ssh-config", cfg, "--json", "--", "true"]
    argv_b = [ssh, "-F", cfg, alias, "true"]
    env.cli_started_at = time.time() - 1

    async def a() -> None:
        res = await anyio.run_process(argv_a, env=cenv, check=False)
        try:
            d = json.loads(res.stdout)
        except ValueError as exc:
            raise BenchError(f"CLI printed no JSON (status {res.returncode}): {res.stderr[-400:]!r}") from exc
        if d.get("job_id"):
            env.cli_job_ids.append(d["job_id"])
        if res.returncode != 0 or d.get("outcome") != "finished":
            raise BenchError(f"CLI: status {res.returncode}, {res.stdout[:400]!r}")

    async def b() -> None:
        res = await anyio.run_process(argv_b, check=False)
        if res.returncode != 0:
            raise BenchError(f"ssh exited with {res.returncode}: {res.stderr[-400:]!r}")

    n = p.pick(10, 3)
    progress(f"cli: {n} process starts per side ({' '.join(argv_a[:2])} ... vs ssh -F)")
    sa, sb = await interleave(a, b, rounds=n, per_round=1, warmup=1)
    return [Row("cli", "one call, new process each time (connect + run + exit)",
                Side("agent-tools run --json -- true", "ms", sa), Side("ssh -F CFG testsshd true", "ms", sb),
                Target("report"), note="includes interpreter start, imports, SSH handshake")]


# ---------------------------------------------------------------------------------------------- 4
async def detach(env: BenchEnv, p: Params) -> list[Row]:
    host, conn, runner = await env.host(), await env.conn(), env.runner()
    calls = p.pick(200, 30)

    async def a() -> None:
        out = await runner.run(host, "true", budget_s=30, detach_immediately=True)
        if not isinstance(out, Detached):
            raise BenchError(f"expected detached, got {out.model_dump_json()[:400]}")

    progress(f"detach: {calls} detached starts per side")
    sa, sb = await interleave(a, _conn_true(conn), rounds=calls // 10, per_round=10, warmup=3,
                              settle=host.wait_warm)
    return [Row("detach", "detached start: run_command(..., detach_immediately=True)",
                Side("JobRunner.run detach_immediately", "ms", sa), Side("asyncssh conn.run('true')", "ms", sb),
                Target("max_ratio", 2.0), note="returns once the host confirmed the start")]


# ---------------------------------------------------------------------------------------------- 5
async def host_states(env: BenchEnv, p: Params) -> list[Row]:
    host, conn, runner = await env.host(), await env.conn(), env.runner()
    jobs = 100
    ids: list[str] = []
    progress(f"host_states: starting {jobs} detached `sleep 300` jobs")

    async def start_one() -> None:
        out = await runner.run(host, "sleep 300", budget_s=60, detach_immediately=True)
        if not isinstance(out, Detached):
            raise BenchError(f"expected detached, got {out.model_dump_json()[:400]}")
        ids.append(out.job_id)
        env.extra_job_ids.add(out.job_id)

    try:
        # One after the other: started concurrently, some starts fail with "channel open failed" (SshHost
        # releases its channel slot before sshd has closed the session; see docs/performance.md).
        for _ in range(jobs):
            await start_one()
        states = await runner.host_states(host, ids)
        if len(states) != jobs or not all(s.alive for s in states.values()):
            await anyio.sleep(0.5)  # a monitor may not have written its pid file yet
            states = await runner.host_states(host, ids)
            if not all(s.alive for s in states.values()):
                raise BenchError("not every sleep job is alive")

        async def a() -> None:
            st = await runner.host_states(host, ids)
            if len(st) != jobs:
                raise BenchError(f"host_states returned {len(st)} of {jobs} jobs")

        calls = p.pick(30, 10)
        progress(f"host_states: {calls} calls per side")
        sa, sb = await interleave(a, _conn_true(conn), rounds=calls // 5, per_round=5, warmup=2,
                                  settle=host.wait_warm)
    finally:
        with anyio.CancelScope(shield=True):
            cancel_s, problems = await _cancel_all(runner, host, ids)
    if problems:
        env.notes.append(f"host_states: {len(problems)} cancel problem(s), e.g. {problems[0]}")
    env.notes.append(f"host_states: cancelling the {len(ids)} sleep jobs (JobRunner.cancel, 8 at a time) took "
                     f"{cancel_s:.1f} s")
    return [Row("host_states", f"JobRunner.host_states of {jobs} running jobs on one host (one round trip)",
                Side(f"host_states({jobs} jobs)", "ms", sa), Side("asyncssh conn.run('true')", "ms", sb),
                Target("max_ratio", 2.0), note="per call")]


async def _cancel_all(runner: JobRunner, host: SshHost, ids: list[str]) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    problems: list[str] = []

    async def one(job_id: str) -> None:
        for attempt in range(3):
            try:
                res = await runner.cancel(host, job_id, grace_s=1.0, reason="benchmark cleanup")
            except ChannelOpenFailed as exc:  # see the note on channel slots in host_states()
                if attempt == 2:
                    problems.append(f"{job_id}: {exc}")
                    return
                await anyio.sleep(0.2)
                continue
            except Exception as exc:
                problems.append(f"{job_id}: {exc}")
                return
            if res.survivors:
                problems.append(f"{job_id}: survivors {res.survivors}")
            return

    async def limited(job_id: str) -> None:
        async with limiter:
            await one(job_id)

    limiter = anyio.CapacityLimiter(host.settings.max_channels)
    if ids:
        progress(f"cancelling {len(ids)} jobs, {limiter.total_tokens:g} at a time")
        with anyio.move_on_after(120):
            async with anyio.create_task_group() as tg:
                for job_id in ids:
                    tg.start_soon(limited, job_id)
    if problems:
        progress(f"cancel problems: {problems[:5]}")
    return time.perf_counter() - t0, problems


# ---------------------------------------------------------------------------------------------- 6
async def fanout(env: BenchEnv, p: Params) -> list[Row]:
    count = 100
    fleet = await env.start_fleet(count)
    aliases = [h["alias"] for h in fleet.hosts]
    hosts = [SshHost(SshSettings(h["alias"], config_paths=[h["config"]])) for h in fleet.hosts]
    registry = HostRegistry(list(hosts))
    runner = JobRunner(env.journal, jobs_dir=str(env.fleet_jobs_dir))
    tk = Toolkit(registry, journal=env.journal, runner=runner)
    conns: list[asyncssh.SSHClientConnection] = []
    try:
        progress(f"fanout: opening {count} + {count} connections")
        limiter = anyio.CapacityLimiter(20)

        async def connect_pair(h: dict[str, Any], host: SshHost) -> None:
            async with limiter:
                await host.connection()
                conns.append(await asyncssh.connect(h["alias"], config=[h["config"]]))

        async with anyio.create_task_group() as tg:
            for h, host in zip(fleet.hosts, hosts, strict=True):
                tg.start_soon(connect_pair, h, host)

        async def one(alias: str) -> None:
            _finished_ok(await tk.run_command(host=alias, command="true", budget_s=60))

        async def a() -> None:
            async with anyio.create_task_group() as tg:
                for alias in aliases:
                    tg.start_soon(one, alias)

        async def b() -> None:
            for res in await asyncio.gather(*(c.run("true") for c in conns)):
                _exit_ok(res)

        async def settle() -> None:  # every host's warm session for the next fan-out gets ready (untimed)
            async with anyio.create_task_group() as tg:
                for host in hosts:
                    tg.start_soon(host.wait_warm)

        rounds = p.pick(6, 2)
        ca, cb = CpuMeter(), CpuMeter()
        fa, fb = CpuMeter(fleet.proc.pid), CpuMeter(fleet.proc.pid)
        progress(f"fanout: {rounds} fan-outs per side to {count} hosts")
        sa, sb = await interleave(fa.wrap(ca.wrap(a)), fb.wrap(cb.wrap(b)), rounds=rounds, per_round=1, warmup=1,
                                  settle=settle)
        env.notes.append(
            f"fanout: CPU per fan-out: client {ca.per_call_ms:.0f} ms (A) vs {cb.per_call_ms:.0f} ms (B); fleet "
            f"process incl. the commands it ran {fa.per_call_ms:.0f} ms (A) vs {fb.per_call_ms:.0f} ms (B), on "
            f"{os.cpu_count()} cores shared by both")
    finally:
        with anyio.CancelScope(shield=True):
            await registry.aclose()
            for c in conns:
                c.close()
        fleet.stop()
    return [Row("fanout", f"one command to {count} hosts at once (anyio task group of run_command)",
                Side(f"Toolkit.run_command x{count}", "ms", sa), Side(f"asyncio.gather(conn.run) x{count}", "ms", sb),
                Target("max_ratio", 1.2),
                note=f"{count} EmbeddedHost asyncssh servers in one separate process; per fan-out")]


# ---------------------------------------------------------------------------------------------- 7
GiB = 1 << 30


def _make_file(path: Path, size: int) -> None:
    chunk = b"x" * (8 << 20)
    with path.open("wb") as fh:
        left = size
        while left > 0:
            n = min(left, len(chunk))
            fh.write(chunk[:n])
            left -= n
    path.chmod(0o644)


async def output(env: BenchEnv, p: Params) -> list[Row]:
    cfg, alias = env.ssh_config, env.alias
    size = p.pick(GiB, GiB // 4)
    label = f"{size >> 20} MiB" if size < GiB else f"{size >> 30} GiB"
    env.data_dir.mkdir(mode=0o755, exist_ok=True)
    path = env.data_dir / "out.bin"
    progress(f"output: writing a {label} file")
    await anyio.to_thread.run_sync(_make_file, path, size)
    state = env.run_dir / "output-state"
    state.mkdir(mode=0o700, exist_ok=True)
    args = [cfg, alias, str(path), str(env.sshd_jobs_dir), str(state)]
    tp: dict[str, list[float]] = {"agent": [], "baseline": []}
    rss: dict[str, list[float]] = {"agent": [], "baseline": []}
    rounds = p.pick(3, 1)
    progress(f"output: {rounds} round(s) per side, each side in its own process")
    for r in range(rounds):
        for side in (("agent", "baseline") if r % 2 == 0 else ("baseline", "agent")):
            res = await anyio.run_process(
                [sys.executable, "-m", "benchmarks.output_child", "wrap", side, *args],
                cwd=REPO_ROOT, env=child_env(), check=False)
            if res.returncode != 0:
                raise BenchError(f"output child ({side}) failed: {res.stderr.decode(errors='replace')[-800:]}")
            d = json.loads(res.stdout.decode().strip().splitlines()[-1])
            if d["bytes"] != size:
                raise BenchError(f"output child ({side}) saw {d['bytes']} bytes, expected {size}")
            tp[side].append(size / d["seconds"] / 1e6)
            rss[side].append(d["maxrss_kb"] / 1024)
            if side == "agent":  # the job's 1 GiB stdout file on the host
                shutil.rmtree(env.sshd_jobs_dir / d["job_id"], ignore_errors=True)
    path.unlink()
    return [
        Row("output", f"{label} of stdout (cat FILE): throughput, higher is better",
            Side("run_command: to host file", "MB/s", tp["agent"]),
            Side("asyncssh stream+drop", "MB/s", tp["baseline"]),
            Target("min_ratio", 0.8),
            note="A = time until the command finished writing the job's stdout file on the host (client gets "
                 "head+tail+count); B = all bytes through SSH to the client"),
        Row("output_rss", "peak RSS of the client process (RUSAGE_CHILDREN.ru_maxrss)",
            Side("run_command child", "MB", rss["agent"]), Side("asyncssh child", "MB", rss["baseline"]),
            Target("max_a", 100.0), note="MiB; each side in its own Python process"),
    ]


# ---------------------------------------------------------------------------------------------- 8
CASSETTES = REPO_ROOT / "tests" / "cassettes"
REPLAYS = (("replay", "hicache_walkthrough"), ("replay_long", "hicache_walkthrough_long_restart"))


def _replay_unavailable() -> str | None:
    """Why replay cannot be measured here (None: it can)."""
    try:
        mod = importlib.import_module("agent_tools.recording")
    except ImportError:
        return "replay not built"
    if getattr(mod, "CassetteSession", None) is None:
        return "replay not built"
    return None


def _short_error(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    err = next((ln for ln in reversed(lines) if "Error" in ln.split(":", 1)[0]), lines[-1] if lines else "")
    return err.removeprefix("agent_tools.errors.")[:200]


async def replay(env: BenchEnv, p: Params) -> list[Row]:
    rows: list[Row] = []
    reason = _replay_unavailable()
    rounds = p.pick(3, 1)
    for name, cassette in REPLAYS:
        path = CASSETTES / f"{cassette}.jsonl"
        title = f"replay of the recorded {cassette} session vs its recorded wall time"
        a, b = Side("replay wall time", "s"), Side("recorded wall time", "s")
        why = reason or ("" if path.exists() else f"no cassette {path.name}")
        for r in range(0 if why else rounds):
            state = env.run_dir / f"replay-{name}-{r}"
            res = await anyio.run_process([sys.executable, "-m", "benchmarks.replay_child", str(path), str(state)],
                                          cwd=REPO_ROOT, env=child_env(), check=False)
            if res.returncode != 0:
                why = f"replay failed: {_short_error(res.stderr.decode(errors='replace'))}"
                env.notes.append(f"{name}: {why}")
                a.samples.clear()
                break
            d = json.loads(res.stdout.decode().strip().splitlines()[-1])
            if d["result"] != "verified":
                why = f"replay ended {d['result']!r}, recorded 'verified'"
                a.samples.clear()
                break
            a.samples.append(d["seconds"])
            b.samples[:] = [d["recorded_s"]]
        rows.append(Row(name, title, a, b, Target("pending") if why else Target("max_a", 1.0), pending_reason=why,
                        note="replay on a virtual clock, in its own process; target: every replay < 1 s"))
        progress(f"{name}: {'pending: ' + why if why else 'done'}")
    return rows


SCENARIO_FUNCS: dict[str, Callable[[BenchEnv, Params], Awaitable[list[Row]]]] = {
    "run_command": run_command,
    "dispatch": dispatch,
    "cli": cli,
    "detach": detach,
    "host_states": host_states,
    "fanout": fanout,
    "output": output,
    "replay": replay,
    "agent_view": agent_view,
    "fleet_rollout": fleet_rollout,
}
