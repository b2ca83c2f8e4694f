"""Throw-away Debian test hosts with real systemd and real sshd, one network namespace each.

Each host is a ``systemd-nspawn --boot`` container whose root is an overlay mount over a cached
``mmdebstrap`` base (bookworm, minbase plus systemd, dbus, openssh-server, ...). Each container joins its
own network namespace (``ip netns add NAME``); a veth pair links it to a bridge in the root namespace
(``at-br0``, first free /24 of 10.220-254.0.0, normally 10.220.0.1/24), and host ``at-hN`` answers on
.(10+N):22 of that subnet.

Several pools can run on one machine side by side: ``AGENT_TOOLS_TESTHOSTS_POOL=K`` (0..29, default 0)
gives pool K its own state dir, lock, bridge (``at-brK``), netns/machine/veth names (``atK-hN``) and subnet;
the hosts keep their names (``at-h1``...) as ssh aliases and hostnames inside the pool.

Run as root from the repository root::

    python3 -m tests.hosts.nspawn up --count 2     # prints a JSON description of the pool
    ssh -F /run/agent-tools-testhosts/ssh_config at-h1 systemctl is-system-running
    python3 -m tests.hosts.nspawn partition at-h1  # drop all non-loopback traffic of at-h1
    python3 -m tests.hosts.nspawn heal at-h1
    python3 -m tests.hosts.nspawn down             # removes containers, mounts, netns, veths, bridge

The package, by concern: :mod:`.common` (pool names and paths, :class:`HarnessError`, running commands),
:mod:`.image` (the cached base rootfs), :mod:`.network` (bridge, netns, veths, subnet, injected faults),
:mod:`.supervision` (processes, cgroups, the supervisor that survives in-container reboots),
:mod:`.pool` (:class:`HostPool`, :class:`TestHost`) and :mod:`.cli`. Standard library only: the pytest
fixtures in ``tests/hosts/fixtures.py`` import it, and a detached ``python3 -m tests.hosts.nspawn
_supervise`` keeps each container running across in-container reboots.
"""

from __future__ import annotations

from .cli import main
from .common import (
    AGENT_USER,
    BASE_INCLUDE,
    BRIDGE,
    CACHE_DIR,
    DEFAULT_STATE_DIR,
    HOST_PREFIX,
    LOCK_FILE,
    MACHINE_PACKAGES,
    MAX_HOSTS,
    NS_PREFIX,
    POOL,
    POOL_ENV,
    SUBNET_CANDIDATES,
    HarnessError,
    ensure_machine_packages,
    unavailable_reason,
)
from .image import base_dir, base_is_current, build_base
from .network import _taken_networks, choose_subnet, host_name, host_netns
from .pool import HostPool, TestHost
from .supervision import ProcRef

__all__ = [
    "AGENT_USER",
    "BASE_INCLUDE",
    "BRIDGE",
    "CACHE_DIR",
    "DEFAULT_STATE_DIR",
    "HOST_PREFIX",
    "LOCK_FILE",
    "MACHINE_PACKAGES",
    "MAX_HOSTS",
    "NS_PREFIX",
    "POOL",
    "POOL_ENV",
    "SUBNET_CANDIDATES",
    "HarnessError",
    "HostPool",
    "ProcRef",
    "TestHost",
    "_taken_networks",
    "base_dir",
    "base_is_current",
    "build_base",
    "choose_subnet",
    "ensure_machine_packages",
    "host_name",
    "host_netns",
    "main",
    "unavailable_reason",
]
