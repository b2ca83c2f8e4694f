"""The pool: boots, inspects and tears down the test hosts (:class:`HostPool`), and what tests see of one
host (:class:`TestHost`). All state lives under the pool's state dir; the image, network and supervision
modules do the work."""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import network
from .common import (
    AGENT_USER,
    BRIDGE,
    CACHE_DIR,
    DEFAULT_STATE_DIR,
    FIRST_HOST_OCTET,
    LOCK_FILE,
    MAX_HOSTS,
    POOL,
    PORT_WAIT_S,
    STOP_WAIT_S,
    SUBNET_CANDIDATES,
    HarnessError,
    _passwd_ids,
    _port_open,
    _run,
    _write,
    ensure_machine_packages,
)
from .image import _overlay_mounts, build_base
from .network import choose_subnet, host_name, host_netns
from .supervision import ProcRef, _all_pids, _proc_ppid, _wait_gone, kill_harness_processes, launch_supervisor


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

        network.setup_bridge(self.bridge_address)
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

        network.plug_host(host.netns, host.veth, host.address, self.bridge_address)

        keys = sorted((root / "etc/ssh").glob("ssh_host_*_key.pub"))
        lines = []
        for key in keys:
            kind, blob = key.read_text().split()[:2]
            lines.append(f"{host.name},{host.address} {kind} {blob}")
        return "\n".join(lines)

    def _write_client_files(self, host_keys: Sequence[str]) -> None:
        _write(self.known_hosts, "\n".join(host_keys) + "\n", mode=0o644)
        blocks = [f"# agent-tools test hosts; generated by tests/hosts/nspawn. State: {self.state_dir}"]
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
        launch_supervisor(self._host_dir(host.name), self._nspawn_argv(host))

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
        return network.is_partitioned(self.host(name).netns)

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
        self.heal(name)
        network.partition(self.host(name).netns)

    def stall_port(self, name: str, port: int = 22, *, inbound: bool = True) -> None:
        """Drop the packets of TCP ``port`` of the host (default sshd's) without resetting anything: what the
        host sends from it, and with ``inbound`` (the default) what it receives on it too. Open connections
        stall (with ``inbound=False`` the host still gets every request but none of its answers leave), new
        ones hang in SYN retries. ``heal`` undoes it."""
        self.heal(name)
        network.stall_port(self.host(name).netns, port, inbound=inbound)

    def lossy_port(self, name: str, loss: float, port: int = 22) -> None:
        """Drop each packet of TCP ``port`` of the host (both ways) with probability ``loss`` (0..1; iptables
        ``-m statistic --mode random``): a lossy link rather than a cut one. ``heal`` undoes it."""
        if not 0.0 < loss <= 1.0:
            raise ValueError(f"loss is a probability in (0, 1], got {loss!r}")
        self.heal(name)
        network.lossy_port(self.host(name).netns, loss, port)

    def unplug(self, name: str) -> None:
        """Cut the host off from the machine's side: its veth end on the bridge goes down (the host sees its
        eth0 lose carrier; nothing inside the host changes, its firewall included). ``heal`` undoes it."""
        network.unplug(self.host(name).veth)

    def heal(self, name: str) -> None:
        """Undo :meth:`partition`, :meth:`stall_port`, :meth:`lossy_port` and :meth:`unplug`."""
        host = self.host(name)
        network.heal(host.netns, host.veth)

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
            enter = ["nsenter", "-t", str(leader), "-m", "-u", "-i", "-n", "-p", "-C", "-r", "-w", "--", *env]
            if user == "root":
                prefix = [*enter, "HOME=/root"]
            else:
                prefix = [*enter, "setpriv", "--reuid", user, "--regid", user, "--init-groups", "--",
                          "env", f"HOME=/home/{user}", f"USER={user}"]
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
        # 1. Processes and cgroups (also of a crashed run).
        kill_harness_processes(self.cache_dir)

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
        network.remove_network()

        # 4. nspawn's per-machine propagation dirs (left behind when /run is not a tmpfs), then our state.
        propagate = nspawn_run / "propagate"
        if propagate.is_dir():
            for d in propagate.iterdir():
                if network.is_pool_name(d.name):
                    shutil.rmtree(d, ignore_errors=True)
        if self.state_dir.exists():
            remaining = [t for t, _ in _overlay_mounts() if t.startswith(str(self.state_dir) + "/")]
            if remaining:
                raise HarnessError(f"overlay mounts still present, not deleting state: {remaining}")
            shutil.rmtree(self.state_dir)
        self.hosts = {}

