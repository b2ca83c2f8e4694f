"""The one exception tree of agent_tools.

Everything the library raises on purpose derives from :class:`AgentToolsError`. Backend exceptions
(asyncssh, OSError, sqlite3) are translated at the seam where they occur (``hosts/``, ``jobs/journal``)
and chained with ``from exc``; nothing above ``hosts/`` catches asyncssh types.

::

    AgentToolsError                 base; ``retryable`` says whether the same call may succeed later
    ├── BadArguments                the caller's arguments are wrong: fix them and call again
    ├── NotFound                    the file, directory, unit or backup named does not exist on the host
    ├── PermissionDenied            the host refused the access (EACCES/EPERM): another path or more rights
    ├── Unsupported                 the host lacks what the tool needs (no systemd, no nvidia-smi) or the tool
    │                               does not do it (https)
    ├── HostError                   something about reaching or using a host (field ``host``)
    │   ├── UnknownHost             no such alias (not ``local``, not in the SSH config or policy)
    │   ├── SshConfigError          the SSH client config (or a file it names) cannot be used: fix it
    │   ├── HostChanged             the alias now reaches another machine than the job's (field ``job_id``)
    │   ├── HostUnreachable         connect refused / timed out / DNS failed within the connect deadline
    │   │   └── ConnectUnfinished   ... not known: the call's own time ran out while connecting (nothing sent)
    │   ├── AuthenticationFailed    the host refused every credential offered
    │   ├── HostKeyError            host key unknown or changed (strict known_hosts)
    │   ├── ConnectionLost          an open connection dropped or stopped answering (exit status unknown)
    │   │   └── ExecUnconfirmed     ... after the command was sent: it may be running on the host
    │   ├── ChannelOpenFailed       the host refused a new session (e.g. OpenSSH MaxSessions)
    │   ├── HostBusy                every session channel to the host was in use by other calls: nothing sent
    │   └── TargetUnreachable       a TCP service seen from the host (an HTTP URL) did not answer
    │       ├── ConnectionRefused   nothing listens there (yet: a server that is loading refuses)
    │       └── TargetTimeout       no answer within the request's time
    ├── JobError                    about a durable job (field ``job_id``)
    │   ├── JobNotFound             no such job in the journal or on the host
    │   └── InputRefused            input to a job that has no pipe, has ended, or had its input ended
    ├── JournalError                the local job journal cannot be opened or is damaged
    ├── PolicyError                 a policy file or decision problem
    │   ├── PolicyFileError         a malformed policy file (fields ``path``, ``line``, ``key``)
    │   └── ApprovalUsed            an approval id given again after its one use (field ``job_id``: what ran)
    └── ReplayError                 a replayed cassette does not match the requests made
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AgentToolsError",
    "ApprovalUsed",
    "AuthenticationFailed",
    "BadArguments",
    "ChannelOpenFailed",
    "ConnectUnfinished",
    "ConnectionLost",
    "ConnectionRefused",
    "ErrorKind",
    "ExecUnconfirmed",
    "HostBusy",
    "HostChanged",
    "HostError",
    "HostKeyError",
    "HostUnreachable",
    "InputRefused",
    "JobError",
    "JobNotFound",
    "JournalError",
    "NotFound",
    "PermissionDenied",
    "PolicyError",
    "PolicyFileError",
    "ReplayError",
    "SshConfigError",
    "TargetTimeout",
    "TargetUnreachable",
    "UnknownHost",
    "Unsupported",
]

#: every ``kind`` an ``error`` outcome can carry: the ``kind`` of each class below, and the kinds the job runner,
#: toolkit and MCP server give outcomes of their own (``launch``: the job could not be started; ``start_unconfirmed``:
#: the start request went unanswered; ``approval``: an approval answer was not accepted). Listed in the tools'
#: schemas (tests/test_error_kinds.py checks that every kind produced in code is here).
ErrorKind = Literal[
    "internal", "bad_arguments", "host", "unknown_host", "ssh_config", "host_changed", "unreachable", "connecting",
    "auth", "host_key", "connection_lost", "channel_open_failed", "busy", "target_unreachable", "connection_refused",
    "timeout", "job", "job_not_found", "journal", "policy", "policy_file", "replay", "launch", "start_unconfirmed",
    "approval", "not_found", "permission_denied", "unsupported", "input_refused",
]


class AgentToolsError(Exception):
    """Base of every error agent_tools raises on purpose.

    :param message: a sentence for a person or a model: what failed and, where known, what to do.
    """

    #: whether the same call may succeed if tried again later (network faults: yes; bad input: no)
    retryable: bool = False
    #: short machine-readable kind used in ``error`` outcomes
    kind: ErrorKind = "internal"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadArguments(AgentToolsError):
    """The arguments of a call are wrong; fix them and call again."""

    kind: ErrorKind = "bad_arguments"


class NotFound(AgentToolsError):
    """What the call names does not exist on the host (ENOENT: a file or its directory; a systemd unit with
    ``LoadState=not-found``; a backup id). Not retryable: check the name (read_file, service_status, list)."""

    kind = "not_found"


class PermissionDenied(AgentToolsError):
    """The host refused the access (EACCES/EPERM, "Permission denied"): the login user may not read or write
    it. Not retryable as it is: another path, or an operator with the rights."""

    kind = "permission_denied"


class Unsupported(AgentToolsError):
    """The host lacks what the tool needs (no systemd as init, no ``nvidia-smi``), or the tool does not do
    what was asked (an ``https://`` URL). Not retryable: the same call fails the same way on that host."""

    kind = "unsupported"


class HostError(AgentToolsError):
    """A problem reaching or using a host.

    :param host: the host alias as the caller named it.
    """

    kind: ErrorKind = "host"

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host


class UnknownHost(HostError):
    """No host is known under this alias."""

    kind: ErrorKind = "unknown_host"


class SshConfigError(HostError):
    """The OpenSSH client config cannot be used for this host: a config file or a file it names (a key, a
    certificate, a known_hosts file) cannot be read, a line is malformed, or an option allows nothing the host
    offers (``HostKeyAlgorithms``: "no matching host key type"). Nothing was sent to the host; fix
    the file or the config (the message names it) — retrying the same call does not help."""

    kind: ErrorKind = "ssh_config"


class HostChanged(HostError):
    """The alias now reaches another machine than the one a job was started on (its host key differs from the
    one recorded at launch: the SSH config points elsewhere now). What that machine shows says nothing about the
    job, so nothing is concluded or recorded.

    :param job_id: the job asked about.
    """

    kind: ErrorKind = "host_changed"

    def __init__(self, host: str, message: str, *, job_id: str) -> None:
        super().__init__(host, message)
        self.job_id = job_id


class HostUnreachable(HostError):
    """The host could not be reached within its connect deadline (refused, timed out, no route)."""

    kind: ErrorKind = "unreachable"
    retryable = True


class ConnectUnfinished(HostUnreachable):
    """The call's own time (its ``budget_s`` or ``wait_s``) ran out while connecting, before anything says the host
    is unreachable: the host answered (TCP connected, the SSH handshake or login was under way), or its first
    SYN was still within TCP's initial retransmission timeout (1 s, RFC 6298 2.1) when the time ran out. No
    command was sent. A subclass of :class:`HostUnreachable` (handled like it) with its own ``kind``, so the
    caller is not told that a reachable host is unreachable: retry with more time."""

    kind = "connecting"


class AuthenticationFailed(HostError):
    """The host refused every credential offered."""

    kind: ErrorKind = "auth"


class HostKeyError(HostError):
    """The host's key is unknown or does not match known_hosts (strict checking)."""

    kind: ErrorKind = "host_key"


class ConnectionLost(HostError):
    """An open connection dropped. Any command in flight has an unknown exit status (never success)."""

    kind: ErrorKind = "connection_lost"
    retryable = True


class ExecUnconfirmed(ConnectionLost):
    """The command was sent to the host (an SSH ``exec`` request went out) but the host never confirmed it: the
    connection dropped or stopped answering before the reply. The command may be running; whoever sent it must
    treat its start as unconfirmed (never as "nothing was started")."""


class ChannelOpenFailed(HostError):
    """The host refused to open a new session channel (for example OpenSSH ``MaxSessions``)."""

    kind: ErrorKind = "channel_open_failed"
    retryable = True


class HostBusy(HostError):
    """Every session channel to the host was in use by other calls for the whole time the call had: nothing
    was sent for this call. Retry, give it more time, or run fewer commands at once."""

    kind: ErrorKind = "busy"
    retryable = True


class TargetUnreachable(HostError):
    """A TCP service reached through the host (``http_get``'s URL) did not answer. The host itself is fine; the
    service may be starting, so the same call may work later.

    :param host: the host alias the service was reached from.
    """

    kind: ErrorKind = "target_unreachable"
    retryable = True

    def __init__(self, host: str, message: str, *, retryable: bool = True) -> None:
        """:param retryable: False when the tools can tell that the same call will fail again (the port listens,
        but on other addresses only)."""
        super().__init__(host, message)
        self.retryable = retryable


class ConnectionRefused(TargetUnreachable):
    """Nothing listens on the address and port (yet: SGLang keeps its port closed while it loads; or the port
    listens on other addresses only, e.g. 127.0.0.1: then it is not retryable)."""

    kind: ErrorKind = "connection_refused"


class TargetTimeout(TargetUnreachable):
    """The service accepted nothing or answered nothing within the request's time."""

    kind: ErrorKind = "timeout"


class JobError(AgentToolsError):
    """A problem with a durable job.

    :param job_id: the job's id (``j_...``).
    """

    kind: ErrorKind = "job"

    def __init__(self, job_id: str, message: str) -> None:
        super().__init__(message)
        self.job_id = job_id


class JobNotFound(JobError):
    """No job with this id is in the journal (and none was found on the host)."""

    kind: ErrorKind = "job_not_found"


class InputRefused(JobError):
    """Input for a job that cannot take it: started without ``stdin="pipe"`` (its stdin is ``/dev/null``),
    already ended, or its input was ended (``eof``). Nothing was written."""

    kind = "input_refused"


class JournalError(AgentToolsError):
    """The local job journal cannot be opened, read or written (missing directory, corrupted file)."""

    kind: ErrorKind = "journal"


class PolicyError(AgentToolsError):
    """A policy problem (loading or deciding)."""

    kind: ErrorKind = "policy"


class PolicyFileError(PolicyError):
    """A malformed policy file.

    :param path: the file's path.
    :param line: 1-based line number, or None when unknown.
    :param key: the dotted key path inside the file (``rules.3.match``), or None.
    """

    kind: ErrorKind = "policy_file"

    def __init__(self, path: str, line: int | None, key: str | None, message: str) -> None:
        where = path + (f":{line}" if line is not None else "") + (f" ({key})" if key else "")
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line
        self.key = key


class ApprovalUsed(PolicyError):
    """An approval id presented again after its one use (two callers racing with it, or a retry): the call it
    approved ran once, and never runs again under it.

    :param job_id: the job that use started, when known (``j_...``), else None.
    """

    kind: ErrorKind = "approval"

    def __init__(self, message: str, job_id: str | None = None) -> None:
        super().__init__(message)
        self.job_id = job_id


class ReplayError(AgentToolsError):
    """A replayed cassette did not match: an unmatched request or unused recorded interactions."""

    kind: ErrorKind = "replay"
