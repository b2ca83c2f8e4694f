"""The hosts' root filesystem: a cached ``mmdebstrap`` bookworm base (minbase plus systemd, dbus,
openssh-server, ...), customised once (no identity, no DNS, key-only sshd, the unprivileged user, masked
units), shared by every pool under :data:`~.common.CACHE_DIR` and mounted per host as an overlay's lower dir."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from .common import (
    AGENT_USER,
    BASE_INCLUDE,
    BASE_LOCK_FILE,
    BASE_RECIPE,
    CACHE_DIR,
    MASKED_UNITS,
    SUITE,
    HarnessError,
    _run,
    _write,
    ensure_machine_packages,
)


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

