"""Keeping the containers running and stopping them: processes named by pid and start time
(:class:`ProcRef`), one cgroup per host, the detached supervisor that relaunches ``systemd-nspawn`` after an
in-container reboot (exit 133), and finding and killing what a run (also a crashed one) left behind.

The supervisor runs as ``python3 -m tests.hosts.nspawn _supervise HOST_DIR NS_PREFIX`` from the repository
root, so it outlives the session that started it and is found again by its command line."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .common import _SUPERVISOR_MARK, CGROUP_GROUP, NS_PREFIX, NSPAWN_REBOOT_EXIT, STOP_WAIT_S, HarnessError, _write
from .image import base_dir
from .network import our_netns_inodes

#: the module the supervisor runs as (``python3 -m``), from :data:`REPO_ROOT`
SUPERVISOR_MODULE = "tests.hosts.nspawn"
REPO_ROOT = Path(__file__).resolve().parents[3]


def _proc_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), or None when the pid is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _proc_ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _proc_cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _all_pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _reap(pid: int) -> None:
    """Collect the exit status if the pid is our own child (otherwise it would linger as a zombie)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


@dataclass(frozen=True)
class ProcRef:
    """A pid plus its start time, so a recycled pid is never mistaken for the process we started."""

    pid: int
    start: int

    @classmethod
    def of(cls, pid: int) -> ProcRef | None:
        start = _proc_start_time(pid)
        return None if start is None else cls(pid, start)

    @classmethod
    def parse(cls, text: str) -> ProcRef | None:
        parts = text.split()
        if len(parts) != 2:
            return None
        return cls(int(parts[0]), int(parts[1]))

    def alive(self) -> bool:
        _reap(self.pid)
        return _proc_start_time(self.pid) == self.start

    def signal(self, sig: int) -> None:
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def __str__(self) -> str:
        return f"{self.pid} {self.start}"


def _wait_gone(refs: Sequence[ProcRef], timeout: float) -> list[ProcRef]:
    deadline = time.monotonic() + timeout
    left = [r for r in refs if r.alive()]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [r for r in left if r.alive()]
    return left



def _cgroup_roots() -> list[Path]:
    """Mount points of the cgroup2 hierarchy and of the v1 name=systemd hierarchy (hybrid hosts)."""
    roots: list[Path] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _src, *opts = post.split()
        target = Path(pre.split()[4])
        if fstype == "cgroup2" or (fstype == "cgroup" and opts and "name=systemd" in opts[0].split(",")):
            roots.append(target)
    return roots


def _enter_host_cgroup(name: str) -> None:
    for root in _cgroup_roots():
        group = root / CGROUP_GROUP / name
        group.mkdir(parents=True, exist_ok=True)
        (group / "cgroup.procs").write_text(f"{os.getpid()}\n")


def _remove_host_cgroups(kill: bool) -> None:
    """Kill whatever is left in the hosts' cgroups (when ``kill``) and remove the cgroups, deepest first."""
    for root in _cgroup_roots():
        top = root / CGROUP_GROUP
        if not top.is_dir():
            continue
        if kill and (top / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (top / "cgroup.kill").write_text("1\n")
        deadline = time.monotonic() + 5
        while top.exists():
            for dirpath, _dirs, _files in os.walk(top, topdown=False):
                with contextlib.suppress(OSError):
                    os.rmdir(dirpath)
            if not top.exists() or time.monotonic() > deadline:
                break
            time.sleep(0.05)



def _is_supervisor(argv: Sequence[str]) -> bool:
    """``python3 -m tests.hosts.nspawn _supervise HOST_DIR NS_PREFIX`` of this pool; also the form of the
    single-file harness (``python3 .../tests/hosts/nspawn.py _supervise HOST_DIR [NS_PREFIX]``, no prefix:
    pool 0) that a crashed older run may have left behind."""
    if _SUPERVISOR_MARK not in argv:
        return False
    ours = SUPERVISOR_MODULE in argv or any(a.endswith("/tests/hosts/nspawn.py") for a in argv)
    pool_of = argv[-1] if len(argv) >= 5 and argv[-3] == _SUPERVISOR_MARK else "at-h"
    return ours and pool_of == NS_PREFIX


def _find_harness_processes() -> tuple[list[ProcRef], list[ProcRef]]:
    """Supervisors and systemd-nspawn processes of this harness, found by their command lines."""
    supervisors: list[ProcRef] = []
    nspawns: list[ProcRef] = []
    netns_flag = f"--network-namespace-path=/run/netns/{NS_PREFIX}"
    for pid in _all_pids():
        argv = _proc_cmdline(pid)
        if not argv:
            continue
        if _is_supervisor(argv):
            ref = ProcRef.of(pid)
            if ref:
                supervisors.append(ref)
        elif Path(argv[0]).name == "systemd-nspawn" and any(
            a.startswith(netns_flag) and a.removeprefix(netns_flag).isdigit() for a in argv
        ):
            ref = ProcRef.of(pid)
            if ref:
                nspawns.append(ref)
    return supervisors, nspawns


def kill_harness_processes(cache_dir: Path) -> None:
    """Stop every container of this pool, also those of a crashed run: supervisors first (they forward TERM
    to nspawn = orderly poweroff), nspawn without a live supervisor gets TERM from us; whatever is left
    after :data:`~.common.STOP_WAIT_S`: KILL, the container's init included (it is nspawn's child, not
    ours). Then the hosts' cgroups, and container inits that outlived their nspawn (they run on our base).
    :raises HarnessError: a process survived SIGKILL."""
    supervisors, nspawns = _find_harness_processes()
    sup_pids = {r.pid for r in supervisors}
    for ref in supervisors + [r for r in nspawns if _proc_ppid(r.pid) not in sup_pids]:
        ref.signal(signal.SIGTERM)
    left = _wait_gone(supervisors + nspawns, STOP_WAIT_S)
    if left:
        print(
            f"down: no orderly exit within {STOP_WAIT_S:.0f}s, killing: "
            f"{[(r.pid, ' '.join(_proc_cmdline(r.pid))[:80]) for r in left]}",
            file=sys.stderr,
        )
        leaders = [ProcRef.of(pid) for pid in _all_pids() if _proc_ppid(pid) in {r.pid for r in left}]
        for ref in left + [r for r in leaders if r is not None]:
            ref.signal(signal.SIGKILL)
        left = _wait_gone(left + [r for r in leaders if r is not None], 5)
        if left:
            raise HarnessError(f"processes survived SIGKILL: {[r.pid for r in left]}")

    # Anything still in the hosts' cgroups (cgroup.kill where the kernel has it), then the cgroups.
    _remove_host_cgroups(kill=True)

    orphans = _find_orphan_inits(cache_dir, our_netns_inodes())
    for ref in orphans:
        ref.signal(signal.SIGKILL)
    if _wait_gone(orphans, 5):
        raise HarnessError(f"container inits survived SIGKILL: {[r.pid for r in orphans]}")


def launch_supervisor(host_dir: Path, nspawn_argv: Sequence[str]) -> ProcRef:
    """Start the detached supervisor of one host (``host_dir``: its state dir), which runs ``nspawn_argv``
    and relaunches it after in-container reboots. Its output goes to ``host_dir/console.log``; its
    :class:`ProcRef` to ``host_dir/supervisor.pid``. :raises HarnessError: it exited at once."""
    _write(host_dir / "nspawn.json", json.dumps({"argv": list(nspawn_argv)}))
    for stale in ("nspawn.pid", "supervisor.exit"):
        (host_dir / stale).unlink(missing_ok=True)
    log = (host_dir / "console.log").open("ab")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", SUPERVISOR_MODULE, _SUPERVISOR_MARK, str(host_dir), NS_PREFIX],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    finally:
        log.close()
    ref = ProcRef.of(proc.pid)
    if ref is None:
        raise HarnessError(f"{host_dir.name}: supervisor exited at once; see {host_dir / 'console.log'}")
    _write(host_dir / "supervisor.pid", str(ref) + "\n")
    return ref


def _find_orphan_inits(cache_dir: Path, netns_inodes: set[int]) -> list[ProcRef]:
    """PID 1 of this pool's containers (booted from our base, in one of ``netns_inodes``), in any pid
    namespace but ours."""
    try:
        my_ns = os.readlink("/proc/self/ns/pid")
    except OSError:
        return []
    needle = f"lowerdir={base_dir(cache_dir)},"
    found: list[ProcRef] = []
    for pid in _all_pids():
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") == my_ns:
                continue
            nspid = next(
                (
                    ln.split()[1:]
                    for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if ln.startswith("NSpid:")
                ),
                [],
            )
            if len(nspid) < 2 or nspid[-1] != "1" or needle not in Path(f"/proc/{pid}/mountinfo").read_text():
                continue
            if os.stat(f"/proc/{pid}/ns/net").st_ino not in netns_inodes:
                continue  # another pool's container
        except OSError:
            continue
        ref = ProcRef.of(pid)
        if ref is not None:
            found.append(ref)
    return found



# The supervisor process itself: relaunches a container after an in-container reboot (nspawn exit 133).


def _become_subreaper() -> None:
    """PR_SET_CHILD_SUBREAPER: orphans of our subtree (a container init whose nspawn died) come to us."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER = 36


def _kill_stray_children() -> None:
    me = os.getpid()
    strays = [ref for pid in _all_pids() if _proc_ppid(pid) == me and (ref := ProcRef.of(pid)) is not None]
    for ref in strays:
        ref.signal(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)


def _copy_stream(stream: IO[bytes] | None) -> None:
    if stream is None:
        return
    out = sys.stdout.buffer
    while chunk := os.read(stream.fileno(), 65536):
        out.write(chunk)
        out.flush()


def _supervise(host_dir: Path) -> int:
    argv: list[str] = json.loads((host_dir / "nspawn.json").read_text())["argv"]
    env = dict(os.environ, SYSTEMD_NSPAWN_UNIFIED_HIERARCHY="1")
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _become_subreaper()
    _enter_host_cgroup(host_dir.name)
    boots = 0
    rc = 0
    while not stopping:
        boots += 1
        # nspawn's console forwarder cannot poll a regular file (the output would sit in the pty until
        # exit, and a full pty blocks the container's console): give it a pipe and copy to our stdout.
        child = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env
        )
        copier = threading.Thread(target=_copy_stream, args=(child.stdout,), daemon=True)
        copier.start()
        ref = ProcRef.of(child.pid)
        _write(host_dir / "nspawn.pid", f"{ref}\n" if ref else "")
        _write(host_dir / "boots", f"{boots}\n")
        if stopping:  # a signal raced the launch
            child.send_signal(signal.SIGTERM)
        rc = child.wait()
        copier.join(timeout=2)
        _kill_stray_children()  # a container init that outlived nspawn (nspawn killed) is reparented to us
        print(f"[agent-tools supervisor] systemd-nspawn exited with {rc} (boot {boots})", flush=True)
        if rc != NSPAWN_REBOOT_EXIT:
            break
    _write(host_dir / "supervisor.exit", f"{rc}\n")
    return 0 if rc in (0, NSPAWN_REBOOT_EXIT) else rc

