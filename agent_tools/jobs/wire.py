"""Parsing the scripts' stdout: ``@@AT`` header lines and exact-length byte views."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..output import OutputView, make_view

__all__ = ["Elsewhere", "HostJobState", "RawView", "WireReader", "deadline_interrupted", "parse_deadline",
           "parse_elsewhere", "parse_status"]


class WireError(Exception):
    """The host's script output did not have the expected shape (truncated stream, foreign output)."""


class WireReader:
    """Reads lines and exact byte counts from an async chunk source (``read() -> bytes``, b"" at EOF)."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]) -> None:
        self._read = read
        self._buf = bytearray()
        self.eof = False
        self.got_data = False  # any byte arrived (the other side answered at all)

    async def _fill(self) -> bool:
        if self.eof:
            return False
        chunk = await self._read()
        if not chunk:
            self.eof = True
            return False
        self.got_data = True
        self._buf.extend(chunk)
        return True

    async def readline(self) -> bytes | None:
        """Next line without its newline, or None at EOF (a partial last line is returned)."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            if not await self._fill():
                if self._buf:
                    line = bytes(self._buf)
                    self._buf.clear()
                    return line
                return None

    async def readexactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            if not await self._fill():
                raise WireError(f"stream ended {n - len(self._buf)} bytes short")
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def header(self) -> list[str] | None:
        """Next ``@@AT`` header as its words (foreign lines skipped), or None at EOF."""
        while True:
            line = await self.readline()
            if line is None:
                return None
            if line.startswith(b"@@AT "):
                return line[5:].decode("utf-8", "replace").split(" ")


@dataclass
class RawView:
    """One stream's view as sent by the host: size, and the raw head/tail bytes from an offset."""

    size: int
    head: bytes
    tail: bytes
    stream: str = "stdout"

    def view(self, offset: int = 0, budget: int | None = None) -> OutputView:
        """The agent-facing view of bytes ``[offset, size)``; ``budget``: the view's size in bytes when head and
        tail were asked for with :func:`agent_tools.output.view_request` (the rest is context for redaction)."""
        if not self.tail:
            return make_view(self.head, b"", len(self.head), stream=self.stream, start=offset, budget=budget)
        return make_view(self.head, self.tail, self.size - offset, stream=self.stream, start=offset, budget=budget)


async def read_view(reader: WireReader, words: list[str]) -> tuple[str, RawView]:
    """Read the bytes announced by a ``view NAME SIZE HL TL`` header (already split into ``words``)."""
    name, size, hl, tl = words[1], int(words[2]), int(words[3]), int(words[4])
    head = await reader.readexactly(hl)
    tail = await reader.readexactly(tl)
    return name, RawView(size, head, tail, name)


@dataclass(frozen=True)
class Elsewhere:
    """A process a job may have handed on (the scripts' ``at_elsewhere``): started while the job ran, in a unit,
    scope or login that began since (every process of its cgroup is that new) or in an audit session newer than
    the job's, and not found to be the job's: nothing on the host says whose it is."""

    pid: int
    #: its cgroup path (``/system.slice/run-r1234.scope``), "-" when the host has no cgroup hierarchy
    cgroup: str
    #: its command line (spaces for NULs, first 200 bytes)
    command: str


def parse_elsewhere(words: list[str]) -> Elsewhere | None:
    """``PID START CGROUP COMMAND...`` of an ``elsewhere`` line, or None when it is not one."""
    if len(words) < 3 or not words[0].isdigit():
        return None
    return Elsewhere(int(words[0]), words[2].replace("\\x20", " "), " ".join(words[3:]).strip())


@dataclass
class HostJobState:
    """What the host's job directory says about one job (see :mod:`agent_tools.jobs.scripts`).

    ``stdout_bytes``/``stderr_bytes`` are measured only for jobs whose output view was asked for (head or
    tail bytes > 0); otherwise they are 0.
    """

    job_id: str
    present: bool
    exit_code: int | None = None
    pid: int | None = None
    boot_id: str | None = None
    alive: bool = False
    monitor_alive: bool = False
    cancelled: bool = False
    cancel_reason: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    current_boot: str | None = None
    views: dict[str, RawView] = field(default_factory=dict)
    #: the command's run time on the host's clock (seconds, from the ``exit`` file), None when not recorded
    duration_s: float | None = None
    #: how the command ended: ``exit`` (it exited, its status even above 128), ``signal`` (a signal killed it),
    #: ``-`` (not known, or still running)
    ended: str = "-"
    #: the deadline (seconds) at which the job's monitor started killing it on the host, None when it did not
    deadline_s: float | None = None
    #: pids of the job still alive after that kill (None while the kill is still under way)
    deadline_survivors: list[int] | None = None
    #: how that kill found the job's processes (``cgroup PATH`` or ``- REASON``, the cancel's ``how``), "" unknown
    deadline_how: str = ""
    #: the job's audit session as that kill saw it (``ses N`` or ``- REASON``, the cancel's ``tag``), "" unknown
    deadline_tag: str = ""
    #: the command's exit status when it had ended before its deadline (the kill was of what it left running)
    deadline_was: int | None = None
    #: what that kill found the job may have handed on (still running), and what it could not look by ("" or
    #: ``- REASON``): see :class:`Elsewhere`
    deadline_elsewhere: list[Elsewhere] = field(default_factory=list)
    deadline_elsewhere_how: str = ""
    #: the deadline kill's watcher is gone before it checked the kill (it was killed itself): nothing says it ended
    deadline_interrupted: bool = False
    #: processes the ended command left running that still run (pid, command line), as its monitor last saw them
    leftovers: list[tuple[int, str]] = field(default_factory=list)
    #: the command ended and its monitor is still looking for what it left running (``leftovers`` not known yet)
    leftovers_pending: bool = False
    #: how the job's processes are found (``cgroup PATH`` / ``- REASON`` and ``ses N`` / ``- REASON``), sent with
    #: leftovers ("" when not sent)
    how: str = ""
    tag: str = ""
    #: why the job dies when the login that started it ends (logind KillUserProcesses=yes), "" when it does not
    logout: str = ""


def parse_deadline(words: list[str]) -> tuple[float | None, list[int] | None]:
    """``LIMIT DONE [PIDS...]`` of a ``deadline`` line (see :mod:`agent_tools.jobs.scripts`): the deadline in
    seconds, and the survivors of the kill (None while it is under way, or when it was interrupted: DONE 2)."""
    limit = _float(words[0]) if words else None
    survivors = [int(w) for w in words[2:] if w.isdigit()] if len(words) > 1 and words[1] == "1" else None
    return limit, survivors


def deadline_interrupted(words: list[str]) -> bool:
    """Whether a ``deadline`` line's DONE word says its kill was interrupted (its watcher is gone before it checked
    the kill)."""
    return len(words) > 1 and words[1] == "2"


def _int(word: str) -> int | None:
    try:
        return int(word)
    except ValueError:
        return None


def _float(word: str) -> float | None:
    try:
        return float(word)
    except ValueError:
        return None


#: status report lines about one job: ``@@AT KIND JOB_ID ...``
_PER_JOB = frozenset({"deadline", "deadline_how", "deadline_tag", "deadline_was", "left", "how", "tag", "logout",
                      "left_pending", "deadline_elsewhere", "deadline_elsewhere_how"})


async def parse_status(reader: WireReader) -> dict[str, HostJobState]:
    """Parse the status script's output into one :class:`HostJobState` per job id."""
    states: dict[str, HostJobState] = {}
    boot: str | None = None
    last: HostJobState | None = None
    while True:
        words = await reader.header()
        if words is None:
            raise WireError("status report ended early")
        kind = words[0]
        if kind == "end":
            break
        if kind == "boot":
            boot = words[1] if words[1] != "-" else None
        elif kind == "job":
            jid = words[1]
            if words[2] == "missing":
                last = HostJobState(jid, present=False, current_boot=boot)
            else:
                rc, pid, bt, alive, malive, ca, os_, es = words[3:11]
                last = HostJobState(
                    jid, present=True, exit_code=_int(rc), pid=_int(pid), boot_id=None if bt == "-" else bt,
                    alive=alive == "1", monitor_alive=malive == "1", cancelled=ca == "1",
                    stdout_bytes=int(os_), stderr_bytes=int(es), current_boot=boot,
                    duration_s=_float(words[12]) if len(words) > 12 else None,
                    ended=words[13] if len(words) > 13 and words[13] in ("exit", "signal") else "-")
            states[jid] = last
        elif kind == "view":
            target = states.get(words[5]) if len(words) > 5 and words[5] else last
            name, raw = await read_view(reader, words)
            if target is not None:
                target.views[name] = raw
        elif kind == "cancel":
            st = states.get(words[1])
            if st is not None:
                st.cancel_reason = " ".join(words[2:])
        elif kind == "left_pending" and len(words) > 1 and (st := states.get(words[1])) is not None:
            st.leftovers_pending = True
        elif kind in _PER_JOB and len(words) > 2 and (st := states.get(words[1])) is not None:
            rest = words[2:]
            if kind == "deadline":
                st.deadline_s, st.deadline_survivors = parse_deadline(rest)
                st.deadline_interrupted = deadline_interrupted(rest)
            elif kind == "deadline_how":
                st.deadline_how = " ".join(rest)
            elif kind == "deadline_tag":
                st.deadline_tag = " ".join(rest)
            elif kind == "deadline_was":
                st.deadline_was = _int(rest[0])
            elif kind == "deadline_elsewhere" and (e := parse_elsewhere(rest)) is not None:
                st.deadline_elsewhere.append(e)
            elif kind == "deadline_elsewhere_how":
                st.deadline_elsewhere_how = " ".join(rest)
            elif kind == "left" and rest[0].isdigit():
                st.leftovers.append((int(rest[0]), " ".join(rest[1:]).strip()))
            elif kind == "how":
                st.how = " ".join(rest)
            elif kind == "tag":
                st.tag = " ".join(rest)
            elif kind == "logout":
                st.logout = " ".join(rest)
    return states
