"""``HostRegistry``: host aliases → :class:`Host` objects, one per alias per registry (pooled connections)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from ..errors import BadArguments
from .base import Host
from .local import LocalHost
from .ssh import SshHost, SshSettings, default_config_paths
from .sshconfig import config_hosts, config_matches

__all__ = ["HostRegistry"]

log = structlog.get_logger(__name__)


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
        self._given = set(self._hosts)  # the hosts given (not the ones made on lookup: a typo is not a host)
        self._ssh_config = [str(p) for p in ssh_config] if ssh_config is not None else None
        self._settings_for = settings_for
        self._remembered: dict[str, Host] = {}  # hosts reached through the config a job was started with

    def add(self, host: Host) -> None:
        """Register ``host`` under ``host.name`` (replacing any host of that name)."""
        self._hosts[host.name] = host
        self._given.add(host.name)

    def get(self, alias: str) -> Host:
        """The host for ``alias``, creating it on first use.

        :raises BadArguments: the alias is empty or malformed.
        """
        if not alias or any(c.isspace() for c in alias) or alias.startswith("-"):
            stripped = alias.strip()
            if stripped and stripped != alias and not any(c.isspace() for c in stripped):
                raise BadArguments(f"host {alias!r} is not a host alias: it has blanks around it; did you mean "
                                   f"{stripped!r}?")
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

    def for_job(self, alias: str, remembered: dict[str, Any] | None) -> tuple[Host, str | None]:
        """The host to follow a job of ``alias`` on, given how it was reached at launch (``remembered``: the job's
        ``meta["connection"]``, see :mod:`agent_tools.hosts.reach`), and a note for people when that matters.

        A host registered under ``alias`` (a fake, an embedded host) and SSH config files given to this registry
        explicitly win. Otherwise the config files the job was started with are used when they differ from the
        default ones — so a job started with ``-F cfg`` is followed without ``-F cfg``. The note says when those
        files changed since the job started (or are gone, or differ from the files given now), or did not change
        but a relative ``Include`` of theirs reads other files under another ``$HOME``; else it is None.

        :raises BadArguments: the alias is malformed.
        """
        from .reach import config_change

        if alias in self._hosts or not remembered or remembered.get("via") != "ssh" or alias == "local":
            return self.get(alias), None
        started = [str(p) for p in remembered.get("ssh_config") or []]
        present = [p for p in started if os.path.exists(p)]
        if self._ssh_config is not None:  # config files given now: as given
            now = [os.path.abspath(p) for p in self._ssh_config]
            if now != started:
                return self.get(alias), (f"the job was started with SSH config {', '.join(started) or '(none)'}; "
                                         f"following it with {', '.join(now) or '(none)'} as given")
            host = self.get(alias)
        elif not present or started == [os.path.abspath(p) for p in default_config_paths()]:
            host = self.get(alias)
            if started and not present:
                return host, (f"the SSH config the job was started with ({', '.join(started)}) is gone; using the "
                              "default")
        else:
            key = "\0".join([alias, *present])
            remembered_host = self._remembered.get(key)
            if remembered_host is None:
                overrides = self._settings_for(alias) if self._settings_for else {}
                remembered_host = self._remembered[key] = SshHost(SshSettings(alias, config_paths=present,
                                                                              **overrides))
            host = remembered_host
        if host is not self._hosts.get(alias):
            log.info("host.remembered_config", alias=alias, ssh_config=present)
        change = config_change(remembered)
        if change is not None:
            from .sshconfig import config_hosts, config_match

            named = next((h for h in config_hosts(present) if h.alias == alias), None)
            pattern = config_match(alias, present) if named is None else None
            if pattern is not None:  # a wildcard line (Host lo-*) applies to it: not renamed
                reached = (f"the line Host {pattern[0]} ({pattern[1]}) applies to {alias} now, and it is reached as "
                           "the file says")
            elif named is None:
                reached = (f"no Host line in it (or in what it includes) names {alias} now: renamed, or its "
                           "Include removed?")
            else:
                reached = (f"{alias} is in {named.path} now" + (f" (HostName {named.hostname})" if named.hostname
                                                                 else "") + ", and is reached as that says")
            files = ", ".join(started)
            if change == "home":
                then = remembered.get("home")
                return host, (f"the SSH config the job was started with ({files}) did not change, but its relative "
                              f"Include is read under another $HOME now ({os.path.expanduser('~')}, not {then} as at "
                              f"the launch); {reached}")
            return host, f"the SSH config the job was started with ({files}) changed since the launch; {reached}"
        return host, None

    def names(self) -> list[str]:
        """Aliases of the hosts made so far (given at construction or looked up since)."""
        return sorted(self._hosts)

    @property
    def config_paths(self) -> list[str]:
        """The OpenSSH client config files this registry reads."""
        return list(self._ssh_config) if self._ssh_config is not None else default_config_paths()

    def known(self) -> dict[str, str]:
        """Every alias this registry can name without guessing, with where it comes from: ``local``, the aliases
        of the SSH config files' ``Host`` lines (``ssh_config``; :func:`~agent_tools.hosts.sshconfig.config_hosts`)
        and the hosts given at construction or with :meth:`add` (``registered``); not aliases only looked up."""
        found: dict[str, str] = {"local": "local"}
        for entry in config_hosts(self.config_paths):
            found.setdefault(entry.alias, "ssh_config")
        for alias in sorted(self._given):
            found.setdefault(alias, "registered")
        return found

    def in_ssh_config(self, alias: str) -> bool:
        """True when a ``Host`` line (other than ``Host *``) of the SSH config files applies to ``alias``."""
        return config_matches(alias, self.config_paths)

    async def aclose(self) -> None:
        for host in [*self._hosts.values(), *self._remembered.values()]:
            await host.aclose()
