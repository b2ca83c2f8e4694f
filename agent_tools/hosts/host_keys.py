"""Host keys: which known_hosts files a connection checks, and what to say when a host's key is refused.

asyncssh checks the server's key (or its certificate against an ``@cert-authority`` line) during the handshake
and raises ``HostKeyNotVerifiable`` with a terse reason; this module tells the cases apart as ssh(1) does
("No ED25519 host key is known for [127.0.0.1]:2222 and you have requested strict checking" versus "REMOTE
HOST IDENTIFICATION HAS CHANGED"), names the files it looked in and the key the host offered, and adds an
unknown key for ``accept-new``.

Files (ssh_config(5)): ``UserKnownHostsFile`` (default ``~/.ssh/known_hosts ~/.ssh/known_hosts2``; ``none``:
no file) and ``GlobalKnownHostsFile`` (default ``/etc/ssh/ssh_known_hosts /etc/ssh/ssh_known_hosts2``), ``~``
being the password database's home as for ssh (:func:`~agent_tools.hosts.ssh_config.expand_tilde`, not
``$HOME``); the settings' ``known_hosts`` replaces the user files. A file that does not exist holds no key, as
for ssh (:meth:`KnownHostsFiles.trusted`: asyncssh fails on a missing file, and takes ``none`` as "check
nothing"). Entries are looked up under ``HostKeyAlias`` when set, else the host name, written ``[host]:port``
for a port other than 22 (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT). ``accept-new`` appends to the first user file,
as ssh does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from .._asyncssh import asyncssh
from .ssh_config import expand_tilde

__all__ = ["KnownHostsFiles", "describe_refusal", "known_hosts_files", "lookup", "remember"]

KeyState = Literal["unknown", "changed", "revoked"]


@dataclass(frozen=True)
class KnownHostsFiles:
    """The known_hosts files a connection checks: ``user`` ones (accept-new writes to the first) and global ones,
    and the name its entries are looked up under (``name``, ``port``)."""

    user: list[str]
    global_: list[str]
    name: str
    port: int

    @property
    def all(self) -> list[str]:
        return self.user + self.global_

    def trusted(self) -> list[str] | bytes:
        """What asyncssh's ``known_hosts`` argument gets: the files that exist (ssh reads a missing one as
        empty), or ``b""`` (no key trusted: every host key is refused) when none does — never None or an empty
        list, which would make asyncssh check no host key at all. Blocking (stat)."""
        found = [f for f in self.all if os.path.isfile(f)]
        return found or b""

    @property
    def pattern(self) -> str:
        """The host as a known_hosts line writes it: ``host`` on port 22, else ``[host]:port``."""
        return self.name if self.port == 22 else f"[{self.name}]:{self.port}"


#: ssh's defaults (ssh_config(5) UserKnownHostsFile, GlobalKnownHostsFile)
_USER_DEFAULT = ["~/.ssh/known_hosts", "~/.ssh/known_hosts2"]
_GLOBAL_DEFAULT = ["/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"]


def _list(value: Any) -> list[str] | None:
    if isinstance(value, str):
        value = value.split()
    if not isinstance(value, list | tuple):
        return None
    return [str(v) for v in value if str(v).lower() != "none"]


def known_hosts_files(settings_file: str | None, config: Any, hostname: str, port: int) -> KnownHostsFiles:
    """The files and lookup name for a host reached as ``hostname:port`` with the resolved ``config``
    (:attr:`~agent_tools.hosts.ssh_config.ResolvedHost.config`) and the settings' ``known_hosts`` file."""
    user = [settings_file] if settings_file else _list(config.get("UserKnownHostsFile"))
    glob_ = _list(config.get("GlobalKnownHostsFile"))
    alias = config.get("HostKeyAlias")
    return KnownHostsFiles(user=[expand_tilde(f) for f in (user if user is not None else _USER_DEFAULT)],
                           global_=[expand_tilde(f) for f in (glob_ if glob_ is not None else _GLOBAL_DEFAULT)],
                           name=alias if isinstance(alias, str) and alias else hostname, port=port)


def _base_algorithm(key: asyncssh.SSHKey | None) -> str | None:
    """The key type of ``key`` (a certificate's own key type, e.g. ``ssh-ed25519``), or None."""
    if key is None:
        return None
    alg = key.get_algorithm()
    return alg.replace("-cert-v01@openssh.com", "") if isinstance(alg, str) else None


def lookup(files: KnownHostsFiles, offered: asyncssh.SSHKey | None = None) -> tuple[KeyState, list[str]]:
    """Why a key the files did not verify was refused, as ssh(1) tells it (sshconnect.c check_host_key):
    ``revoked`` (``@revoked``); ``changed`` when the files hold another key *of the type the host offered*
    (``offered``: the key, or the certificate whose key type counts; None: any key type); else ``unknown`` —
    no key of that type is known, though keys of other types or ``@cert-authority`` entries may name the host
    (a certificate signed by a CA that is not trusted there falls back to its plain key, which is unknown:
    "No ED25519 host key is known"). Also the files holding entries for the host. Blocking (reads files); an
    unreadable or malformed file counts as holding none."""
    holding: list[str] = []
    revoked = changed = False
    want = _base_algorithm(offered)
    for path in files.all:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
            keys, cas, bad, *_ = asyncssh.import_known_hosts(text).match(files.name, "", files.port)
        except (OSError, ValueError):
            continue
        if keys or cas or bad:
            holding.append(path)
        revoked = revoked or bool(bad)
        changed = changed or any(want is None or _base_algorithm(k) == want for k in keys)
    return ("revoked" if revoked else "changed" if changed else "unknown"), holding


def remember(files: KnownHostsFiles, key: asyncssh.SSHKey) -> str:
    """Append ``key`` for the host to the first user file (creating it, mode 0600, and its directory); return
    the file. Blocking.

    :raises OSError: the file cannot be written.
    """
    path = Path(files.user[0] if files.user else expand_tilde(_USER_DEFAULT[0]))
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        f.write(f"{files.pattern} {key.export_public_key().decode().strip()}\n")
    return str(path)


def describe_refusal(alias: str, files: KnownHostsFiles, state: KeyState, holding: list[str],
                     offered: asyncssh.SSHKey | None, reason: str) -> str:
    """The sentence of a :class:`~agent_tools.errors.HostKeyError`: what was refused, where it looked, what the
    host offered (``SHA256:`` fingerprint, when known) and what to do."""
    fp = f" {offered.get_algorithm()} key {offered.get_fingerprint('sha256')}" if offered is not None else \
        " a key"
    where = ", ".join(files.all) or "(no known_hosts file)"
    if state == "unknown":
        first = files.user[0] if files.user else "~/.ssh/known_hosts"
        kind = _base_algorithm(offered)
        what = f"no {kind} host key" if kind else "no host key"
        other = (f" ({', '.join(holding)} name(s) it only with keys of other types or @cert-authority entries "
                 "whose CA did not sign the host's key: not trusted; accept-new adds no key next to them)"
                 ) if holding else ""
        return (f"{alias}: {what} is known for {files.pattern} in {where}{other}, and host keys are checked "
                f"strictly ({reason}); the host offered{fp}. Check that fingerprint with the host's owner, then "
                f"add the key to {first} (ssh-keyscan -p {files.port} {files.name}), or let it be added on first use "
                "(StrictHostKeyChecking accept-new in the SSH config, or known_hosts: accept-new in a policy)")
    if state == "revoked":
        return f"{alias}: the host key of {files.pattern} is revoked in {', '.join(holding)} ({reason}): refused"
    return (f"{alias}: the host key of {files.pattern} changed: {', '.join(holding)} hold(s) another key of that "
            f"type for it and the host now offers{fp} ({reason}). Refused: it may be another machine or someone in "
            f"between; if the host was reinstalled, remove the old entry (ssh-keygen -R '{files.pattern}')")
