#!/usr/bin/env python3
# ruff: noqa: T201 - a command-line program: print is its output
"""A fake ``nvidia-smi`` for the simulated SGLang node (standard library only).

Reports the GPUs described by the simulation profile (see ``sglang_server.py`` for the lookup order) with the
memory the simulated server currently holds, read from its state file; a state file whose process is gone
counts as "nothing running". Supported forms::

    nvidia-smi --query-gpu=index,name,memory.used,memory.total,memory.free,utilization.gpu \\
               --format=csv[,noheader][,nounits] [-i 0,1]
    nvidia-smi --query-compute-apps=pid,process_name,used_memory,gpu_uuid --format=csv
    nvidia-smi -L
    nvidia-smi            # a short table
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MIB = 1 << 20
DEFAULT_PROFILE_PATH = "/etc/sglang-sim/profile.json"

GPU_FIELDS: dict[str, str] = {
    "index": "",
    "name": "",
    "uuid": "",
    "memory.used": "MiB",
    "memory.total": "MiB",
    "memory.free": "MiB",
    "utilization.gpu": "%",
    "driver_version": "",
    "count": "",
}
APP_FIELDS: dict[str, str] = {"pid": "", "process_name": "", "used_memory": "MiB", "gpu_uuid": "", "name": ""}


def find_profile() -> Path:
    env = os.environ.get("SGLANG_SIM_PROFILE")
    if env:
        return Path(env)
    if Path(DEFAULT_PROFILE_PATH).exists():
        return Path(DEFAULT_PROFILE_PATH)
    return Path(__file__).resolve().with_name("profile_default.json")


def state_paths(profile: dict[str, Any]) -> list[Path]:
    out: list[Path] = []
    env = os.environ.get("SGLANG_SIM_STATE")
    if env:
        out.append(Path(env))
    if profile.get("state_path"):
        out.append(Path(str(profile["state_path"])))
    out.append(Path(tempfile.gettempdir()) / "sglang-sim" / "state.json")
    return out


def proc_start_ticks(pid: int) -> int | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def read_state(profile: dict[str, Any]) -> dict[str, Any]:
    """The running server's state, or {} when none is running (stale files are ignored)."""
    for path in state_paths(profile):
        try:
            state: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = int(state.get("pid") or 0)
        if state.get("phase") in ("stopped", "failed") or pid <= 0:
            return {}
        ticks = proc_start_ticks(pid)
        if ticks is None or (state.get("start_ticks") is not None and ticks != state["start_ticks"]):
            return {}
        return state
    return {}


def gpu_uuid(index: int) -> str:
    return f"GPU-5e1a{index:04x}-0c3d-4a11-9b7e-{index:012x}"


def gpu_rows(profile: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    gpu = profile["gpu"]
    total_mib = int(gpu["memory_total_mib"])
    idle = int(gpu.get("idle_used_mib", 0))
    used_by_index = {int(g["index"]): int(g["used_bytes"]) for g in state.get("gpus", [])}
    rows = []
    for i in range(int(gpu["count"])):
        used = min(total_mib, idle + used_by_index.get(i, 0) // MIB)
        busy = state.get("phase") == "ready" and used_by_index.get(i, 0) > 0
        rows.append(
            {
                "index": i,
                "name": gpu["name"],
                "uuid": gpu_uuid(i),
                "memory.used": used,
                "memory.total": total_mib,
                "memory.free": total_mib - used,
                "utilization.gpu": 3 if busy else 0,
                "driver_version": gpu.get("driver_version", "550.54.15"),
                "count": int(gpu["count"]),
                "used_bytes": used_by_index.get(i, 0),
            }
        )
    return rows


def fail(msg: str, code: int = 2) -> int:
    print(msg)
    return code


def render_csv(fields: list[str], units: dict[str, str], rows: list[dict[str, Any]], fmt: set[str]) -> None:
    with_units = "nounits" not in fmt
    if "noheader" not in fmt:
        print(", ".join(f"{f} [{units[f]}]" if units[f] else f for f in fields))
    for row in rows:
        cells = []
        for f in fields:
            val = str(row[f])
            if with_units and units[f]:
                val = f"{val} {units[f]}"
            cells.append(val)
        print(", ".join(cells))


def table(profile: dict[str, Any], rows: list[dict[str, Any]], state: dict[str, Any]) -> None:
    gpu = profile["gpu"]
    drv = gpu.get("driver_version", "550.54.15")
    cuda = gpu.get("cuda_version", "12.4")
    sep = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"

    def row(a: str, b: str, c: str) -> str:
        return f"|{a:<41}|{b:>24}|{c:>22}|"

    print(time.strftime("%a %b %d %H:%M:%S %Y"))
    print("+" + "-" * 89 + "+")
    print(f"| {'NVIDIA-SMI ' + drv:<32}Driver Version: {drv:<14}CUDA Version: {cuda:<12}|")
    print(sep)
    print(row(" GPU  Name                 Persistence-M", "Bus-Id          Disp.A ", "Volatile Uncorr. ECC "))
    print(row(" Fan  Temp   Perf          Pwr:Usage/Cap", "          Memory-Usage ", "GPU-Util  Compute M. "))
    print("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for r in rows:
        mem = f"{r['memory.used']}MiB / {r['memory.total']}MiB "
        print(
            row(
                f" {r['index']:>3}  {r['name'][:26]:<26}      On",
                f"00000000:{0x18 + 0x10 * r['index']:02X}:00.0 Off ",
                "0 ",
            )
        )
        print(row(" N/A   34C    P0             70W /  700W", mem, f"{r['utilization.gpu']}%      Default "))
        print(sep)
    print()
    print("+" + "-" * 89 + "+")
    print(f"| {'Processes:':<88}|")
    print(f"| {' GPU   GI   CI        PID   Type   Process name':<68}{'GPU Memory':>19} |")
    print("|" + "=" * 89 + "|")
    running = [r for r in rows if r["used_bytes"] > 0]
    if not running:
        print(f"| {' No running processes found':<88}|")
    for r in running:
        used = f"{r['used_bytes'] // MIB}MiB"
        line = f"  {r['index']:>3}   N/A  N/A  {state.get('pid', 0):>9}      C   python3"
        print(f"| {line:<68}{used:>19} |")
    print("+" + "-" * 89 + "+")


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        profile: dict[str, Any] = json.loads(find_profile().read_text())
    except (OSError, ValueError) as exc:
        return fail(f"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver ({exc}).", 9)
    state = read_state(profile)
    rows = gpu_rows(profile, state)

    query: list[str] | None = None
    apps: list[str] | None = None
    fmt: set[str] | None = None
    ids: set[int] | None = None
    list_gpus = False
    i = 0
    while i < len(args):
        a = args[i]
        val: str | None = None
        if "=" in a and a.startswith("--"):
            a, val = a.split("=", 1)
        elif a in ("--query-gpu", "--query-compute-apps", "--format", "-i", "--id") and i + 1 < len(args):
            val = args[i + 1]
            i += 1
        if a == "--query-gpu":
            query = [f.strip() for f in (val or "").split(",") if f.strip()]
        elif a == "--query-compute-apps":
            apps = [f.strip() for f in (val or "").split(",") if f.strip()]
        elif a == "--format":
            fmt = {f.strip() for f in (val or "").split(",") if f.strip()}
        elif a in ("-i", "--id"):
            try:
                ids = {int(x) for x in (val or "").split(",") if x.strip()}
            except ValueError:
                return fail(f'Invalid value "{val}" for parameter -i')
        elif a in ("-L", "--list-gpus"):
            list_gpus = True
        elif a in ("-h", "--help"):
            print(__doc__)
            return 0
        else:
            return fail(f'Invalid combination of input arguments. Please run "nvidia-smi -h" for help.\n({a})')
        i += 1

    if ids is not None:
        bad = [x for x in ids if x >= len(rows)]
        if bad:
            return fail(f"No devices were found with index {bad[0]}", 6)
        rows = [r for r in rows if r["index"] in ids]

    if list_gpus:
        for r in rows:
            print(f"GPU {r['index']}: {r['name']} (UUID: {r['uuid']})")
        return 0
    if query is not None or apps is not None:
        if fmt is None or "csv" not in fmt:
            return fail('"--format=csv" is required with --query-* switches.')
        if query is not None:
            for f in query:
                if f not in GPU_FIELDS:
                    return fail(f'Field "{f}" is not a valid field to query.')
            render_csv(query, GPU_FIELDS, rows, fmt)
        else:
            assert apps is not None
            for f in apps:
                if f not in APP_FIELDS:
                    return fail(f'Field "{f}" is not a valid field to query.')
            app_rows = [
                {
                    "pid": state.get("pid", 0),
                    "process_name": "python3",
                    "name": "python3",
                    "used_memory": r["used_bytes"] // MIB,
                    "gpu_uuid": r["uuid"],
                }
                for r in rows
                if r["used_bytes"] > 0
            ]
            render_csv(apps, APP_FIELDS, app_rows, fmt)
        return 0
    table(profile, rows, state)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
