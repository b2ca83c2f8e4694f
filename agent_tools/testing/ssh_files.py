"""Client-side SSH files for test hosts: a ``Host`` block of an OpenSSH client config and a ``known_hosts`` line.

The block is what a test host needs to be reached the same way by ``ssh -F CONFIG ALIAS`` and by agent_tools
(``SshSettings(alias, config_paths=[CONFIG])``, which reads it with asyncssh): one identity, key
authentication only, strict host key checking against one ``known_hosts`` file, no prompt, no connection
sharing. Facts from ssh_config(5) (OpenSSH 9.x):

* ``IdentitiesOnly yes``: only the ``IdentityFile`` is offered, never an agent's or the default keys.
* ``GlobalKnownHostsFile /dev/null`` with ``StrictHostKeyChecking yes``: a host whose key is not in
  ``UserKnownHostsFile`` is refused, never added; ``UpdateHostKeys no`` keeps the file as written.
* ``BatchMode yes`` and no password/keyboard-interactive authentication: a failure is an error, never a prompt.
* ``ControlMaster no``/``ControlPath none``: a user's ``ControlMaster auto`` in ``~/.ssh/config`` cannot
  share a connection across tests.
"""

from __future__ import annotations

import os

__all__ = ["known_hosts_line", "ssh_config_block"]


def ssh_config_block(alias: str, *, user: str, identity_file: str | os.PathLike[str],
                     known_hosts: str | os.PathLike[str], hostname: str = "127.0.0.1", port: int = 22,
                     connect_timeout_s: int = 5) -> str:
    """One ``Host ALIAS`` block (see the module docstring for what each line does), ending in a newline.

    :param alias: the ``Host`` name (one name, no pattern).
    :param user: the login user. :param identity_file: the private key file to offer (the only one).
    :param known_hosts: the ``known_hosts`` file holding the host's key (see :func:`known_hosts_line`).
    :param hostname: ``HostName`` (default ``127.0.0.1``). :param port: ``Port`` (default 22).
    :param connect_timeout_s: ``ConnectTimeout`` in whole seconds (ssh_config(5) takes an integer).
    :raises ValueError: ``alias`` is empty or holds white space or a pattern character (``*?!,``).
    """
    if not alias or any(c.isspace() or c in "*?!," for c in alias):
        raise ValueError(f"an SSH alias for a test host is one name without white space or patterns, got {alias!r}")
    lines = [
        f"Host {alias}",
        f"  HostName {hostname}",
        f"  Port {port}",
        f"  User {user}",
        f"  IdentityFile {os.fspath(identity_file)}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {os.fspath(known_hosts)}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  BatchMode yes",
        "  PasswordAuthentication no",
        "  KbdInteractiveAuthentication no",
        f"  ConnectTimeout {connect_timeout_s}",
        "  ControlMaster no",
        "  ControlPath none",
        "  LogLevel ERROR",
    ]
    return "\n".join(lines) + "\n"


def known_hosts_line(public_key: str, *, hostname: str = "127.0.0.1", port: int = 22) -> str:
    """A ``known_hosts`` line for a host's public key, ending in a newline (sshd(8), SSH_KNOWN_HOSTS FILE FORMAT).

    :param public_key: an OpenSSH public key line (``ssh-ed25519 AAAA... [comment]``); the comment is left out.
    :param hostname: the name or address ssh connects to. :param port: a port other than 22 is written as
        ``[hostname]:port``, as ssh looks it up.
    :raises ValueError: ``public_key`` is not ``TYPE BASE64 [COMMENT]``.
    """
    fields = public_key.split()
    if len(fields) < 2:
        raise ValueError(f"not an OpenSSH public key line: {public_key!r}")
    host = hostname if port == 22 else f"[{hostname}]:{port}"
    return f"{host} {fields[0]} {fields[1]}\n"
