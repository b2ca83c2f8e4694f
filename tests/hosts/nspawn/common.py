"""What every part of the harness shares: the pool's names and paths (from ``AGENT_TOOLS_TESTHOSTS_POOL``),
the error it raises, running a command, writing a file atomically, and what the machine needs."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

POOL_ENV = "AGENT_TOOLS_TESTHOSTS_POOL"


def _pool_id() -> int:
    raw = os.environ.get(POOL_ENV, "") or "0"
    if not raw.isdigit() or int(raw) > 29:
        raise ValueError(f"{POOL_ENV}={raw!r}: expected a pool number 0..29")
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



def _port_open(address: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            # sshd greets first; a banner means sshd (not just the kernel) is answering.
            return sock.recv(4).startswith(b"SSH-")
    except OSError:
        return False


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



def _passwd_ids(root: Path, user: str) -> tuple[int, int]:
    for line in (root / "etc/passwd").read_text().splitlines():
        parts = line.split(":")
        if parts[0] == user:
            return int(parts[2]), int(parts[3])
    raise HarnessError(f"user {user!r} not found in {root}/etc/passwd")

