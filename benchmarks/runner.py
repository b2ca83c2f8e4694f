"""``python -m benchmarks [--quick] [--only NAME ...] [--json]``: run the scenarios, print the table."""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import time
from importlib import metadata
from types import FrameType
from typing import Any

import anyio

from agent_tools.logs import configure_logging

from . import SCENARIOS
from .env import REPO_ROOT, BenchEnv
from .scenarios import SCENARIO_FUNCS, Params
from .stats import Row, progress, render_table

__all__ = ["main"]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer iterations (< 60 s)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME",
                    help=f"run only this scenario (repeatable, or comma-separated): {', '.join(SCENARIOS)}")
    ap.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    ns = ap.parse_args(argv)
    only = [n.strip() for item in ns.only for n in item.split(",") if n.strip()]
    unknown = [n for n in only if n not in SCENARIOS]
    if unknown:
        ap.error(f"unknown scenario(s) {unknown}; choose from {', '.join(SCENARIOS)}")
    ns.only = only
    return ns


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "not installed"


def _openssh_version() -> str:
    try:
        res = subprocess.run(["ssh", "-V"], capture_output=True, text=True, timeout=10, check=False)
    except OSError:
        return "not installed"
    return (res.stderr or res.stdout).strip()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_available_gib() -> float | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return round(int(line.split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    return None


def _commit() -> str:
    """The commit measured (``+dirty`` when agent_tools/ has uncommitted changes)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True,
                              text=True, timeout=10, check=False).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "agent_tools"], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty" if dirty else "")


def machine_facts() -> dict[str, Any]:
    return {
        "commit": _commit(),
        "cores": os.cpu_count(),
        "cpu": _cpu_model(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "asyncssh": _version("asyncssh"),
        "anyio": _version("anyio"),
        "pydantic": _version("pydantic"),
        "openssh": _openssh_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "mem_available_gib": _mem_available_gib(),
    }


async def _run_all(env: BenchEnv, names: list[str], params: Params, rows: list[Row]) -> None:
    try:
        for name in names:
            t0 = time.perf_counter()
            rows.extend(await SCENARIO_FUNCS[name](env, params))
            progress(f"{name}: done in {time.perf_counter() - t0:.1f} s")
    finally:
        with anyio.CancelScope(shield=True):
            await env.aclose()


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # same path as Ctrl-C: the finally blocks clean up


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    configure_logging("warning")  # as the CLI does; structlog's unconfigured default prints debug to stdout
    names = ns.only or list(SCENARIOS)
    params = Params(quick=ns.quick)
    facts = machine_facts()
    progress(f"mode={'quick' if ns.quick else 'full'} scenarios={','.join(names)}")
    progress(f"machine: {facts['cores']} cores, {facts['cpu']}, python {facts['python']}, asyncssh "
             f"{facts['asyncssh']}, {facts['openssh']}, load {facts['loadavg_start']}")
    rows: list[Row] = []
    env = BenchEnv()
    old = signal.signal(signal.SIGTERM, _sigterm)
    # Ctrl-C even when started from a script in the background (where SIGINT starts out ignored)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.perf_counter()
    interrupted = False
    try:
        anyio.run(_run_all, env, names, params, rows)
    except KeyboardInterrupt:
        interrupted = True
        progress("interrupted: cleaning up")
    finally:
        env.cleanup()
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, old_int)
    elapsed = time.perf_counter() - t0
    facts["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if ns.json:
        print(json.dumps({"mode": "quick" if ns.quick else "full", "scenarios": names, "machine": facts,
                          "elapsed_s": round(elapsed, 1), "interrupted": interrupted,
                          "rows": [r.to_json() for r in rows], "notes": env.notes}, indent=2))
    else:
        _print_report(facts, rows, env.notes, elapsed, ns.quick)
    return 130 if interrupted else 0


def _print_report(facts: dict[str, Any], rows: list[Row], notes: list[str], elapsed: float, quick: bool) -> None:
    print(f"machine: {facts['cores']} cores ({facts['cpu']}), kernel {facts['kernel']}, python {facts['python']}, "
          f"asyncssh {facts['asyncssh']}, anyio {facts['anyio']}, pydantic {facts['pydantic']}")
    print(f"         {facts['openssh']}; load average {facts['loadavg_start']} at start, "
          f"{facts['loadavg_end']} at end; {facts['mem_available_gib']} GiB available")
    print(f"agent_tools at {facts['commit']}; mode: {'quick' if quick else 'full'}; wall time {elapsed:.0f} s; "
          "A = agent_tools, B = baseline, "
          "rounds interleaved A/B; times in ms per call unless noted\n")
    print(render_table(rows))
    for row in rows:
        if row.note:
            print(f"  {row.name}: {row.note}")
    for note in notes:
        print(f"  note: {note}")
