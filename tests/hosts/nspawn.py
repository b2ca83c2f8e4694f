"""Throw-away Debian test hosts with real systemd and real sshd, one network namespace each.

Each host is a ``systemd-nspawn --boot`` container whose root is an overlay mount over a cached
``mmdebstrap`` base (bookworm, minbase plus systemd, dbus, openssh-server, ...). Each container joins its
own network namespace (``ip netns add NAME``); a veth pair links it to a bridge in the root namespace
(``at-br0``, first free /24 of 10.220-254.0.0, normally 10.220.0.1/24), and host ``at-hN`` answers on
.(10+N):22 of that subnet.

Several pools can run on one machine side by side: ``AGENT_TOOLS_TESTHOSTS_POOL=K`` (0..9, default 0)
gives pool K its own state dir, lock, bridge (``at-brK``), netns/machine/veth names (``atK-hN``) and subnet;
the hosts keep their names (``at-h1``...) as ssh aliases and hostnames inside the pool.

Run as root from the repository root::

    python3 -m tests.hosts.nspawn up --count 2     # prints a JSON description of the pool
    ssh -F /run/agent-tools-testhosts/ssh_config at-h1 systemctl is-system-running
    python3 -m tests.hosts.nspawn partition at-h1  # drop all non-loopback traffic of at-h1
    python3 -m tests.hosts.nspawn heal at-h1
    python3 -m tests.hosts.nspawn down             # removes containers, mounts, netns, veths, bridge

Standard library only: the pytest fixtures in ``tests/hosts/fixtures.py`` import this module, and a
detached copy of it (``_supervise``) keeps each container running across in-container reboots.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

# ---------------------------------------------------------------------------------------------------------
# Constants
# ---------------------------------------------------------------------------------------------------------

POOL_ENV = "AGENT_TOOLS_TESTHOSTS_POOL"


def _pool_id() -> int:
    raw = os.environ.get(POOL_ENV, "") or "0"
    if not raw.isdigit() or int(raw) > 9:
        raise ValueError(f"{POOL_ENV}={raw!r}: expected a pool number 0..9")
    return int(raw)


#: which pool this process works on (several pools can run side by side, each with its own names)
POOL = _pool_id()
_SUFFIX = "" if POOL == 0 else f"-{POOL}"

CACHE_DIR = Path(os.environ.get("AGENT_TOOLS_TESTHOSTS_CACHE", "/var/cache/agent-tools-testhosts"))
DEFAULT_STATE_DIR = Path(os.environ.get("AGENT_TOOLS_TESTHOSTS_STATE", f"/run/agent-tools-testhosts{_SUFFIX}"))

SUITE = "bookworm"
BASE_INCLUDE: tuple[str, ...] = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "libpam-systemd",
    "openssh-server",
    "iproute2",
    "procps",
    "python3",
    "iptables",
)
# Bump when the base customisation below changes: a cached base with another recipe is rebuilt.
BASE_RECIPE = 3

# Units that slow the boot, fail in a container, or would try to reach the network.
MASKED_UNITS: tuple[str, ...] = (
    "systemd-networkd-wait-online.service",
    "systemd-timesyncd.service",
    "console-getty.service",
    "getty@tty1.service",
    "getty-static.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
    "man-db.timer",
    "systemd-tmpfiles-clean.timer",
)

HOST_PREFIX = "at-h"  # host names (ssh aliases, hostnames): at-h1, at-h2, ... in every pool
# netns, machine and veth names are machine-wide, so they carry the pool: at-h1 (pool 0), at3-h1 (pool 3)
NS_PREFIX = "at-h" if POOL == 0 else f"at{POOL}-h"
BRIDGE = f"at-br{POOL}"
# The subnet is the first /24 of these that no route or address on the machine overlaps (checked at `up`).
SUBNET_CANDIDATES: tuple[str, ...] = tuple(dict.fromkeys(
    [f"10.{220 + POOL}.0"] + [f"10.{b}.{c}" for b in range(220, 255) for c in (0, 64, 128)]))
FIRST_HOST_OCTET = 10  # at-h1 -> .11
MAX_HOSTS = 50
AGENT_USER = "agent"

# Packages on the machine running the harness (not inside the hosts).
MACHINE_PACKAGES: dict[str, str] = {
    # package: a file it ships, checked before asking dpkg/apt
    "systemd-container": "/usr/bin/systemd-nspawn",
    "mmdebstrap": "/usr/bin/mmdebstrap",
    "iptables": "/usr/sbin/iptables",
    "openssh-client": "/usr/bin/ssh-keygen",
    "iproute2": "/usr/sbin/ip" if Path("/usr/sbin/ip").exists() else "/bin/ip",
}

NSPAWN_REBOOT_EXIT = 133
PORT_WAIT_S = 30.0
STOP_WAIT_S = 15.0

_SUPERVISOR_MARK = "_supervise"
# Every host gets its own cgroup (in the unified hierarchy and, on a hybrid host, in name=systemd), so the
# containers' systemd instances never share one: nspawn --keep-unit makes its `payload`/`supervisor`
# sub-cgroups where it stands, and two containers in one cgroup break each other (219/CGROUP, hung shutdowns).
CGROUP_GROUP = f"agent-tools-testhosts{_SUFFIX}"
# One pool per pool number: a session that brings it up holds this lock until `down` (or its exit), and
# another session on the same pool waits for it instead of tearing the pool down.
_LOCK_DIR = Path("/run/lock") if Path("/run/lock").is_dir() else Path("/tmp")
LOCK_FILE = _LOCK_DIR / f"agent-tools-testhosts{_SUFFIX}.lock"
# Building the shared base is serialised across pools.
BASE_LOCK_FILE = _LOCK_DIR / "agent-tools-testhosts-base.lock"


class HarnessError(RuntimeError):
    """Raised when the harness cannot bring hosts up or tear them down."""


# ---------------------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------------------


def _run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    timeout: float | None = 120.0,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [os.fspath(a) for a in argv],
        input=input_text,
        stdin=None if input_text is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if check and proc.returncode != 0:
        raise HarnessError(
            f"command failed ({proc.returncode}): {' '.join(os.fspath(a) for a in argv)}\n"
            f"{proc.stderr.strip() or proc.stdout.strip()}"
        )
    return proc


def _write(path: Path, text: str, mode: int = 0o644, uid: int = 0, gid: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.chown(tmp, uid, gid)
    tmp.chmod(mode)
    tmp.replace(path)


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


def _port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            # sshd greets first; a banner means sshd (not just the kernel) is answering.
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def _apt_sources_file() -> Path:
    for candidate in (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list")):
        if candidate.is_file() and candidate.stat().st_size > 0:
            return candidate
    for candidate in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")) + sorted(
        Path("/etc/apt/sources.list.d").glob("*.list")
    ):
        if "debian" in candidate.read_text(errors="replace"):
            return candidate
    raise HarnessError("no apt sources file found (/etc/apt/sources.list[.d]); mmdebstrap needs one")


def ensure_machine_packages() -> list[str]:
    """apt-get install the harness's own tools when missing; returns the packages it installed."""
    missing = [pkg for pkg, path in MACHINE_PACKAGES.items() if not Path(path).exists()]
    if not missing:
        return []
    if os.geteuid() != 0:
        raise HarnessError(f"missing packages {missing} and not root to install them")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    _run(["apt-get", "update"], env=env, timeout=600)
    _run(["apt-get", "install", "-y", *missing], env=env, timeout=900)
    return missing


def unavailable_reason() -> str | None:
    """Why real systemd hosts cannot run here (None when they can); packages may still need installing."""
    if sys.platform != "linux":
        return "systemd test hosts need Linux"
    if os.geteuid() != 0:
        return "systemd test hosts need root (network namespaces, overlay mounts, systemd-nspawn)"
    if shutil.which("systemd-nspawn") is None:
        return "systemd-nspawn is missing (apt-get install systemd-container)"
    return None


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


# ---------------------------------------------------------------------------------------------------------
# Base root filesystem
# ---------------------------------------------------------------------------------------------------------


def base_dir(cache_dir: Path = CACHE_DIR) -> Path:
    return cache_dir / "base"


def _base_stamp_wanted() -> dict[str, Any]:
    return {
        "suite": SUITE,
        "include": list(BASE_INCLUDE),
        "recipe": BASE_RECIPE,
        "masked": list(MASKED_UNITS),
    }


def base_is_current(cache_dir: Path = CACHE_DIR) -> bool:
    stamp = cache_dir / "base.stamp"
    try:
        return bool(json.loads(stamp.read_text()) == _base_stamp_wanted()) and base_dir(cache_dir).is_dir()
    except (OSError, ValueError):
        return False


def _overlay_mounts() -> list[tuple[str, str]]:
    """(mount point, super options) of every overlay mount in this mount namespace."""
    out: list[tuple[str, str]] = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        parts = pre.split()
        post_parts = post.split()
        if len(post_parts) >= 3 and post_parts[0] == "overlay":
            target = parts[4].replace("\\040", " ")
            out.append((target, post_parts[2]))
    return out


def _mounts_using_base(cache_dir: Path) -> list[str]:
    needle = f"lowerdir={base_dir(cache_dir)}"
    return [target for target, opts in _overlay_mounts() if needle in opts]


def build_base(cache_dir: Path = CACHE_DIR, *, force: bool = False) -> Path:
    """Build (or reuse) the cached bookworm base rootfs. Returns its path. Pools on one machine share the
    base: the build holds :data:`BASE_LOCK_FILE`, so a second pool waits for it instead of building too."""
    if not force and base_is_current(cache_dir):
        return base_dir(cache_dir)
    fd = os.open(BASE_LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return _build_base_locked(cache_dir, force=force)
    finally:
        os.close(fd)


def _build_base_locked(cache_dir: Path, *, force: bool) -> Path:
    base = base_dir(cache_dir)
    stamp = cache_dir / "base.stamp"
    if not force and base_is_current(cache_dir):
        return base
    if _mounts_using_base(cache_dir):
        raise HarnessError(f"base {base} is in use by running hosts; run `down` before rebuilding it")
    ensure_machine_packages()
    cache_dir.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    tmp = cache_dir / "base.tmp"
    for old in (tmp, base):
        if old.exists():
            shutil.rmtree(old)
    sources = _apt_sources_file()
    started = time.monotonic()
    _run(
        [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(BASE_INCLUDE)}",
            SUITE,
            tmp,
            sources,
        ],
        timeout=900,
        env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"),
    )
    _customize_base(tmp)
    tmp.rename(base)
    stamp.write_text(json.dumps(_base_stamp_wanted()))  # written last: marks the base complete
    print(f"built base {base} in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return base


def _customize_base(root: Path) -> None:
    # Identity: every host gets its own machine-id and host keys at `up`.
    _write(root / "etc/machine-id", "")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    _write(root / "etc/hostname", "localhost\n")
    # No DNS: nothing in a test host may resolve (or reach) anything outside the test bridge.
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink() or resolv.exists():
        resolv.unlink()
    _write(resolv, "# agent-tools test host: no DNS on purpose\n")

    # sshd: key-only logins for root and the unprivileged user.
    _write(
        root / "etc/ssh/sshd_config.d/10-agent-tools.conf",
        "\n".join(
            [
                "# agent-tools test host",
                "PermitRootLogin prohibit-password",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PubkeyAuthentication yes",
                "UsePAM yes",
                "UseDNS no",
                "MaxStartups 64:30:128",
                "",
            ]
        ),
    )

    # The unprivileged user (no sudo, no password: key login only).
    _run(["chroot", root, "useradd", "--create-home", "--shell", "/bin/bash", "--user-group", AGENT_USER])
    _run(["chroot", root, "usermod", "--password", "*", AGENT_USER])
    for home, owner in ((root / "root", "root"), (root / "home" / AGENT_USER, AGENT_USER)):
        ssh_dir = home / ".ssh"
        ssh_dir.mkdir(mode=0o700, exist_ok=True)
        _run(["chroot", root, "chown", f"{owner}:{owner}", f"/{ssh_dir.relative_to(root)}"])
        ssh_dir.chmod(0o700)

    # Boot: mask what slows it, fails in a container, or talks to the network.
    units = root / "etc/systemd/system"
    units.mkdir(parents=True, exist_ok=True)
    for unit in MASKED_UNITS:
        link = units / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")
    # A quiet journal that lives in memory: the hosts are thrown away anyway.
    _write(
        root / "etc/systemd/journald.conf.d/10-agent-tools.conf",
        "[Journal]\nStorage=volatile\nRuntimeMaxUse=16M\n",
    )
    # Nothing cached from the build is needed inside.
    for leftover in (root / "var/cache/apt/archives").glob("*.deb"):
        leftover.unlink()


# ---------------------------------------------------------------------------------------------------------
# Hosts and the pool
# ---------------------------------------------------------------------------------------------------------


@dataclass
class TestHost:
    """One booted test host, as the tests see it."""

    __test__ = False  # not a pytest test class

    name: str
    address: str
    ssh_port: int
    root_dir: str
    netns: str
    ssh_alias: str
    ssh_alias_agent: str
    machine_id: str
    index: int = 0
    veth: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TestHost:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def host_name(index: int) -> str:
    return f"{HOST_PREFIX}{index}"


def host_netns(index: int) -> str:
    """The machine-wide name of host ``index`` of this pool: its netns, machine name and veth prefix."""
    return f"{NS_PREFIX}{index}"


_ROUTE_TYPES = ("unicast", "local", "broadcast", "multicast", "throw", "unreachable", "prohibit", "blackhole", "nat")


def _taken_networks() -> list[tuple[ipaddress.IPv4Network, str]]:
    """IPv4 networks already routed (any table) or addressed on this machine, each with the line naming it."""
    taken: list[tuple[ipaddress.IPv4Network, str]] = []

    def add(dest: str, line: str) -> None:
        if dest != "default":
            with contextlib.suppress(ValueError):
                taken.append((ipaddress.IPv4Network(dest, strict=False), line.strip()))

    for line in _run(["ip", "-4", "-o", "route", "show", "table", "all"], check=False).stdout.splitlines():
        words = line.split()
        if words:
            add(words[1] if words[0] in _ROUTE_TYPES and len(words) > 1 else words[0], line)
    for line in _run(["ip", "-4", "-o", "addr", "show"], check=False).stdout.splitlines():
        words = line.split()
        if "inet" in words[:-1]:
            add(words[words.index("inet") + 1], line)
    return taken


def choose_subnet(taken: Sequence[tuple[ipaddress.IPv4Network, str]] | None = None) -> str:
    """The first of :data:`SUBNET_CANDIDATES` (``A.B.C``, a /24) that overlaps nothing in ``taken``
    (default: this machine's routes and addresses). :raises HarnessError: none is free (names what is in the
    way of the preferred one)."""
    taken = _taken_networks() if taken is None else taken
    for prefix in SUBNET_CANDIDATES:
        net = ipaddress.IPv4Network(f"{prefix}.0/24")
        if not any(net.overlaps(t) for t, _ in taken):
            return prefix
    first = ipaddress.IPv4Network(f"{SUBNET_CANDIDATES[0]}.0/24")
    blocking = [line for t, line in taken if first.overlaps(t)]
    raise HarnessError(f"no free /24 for the test hosts' bridge among {len(SUBNET_CANDIDATES)} candidates in "
                       f"10.220-254.x; {first} is taken by: {blocking[:3]}")


class HostPool:
    """Boots, inspects and tears down the test hosts. All state lives under ``state_dir``."""

    def __init__(
        self,
        state_dir: Path | str = DEFAULT_STATE_DIR,
        cache_dir: Path | str = CACHE_DIR,
        *,
        lock_wait_s: float = 0.0,
    ) -> None:
        self.state_dir = Path(state_dir)
        self.cache_dir = Path(cache_dir)
        self.lock_wait_s = lock_wait_s
        self.hosts: dict[str, TestHost] = {}
        self.subnet = SUBNET_CANDIDATES[0]  # A.B.C of the bridge's /24; chosen at `up`, kept in pool.json
        self._lock_fd: int | None = None
        self._load()

    # -- the machine-wide lock -----------------------------------------------------------------------------

    def _lock(self) -> None:
        if self._lock_fd is not None:
            return
        fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 300, 0).decode(errors="replace").strip()
                    os.close(fd)
                    raise HarnessError(
                        f"the test hosts are in use by another session ({holder or 'unknown'}); "
                        f"waited {self.lock_wait_s:.0f}s for {LOCK_FILE}"
                    ) from None
                time.sleep(0.5)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: {' '.join(sys.argv)[:200]}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    # -- addresses -----------------------------------------------------------------------------------------

    @property
    def bridge_address(self) -> str:
        """The root namespace's address on the pool's bridge: where the hosts see connections come from."""
        return f"{self.subnet}.1"

    def address(self, index: int) -> str:
        return f"{self.subnet}.{FIRST_HOST_OCTET + index}"

    # -- paths ---------------------------------------------------------------------------------------------

    @property
    def ssh_config(self) -> Path:
        return self.state_dir / "ssh_config"

    @property
    def identity_file(self) -> Path:
        return self.state_dir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def _state_file(self) -> Path:
        return self.state_dir / "pool.json"

    def _host_dir(self, name: str) -> Path:
        return self.state_dir / "hosts" / name

    def host(self, name: str) -> TestHost:
        try:
            return self.hosts[name]
        except KeyError:
            raise HarnessError(f"no test host named {name!r} (have: {sorted(self.hosts)})") from None

    # -- state ---------------------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            data = json.loads(self._state_file.read_text())
        except (OSError, ValueError):
            self.hosts = {}
            return
        self.hosts = {h["name"]: TestHost.from_dict(h) for h in data.get("hosts", [])}
        self.subnet = str(data.get("subnet", self.subnet))

    def describe(self) -> dict[str, Any]:
        return {
            "state_dir": str(self.state_dir),
            "ssh_config": str(self.ssh_config),
            "identity_file": str(self.identity_file),
            "known_hosts": str(self.known_hosts),
            "pool": POOL,
            "subnet": self.subnet,
            "bridge": {"name": BRIDGE, "address": self.bridge_address, "prefix_len": 24},
            "users": {"root": "root", "unprivileged": AGENT_USER},
            "hosts": [asdict(h) for h in self.hosts.values()],
        }

    def _save(self) -> None:
        _write(self._state_file, json.dumps(self.describe(), indent=2) + "\n", mode=0o600)

    # -- up ------------------------------------------------------------------------------------------------

    def up(self, count: int = 2, *, fresh: bool = False) -> list[TestHost]:
        """Boot ``count`` hosts. Reuses a healthy pool of the same size unless ``fresh``; otherwise clears any
        leftovers (also from a crashed run) first."""
        if not 1 <= count <= MAX_HOSTS:
            raise HarnessError(f"count must be 1..{MAX_HOSTS}")
        if os.geteuid() != 0:
            raise HarnessError("the systemd test hosts need root")
        self._lock()
        self._load()  # whoever held the lock before may have changed the pool
        if not fresh and len(self.hosts) == count and all(self._healthy(n) for n in self.hosts):
            return list(self.hosts.values())
        self._teardown()
        ensure_machine_packages()
        base = build_base(self.cache_dir)
        self.subnet = choose_subnet()  # after the teardown: our own old bridge is gone

        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        _run(
            [
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                "agent-tools-testhosts",
                "-f",
                self.identity_file,
            ]
        )
        pubkey = self.identity_file.with_suffix(".pub").read_text()

        self._setup_bridge()
        names = [host_name(i) for i in range(1, count + 1)]
        self.hosts = {
            name: TestHost(
                name=name,
                address=self.address(i),
                ssh_port=22,
                root_dir=str(self._host_dir(name) / "root"),
                netns=host_netns(i),
                ssh_alias=name,
                ssh_alias_agent=f"{name}-{AGENT_USER}",
                machine_id=secrets.token_hex(16),
                index=i,
                veth=f"{host_netns(i)}-v",
            )
            for i, name in enumerate(names, start=1)
        }
        self._save()  # early, so a failing `up` can still be torn down from the state file
        try:
            with concurrent.futures.ThreadPoolExecutor(max_workers=min(8, count)) as pool:
                host_keys = list(pool.map(lambda h: self._prepare_host(h, base, pubkey), self.hosts.values()))
            self._write_client_files(host_keys)
            for host in self.hosts.values():
                self._launch(host)
            for host in self.hosts.values():
                self.wait_ssh(host.name)
        except BaseException:
            with contextlib.suppress(Exception):
                self._teardown()
            self._unlock()
            raise
        self._save()
        return list(self.hosts.values())

    def _setup_bridge(self) -> None:
        if not Path(f"/sys/class/net/{BRIDGE}").exists():
            _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
        _run(["ip", "addr", "replace", f"{self.bridge_address}/24", "dev", BRIDGE])
        _run(["ip", "link", "set", BRIDGE, "up"])

    def _prepare_host(self, host: TestHost, base: Path, pubkey: str) -> str:
        hdir = self._host_dir(host.name)
        upper, work, root = hdir / "upper", hdir / "work", Path(host.root_dir)
        for d in (upper, work, root):
            d.mkdir(parents=True, exist_ok=True)
        _run(
            [
                "mount",
                "-t",
                "overlay",
                "overlay",
                "-o",
                f"lowerdir={base},upperdir={upper},workdir={work}",
                root,
            ]
        )

        # Identity.
        _write(root / "etc/machine-id", host.machine_id + "\n", mode=0o444)
        _write(root / "etc/hostname", host.name + "\n")
        hosts_lines = [
            "127.0.0.1 localhost",
            f"127.0.1.1 {host.name}",
            "::1 localhost ip6-localhost ip6-loopback",
        ]
        hosts_lines += [f"{self.address(i)} {host_name(i)}" for i in range(1, len(self.hosts) + 1)]
        _write(root / "etc/hosts", "\n".join(hosts_lines) + "\n")
        _run(["ssh-keygen", "-A", "-f", root])

        # Logins: the test key for root and for the unprivileged user.
        _write(root / "root/.ssh/authorized_keys", pubkey, mode=0o600)
        agent_uid, agent_gid = _passwd_ids(root, AGENT_USER)
        agent_keys = root / f"home/{AGENT_USER}/.ssh/authorized_keys"
        _write(agent_keys, pubkey, mode=0o600, uid=agent_uid, gid=agent_gid)

        # Network: netns + veth whose host end sits on the bridge; addresses set from outside before boot.
        ns = host.netns
        _run(["ip", "netns", "add", ns])
        _run(["ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
        _run(["ip", "link", "set", host.veth, "master", BRIDGE, "up"])
        _run(["ip", "-n", ns, "link", "set", "lo", "up"])
        _run(["ip", "-n", ns, "addr", "add", f"{host.address}/24", "dev", "eth0"])
        _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
        _run(["ip", "-n", ns, "route", "add", "default", "via", self.bridge_address])

        keys = sorted((root / "etc/ssh").glob("ssh_host_*_key.pub"))
        lines = []
        for key in keys:
            kind, blob = key.read_text().split()[:2]
            lines.append(f"{host.name},{host.address} {kind} {blob}")
        return "\n".join(lines)

    def _write_client_files(self, host_keys: Sequence[str]) -> None:
        _write(self.known_hosts, "\n".join(host_keys) + "\n", mode=0o644)
        blocks = [f"# agent-tools test hosts; generated by tests/hosts/nspawn.py. State: {self.state_dir}"]
        for host in self.hosts.values():
            for alias, user in ((host.ssh_alias, "root"), (host.ssh_alias_agent, AGENT_USER)):
                blocks.append(
                    "\n".join(
                        [
                            f"Host {alias}",
                            f"    HostName {host.address}",
                            f"    Port {host.ssh_port}",
                            f"    User {user}",
                            f"    IdentityFile {self.identity_file}",
                            "    IdentitiesOnly yes",
                            f"    UserKnownHostsFile {self.known_hosts}",
                            "    GlobalKnownHostsFile /dev/null",
                            "    StrictHostKeyChecking yes",
                            "    UpdateHostKeys no",
                            "    BatchMode yes",
                            "    ConnectTimeout 10",
                            "    LogLevel ERROR",
                        ]
                    )
                )
        _write(self.ssh_config, "\n\n".join(blocks) + "\n", mode=0o644)

    def _nspawn_argv(self, host: TestHost) -> list[str]:
        return [
            "systemd-nspawn",
            "--quiet",
            "-D",
            host.root_dir,
            "--boot",
            "--register=no",
            "--keep-unit",
            "--console=read-only",
            "--link-journal=no",
            "--resolv-conf=off",
            "-M",
            host.netns,
            f"--network-namespace-path=/run/netns/{host.netns}",
        ]

    def _launch(self, host: TestHost) -> None:
        hdir = self._host_dir(host.name)
        _write(hdir / "nspawn.json", json.dumps({"argv": self._nspawn_argv(host)}))
        for stale in ("nspawn.pid", "supervisor.exit"):
            (hdir / stale).unlink(missing_ok=True)
        log = (hdir / "console.log").open("ab")
        try:
            proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve()), _SUPERVISOR_MARK, str(hdir), NS_PREFIX],
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
            raise HarnessError(f"{host.name}: supervisor exited at once; see {hdir / 'console.log'}")
        _write(hdir / "supervisor.pid", str(ref) + "\n")

    # -- inspection ----------------------------------------------------------------------------------------

    def _ref(self, name: str, what: str) -> ProcRef | None:
        try:
            return ProcRef.parse((self._host_dir(name) / f"{what}.pid").read_text())
        except OSError:
            return None

    def nspawn_proc(self, name: str) -> ProcRef | None:
        ref = self._ref(name, "nspawn")
        return ref if ref is not None and ref.alive() else None

    def leader_pid(self, name: str) -> int | None:
        """PID (in the root pid namespace) of the container's systemd, i.e. its PID 1."""
        nspawn = self.nspawn_proc(name)
        if nspawn is None:
            return None
        for pid in _all_pids():
            if _proc_ppid(pid) == nspawn.pid:
                try:
                    status = Path(f"/proc/{pid}/status").read_text()
                except OSError:
                    continue
                for line in status.splitlines():
                    if line.startswith("NSpid:") and line.split()[-1] == "1" and len(line.split()) > 2:
                        return pid
        return None

    def _healthy(self, name: str) -> bool:
        sup = self._ref(name, "supervisor")
        host = self.hosts[name]
        return sup is not None and sup.alive() and _port_open(host.address, host.ssh_port)

    def _container_pids(self, name: str) -> list[int]:
        leader = self.leader_pid(name)
        if leader is None:
            return []
        try:
            ns = os.readlink(f"/proc/{leader}/ns/pid")
        except OSError:
            return []
        pids = []
        for pid in _all_pids():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/pid") == ns:
                    pids.append(pid)
        return pids

    def rss_kib(self, name: str) -> int:
        """Resident memory of the container's processes plus its systemd-nspawn, in KiB."""
        total = 0
        nspawn = self.nspawn_proc(name)
        pids = self._container_pids(name) + ([nspawn.pid] if nspawn else [])
        for pid in pids:
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        return total

    def is_partitioned(self, name: str) -> bool:
        out = _run(["ip", "netns", "exec", self.host(name).netns, "iptables", "-S"], check=False).stdout
        return "-j DROP" in out

    def status(self) -> dict[str, Any]:
        desc = self.describe()
        for entry in desc["hosts"]:
            name = entry["name"]
            sup = self._ref(name, "supervisor")
            nspawn = self.nspawn_proc(name)
            try:
                boots = int((self._host_dir(name) / "boots").read_text())
            except (OSError, ValueError):
                boots = 0
            entry["supervisor_alive"] = bool(sup and sup.alive())
            entry["nspawn_pid"] = nspawn.pid if nspawn else None
            entry["leader_pid"] = self.leader_pid(name)
            entry["boots"] = boots
            entry["ssh_port_open"] = _port_open(entry["address"], entry["ssh_port"])
            entry["partitioned"] = (self.is_partitioned(name) if Path(f"/run/netns/{entry['netns']}").exists()
                                    else None)
            entry["rss_kib"] = self.rss_kib(name)
        return desc

    # -- waiting -------------------------------------------------------------------------------------------

    def wait_ssh(self, name: str, timeout: float = PORT_WAIT_S) -> float:
        """Wait until sshd of ``name`` greets on its port; returns seconds waited."""
        host = self.host(name)
        hdir = self._host_dir(name)
        started = time.monotonic()
        while True:
            if _port_open(host.address, host.ssh_port, timeout=0.5):
                return time.monotonic() - started
            sup = self._ref(name, "supervisor")
            if sup is None or not sup.alive():
                raise HarnessError(f"{name}: container is not running\n{self.console_tail(name)}")
            if time.monotonic() - started > timeout:
                raise HarnessError(
                    f"{name}: sshd not answering on {host.address}:{host.ssh_port} after "
                    f"{timeout:.0f}s; console: {hdir / 'console.log'}\n{self.console_tail(name)}"
                )
            time.sleep(0.1)

    def console_tail(self, name: str, lines: int = 30) -> str:
        try:
            text = (self._host_dir(name) / "console.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # -- operations ----------------------------------------------------------------------------------------

    def partition(self, name: str) -> None:
        """Cut the host off the network (all interfaces but loopback), without netem."""
        ns = self.host(name).netns
        self.heal(name)
        _run(["ip", "netns", "exec", ns, "iptables", "-I", "INPUT", "!", "-i", "lo", "-j", "DROP"])
        _run(["ip", "netns", "exec", ns, "iptables", "-I", "OUTPUT", "!", "-o", "lo", "-j", "DROP"])

    def stall_port(self, name: str, port: int = 22, *, inbound: bool = True) -> None:
        """Drop the packets of TCP ``port`` of the host (default sshd's) without resetting anything: what the
        host sends from it, and with ``inbound`` (the default) what it receives on it too. Open connections
        stall (with ``inbound=False`` the host still gets every request but none of its answers leave), new
        ones hang in SYN retries. ``heal`` undoes it."""
        ns = self.host(name).netns
        self.heal(name)
        if inbound:
            _run(["ip", "netns", "exec", ns, "iptables", "-I", "INPUT", "-p", "tcp", "--dport", str(port), "-j",
                  "DROP"])
        _run(["ip", "netns", "exec", ns, "iptables", "-I", "OUTPUT", "-p", "tcp", "--sport", str(port), "-j", "DROP"])

    def lossy_port(self, name: str, loss: float, port: int = 22) -> None:
        """Drop each packet of TCP ``port`` of the host (both ways) with probability ``loss`` (0..1; iptables
        ``-m statistic --mode random``): a lossy link rather than a cut one. ``heal`` undoes it."""
        if not 0.0 < loss <= 1.0:
            raise ValueError(f"loss is a probability in (0, 1], got {loss!r}")
        ns = self.host(name).netns
        self.heal(name)
        for chain, flag in (("INPUT", "--dport"), ("OUTPUT", "--sport")):
            _run(["ip", "netns", "exec", ns, "iptables", "-I", chain, "-p", "tcp", flag, str(port), "-m",
                  "statistic", "--mode", "random", "--probability", f"{loss:g}", "-j", "DROP"])

    def unplug(self, name: str) -> None:
        """Cut the host off from the machine's side: its veth end on the bridge goes down (the host sees its
        eth0 lose carrier; nothing inside the host changes, its firewall included). ``heal`` undoes it."""
        _run(["ip", "link", "set", self.host(name).veth, "down"])

    def heal(self, name: str) -> None:
        host = self.host(name)
        ns = host.netns
        _run(["ip", "netns", "exec", ns, "iptables", "-F", "INPUT"])
        _run(["ip", "netns", "exec", ns, "iptables", "-F", "OUTPUT"])
        _run(["ip", "link", "set", host.veth, "up"])

    def run(
        self,
        name: str,
        cmd: str | Sequence[str],
        *,
        via: str = "nsenter",
        user: str = "root",
        timeout: float | None = 60.0,
        check: bool = False,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``cmd`` inside the host: a string goes through ``sh -c``, a list is exec'd as is.

        ``via="nsenter"`` enters the namespaces of the container's PID 1 (works while partitioned);
        ``via="ssh"`` uses real OpenSSH with the generated client config.
        """
        argv = ["/bin/sh", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        if via == "ssh":
            host = self.host(name)
            alias = host.ssh_alias if user == "root" else host.ssh_alias_agent
            if user not in ("root", AGENT_USER):
                raise HarnessError(f"no ssh alias for user {user!r}")
            import shlex

            full = ["ssh", "-F", str(self.ssh_config), alias, "--", shlex.join(argv)]
        elif via == "nsenter":
            leader = self.leader_pid(name)
            if leader is None:
                raise HarnessError(f"{name}: container is not running")
            env = [
                "/usr/bin/env",
                "-i",
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "LANG=C.UTF-8",
                "TERM=dumb",
                "SYSTEMD_PAGER=",
                "PAGER=cat",
            ]
            if user == "root":
                prefix = [
                    "nsenter",
                    "-t",
                    str(leader),
                    "-m",
                    "-u",
                    "-i",
                    "-n",
                    "-p",
                    "-C",
                    "-r",
                    "-w",
                    "--",
                    *env,
                    "HOME=/root",
                ]
            else:
                prefix = [
                    "nsenter",
                    "-t",
                    str(leader),
                    "-m",
                    "-u",
                    "-i",
                    "-n",
                    "-p",
                    "-C",
                    "-r",
                    "-w",
                    "--",
                    *env,
                    "setpriv",
                    "--reuid",
                    user,
                    "--regid",
                    user,
                    "--init-groups",
                    "--",
                    "env",
                    f"HOME=/home/{user}",
                    f"USER={user}",
                ]
            full = prefix + argv
        else:
            raise HarnessError(f"unknown via={via!r} (nsenter or ssh)")
        return _run(full, check=check, timeout=timeout, input_text=input_text)

    def ssh(self, name: str, cmd: str | Sequence[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run(name, cmd, via="ssh", **kw)

    def install_file(
        self,
        name: str,
        local_path: Path | str,
        remote_path: str,
        mode: int = 0o644,
        owner: str = "root",
    ) -> Path:
        """Copy a local file into the host (through its overlay root: visible at once, survives reboots)."""
        if not remote_path.startswith("/"):
            raise HarnessError(f"remote_path must be absolute: {remote_path!r}")
        root = Path(self.host(name).root_dir)
        dest = root / remote_path.lstrip("/")
        if not dest.resolve().is_relative_to(root.resolve()):
            raise HarnessError(f"remote_path escapes the host root: {remote_path!r}")
        uid, gid = (0, 0) if owner == "root" else _passwd_ids(root, owner)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.agent-tools-tmp")
        shutil.copyfile(local_path, tmp)
        os.chown(tmp, uid, gid)
        tmp.chmod(mode)
        tmp.replace(dest)
        return dest

    def reboot(self, name: str, timeout: float = 60.0) -> float:
        """``systemctl reboot`` inside the host; waits for the relaunched sshd. Returns the seconds taken."""
        started = time.monotonic()
        old = self.nspawn_proc(name)
        self.run(name, ["systemctl", "reboot"], timeout=30)
        while True:
            new = self.nspawn_proc(name)
            if new is not None and new != old:
                break
            sup = self._ref(name, "supervisor")
            if sup is None or not sup.alive():
                tail = self.console_tail(name)
                raise HarnessError(f"{name}: container stopped instead of rebooting\n{tail}")
            if time.monotonic() - started > timeout:
                raise HarnessError(f"{name}: no relaunch within {timeout:.0f}s")
            time.sleep(0.05)
        self.wait_ssh(name, timeout=max(1.0, timeout - (time.monotonic() - started)))
        return time.monotonic() - started

    def stop(self, name: str) -> None:
        """Power the host off (orderly, like pulling it from the pool); ``start`` boots it again."""
        sup = self._ref(name, "supervisor")
        nspawn = self.nspawn_proc(name)
        refs = [r for r in (sup, nspawn) if r is not None]
        # The supervisor forwards TERM to nspawn (orderly poweroff); without a supervisor, TERM nspawn.
        if sup is not None and sup.alive():
            sup.signal(signal.SIGTERM)
        elif nspawn is not None:
            nspawn.signal(signal.SIGTERM)
        for ref in _wait_gone(refs, STOP_WAIT_S):
            ref.signal(signal.SIGKILL)
        _wait_gone(refs, 5)

    def start(self, name: str) -> None:
        host = self.host(name)
        sup = self._ref(name, "supervisor")
        if sup is None or not sup.alive():
            self._launch(host)
        self.wait_ssh(name)

    # -- down ----------------------------------------------------------------------------------------------

    def down(self) -> None:
        """Tear everything down: containers, overlay mounts, netns, veths, bridge and the state dir. Also
        clears leftovers of a crashed run (found by name/command line, whatever state dir they used)."""
        self._lock()
        try:
            self._teardown()
        finally:
            self._unlock()

    def _teardown(self) -> None:
        # 1. Processes: supervisors first (they forward TERM to nspawn = orderly poweroff); nspawn without a
        #    live supervisor (crashed run) gets TERM from us. Whatever is left after the grace period: KILL,
        #    the container's init included (it is nspawn's child, not ours).
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

        # Container inits that outlived their nspawn (e.g. nspawn got SIGKILL): they run on our base.
        orphans = _find_orphan_inits(self.cache_dir, _our_netns_inodes())
        for ref in orphans:
            ref.signal(signal.SIGKILL)
        if _wait_gone(orphans, 5):
            raise HarnessError(f"container inits survived SIGKILL: {[r.pid for r in orphans]}")

        # 2. Overlay mounts: ours sit under our state dir (other pools' mounts use the same base: left alone).
        mine = str(self.state_dir) + "/"
        targets = {t for t, opts in _overlay_mounts() if t.startswith(mine) or f"upperdir={mine}" in opts}
        nspawn_run = Path("/run/systemd/nspawn")
        for target in sorted(targets, key=len, reverse=True):
            with contextlib.suppress(OSError):  # nspawn's lock file for this root (named by device:inode)
                st = os.stat(target)
                (nspawn_run / "locks" / f"inode-{st.st_dev}:{st.st_ino}").unlink(missing_ok=True)
            if _run(["umount", target], check=False).returncode != 0:
                _run(["umount", "--lazy", target], check=False)

        # 3. Network: namespaces (takes the inner veth ends along), host-side veths, bridge.
        netns = _run(["ip", "netns", "list"], check=False).stdout.split("\n")
        for line in netns:
            ns = line.split(" ")[0]
            if ns.startswith(NS_PREFIX) and ns[len(NS_PREFIX) :].isdigit():
                _run(["ip", "netns", "del", ns], check=False)
        for dev in Path("/sys/class/net").iterdir():
            n = dev.name
            if n == BRIDGE or (n.startswith(NS_PREFIX) and n.endswith("-v") and n[len(NS_PREFIX) : -2].isdigit()):
                _run(["ip", "link", "del", n], check=False)

        # 4. nspawn's per-machine propagation dirs (left behind when /run is not a tmpfs), then our state.
        propagate = nspawn_run / "propagate"
        if propagate.is_dir():
            for d in propagate.iterdir():
                if d.name.startswith(NS_PREFIX) and d.name[len(NS_PREFIX) :].isdigit():
                    shutil.rmtree(d, ignore_errors=True)
        if self.state_dir.exists():
            remaining = [t for t, _ in _overlay_mounts() if t.startswith(str(self.state_dir) + "/")]
            if remaining:
                raise HarnessError(f"overlay mounts still present, not deleting state: {remaining}")
            shutil.rmtree(self.state_dir)
        self.hosts = {}


def _passwd_ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        parts = line.split(":")
        if parts[0] == user:
            return int(parts[2]), int(parts[3])
    raise HarnessError(f"user {user!r} not found in {root}/etc/passwd")


def _find_harness_processes() -> tuple[list[ProcRef], list[ProcRef]]:
    """Supervisors and systemd-nspawn processes of this harness, found by their command lines."""
    me = Path(__file__).resolve().name
    supervisors: list[ProcRef] = []
    nspawns: list[ProcRef] = []
    for pid in _all_pids():
        argv = _proc_cmdline(pid)
        if not argv:
            continue
        # argv: python nspawn.py _supervise HOST_DIR NS_PREFIX (older supervisors, without the prefix: pool 0)
        pool_of = argv[-1] if len(argv) >= 5 and argv[-3] == _SUPERVISOR_MARK else "at-h"
        if _SUPERVISOR_MARK in argv and any(a.endswith(f"/tests/hosts/{me}") for a in argv) and pool_of == NS_PREFIX:
            ref = ProcRef.of(pid)
            if ref:
                supervisors.append(ref)
        elif Path(argv[0]).name == "systemd-nspawn" and any(
            a.startswith(f"--network-namespace-path=/run/netns/{NS_PREFIX}")
            and a.removeprefix(f"--network-namespace-path=/run/netns/{NS_PREFIX}").isdigit()
            for a in argv
        ):
            ref = ProcRef.of(pid)
            if ref:
                nspawns.append(ref)
    return supervisors, nspawns


def _our_netns_inodes() -> set[int]:
    """Inodes of this pool's network namespaces (``/run/netns/atK-hN``)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in Path("/run/netns").iterdir():
            if entry.name.startswith(NS_PREFIX) and entry.name[len(NS_PREFIX) :].isdigit():
                with contextlib.suppress(OSError):
                    found.add(entry.stat().st_ino)
    return found


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


# ---------------------------------------------------------------------------------------------------------
# The supervisor: relaunches a container after an in-container reboot (nspawn exit 133)
# ---------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------------------


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

    parser = argparse.ArgumentParser(prog="python3 -m tests.hosts.nspawn", description=__doc__.split("\n")[0])
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


if __name__ == "__main__":
    sys.exit(main())
