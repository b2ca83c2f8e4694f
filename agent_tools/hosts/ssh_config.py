"""OpenSSH client config files → the options of one asyncssh connection, with ssh(1)'s semantics.

asyncssh parses the files (``asyncssh.config.SSHClientConfig``: ``Host``/``Match``/``Include``, ``%`` tokens,
first value wins); this module applies them the way ssh(1) does where asyncssh's own connect path differs
(checked against ``ssh -G`` and ``ssh`` on the project's test hosts: tests/test_ssh_config.py):

* **Match final** (ssh_config(5): "Match final ... requests that the configuration be re-parsed"): ssh parses
  the files a second time after the first pass, *keeping* every value the first pass obtained, so ``Match final
  host 10.0.0.5`` sees the ``HostName`` the first pass resolved and a ``User`` set there wins over the final
  block's. asyncssh (2.19 to at least 2.24) re-parses from scratch, so such a block never sees the resolved
  host and its options are lost. Here the final pass starts from the first pass's values.
* **An IdentityFile or CertificateFile that does not exist**: ssh skips it (``ssh -v``: "no such identity")
  and authenticates with the others; asyncssh raises ``FileNotFoundError`` for it and no connection is ever
  made. Here missing files are left out (:attr:`ResolvedHost.missing_files`: logged, and named in an
  authentication failure). When every ``IdentityFile`` is missing, asyncssh's default key files are tried
  (ssh would try none of its defaults then; the agent is used either way).
* **ProxyJump hops** are resolved the same way (ssh runs ``ssh -W host:port hop`` with the same config files),
  so a hop's missing key or ``Match final`` block behaves as it does for ssh.

The resolved options are handed to asyncssh as the configuration of the ``options`` argument of
``asyncssh.connect``, with ``config=None`` ("no new configuration files will be loaded, but any configuration
loaded when constructing the options argument will still apply"), so asyncssh takes every other option
(ciphers, ``ServerAliveInterval``, ``ProxyCommand``, ``IdentityAgent``, ...) from them unchanged.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import asyncssh
from asyncssh.config import SSHClientConfig

__all__ = ["JumpHop", "ResolvedHost", "resolve"]


class _Configured(asyncssh.SSHClientConnectionOptions):
    """Options that carry only a resolved configuration: ``asyncssh.connect(options=...)`` builds its options on
    ``options.config`` (``SSHClientConnectionOptions.__init__``); nothing else is set here, so every option comes
    from the keyword arguments of the connect call and from that configuration."""

    def __init__(self, config: SSHClientConfig) -> None:  # no prepare(): nothing is loaded until connect builds on it
        self.config = config
        self.kwargs = {}


@dataclass(frozen=True)
class JumpHop:
    """One ``ProxyJump`` hop: ``[user@]host[:port]`` (ssh_config(5))."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, spec: str) -> JumpHop:
        """``"root@10.0.0.1:2222"`` → ``JumpHop("10.0.0.1", "root", 2222)`` (``ssh://`` URIs are accepted too)."""
        spec = re.sub(r"^ssh://", "", spec.strip())
        user, _, hostport = spec.rpartition("@")
        m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:]+)(?::(\d+))?", hostport)
        if not m:
            raise ValueError(f"ProxyJump hop {spec!r} is not [user@]host[:port]")
        host, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        return cls(host, user or None, int(port) if port else None)


@dataclass
class ResolvedHost:
    """How ssh(1) would reach ``alias`` with the given config files.

    :attr config: the resolved options (asyncssh's config object), given to asyncssh by :meth:`connect_kwargs`.
    :attr hostname: ``HostName`` (the alias itself when unset). :attr port: ``Port`` or 22.
    :attr user: ``User``, or None (asyncssh then uses the local user name).
    :attr identity_files: the ``IdentityFile`` entries that exist, in order (None: the config names none).
    :attr cert_files: the ``CertificateFile`` entries that exist (None: the config names none).
    :attr missing_files: the ``IdentityFile``/``CertificateFile`` entries that do not exist (skipped, as ssh does).
    :attr jumps: the ``ProxyJump`` hops, first hop first (empty: none, or ``ProxyJump none``).
    """

    alias: str
    config: SSHClientConfig
    hostname: str
    port: int
    user: str | None
    identity_files: list[str] | None
    cert_files: list[str] | None
    missing_files: list[str] = field(default_factory=list)
    jumps: list[JumpHop] = field(default_factory=list)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``asyncssh.connect(alias, ...)`` that make it use these options as resolved."""
        kw: dict[str, Any] = {"options": _Configured(self.config), "config": None}
        if self.identity_files is not None:
            kw["client_keys"] = list(self.identity_files)
            kw["ignore_encrypted"] = True  # as for keys named by a config file: ssh in BatchMode cannot ask either
        if self.cert_files is not None:
            kw["client_certs"] = list(self.cert_files)
        return kw


def _files(value: Any) -> list[str] | None:
    """The distinct entries of a file-list option, in order (the final pass repeats the first pass's)."""
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for v in value:
        if isinstance(v, str) and v not in out:
            out.append(v)
    return out


def _split(files: list[str] | None, missing: list[str]) -> list[str] | None:
    if files is None:
        return None
    present: list[str] = []
    for f in files:
        (present if os.path.exists(os.path.expanduser(f)) else missing).append(f)
    return present


def resolve(alias: str, config_paths: Sequence[str | os.PathLike[str]], *, user: str | None = None,
            port: int | None = None) -> ResolvedHost:
    """Resolve ``alias`` through the OpenSSH client config files ``config_paths`` as ssh(1) does (see the module
    docstring). Blocking (reads files; ``Match exec`` runs commands, as ssh does): call it from a worker thread.

    :param user: a ``User`` that overrides the config's (``ssh -l``); :param port: likewise for ``Port``.
    :raises OSError: a config file (or one it ``Include``s by name) cannot be read.
    :raises ValueError: a config line is malformed (asyncssh's ``ConfigParseError``), or a ``ProxyJump`` hop is.
    """
    try:
        local_user = getpass.getuser()
    except (KeyError, OSError):
        local_user = "root" if hasattr(os, "getuid") and os.getuid() == 0 else ""
    paths = [str(p) for p in config_paths]
    u: Any = user if user is not None else ()
    p: Any = port if port is not None else ()
    first = cast(SSHClientConfig, SSHClientConfig.load(None, paths, False, False, False, local_user, u, alias, p))
    config = first
    if first.has_match_final():  # ssh: a second pass that keeps what the first one set
        config = cast(SSHClientConfig, SSHClientConfig.load(first, paths, False, False, True, local_user, (), alias,
                                                            ()))
    missing: list[str] = []
    identity = _split(_files(config.get("IdentityFile")), missing)
    certs = _split(_files(config.get("CertificateFile")), missing)
    jump = config.get("ProxyJump")
    jumps = [JumpHop.parse(h) for h in jump.split(",") if h.strip()] if isinstance(jump, str) else []
    hostname = config.get("Hostname", alias)
    cfg_port = config.get("Port", 22)
    cfg_user = config.get("User")
    return ResolvedHost(alias=alias, config=config, hostname=str(hostname),
                        port=int(cfg_port) if isinstance(cfg_port, int) else 22,
                        user=str(cfg_user) if isinstance(cfg_user, str) else None,
                        identity_files=identity, cert_files=certs, missing_files=missing, jumps=jumps)
