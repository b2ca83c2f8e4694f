"""How a host was reached, remembered with each job so a later process reaches it the same way.

A job started with ``agent-tools run -F cfg gpu1 -- ...`` must stay followable by ``agent-tools status JOB``
without ``-F cfg``: the alias ``gpu1`` may exist only in ``cfg``. The job's journal row keeps, in its
``meta["connection"]`` (JSON; journals written before simply lack it)::

    {"via": "ssh", "alias": "gpu1", "ssh_config": ["/abs/path/cfg", ...], "digest": "<sha256 hex>",
     "home": "/home/ops", "host_key": "SHA256:..."}

``ssh_config`` are the OpenSSH client config files the host was reached through (absolute: a later process may
run elsewhere); ``digest`` covers their bytes and the files they ``Include`` (ssh_config(5): a relative
``Include`` of a user config is taken under ``~/.ssh``, ``~`` being ``$HOME`` there, as ssh(1) globs it; globs
allowed), so a later change of the config is noticed and said (:func:`config_change`). ``home`` is that
``$HOME`` at the launch: a later process with another ``$HOME`` reads a relative ``Include`` elsewhere, which
is not a change of the files, and is said as what it is. ``host_key`` is the fingerprint of the host key the launch's
connection authenticated (recorded once the launch reached the host; absent in journals written before): the
machine's identity. A later process that reaches the alias and finds another host key is talking to another
machine (the config now points elsewhere): what it sees there says nothing about the job
(:func:`check_same_machine`). Local and other hosts remember nothing (``None``).
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["check_same_machine", "config_change", "config_digest", "connection_info", "host_identity"]

_INCLUDE_RE = re.compile(r"^\s*Include\s*(?:=\s*|\s)(.+?)\s*$", re.IGNORECASE)
_MAX_INCLUDE_DEPTH = 16  # OpenSSH's own READCONF_MAX_DEPTH


def _home() -> str:
    """``$HOME`` as a relative ``Include`` reads it (ssh globs it with ``GLOB_TILDE``)."""
    return os.path.expanduser("~")


def _included(path: Path, home: str) -> list[Path]:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    out: list[Path] = []
    for line in lines:
        m = _INCLUDE_RE.match(line)
        if not m:
            continue
        try:
            words = shlex.split(m.group(1), comments=True)
        except ValueError:
            continue
        for word in words:
            pattern = home + word[1:] if word == "~" or word.startswith("~/") else os.path.expanduser(word)
            if not os.path.isabs(pattern):
                pattern = str(Path(home) / ".ssh" / pattern)
            out.extend(Path(p) for p in sorted(glob.glob(pattern)))
    return out


def config_digest(paths: Sequence[str | os.PathLike[str]], home: str | None = None) -> str:
    """SHA-256 (hex) over the config files ``paths`` and the files they ``Include``, in order (a missing file
    counts as missing, so its disappearance changes the digest too).

    :param home: the ``$HOME`` a relative ``Include`` is read under (default: this process's).
    """
    home = home or _home()
    h = hashlib.sha256()
    seen: set[Path] = set()

    def add(path: Path, depth: int) -> None:
        if path in seen or depth > _MAX_INCLUDE_DEPTH:
            return
        seen.add(path)
        h.update(str(path).encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"\0missing\0")
            return
        for inc in _included(path, home):
            add(inc, depth + 1)

    for p in paths:
        add(Path(os.path.abspath(os.path.expanduser(p))), 0)
    return h.hexdigest()


def _ssh_host(host: Any) -> Any:
    """The :class:`~agent_tools.hosts.ssh.SshHost` behind ``host`` (wrappers holding it as ``inner`` — recording,
    fakes — are looked through), or None."""
    from .ssh import SshHost

    seen = 0
    while not isinstance(host, SshHost) and hasattr(host, "inner") and seen < 8:
        host, seen = host.inner, seen + 1
    return host if isinstance(host, SshHost) else None


def connection_info(host: Any) -> dict[str, Any] | None:
    """What to remember of how ``host`` was reached (see the module docstring), or None (not an SSH host).
    ``host_key`` is included when ``host`` is connected."""
    ssh = _ssh_host(host)
    if ssh is None:
        return None
    paths = [os.path.abspath(os.path.expanduser(p)) for p in ssh.settings.config_paths]
    info = {"via": "ssh", "alias": ssh.settings.alias, "ssh_config": paths, "digest": config_digest(paths),
            "home": _home()}
    if ssh.host_key_fingerprint is not None:
        info["host_key"] = ssh.host_key_fingerprint
    return info


async def host_identity(host: Any) -> str | None:
    """The host key fingerprint of the machine ``host`` reaches now (connecting if needed), or None (not SSH).

    :raises HostError: connecting failed.
    """
    ssh = _ssh_host(host)
    return None if ssh is None else await ssh.identify()


async def check_same_machine(host: Any, remembered: dict[str, Any] | None, *, job_id: str) -> None:
    """Raise :class:`~agent_tools.errors.HostChanged` when ``host`` now reaches another machine than the one the
    job was started on (its host key differs from the one recorded at launch). No-op when nothing was recorded or
    ``host`` is not an SSH host.

    :raises HostChanged: another machine answers under the alias.
    :raises HostError: connecting failed.
    """
    from ..errors import HostChanged

    want = (remembered or {}).get("host_key")
    if not isinstance(want, str) or _ssh_host(host) is None:
        return
    got = await host_identity(host)
    if got is not None and got != want:
        alias = str((remembered or {}).get("alias") or getattr(host, "name", "?"))
        change = config_change(remembered) if remembered else None
        changed = {"changed": " (the SSH config it was started with changed since)",
                   "home": " (the SSH config's relative Include reads under another $HOME than at the launch)"
                   }.get(change or "", "")
        raise HostChanged(alias, f"cannot tell what became of job {job_id}: {alias} now reaches another machine "
                                 f"(host key {got}, the job was started on {want}){changed}; nothing was changed. "
                                 "Reach the job's machine again (restore the config, or give the one it was "
                                 "started with: -F) and ask again", job_id=job_id)


def config_change(remembered: dict[str, Any]) -> str | None:
    """How the config remembered in ``remembered`` reads now against the launch: ``"changed"`` when its files (or a
    file they include, read as at the launch) changed; ``"home"`` when they did not, but a relative ``Include``
    reads other files now (another ``$HOME`` than the launch's); None when nothing differs (or nothing was
    remembered)."""
    paths, digest = remembered.get("ssh_config"), remembered.get("digest")
    if not isinstance(paths, list) or not isinstance(digest, str):
        return None
    files = [str(p) for p in paths]
    then = remembered.get("home") if isinstance(remembered.get("home"), str) else None
    if config_digest(files, then) != digest:
        return "changed"
    if then is not None and then != _home() and config_digest(files) != digest:
        return "home"
    return None

