#!/usr/bin/env python3
# ruff: noqa: T201 - a command-line program: print is its output
"""A fake procps ``free`` reporting the simulated GPU node's host RAM (standard library only).

The numbers come from the simulation profile's ``host`` section (see ``sglang_server.py`` for the lookup
order), so a small test machine reports the node's RAM (e.g. 2 TiB). While the simulated server runs with
hierarchical cache, its pinned host pool (from the server's state file) is taken out of ``available`` and
``free``. Layout and arithmetic follow procps-ng 4: ``used = total - available``; default unit KiB;
``-b``, ``-k``, ``-m``, ``-g``, ``--tebi``, ``--kilo``/``--mega``/``--giga``/``--tera``, ``-h`` (``--si``),
``-w``, ``-t``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_PROFILE_PATH = "/etc/sglang-sim/profile.json"
USAGE = """
Usage:
 free [options]

Options:
 -b, --bytes         show output in bytes
     --kilo          show output in kilobytes
     --mega          show output in megabytes
     --giga          show output in gigabytes
     --tera          show output in terabytes
 -k, --kibi          show output in kibibytes
 -m, --mebi          show output in mebibytes
 -g, --gibi          show output in gibibytes
     --tebi          show output in tebibytes
 -h, --human         show human-readable output
     --si            use powers of 1000 not 1024
 -t, --total         show total for RAM + swap
 -w, --wide          wide output

     --help     display this help and exit
 -V, --version  output version information and exit
"""


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


def pinned_host_bytes(profile: dict[str, Any]) -> int:
    """Host memory pinned by a running simulated server (its hicache pool), else 0."""
    for path in state_paths(profile):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = int(state.get("pid") or 0)
        if state.get("phase") in ("stopped", "failed") or pid <= 0:
            return 0
        ticks = proc_start_ticks(pid)
        if ticks is None or (state.get("start_ticks") is not None and ticks != state["start_ticks"]):
            return 0
        return int(state.get("host_pool_bytes") or 0)
    return 0


def memory(profile: dict[str, Any]) -> dict[str, int]:
    """Byte counts for the Mem: and Swap: lines."""
    host = profile["host"]
    total = int(host["mem_total_bytes"])
    pinned = pinned_host_bytes(profile)
    available = max(0, int(host["mem_available_bytes"]) - pinned)
    shared = int(host.get("shared_bytes", 0))
    buff_cache = int(host.get("buff_cache_bytes", 0))
    reclaimable = max(0, buff_cache - shared)
    buffers = min(buff_cache, 1 << 30)
    swap_total = int(host.get("swap_total_bytes", 0))
    return {
        "total": total,
        "used": total - available,
        "free": max(0, available - reclaimable),
        "shared": shared,
        "buff_cache": buff_cache,
        "buffers": buffers,
        "cache": buff_cache - buffers,
        "available": available,
        "swap_total": swap_total,
        "swap_used": 0,
        "swap_free": swap_total,
    }


def human(n: int, si: bool) -> str:
    base = 1000 if si else 1024
    if n < base:
        return f"{n}B"
    suffixes = ["K", "M", "G", "T", "P", "E"]
    value = float(n)
    for suffix in suffixes:
        value /= base
        if value < base or suffix == suffixes[-1]:
            unit = suffix if si else suffix + "i"
            return f"{value:.1f}{unit}" if value < 10 else f"{int(value)}{unit}"
    return f"{n}B"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    divisor = 1024
    is_human = si = wide = total_line = False
    long_units = {
        "--bytes": 1,
        "--kilo": 1000,
        "--mega": 1000**2,
        "--giga": 1000**3,
        "--tera": 1000**4,
        "--kibi": 1024,
        "--mebi": 1024**2,
        "--gibi": 1024**3,
        "--tebi": 1024**4,
    }
    short_units = {"b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
    for a in args:
        if a in long_units:
            divisor = long_units[a]
        elif a == "--human":
            is_human = True
        elif a == "--si":
            si = True
        elif a == "--wide":
            wide = True
        elif a == "--total":
            total_line = True
        elif a == "--help":
            print(USAGE)
            return 0
        elif a in ("-V", "--version"):
            print("free from procps-ng 4.0.2 (simulated)")
            return 0
        elif a.startswith("-") and not a.startswith("--") and len(a) > 1:
            for ch in a[1:]:
                if ch in short_units:
                    divisor = short_units[ch]
                elif ch == "h":
                    is_human = True
                elif ch == "w":
                    wide = True
                elif ch == "t":
                    total_line = True
                elif ch == "V":
                    print("free from procps-ng 4.0.2 (simulated)")
                    return 0
                else:
                    sys.stderr.write(f"free: invalid option -- '{ch}'\n{USAGE}")
                    return 1
        else:
            sys.stderr.write(f"free: unrecognized option '{a}'\n{USAGE}")
            return 1
    try:
        profile = json.loads(find_profile().read_text())
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"free: cannot read the simulation profile: {exc}\n")
        return 1
    m = memory(profile)

    def fmt(n: int) -> str:
        if is_human:
            return human(n, si)
        return str(n // divisor)

    def line(label: str, values: list[int]) -> str:
        return f"{label:<8}" + "".join(f" {fmt(v):>11}" for v in values)

    if wide:
        print(
            f"{'':<8}"
            + "".join(f" {h:>11}" for h in ("total", "used", "free", "shared", "buffers", "cache", "available"))
        )
        print(
            line(
                "Mem:",
                [m["total"], m["used"], m["free"], m["shared"], m["buffers"], m["cache"], m["available"]],
            )
        )
    else:
        print(f"{'':<8}" + "".join(f" {h:>11}" for h in ("total", "used", "free", "shared", "buff/cache", "available")))
        print(line("Mem:", [m["total"], m["used"], m["free"], m["shared"], m["buff_cache"], m["available"]]))
    print(line("Swap:", [m["swap_total"], m["swap_used"], m["swap_free"]]))
    if total_line:
        print(
            line(
                "Total:",
                [m["total"] + m["swap_total"], m["used"] + m["swap_used"], m["free"] + m["swap_free"]],
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
