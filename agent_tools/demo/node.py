"""The simulated GPU node the hicache walkthrough runs on by default: :mod:`gpusim` installed into a temporary
root and served over SSH by an :class:`~agent_tools.testing.EmbeddedHost` on loopback (no root, no network).

The node's commands run as the current user with the root's ``usr/local/bin`` first on ``PATH``: gpusim's
``systemctl``/``journalctl`` shims (its service manager, with ``SIM_SYSTEMD_ROOT`` the root), ``nvidia-smi`` and
``free``; its ``sglang.service`` serves on a free loopback port. ``agent-tools demo hicache|node`` and the tests
start it with :func:`run_node` (or :func:`embedded_node`).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio

from gpusim import install as sim_install

from ..hosts.registry import HostRegistry
from ..hosts.ssh import SshHost, SshSettings
from ..jobs.journal import Journal
from ..testing import EmbeddedHost, free_port
from ..tools.toolkit import Toolkit
from .hicache import UNIT

__all__ = ["EmbeddedNode", "count_starts", "embedded_node", "run_node"]


@dataclass
class EmbeddedNode:
    """A running simulated GPU node (see :func:`run_node`).

    :param alias: the host alias (``gpu-node-1``).
    :param registry: a :class:`HostRegistry` with the node (and ``ssh_config`` naming it, for ``list_hosts``).
    :param ssh_config: an OpenSSH client config naming only the node (``agent-tools mcp -F PATH``).
    :param state_dir: the node's own agent-tools state dir (its job journal): use it as
        ``AGENT_TOOLS_STATE_DIR`` for every process that drives the node, so its jobs never enter the user's
        journal (they vanish with the node).
    :param journal: the job journal in ``state_dir``.
    :param root: the node's root (gpusim's ``SIM_SYSTEMD_ROOT``).
    """

    alias: str
    registry: HostRegistry
    ssh_config: Path
    state_dir: Path
    journal: Journal
    root: Path

    def starts(self, unit: str = UNIT) -> int:
        """How many times ``unit`` was started on the node so far (its invocations in the node's journal: the
        first start, then one per restart): counted on the node, whoever asked."""
        return count_starts(self.root, unit)


def count_starts(root: Path, unit: str = UNIT) -> int:
    """The invocations of ``unit`` in the journal of the gpusim node at ``root`` (one per start or restart)."""
    path = root / "run/sim-systemd/journal.jsonl"
    seen: set[str] = set()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if entry.get("UNIT") == unit and entry.get("INVOCATION_ID"):
                seen.add(str(entry["INVOCATION_ID"]))
    return len(seen)


@asynccontextmanager
async def run_node(profile: str = "default", *, load_s: float = 8.0, workdir: Path | None = None,
                   alias: str = "gpu-node-1") -> AsyncIterator[EmbeddedNode]:
    """A simulated GPU node on an in-process SSH server on loopback (no root, no network), with the SGLang
    service started as it was before the agent came (no hicache); stopped and removed on exit.

    The node runs the simulated SGLang server under a ``systemctl``/``journalctl`` shim, with simulated
    ``nvidia-smi`` and ``free``, as the current user. Its jobs are journalled in its own state dir (removed with
    it), never in the user's.

    :param profile: ``default`` (2 TiB host RAM: hicache fits) or ``small_ram`` (it does not).
    :param load_s: the simulated model load time in seconds (a real node: ~11 minutes).
    :param workdir: directory for the node's files (default: a new temp dir, removed afterwards).
    :param alias: the node's host alias (and its simulated hostname).
    """
    with tempfile.TemporaryDirectory(prefix="agent-tools-node-") as tmp:
        root = Path(workdir or tmp)
        port = free_port()
        sim_install.install(root, profile, load_s, True, _python(), port, hostname=alias)
        _own(root, remove_root=workdir is None)
        env = {
            "PATH": f"{root}/usr/local/bin:/usr/local/bin:/usr/bin:/bin",
            "SIM_SYSTEMD_ROOT": str(root),
            "SGLANG_SIM_PROFILE": str(root / "etc/sglang-sim/profile.json"),
            "XDG_STATE_HOME": str(root / "state"),
        }
        state_dir = root / "controller-state"
        state_dir.mkdir(parents=True, exist_ok=True)
        journal = Journal(state_dir / "journal.sqlite3")
        try:
            async with EmbeddedHost(root=root / "sshd", env=env, alias=alias) as eh:
                config = eh.alias_config_path
                host = SshHost(SshSettings(eh.alias, config_paths=[str(config)]))
                registry = HostRegistry({eh.alias: host}, ssh_config=[str(config)])
                try:
                    tk = Toolkit(registry, journal=journal)
                    await tk.dispatch("run_command", {"host": eh.alias, "budget_s": 60,
                                                      "command": f"systemctl start {shlex.quote(UNIT)}"})
                    yield EmbeddedNode(eh.alias, registry, config, state_dir, journal, root)
                finally:
                    with anyio.CancelScope(shield=True):
                        await Toolkit(registry, journal=journal).dispatch(
                            "run_command", {"host": eh.alias, "budget_s": 20,
                                            "command": f"systemctl stop {shlex.quote(UNIT)}"})
                        await registry.aclose()
        finally:
            journal.close()


@asynccontextmanager
async def embedded_node(profile: str = "default", *, load_s: float = 8.0,
                        workdir: Path | None = None) -> AsyncIterator[tuple[str, HostRegistry]]:
    """:func:`run_node`, yielding ``(alias, registry)``. A Toolkit over that registry should be given a journal
    of its own (``Toolkit(registry, journal=Journal(path))``; :func:`run_node` offers the node's)."""
    async with run_node(profile, load_s=load_s, workdir=workdir) as node:
        yield node.alias, node.registry


def _own(root: Path, *, remove_root: bool) -> None:
    """Make this process the simulated host's owner (gpusim.systemctl's ``run/sim-systemd/owner``): should it die
    without stopping the node (SIGKILL), the simulated service manager stops its services, and removes the node's
    directory when it is a temporary one of this process (``remove_root``)."""
    stat = Path(f"/proc/{os.getpid()}/stat").read_text()
    ticks = stat[stat.rfind(")") + 2:].split()[19]
    owner = root / "run/sim-systemd/owner"
    owner.parent.mkdir(parents=True, exist_ok=True)
    owner.write_text(f"{os.getpid()} {ticks}" + (" remove-root" if remove_root else "") + "\n")


def _python() -> str:
    return shutil.which("python3") or sys.executable
