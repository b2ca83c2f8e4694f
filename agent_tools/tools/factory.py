"""Building a :class:`Toolkit` for an entry point (CLI, MCP server) from files and the environment."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..hosts.registry import HostRegistry
from ..jobs.journal import Journal, default_state_dir
from ..jobs.manager import JobRunner
from .toolkit import Toolkit

__all__ = ["build_toolkit", "load_policies", "policy_paths"]


def policy_paths(paths: Sequence[str | os.PathLike[str]] | None) -> list[str]:
    """Policy files to load: ``paths`` when given, else ``$AGENT_TOOLS_POLICY`` (``:``-separated), else none."""
    if paths:
        return [str(p) for p in paths]
    env = os.environ.get("AGENT_TOOLS_POLICY", "")
    return [p for p in env.split(os.pathsep) if p]


def load_policies(paths: Sequence[str | os.PathLike[str]] | None) -> Any:
    """A ``PolicySet`` for the files (None when there are none).

    :raises PolicyFileError: a file is malformed or one of its examples fails (names file, line and key).
    """
    files = policy_paths(paths)
    if not files:
        return None
    from ..policy import PolicySet

    return PolicySet.load(files)


def _settings_from(policy: Any) -> Any:
    def settings_for(alias: str) -> dict[str, Any]:
        c = policy.connection(alias)
        out: dict[str, Any] = {}
        for src, dst in (("user", "username"), ("port", "port"), ("known_hosts", "known_hosts_mode"),
                         ("keepalive_interval_s", "keepalive_interval_s"),
                         ("keepalive_count_max", "keepalive_count_max"),
                         ("connect_timeout_s", "connect_timeout_s"), ("max_sessions", "max_channels")):
            value = getattr(c, src, None)
            if value is not None:
                out[dst] = value
        if "max_channels" in out:  # leave two channels of the server's MaxSessions for probes and people
            out["max_channels"] = max(1, int(out["max_channels"]) - 2)
        return out

    return settings_for


def build_toolkit(*, ssh_config: Sequence[str] | None = None, policy: Sequence[str | os.PathLike[str]] | None = None,
                  state_dir: str | os.PathLike[str] | None = None, warm: bool = True) -> Toolkit:
    """A Toolkit with the user's journal, SSH config files, policy files (connection settings applied per host)
    and a persistent approval store (so ``--approve ID`` works across CLI invocations).

    :param warm: keep warm sessions on SSH hosts (:class:`~agent_tools.jobs.manager.JobRunner`); off for
        one-shot processes such as the CLI, which would start one only to close it.

    :raises PolicyFileError: a policy file does not load.
    """
    policies = load_policies(policy)
    base = Path(state_dir) if state_dir is not None else default_state_dir()
    hosts = HostRegistry(ssh_config=list(ssh_config) if ssh_config else None,
                         settings_for=_settings_from(policies) if policies is not None else None)
    approvals = None
    if policies is not None:
        from ..policy import ApprovalStore

        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        approvals = ApprovalStore(base / "approvals.sqlite3")
    journal = Journal(base / "journal.sqlite3")
    return Toolkit(hosts, journal=journal, runner=JobRunner(journal, warm=warm), policy=policies,
                   approvals=approvals)
