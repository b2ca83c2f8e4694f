"""``python3 -m tests.hosts.nspawn``: up, down, status, partition, heal, reboot, run, build-base; and the
``_supervise`` entry point of the detached supervisor (see :mod:`.supervision`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from .common import _SUPERVISOR_MARK, CACHE_DIR, DEFAULT_STATE_DIR, HarnessError
from .image import build_base
from .pool import HostPool
from .supervision import _supervise

_DESCRIPTION = "Throw-away Debian test hosts with real systemd and real sshd, one network namespace each."


def _timed(label: str) -> contextlib.AbstractContextManager[None]:
    @contextlib.contextmanager
    def cm() -> Iterator[None]:
        started = time.monotonic()
        yield
        print(f"{label} took {time.monotonic() - started:.1f}s", file=sys.stderr)

    return cm()


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == [_SUPERVISOR_MARK]:
        return _supervise(Path(args_list[1]))

    parser = argparse.ArgumentParser(prog="python3 -m tests.hosts.nspawn", description=_DESCRIPTION)
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument("--cache-dir", type=Path, default=CACHE_DIR)
    parser.add_argument("--wait", type=float, default=0.0, help="seconds to wait for another session's pool")
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="boot N hosts (reuses a healthy pool of the same size); prints JSON")
    p_up.add_argument("--count", type=int, default=2)
    p_up.add_argument("--fresh", action="store_true", help="tear down and boot anew even if healthy")
    subs = [p_up, sub.add_parser("down", help="tear everything down")]
    subs.append(sub.add_parser("status", help="print the pool with liveness, boots, partition state, RSS"))
    for verb in ("partition", "heal", "reboot"):
        subs.append(sub.add_parser(verb))
        subs[-1].add_argument("name")
    p_run = sub.add_parser("run", help="run a shell command inside a host (nsenter)")
    subs.append(p_run)
    p_run.add_argument("name")
    p_run.add_argument("cmd")
    p_build = sub.add_parser("build-base", help="build the cached base rootfs (if missing or outdated)")
    p_build.add_argument("--force", action="store_true")
    subs.append(p_build)
    # Accept the global options after the sub-command too (`up --count 2 --state-dir X`).
    for p in subs:
        p.add_argument("--state-dir", type=Path, default=argparse.SUPPRESS)
        p.add_argument("--cache-dir", type=Path, default=argparse.SUPPRESS)
        p.add_argument("--wait", type=float, default=argparse.SUPPRESS)
    args = parser.parse_args(args_list)

    pool = HostPool(args.state_dir, args.cache_dir, lock_wait_s=args.wait)
    try:
        if args.command == "build-base":
            with _timed("build-base"):
                print(build_base(args.cache_dir, force=args.force))
        elif args.command == "up":
            with _timed("up"):
                pool.up(args.count, fresh=args.fresh)
            print(json.dumps(pool.describe(), indent=2))
        elif args.command == "down":
            with _timed("down"):
                pool.down()
        elif args.command == "status":
            print(json.dumps(pool.status(), indent=2))
        elif args.command == "partition":
            pool.partition(args.name)
        elif args.command == "heal":
            pool.heal(args.name)
        elif args.command == "reboot":
            print(f"{args.name} back after {pool.reboot(args.name):.1f}s", file=sys.stderr)
        elif args.command == "run":
            proc = pool.run(args.name, args.cmd, timeout=None)
            sys.stdout.write(proc.stdout)
            sys.stderr.write(proc.stderr)
            return proc.returncode
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0
