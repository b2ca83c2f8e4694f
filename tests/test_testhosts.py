"""Smoke tests of the real systemd test hosts, driven with the real OpenSSH client."""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd


def ssh(
    pool: HostPool, alias: str, command: str, *options: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-F", str(pool.ssh_config), *options, alias, command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_system_running(systemd_hosts: HostPool) -> None:
    for host in systemd_hosts.hosts.values():
        state = ssh(systemd_hosts, host.ssh_alias, "systemctl is-system-running --wait").stdout.strip()
        if state == "degraded":
            failed = ssh(
                systemd_hosts,
                host.ssh_alias,
                "systemctl --failed --no-legend --plain; for u in $(systemctl --failed --no-legend --plain"
                " | cut -d' ' -f1); do journalctl -b -u $u -n 8 --no-pager; done",
            ).stdout
            print(f"{host.name} is degraded; failed units:\n{failed}")
        assert state in ("running", "degraded"), f"{host.name}: {state!r}"


def test_hostnames_differ(systemd_hosts: HostPool) -> None:
    hosts = list(systemd_hosts.hosts.values())
    names = [ssh(systemd_hosts, h.ssh_alias, "hostname").stdout.strip() for h in hosts]
    assert names == [h.name for h in hosts]
    assert len(set(names)) == len(names) >= 2
    machine_ids = {ssh(systemd_hosts, h.ssh_alias, "cat /etc/machine-id").stdout.strip() for h in hosts}
    assert len(machine_ids) == len(hosts)


def test_unprivileged_login(systemd_hosts: HostPool) -> None:
    host = next(iter(systemd_hosts.hosts.values()))
    out = ssh(systemd_hosts, host.ssh_alias_agent, "id -u; id -un; echo $HOME")
    assert out.returncode == 0, out.stderr
    uid, name, home = out.stdout.split()
    assert (name, home) == ("agent", "/home/agent")
    assert int(uid) != 0


def test_strict_host_key_checking(systemd_hosts: HostPool) -> None:
    first, second = list(systemd_hosts.hosts.values())[:2]
    # at-h2 answering with its own key where at-h1's is expected must be refused.
    out = ssh(systemd_hosts, second.ssh_alias, "true", "-o", f"HostKeyAlias={first.name}")
    assert out.returncode == 255
    assert "IDENTIFICATION HAS CHANGED" in out.stderr or "Host key verification failed" in out.stderr


def test_partition_and_heal(systemd_hosts: HostPool) -> None:
    victim, bystander = list(systemd_hosts.hosts.values())[:2]
    systemd_hosts.partition(victim.name)
    try:
        cut = ssh(systemd_hosts, victim.ssh_alias, "true", "-o", "ConnectTimeout=2", timeout=20)
        assert cut.returncode == 255, cut
        assert ssh(systemd_hosts, bystander.ssh_alias, "true").returncode == 0
        # The victim itself is fine, just unreachable.
        inside = systemd_hosts.run(victim.name, "systemctl is-active ssh.service")
        assert inside.stdout.strip() == "active"
    finally:
        systemd_hosts.heal(victim.name)
    healed = ssh(systemd_hosts, victim.ssh_alias, "true", "-o", "ConnectTimeout=2", timeout=20)
    assert healed.returncode == 0, healed


def test_install_file_and_run(systemd_hosts: HostPool, tmp_path: Path) -> None:
    host = next(iter(systemd_hosts.hosts.values()))
    local = tmp_path / "hello.sh"
    local.write_text("#!/bin/sh\necho hello from $(hostname)\n")
    systemd_hosts.install_file(host.name, local, "/usr/local/bin/at-hello", 0o755)
    assert systemd_hosts.run(host.name, ["at-hello"]).stdout.strip() == f"hello from {host.name}"
    assert ssh(systemd_hosts, host.ssh_alias_agent, "at-hello").stdout.strip() == f"hello from {host.name}"
    assert systemd_hosts.run(host.name, "id -un", user="agent").stdout.strip() == "agent"


def test_reboot(systemd_hosts: HostPool) -> None:
    host = list(systemd_hosts.hosts.values())[-1]
    assert ssh(systemd_hosts, host.ssh_alias, "touch /run/at-marker /var/tmp/at-marker").returncode == 0
    systemd_hosts.reboot(host.name)
    # /run is new after a reboot, the root file system is kept.
    after = ssh(systemd_hosts, host.ssh_alias, "test ! -e /run/at-marker && test -e /var/tmp/at-marker")
    assert after.returncode == 0, after
    state = ssh(systemd_hosts, host.ssh_alias, "systemctl is-system-running --wait").stdout.strip()
    assert state in ("running", "degraded")


def test_subnet_is_free_of_other_routes(systemd_hosts: HostPool) -> None:
    """The pool's bridge subnet was chosen so that nothing else on the machine routes into it: the only
    routes overlapping it are the pool's own bridge routes."""
    import ipaddress

    from tests.hosts.nspawn import BRIDGE, _taken_networks

    net = ipaddress.IPv4Network(f"{systemd_hosts.subnet}.0/24")
    others = [line for t, line in _taken_networks() if t.overlaps(net) and f"dev {BRIDGE}" not in line
              and f" {BRIDGE}" not in line]
    assert not others, others
    assert all(h.address.startswith(systemd_hosts.subnet + ".") for h in systemd_hosts.hosts.values())


def test_choose_subnet_skips_taken_routes_and_names_the_blocker() -> None:
    """12.12: a subnet already routed on the machine is skipped (the next free /24 is used); when every
    candidate is taken, one clear error names the route in the way of the preferred subnet."""
    import ipaddress

    from tests.hosts.nspawn import SUBNET_CANDIDATES, HarnessError, choose_subnet

    first = SUBNET_CANDIDATES[0]
    taken = [(ipaddress.IPv4Network(f"{first}.0/24"), f"{first}.0/24 dev vpn0 proto static")]
    chosen = choose_subnet(taken)
    assert chosen != first and chosen in SUBNET_CANDIDATES
    wide = [(ipaddress.IPv4Network("10.0.0.0/8"), "10.0.0.0/8 dev corp0")]
    with pytest.raises(HarnessError, match=re.escape("10.0.0.0/8 dev corp0")):
        choose_subnet(wide)


def test_choose_subnet_reads_real_routes_in_a_network_namespace(tmp_path: Path) -> None:
    """12.12 on real parts: the harness reads routes and addresses with ip(8) as the kernel has them. In a
    network namespace of this test only (nothing on the machine changes), the preferred subnet is an address of
    an interface (a veth pair with both ends inside) and the next candidates are under a routed /18: the first
    free /24 past them is chosen;
    with 10.0.0.0/8 routed, choosing fails once, naming that route."""
    from tests.hosts.nspawn import SUBNET_CANDIDATES

    if os.geteuid() != 0:
        pytest.skip("needs root for ip netns")
    ns = f"at-subnet-{secrets.token_hex(3)}"
    first = SUBNET_CANDIDATES[0]
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from tests.hosts.nspawn import choose_subnet, "
             "HarnessError\ntry:\n    print('chose', choose_subnet())\nexcept HarnessError as exc:\n"
             "    print('error', exc)")

    def ip(*args: str) -> None:
        subprocess.run(["ip", "-n", ns, *args], check=True, capture_output=True)

    def choose() -> str:
        root = str(Path(__file__).resolve().parents[1])
        return subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", probe, root], check=True,
                              capture_output=True, text=True).stdout.strip()

    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        ip("link", "add", "dummy0", "type", "veth", "peer", "name", "dummy1")  # both ends in the namespace
        for dev in ("dummy0", "dummy1"):
            ip("link", "set", dev, "up")
        ip("addr", "add", f"{first}.5/24", "dev", "dummy0")
        second = ipaddress.IPv4Network(f"{SUBNET_CANDIDATES[1]}.0/18", strict=False)
        ip("route", "add", str(second), "dev", "dummy0")
        want = next(c for c in SUBNET_CANDIDATES
                    if not ipaddress.IPv4Network(f"{c}.0/24").overlaps(second) and c != first)
        assert choose() == f"chose {want}"
        ip("route", "add", "10.0.0.0/8", "dev", "dummy0")
        out = choose()
        assert out.startswith("error") and "10.0.0.0/8 dev dummy0" in out, out
    finally:
        subprocess.run(["ip", "netns", "delete", ns], check=False)
