"""``HostRegistry``: host aliases → :class:`Host` objects, one per alias per registry (pooled connections)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import BadArguments
from .base import Host
from .local import LocalHost
from .ssh import SshHost, SshSettings, default_config_paths

__all__ = ["HostRegistry"]


class HostRegistry:
    """Resolves host aliases.

    ``local`` is this machine. Any other alias is an SSH host looked up in the OpenSSH client config files
    (``ssh_config`` paths, default ``$AGENT_TOOLS_SSH_CONFIG`` and ``~/.ssh/config``), with per-alias
    overrides from ``settings`` (e.g. connection settings from a policy file).

    :param hosts: pre-built hosts by alias (tests pass fakes or embedded hosts here).
    :param ssh_config: OpenSSH client config files to read.
    :param settings_for: a function alias → dict of :class:`SshSettings` keyword overrides.
    """

    def __init__(
        self,
        hosts: dict[str, Host] | Sequence[Host] | None = None,
        *,
        ssh_config: Sequence[str | os.PathLike[str]] | None = None,
        settings_for: Callable[[str], dict[str, Any]] | None = None,
    ) -> None:
        if hosts is None:
            self._hosts: dict[str, Host] = {}
        elif isinstance(hosts, dict):
            self._hosts = dict(hosts)
        else:
            self._hosts = {h.name: h for h in hosts}
        self._ssh_config = [str(p) for p in ssh_config] if ssh_config is not None else None
        self._settings_for = settings_for

    def add(self, host: Host) -> None:
        """Register ``host`` under ``host.name`` (replacing any host of that name)."""
        self._hosts[host.name] = host

    def get(self, alias: str) -> Host:
        """The host for ``alias``, creating it on first use.

        :raises BadArguments: the alias is empty or malformed.
        """
        if not alias or any(c.isspace() for c in alias) or alias.startswith("-"):
            raise BadArguments(f"host {alias!r} is not a host alias (e.g. 'local' or a name from ~/.ssh/config)")
        host = self._hosts.get(alias)
        if host is not None:
            return host
        if alias == "local":
            host = LocalHost()
        else:
            overrides = self._settings_for(alias) if self._settings_for else {}
            config = self._ssh_config if self._ssh_config is not None else default_config_paths()
            host = SshHost(SshSettings(alias, config_paths=config, **overrides))
        self._hosts[alias] = host
        return host

    def names(self) -> list[str]:
        return sorted(self._hosts)

    async def aclose(self) -> None:
        for host in self._hosts.values():
            await host.aclose()
