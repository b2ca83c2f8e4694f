"""The pool's network: the bridge in the root namespace, one network namespace and veth pair per host, the
/24 they share (the first free one of :data:`~.common.SUBNET_CANDIDATES`), and the faults the tests inject
(iptables in the host's netns, the veth end on the bridge)."""

from __future__ import annotations

import contextlib
import ipaddress
from collections.abc import Sequence
from pathlib import Path

from .common import BRIDGE, HOST_PREFIX, NS_PREFIX, SUBNET_CANDIDATES, HarnessError, _run


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


def _ip_netns_exec(ns: str, *argv: str, check: bool = True) -> str:
    return _run(["ip", "netns", "exec", ns, *argv], check=check).stdout


def setup_bridge(bridge_address: str) -> None:
    """Create the pool's bridge (if missing) with ``bridge_address``/24, up."""
    if not Path(f"/sys/class/net/{BRIDGE}").exists():
        _run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    _run(["ip", "addr", "replace", f"{bridge_address}/24", "dev", BRIDGE])
    _run(["ip", "link", "set", BRIDGE, "up"])


def plug_host(ns: str, veth: str, address: str, bridge_address: str) -> None:
    """Netns ``ns`` plus a veth pair whose host end ``veth`` sits on the bridge and whose inner end is
    ``eth0`` with ``address``/24 and a default route via the bridge; set from outside before boot."""
    _run(["ip", "netns", "add", ns])
    _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
    _run(["ip", "link", "set", veth, "master", BRIDGE, "up"])
    _run(["ip", "-n", ns, "link", "set", "lo", "up"])
    _run(["ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0"])
    _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    _run(["ip", "-n", ns, "route", "add", "default", "via", bridge_address])


def is_pool_name(name: str, suffix: str = "") -> bool:
    """``name`` is ``NS_PREFIX<digits><suffix>``: a netns, machine or veth of this pool."""
    if not name.startswith(NS_PREFIX) or not name.endswith(suffix):
        return False
    return name[len(NS_PREFIX) : len(name) - len(suffix)].isdigit()


def our_netns_inodes() -> set[int]:
    """Inodes of this pool's network namespaces (``/run/netns/atK-hN``)."""
    found: set[int] = set()
    with contextlib.suppress(OSError):
        for entry in Path("/run/netns").iterdir():
            if is_pool_name(entry.name):
                with contextlib.suppress(OSError):
                    found.add(entry.stat().st_ino)
    return found


def remove_network() -> None:
    """Delete this pool's namespaces (which takes the inner veth ends along), host-side veths and bridge."""
    for line in _run(["ip", "netns", "list"], check=False).stdout.split("\n"):
        ns = line.split(" ")[0]
        if is_pool_name(ns):
            _run(["ip", "netns", "del", ns], check=False)
    for dev in Path("/sys/class/net").iterdir():
        if dev.name == BRIDGE or is_pool_name(dev.name, "-v"):
            _run(["ip", "link", "del", dev.name], check=False)


def is_partitioned(ns: str) -> bool:
    """Whether netns ``ns`` has a DROP rule (of :func:`partition`, :func:`stall_port` or :func:`lossy_port`)."""
    return "-j DROP" in _ip_netns_exec(ns, "iptables", "-S", check=False)


def heal(ns: str, veth: str) -> None:
    """Undo every fault below: flush the netns's INPUT/OUTPUT chains and bring ``veth`` up."""
    _ip_netns_exec(ns, "iptables", "-F", "INPUT")
    _ip_netns_exec(ns, "iptables", "-F", "OUTPUT")
    _run(["ip", "link", "set", veth, "up"])


def partition(ns: str) -> None:
    """Drop all traffic of netns ``ns`` but loopback's (iptables, no netem). Call :func:`heal` first."""
    _ip_netns_exec(ns, "iptables", "-I", "INPUT", "!", "-i", "lo", "-j", "DROP")
    _ip_netns_exec(ns, "iptables", "-I", "OUTPUT", "!", "-o", "lo", "-j", "DROP")


def stall_port(ns: str, port: int, *, inbound: bool) -> None:
    """Drop what netns ``ns`` sends from TCP ``port`` and, with ``inbound``, what it receives on it."""
    if inbound:
        _ip_netns_exec(ns, "iptables", "-I", "INPUT", "-p", "tcp", "--dport", str(port), "-j", "DROP")
    _ip_netns_exec(ns, "iptables", "-I", "OUTPUT", "-p", "tcp", "--sport", str(port), "-j", "DROP")


def lossy_port(ns: str, loss: float, port: int) -> None:
    """Drop each packet of TCP ``port`` of netns ``ns`` (both ways) with probability ``loss``."""
    for chain, flag in (("INPUT", "--dport"), ("OUTPUT", "--sport")):
        _ip_netns_exec(ns, "iptables", "-I", chain, "-p", "tcp", flag, str(port), "-m", "statistic", "--mode",
                       "random", "--probability", f"{loss:g}", "-j", "DROP")


def unplug(veth: str) -> None:
    """The host end ``veth`` of a host's veth pair goes down (the host's eth0 loses carrier)."""
    _run(["ip", "link", "set", veth, "down"])
