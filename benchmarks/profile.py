"""Where the time of a missed target goes: ``python -m benchmarks.profile [client|host|all] [--calls N]``.

* ``client``: over the real sshd, per call, wall and client CPU of (B) asyncssh ``conn.run("true")``,
  (L) the job launcher script sent raw over the same kind of channel (read to ``@@AT end``, no journal, no
  pydantic), (W) a launch request written raw to a warm session started beforehand (untimed), (A)
  ``JobRunner.run(host, "true")`` (warm sessions on; untimed settle between calls), (T) ``Toolkit.dispatch``
  with JSON in/out. A - W is the library's own Python cost, W - B the warm launcher's cost on the host.
  Then the same calls over a canned in-memory host (no SSH, no shell: the library's Python alone) with a
  cProfile split by module. With pyinstrument installed (``pip install pyinstrument``; not a project
  dependency) it also prints a profile of A.
* ``host``: the host-side scripts run locally under ``strace -f`` (when installed) to count the processes
  they fork and the programs they exec, and timed without strace (median of 30): launcher ``fg``/``bg``,
  status of 1 and of 100 jobs (with empty output files, and with some output), versus ``sh -c true``;
  then a warm session (bash) timed from its request to its report, and the timeline of one warm ``fg``
  launch of ``true`` (bash xtrace with ``$EPOCHREALTIME``): where the host's time goes step by step.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import anyio
from anyio.abc import ByteStream

from agent_tools.hosts.base import ExecResult, HostProcess
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.manager import JobRunner, new_job_id
from agent_tools.jobs.scripts import (
    launch_request,
    launch_script,
    status_request,
    status_script,
    warm_script,
)
from agent_tools.logs import configure_logging
from agent_tools.tools.toolkit import Toolkit

from .env import BenchEnv

__all__ = ["main"]


async def _measure(fn: Callable[[], Awaitable[object]], n: int,
                   settle: Callable[[], Awaitable[object]] | None = None) -> tuple[float, float]:
    """(median wall ms, mean client CPU ms) per call; ``settle`` runs untimed after each call."""
    walls: list[float] = []
    cpu = 0.0
    for _ in range(n):
        c0 = time.process_time()
        t0 = time.perf_counter()
        await fn()
        walls.append((time.perf_counter() - t0) * 1000)
        cpu += time.process_time() - c0
        if settle is not None:
            await settle()
    return statistics.median(walls), cpu * 1000 / n


class _CannedProcess:
    """A :class:`~agent_tools.hosts.base.HostProcess` that answers like a launcher whose command exited 0."""

    REPLY = (b"@@AT started j 1\n@@AT exit 0\n@@AT view stdout 0 0 0\n@@AT view stderr 0 0 0\n@@AT end\n")

    def __init__(self) -> None:
        self._out = [self.REPLY]

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        return self._out.pop() if self._out else b""

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        return b""

    async def write_stdin(self, data: bytes) -> None:
        return None

    async def close_stdin(self) -> None:
        return None

    async def wait(self) -> ExecResult:
        return ExecResult(0)

    async def close(self) -> None:
        return None


class _CannedHost:
    """A host with no transport and no shell: isolates the library's own per-call Python cost."""

    name = "canned"

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        return _CannedProcess()

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        raise OSError("no TCP on the canned host")

    async def aclose(self) -> None:
        return None


_BUCKETS = ("agent_tools/jobs/journal", "agent_tools/jobs/manager", "agent_tools/jobs/scripts",
            "agent_tools/jobs/wire", "agent_tools/output", "agent_tools/outcomes", "agent_tools/tools",
            "pydantic", "structlog", "anyio", "asyncio", "json", "secrets", "random", "shlex")


def _bucket(path: str, func: str) -> str:
    for b in _BUCKETS:
        if b in path:
            return b
    if path == "~":
        for key, name in (("sqlite3", "sqlite3 (C)"), ("pydantic", "pydantic-core (C)"),
                          ("Validator", "pydantic-core (C)"), ("Serializer", "pydantic-core (C)"),
                          ("json", "json (C)")):
            if key in func:
                return name
        return "other builtins"
    return "other Python"


async def _library_only(env: BenchEnv, calls: int) -> None:
    """JobRunner.run and Toolkit.dispatch over the canned host: no SSH, no host processes."""
    runner = JobRunner(env.journal, jobs_dir=str(env.run_dir / "canned-jobs"))
    host = _CannedHost()
    tk = Toolkit(HostRegistry({"canned": host}), journal=env.journal, runner=runner)
    args = json.dumps({"host": "canned", "command": "true", "budget_s": 30})

    async def a() -> None:
        await runner.run(host, "true", budget_s=30)

    async def t() -> None:
        json.dumps(await tk.dispatch("run_command", args))

    for name, fn in (("JobRunner.run", a), ("Toolkit.dispatch + json.dumps", t)):
        for _ in range(20):
            await fn()
        wall, cpu = await _measure(fn, calls * 4)
        print(f"  canned host, {name:29s} wall {wall:6.3f} ms   client CPU {cpu:6.3f} ms")
    prof = cProfile.Profile(time.process_time)
    n = calls * 4
    prof.enable()
    for _ in range(n):
        await t()
    prof.disable()
    agg: Counter[str] = Counter()
    for (path, _line, func), row in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        agg[_bucket(path, func)] += row[2]  # tottime
    total = sum(agg.values())
    print("  where Toolkit.dispatch's own time goes (cProfile tottime, canned host; cProfile inflates):")
    for name, secs in agg.most_common(10):
        print(f"    {name:28s} {secs * 1000 / n:6.3f} ms/call  {secs / total:5.1%}")


async def _client(env: BenchEnv, calls: int) -> None:
    host, conn, runner = await env.host(), await env.conn(), env.runner()
    tk = Toolkit(HostRegistry({host.name: host}), journal=env.journal, runner=runner)
    args = json.dumps({"host": host.name, "command": "true", "budget_s": 30})
    jobs_dir = str(env.sshd_jobs_dir)

    async def b() -> None:
        await conn.run("true")

    async def raw_launcher() -> None:
        script = launch_script(jobs_dir, new_job_id(), "true", cwd=None, mode="fg", head_bytes=3072,
                               tail_bytes=3072)
        proc = await conn.create_process(script, encoding=None)
        buf = b""
        while b"@@AT end" not in buf:
            chunk = await proc.stdout.read(65536)
            if not chunk:
                break
            buf += chunk
        proc.close()

    warm: list[tuple[str, object]] = []

    async def start_warm() -> None:  # untimed: a warm session ready for the next W call
        jid = new_job_id()
        proc = await conn.create_process(warm_script(jobs_dir, jid), encoding=None)
        await proc.stdout.readuntil(b"\n")
        warm.append((jid, proc))

    async def raw_warm() -> None:
        jid, proc = warm.pop()
        proc.stdin.write(launch_request(jobs_dir, jid, "true", cwd=None, mode="fg", head_bytes=3072,  # type: ignore[attr-defined]
                                        tail_bytes=3072))
        buf = b""
        while b"@@AT end" not in buf:
            chunk = await proc.stdout.read(65536)  # type: ignore[attr-defined]
            if not chunk:
                break
            buf += chunk
        proc.close()  # type: ignore[attr-defined]

    async def a() -> None:
        await runner.run(host, "true", budget_s=30)

    async def t() -> None:
        json.dumps(await tk.dispatch("run_command", args))

    sides = {"B conn.run('true')": b, "L raw launcher over SSH": raw_launcher, "W raw warm launcher": raw_warm,
             "A JobRunner.run": a, "T Toolkit.dispatch": t}
    settles: dict[str, Callable[[], Awaitable[object]] | None] = {
        "W raw warm launcher": start_warm, "A JobRunner.run": host.wait_warm, "T Toolkit.dispatch": host.wait_warm}
    await start_warm()
    for name, fn in sides.items():  # warm up
        for _ in range(3):
            await fn()
            if settles.get(name):
                await settles[name]()  # type: ignore[misc]
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    for _ in range(3):  # three interleaved passes
        for name, fn in sides.items():
            results[name].append(await _measure(fn, max(1, calls // 3), settles.get(name)))
    for _, proc in warm:
        proc.close()  # type: ignore[attr-defined]
    print(f"client: per call, {calls} calls each, interleaved (median wall ms / mean client CPU ms)")
    for name, rs in results.items():
        wall = statistics.median(r[0] for r in rs)
        cpu = statistics.mean(r[1] for r in rs)
        print(f"  {name:28s} wall {wall:7.2f} ms   client CPU {cpu:6.2f} ms")
    await _library_only(env, calls)
    try:
        from pyinstrument import Profiler
    except ImportError:
        print("  (pip install pyinstrument for a profile of A)")
        return
    profiler = Profiler(interval=0.0002)
    for _ in range(calls):
        profiler.start()
        await runner.run(host, "true", budget_s=30)
        profiler.stop()
        await host.wait_warm()
    print(profiler.output_text(unicode=False, color=False, show_all=False))


def _run_held_stdin(argv: list[str]) -> None:
    """Run ``argv`` with a stdin pipe held open until it exits (as an SSH channel is: the fg launcher
    takes EOF on stdin as "the client detached" and exits early)."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.wait()
    assert proc.stdin is not None
    proc.stdin.close()


def _median_ms(make: Callable[[], list[str]], n: int = 30) -> float:
    """Median wall ms of ``n`` runs, each of a fresh ``make()`` (a launcher needs a new job id each time)."""
    xs = []
    for _ in range(n):
        argv = make()
        t0 = time.perf_counter()
        _run_held_stdin(argv)
        xs.append((time.perf_counter() - t0) * 1000)
    return statistics.median(xs)


def _strace_counts(argv: list[str], workdir: Path) -> tuple[int, int] | None:
    """(processes forked, programs exec'd) by ``argv`` and its descendants, or None without strace."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    out = workdir / "strace.txt"
    _run_held_stdin([strace, "-f", "-qq", "-o", str(out), "-e", "trace=execve,clone,clone3,fork,vfork", *argv])
    forks = execs = 0
    for line in out.read_text().splitlines():
        words = line.split(None, 1)
        call = words[1] if len(words) > 1 else ""
        if call.startswith(("clone(", "clone3(", "fork(", "vfork(")):
            forks += 1
        elif call.startswith("execve(") and "ENOENT" not in call and "= -1" not in call:
            execs += 1
    return forks, execs - 1  # not counting the exec of argv itself


def _host(n_status: int = 100) -> None:
    work = Path(tempfile.mkdtemp(prefix="agent-tools-prof-"))
    sleeper = subprocess.Popen(["sleep", "300"])
    try:
        base = work / "jobs"
        base.mkdir()
        # fake running jobs for the status script: a pid file naming a live process, no exit file
        stat = Path(f"/proc/{sleeper.pid}/stat").read_text().rsplit(")", 1)[1].split()
        start = stat[19]
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        ids = [new_job_id() for _ in range(n_status)]
        noisy = [new_job_id() for _ in range(n_status)]
        for jid in ids + noisy:
            d = base / jid
            d.mkdir()
            (d / "pid").write_text(f"{sleeper.pid} {start} {boot} {sleeper.pid} {start}\n")
            (d / "stdout").write_bytes(b"some output\n" if jid in noisy else b"")
            (d / "stderr").write_bytes(b"")

        def launcher(mode: str) -> list[str]:
            return ["/bin/sh", "-c", launch_script(str(base), new_job_id(), "true", cwd=None, mode=mode,
                                                   head_bytes=3072, tail_bytes=3072)]

        cases: dict[str, Callable[[], list[str]]] = {
            "sh -c true": lambda: ["/bin/sh", "-c", "true"],
            "launcher fg 'true'": lambda: launcher("fg"),
            "launcher bg 'true'": lambda: launcher("bg"),
            "status, 1 job": lambda: ["/bin/sh", "-c", status_script(str(base), [(ids[0], 0, 0, 0, 0)])],
            f"status, {n_status} jobs": lambda: ["/bin/sh", "-c",
                                                 status_script(str(base), [(j, 0, 0, 0, 0) for j in ids])],
            f"status, {n_status} w/ output": lambda: ["/bin/sh", "-c",
                                                     status_script(str(base), [(j, 0, 0, 0, 0) for j in noisy])],
        }
        print("host: scripts run locally by /bin/sh (median wall of 30; processes forked / programs exec'd "
              "counted with strace -f)")
        for name, make in cases.items():
            wall = statistics.median(_median_ms(make, 10) for _ in range(3))
            counts = _strace_counts(make(), work)
            c = f"{counts[0]:4d} forks {counts[1]:4d} execs" if counts else "(no strace)"
            print(f"  {name:24s} {wall:8.2f} ms   {c}")
        if shutil.which("bash"):
            _warm_host(base, ids, n_status)
    finally:
        sleeper.kill()
        sleeper.wait()
        shutil.rmtree(work, ignore_errors=True)


def _warm_request(base: Path, request: Callable[[str], bytes],
                  strace_to: Path | None = None) -> tuple[float, float, str]:
    """Start a warm session (untimed), write ``request(reserved_id)``, read to ``@@AT end``.

    :returns: (ms from the request to the report, wall clock time of the request, the reserved job id).
    """
    jid = new_job_id()
    argv = ["/bin/sh", "-c", warm_script(str(base), jid)]
    if strace_to is not None:
        argv = ["strace", "-f", "-ttt", "-qq", "-o", str(strace_to),
                "-e", "trace=execve,clone,clone3,fork,vfork,wait4,exit_group,write", *argv]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.readline()
    wall = time.time()
    t0 = time.perf_counter()
    proc.stdin.write(request(jid))
    proc.stdin.flush()
    buf = b""
    while b"@@AT end" not in buf:
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        buf += chunk
    ms = (time.perf_counter() - t0) * 1000
    proc.communicate()  # EOF on stdin: the session ends
    return ms, wall, jid


def _warm_host(base: Path, ids: list[str], n_status: int) -> None:
    def launch(jid: str) -> bytes:
        return launch_request(str(base), jid, "true", cwd=None, mode="fg", head_bytes=3072, tail_bytes=3072)

    def status(_jid: str) -> bytes:
        return status_request(str(base), [(j, 0, 0, 0, 0) for j in ids])

    print("host: warm session (/bin/sh), timed from the request to the report (median of 30)")
    for name, req in (("warm launch fg 'true'", launch), (f"warm status, {n_status} jobs", status)):
        wall = statistics.median(_warm_request(base, req)[0] for _ in range(30))
        print(f"  {name:24s} {wall:8.2f} ms")
    if shutil.which("strace") is None:
        print("  (apt-get install strace for the timeline of one warm launch)")
        return
    # one launch under strace: which process forks/execs/waits when (strace slows every system call down, so
    # the times are inflated; the order and the shares are what it shows)
    trace = base.parent / "warm.strace"
    _, t_req, _ = _warm_request(base, launch, strace_to=trace)
    names: dict[str, str] = {}
    print("host: one warm fg launch of 'true' under strace -f (ms after the request was written; inflated)")
    for line in trace.read_text(errors="replace").splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[1].replace(".", "").isdigit():
            continue
        pid, t, call = parts[0], float(parts[1]), parts[2]
        if t < t_req - 0.0005:
            continue
        if call.startswith("execve(") and "= 0" in call:
            names[pid] = call.split('"')[1].rsplit("/", 1)[-1]
        elif call.startswith("execve("):
            continue
        if call.startswith("write(") and "@@AT" not in call:
            continue
        who = names.get(pid, "sh")
        print(f"  {1000 * (t - t_req):7.2f}  {pid:>7s} {who:7s} {call[:78]}")


async def _client_main(calls: int) -> None:
    env = BenchEnv()
    try:
        try:
            await _client(env, calls)
        finally:
            with anyio.CancelScope(shield=True):
                await env.aclose()
    finally:
        env.cleanup()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__)
    ap.add_argument("what", nargs="?", choices=("client", "host", "all"), default="all")
    ap.add_argument("--calls", type=int, default=150, help="calls per side for 'client'")
    ns = ap.parse_args(argv)
    configure_logging("warning")
    if ns.what in ("host", "all"):
        _host()
    if ns.what in ("client", "all"):
        anyio.run(_client_main, ns.calls)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
