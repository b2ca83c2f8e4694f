#!/usr/bin/env python3
# ruff: noqa: T201 - a command-line program: print is its output
"""Install the simulated SGLang node into a root directory (standard library only).

``python3 install.py --root / [--profile default|small_ram|PATH] [--load-s 20] [--shims]`` copies the programs
of this directory to ``ROOT/opt/sglang-sim/``, the profile to ``ROOT/etc/sglang-sim/profile.json``, puts
``nvidia-smi`` and ``free`` wrappers (plus ``systemctl``/``journalctl`` with ``--shims``, for hosts without
systemd) in ``ROOT/usr/local/bin/`` and renders ``sglang.service.in`` to
``ROOT/etc/systemd/system/sglang.service``. On a real systemd host run ``systemctl daemon-reload`` afterwards.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROGRAMS = ("sglang_server.py", "nvidia_smi.py", "free.py")
SHIMS = ("systemctl.py", "journalctl.py")
WRAPPERS = {
    "nvidia-smi": "nvidia_smi.py",
    "free": "free.py",
    "systemctl": "systemctl.py",
    "journalctl": "journalctl.py",
}


def render_unit(
    template: str,
    *,
    python: str,
    server: str,
    profile: str,
    port: int | None = None,
    extra_args: str = "",
    timeout_start: str | None = None,
) -> str:
    """Fill ``@PYTHON@``/``@SERVER@``/``@PROFILE@``; optionally change the port, flags and start timeout.
    Lines starting with ``##`` are notes about the template and are left out."""
    text = "".join(line for line in template.splitlines(keepends=True) if not line.startswith("##"))
    text = text.replace("@PYTHON@", python).replace("@SERVER@", server).replace("@PROFILE@", profile)
    if port is not None:
        text = text.replace("--port 30000", f"--port {port}")
    if extra_args:
        marker = "--port " + (str(port) if port is not None else "30000")
        text = text.replace(marker, f"{marker} {extra_args}")
    if timeout_start is not None:
        text = text.replace("TimeoutStartSec=900", f"TimeoutStartSec={timeout_start}")
    return text


def resolve_profile(spec: str) -> Path:
    if spec in ("default", "small_ram"):
        return HERE / f"profile_{spec}.json"
    return Path(spec)


def install(root: Path, profile: str, load_s: float | None, shims: bool, python: str, port: int | None,
            hostname: str | None = None) -> None:
    lib = root / "opt/sglang-sim"
    lib.mkdir(parents=True, exist_ok=True)
    for name in (*PROGRAMS, *(SHIMS if shims else ()), "profile_default.json", "profile_small_ram.json"):
        shutil.copy2(HERE / name, lib / name)
    data = json.loads(resolve_profile(profile).read_text(encoding="utf-8"))
    if load_s is not None:
        data.setdefault("timing", {})["load_s"] = load_s
    if hostname is not None:
        data.setdefault("node", {})["hostname"] = hostname
    if root.resolve() != Path("/"):
        data["state_path"] = str(root / "run/sglang-sim/state.json")
    etc = root / "etc/sglang-sim"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "profile.json").write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    bindir = root / "usr/local/bin"
    bindir.mkdir(parents=True, exist_ok=True)
    # wrappers default the environment to this root, so a root other than / is self-contained
    env_line = {
        "SGLANG_SIM_PROFILE": str(etc / "profile.json"),
        "SIM_SYSTEMD_ROOT": str(root),
    }
    for cmd, prog in WRAPPERS.items():
        if prog in SHIMS and not shims:
            continue
        var = "SIM_SYSTEMD_ROOT" if prog in SHIMS else "SGLANG_SIM_PROFILE"
        wrapper = bindir / cmd
        wrapper.write_text(
            f'#!/bin/sh\n{var}="${{{var}:-{env_line[var]}}}" exec {python} {lib / prog} "$@"\n',
            encoding="utf-8",
        )
        wrapper.chmod(0o755)
    unit_dir = root / "etc/systemd/system"
    unit_dir.mkdir(parents=True, exist_ok=True)
    template = (HERE / "sglang.service.in").read_text(encoding="utf-8")
    unit = render_unit(
        template,
        python=python,
        server=str(lib / "sglang_server.py"),
        profile=str(etc / "profile.json"),
        port=port,
    )
    (unit_dir / "sglang.service").write_text(unit, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", default="/")
    p.add_argument("--profile", default="default", help="default, small_ram or a JSON path")
    p.add_argument("--load-s", type=float, default=None, help="override the profile's start-up time")
    p.add_argument("--shims", action="store_true", help="also install the systemctl/journalctl shims")
    p.add_argument("--python", default=shutil.which("python3") or sys.executable)
    p.add_argument("--port", type=int, default=None)
    args = p.parse_args(argv)
    install(Path(args.root), args.profile, args.load_s, args.shims, args.python, args.port)
    print(f"installed the simulated SGLang node under {args.root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
