"""From a transcript's shell calls to a host that behaves as the transcript says (for synthesising cassettes).

A transcript holds what the *old* tool saw: each command, its output and exit status, and when it ran. It
does not hold what agent_tools would send to a host (its job launcher and status scripts). So an import
(1) infers a **timeline** of the host from the calls, (2) runs the transcript's calls through agent_tools
against :class:`TranscriptHost`, a synthetic host that answers agent_tools' requests from that timeline, on a
virtual clock, while recording, and (3) writes that recording as an ordinary cassette. The cassette is thus
*synthesised, not recorded on a host*; its header says so (``"synthesised": true``, ``"source": {...}``).

Inference, made explicit:

* A call that finished ran for the time between the call and its result in the transcript (an upper bound:
  it includes the runtime's overhead), printed its output and exited with its status (0 when the runtime
  implies it).
* A call the user stopped while it ran (Claude Code ``interrupted``, opencode "User aborted the command" /
  "Tool execution aborted", a Codex ``"aborted"`` output) ran until then: it is a job that agent_tools
  cancels (``job_cancel``) at the time the transcript shows it stopped (:attr:`TimedOutCall.cancel_at_s`; when
  that is sooner than the budget, as soon as ``run_command`` returns). Later checks are not read for it.
* A call the old tool killed at its timeout (e.g. ``systemctl restart`` of a model server, 15 s), or that the
  old tool left running in the background, is taken to have kept running on the host, as a durable job does.
  When the transcript itself later shows it end (a background job's status, a session poll:
  :attr:`ShellCall.finished_at`), that is its end and exit status; when a later entry stopped it on request
  (``KillShell``/``TaskStop``: :attr:`ShellCall.killed_at`) it is cancelled then, as a call the user stopped.
  Otherwise its end is read from the **later checks of the same thing** in the transcript
  (:func:`related_check`): ``systemctl is-active``/``status`` or ``journalctl -u`` of a unit the call
  (re)started; ``curl``/``wget`` of a URL, or a port, its command names, or of this host (``127.0.0.1``,
  ``localhost``) after a call that (re)started a unit (the transcript does not say which port a unit serves);
  ``tail``/``grep`` of a file its command names (a log it writes). A check of anything else never says how
  the call ended (``systemctl status nginx`` says nothing of ``make test``). The first related check that shows
  it ready (active, a successful ``curl``, a log line such as SGLang's "The server is fired up and ready to
  roll!") ends it with status 0 at that check's time; one showing a failure ends it with status 1. With no
  such evidence it is still running at the end of the transcript.
* An ``http://`` URL polled by those checks becomes the job's readiness probe (``https://`` cannot be a probe:
  probes speak plain HTTP): the synthetic host refuses connections to it until the job's end and answers
  ``200`` (with the successful check's output) after.
* The related checks up to that end are **replaced** (:meth:`Timeline.replaced`): agent_tools follows the job
  with ``job_status`` instead, and the import lists them as replaced. Checks after the end, checks of other
  things, and every check of a call whose end no check shows are replayed as they ran.

:class:`TranscriptHost` speaks the job wire protocol of :mod:`agent_tools.jobs.scripts` (launch, status,
cancel); any other command is answered with exit status 127. A launch with a deadline (its optional last word)
is killed at it as the job's monitor would: a job still running then ends with status 143, ``cancel`` and
``deadline`` reported, its output so far kept.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import ByteStream

from ..hosts.base import ExecResult, HostProcess
from .model import ShellCall

__all__ = ["Subject", "Timeline", "TranscriptHost", "check_verdict", "checked_subject", "infer_timeline",
           "related_check", "subject_of"]

_URL_RE = re.compile(r"https?://[^\s'\"|;&)]+")
_READY_LOG_RE = re.compile(r"fired up and ready to roll|Application startup complete|Started .+\.service"
                           r"|ready to accept connections", re.IGNORECASE)
_FAIL_LOG_RE = re.compile(r"Traceback|Failed to start|Main process exited, code=exited, status=[1-9]"
                          r"|Not enough host memory", re.IGNORECASE)
_NOT_READY_HTTP_RE = re.compile(r"Connection refused|Failed to connect|\b50[0-9]\b|Service Unavailable",
                                re.IGNORECASE)
_BOOT_ID = "00000000-0000-4000-8000-transcript00"


_LOCAL_HOSTS = frozenset({"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]", "::", "ip6-localhost"})
_SEGMENT_RE = re.compile(r"&&|\|\||[;|&\n]")
_UNIT_VERBS = frozenset({"start", "restart", "reload-or-restart", "try-restart", "try-reload-or-restart",
                         "reload", "force-reload", "enable", "reenable"})
_PORT_RE = re.compile(r"(?:--port|--listen-port|--http-port|(?<![\w-])-p)(?:=|\s+)(\d{2,5})\b"
                      r"|(?:localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1?\]):(\d{2,5})\b"
                      r"|\bhttp\.server\s+(?:--bind\s+\S+\s+)?(\d{2,5})\b|\bPORT=(\d{2,5})\b")
#: the programs whose file operands a log check reads, with their options that take a value
_FILE_CHECKS: dict[str, frozenset[str]] = {
    "tail": frozenset({"-n", "-c", "--lines", "--bytes", "-s", "--sleep-interval", "--pid"}),
    **{g: frozenset({"-e", "--regexp", "-f", "--file", "-m", "--max-count", "-A", "-B", "-C"})
       for g in ("grep", "egrep", "fgrep", "zgrep")},
}
_REDIRECT_RE = re.compile(r"(?:&>>?|\d?>>?)\s*([^\s;&|<>]+)")


@dataclass(frozen=True)
class Subject:
    """What a command acts on or checks, as far as its text says: unit names (``.service`` added to a bare
    name, as systemctl reads it), URLs as ``(host, port)``, TCP ports, and files."""

    units: frozenset[str] = frozenset()
    urls: frozenset[tuple[str, int]] = frozenset()
    ports: frozenset[int] = frozenset()
    files: frozenset[str] = frozenset()


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def _unit(name: str) -> str:
    return name if "." in name else name + ".service"


def _url(url: str) -> tuple[str, int] | None:
    m = re.match(r"(https?)://(\[[^\]]*\]|[^/:?#\s]+)(?::(\d+))?", url)
    if not m:
        return None
    return m.group(2).lower(), int(m.group(3) or (443 if m.group(1) == "https" else 80))


def _file(word: str) -> str:
    return os.path.normpath(word)


def _segments(command: str) -> list[list[str]]:
    """The simple commands of a command line, as words (``sudo``/``env``/``timeout N`` dropped)."""
    out = []
    for seg in _SEGMENT_RE.split(command):
        words = _words(seg)
        while words and (words[0] in ("sudo", "env", "nohup", "exec", "command", "time")
                         or re.fullmatch(r"[A-Za-z_]\w*=.*", words[0])):
            words = words[1:]
            while words and words[0].startswith("-") and len(words) > 1:  # sudo -u x, env -i
                words = words[2:] if words[0] in ("-u", "-g", "-C") else words[1:]
        if words and words[0] == "timeout":
            words = [w for w in words[1:] if not w.startswith("-")][1:]
        if words:
            out.append(words)
    return out


def subject_of(command: str) -> Subject:
    """What ``command`` acts on: the units it (re)starts (``systemctl start|restart|... UNIT``, ``service UNIT
    start|restart``), the URLs and ports it names, the files it writes (redirections, ``tee``) or names."""
    units: set[str] = set()
    files: set[str] = {_file(m.group(1)) for m in _REDIRECT_RE.finditer(command) if m.group(1) != "/dev/null"}
    for words in _segments(command):
        prog = os.path.basename(words[0])
        args = [w for w in words[1:] if not w.startswith("-")]
        if prog == "systemctl" and args and args[0] in _UNIT_VERBS:
            units.update(_unit(a) for a in args[1:])
        elif prog == "service" and len(args) >= 2 and args[1] in ("start", "restart", "reload", "force-reload"):
            units.add(_unit(args[0]))
        elif prog == "tee":
            files.update(_file(a) for a in args)
    urls = {u for m in _URL_RE.finditer(command) if (u := _url(m.group(0))) is not None}
    ports = {int(p) for m in _PORT_RE.finditer(command) for p in m.groups() if p} | {port for _, port in urls}
    return Subject(frozenset(units), frozenset(urls), frozenset(ports), frozenset(files))


def checked_subject(call: ShellCall) -> Subject:
    """What a check (:func:`check_verdict`) looks at: the units of ``systemctl is-active|status`` and of
    ``journalctl -u``, the URL of ``curl``/``wget``, the files of ``tail``/``grep``."""
    units: set[str] = set()
    files: set[str] = set()
    for words in _segments(call.command):
        prog = os.path.basename(words[0])
        if prog == "systemctl":
            args = [w for w in words[1:] if not w.startswith("-")]
            if args and args[0] in ("is-active", "status", "is-failed", "show"):
                units.update(_unit(a) for a in args[1:])
        elif prog == "journalctl":
            for i, w in enumerate(words):
                if w in ("-u", "--unit") and i + 1 < len(words):
                    units.add(_unit(words[i + 1]))
                elif w.startswith("--unit="):
                    units.add(_unit(w.split("=", 1)[1]))
                elif w.startswith("-u") and len(w) > 2 and not w.startswith("--"):
                    units.add(_unit(w[2:]))
        elif prog in _FILE_CHECKS:
            operands: list[str] = []
            takes_value = _FILE_CHECKS[prog]
            pattern_given = False
            skip = False
            for w in words[1:]:
                if skip:
                    skip = False
                elif w in takes_value:
                    skip = True
                    pattern_given = pattern_given or w in ("-e", "--regexp", "-f", "--file")
                elif w.startswith("--regexp=") or w.startswith("--file="):
                    pattern_given = True
                elif not w.startswith("-") and not w.lstrip("+").isdigit():
                    operands.append(w)
            if prog != "tail" and not pattern_given:
                operands = operands[1:]  # grep's first operand is the pattern
            files.update(_file(a) for a in operands)
    urls = {u for m in _URL_RE.finditer(call.command) if (u := _url(m.group(0))) is not None}
    return Subject(frozenset(units), frozenset(urls), frozenset(), frozenset(files))


def related_check(call: ShellCall, check: ShellCall) -> bool:
    """Whether ``check`` (a later call :func:`check_verdict` reads) looks at the same thing ``call`` acts on
    (see the module docstring): a unit it (re)started, a URL or port it names (or this host's HTTP after a unit
    (re)start), a file it names."""
    did, saw = subject_of(call.command), checked_subject(check)
    if did.units & saw.units:
        return True
    for host, port in saw.urls:
        if (host, port) in did.urls or port in did.ports or (host in _LOCAL_HOSTS and did.units):
            return True
    # a file: the same name, or the same base name where one of them is relative (the directory is not known)
    return any(f == g or (os.path.basename(f) == os.path.basename(g) and not (f.startswith("/") and g.startswith("/")))
               for f in did.files for g in saw.files)


def check_verdict(call: ShellCall) -> str | None:
    """``ready``, ``not_ready`` or ``failed`` when ``call`` checks a service's state, else None."""
    cmd, out = call.command, call.output
    if re.search(r"\bsystemctl\b.*\b(is-active|status)\b", cmd):
        first = out.strip().splitlines()[0] if out.strip() else ""
        if "active (running)" in out or first == "active":
            return "ready"
        if first == "failed" or re.search(r"Active: failed", out):
            return "failed"
        return "not_ready"
    if re.search(r"\b(curl|wget)\b", cmd) and _URL_RE.search(cmd):
        ok = call.exit_status == 0 and not _NOT_READY_HTTP_RE.search(out)
        return "ready" if ok else "not_ready"
    if re.search(r"\b(journalctl|tail|grep)\b", cmd):
        if _FAIL_LOG_RE.search(out):
            return "failed"
        if _READY_LOG_RE.search(out):
            return "ready"
        return "not_ready"
    return None


@dataclass
class TimedOutCall:
    """What the transcript says became of a call the old tool killed at its timeout."""

    call: ShellCall
    end_s: float | None  # seconds from the transcript's start when it ended (None: still running)
    exit_status: int | None
    evidence: str  # the call that showed it, for people
    url: str | None  # an HTTP URL its checks polled (the readiness probe)
    superseded: list[int] = field(default_factory=list)  # checks replaced by following the job (up to its end)
    cancel_at_s: float | None = None  # the user stopped it then (seconds from the start): replayed as job_cancel


@dataclass
class Timeline:
    """The host's story according to the transcript (times in seconds from the first call)."""

    calls: list[ShellCall]
    start_wall: float
    start_s: dict[int, float]
    duration_s: dict[int, float]
    timed_out: dict[int, TimedOutCall]
    end_s: float

    def replaced(self) -> dict[int, int]:
        """The checks the replay does not run, each with the call whose job is followed instead (its end, found
        by a check of the same thing, is at or after the check)."""
        return {i: n for n, t in self.timed_out.items() if t.end_s is not None for i in t.superseded
                if self.start_s[i] <= t.end_s}

    def http_ready_at(self, url_host: str, port: int) -> tuple[float | None, str] | None:
        """``(ready_at_s or None, body)`` for a URL polled by checks of a timed-out call, else None."""
        for t in self.timed_out.values():
            if t.url is None:
                continue
            m = re.match(r"https?://([^/:]+)(?::(\d+))?", t.url)
            if m and m.group(1) in (url_host, "localhost" if url_host == "127.0.0.1" else url_host) and int(
                    m.group(2) or 80) == port:
                body = next((c.output for c in self.calls if c.index in t.superseded and c.command.find(t.url) >= 0
                             and check_verdict(c) == "ready"), "")
                return (t.end_s if t.exit_status == 0 else None), body
        return None


def infer_timeline(calls: list[ShellCall]) -> Timeline:
    """Infer the host's timeline from the shell calls that ran (see the module docstring)."""
    ran = [c for c in calls if c.ran]
    known = [c.started_at for c in ran if c.started_at is not None]
    t0 = min(known) if known else 0.0
    start: dict[int, float] = {}
    dur: dict[int, float] = {}
    last = 0.0
    for c in ran:
        s = (c.started_at - t0) if c.started_at is not None else last + 1.0
        start[c.index] = max(s, last)
        dur[c.index] = c.duration_s if c.duration_s is not None else 0.1
        last = start[c.index]
    timed: dict[int, TimedOutCall] = {}
    for i, c in enumerate(ran):
        if not c.left_running:
            continue
        info = TimedOutCall(c, None, None, "no later check in the transcript shows it finish", None)
        if c.interrupted and c.finished_at is None:
            stop = max((c.ended_at - t0) if c.ended_at is not None else start[c.index], start[c.index])
            info.cancel_at_s = stop
            info.evidence = (f"{c.stopped_how or 'the user stopped it'} at {stop:.0f} s, {stop - start[c.index]:.0f} s "
                             "after it started: replayed as job_cancel then")
            timed[c.index] = info
            continue
        if c.finished_at is not None:
            # the runtime itself saw it end (a background job's status, a session poll): that is the end
            info.end_s = max(c.finished_at - t0, start[c.index])
            info.exit_status = c.final_exit_status if c.final_exit_status is not None else 0
            info.evidence = (f"the transcript's own follow-up at {info.end_s:.0f} s shows it ended with status "
                             f"{info.exit_status}")
            timed[c.index] = info
            continue
        if c.killed_at is not None:  # the agent stopped it (KillShell, TaskStop): cancelled then
            stop = max(c.killed_at - t0, start[c.index])
            info.cancel_at_s = stop
            info.evidence = (f"stopped on request ({c.killed_by or 'a kill'}) at {stop:.0f} s, "
                             f"{stop - start[c.index]:.0f} s after it started: replayed as job_cancel then")
            timed[c.index] = info
            continue
        checks: list[int] = []
        for later in ran[i + 1:]:
            verdict = check_verdict(later)
            if verdict is None or not related_check(c, later):
                continue  # a check of something else says nothing of how this call ended
            url = _URL_RE.search(later.command)
            if url and info.url is None and url.group(0).startswith("http://"):
                info.url = url.group(0)
            checks.append(later.index)
            if verdict in ("ready", "failed"):
                info.end_s = start[later.index]
                info.exit_status = 0 if verdict == "ready" else 1
                info.evidence = f"call {later.index} `{later.command}` at {start[later.index]:.0f} s shows it {verdict}"
                info.superseded = checks  # replaced by following the job to that end
                break
        timed[c.index] = info
    end = max([start[c.index] + dur[c.index] for c in ran], default=0.0)
    return Timeline(calls=ran, start_wall=t0, start_s=start, duration_s=dur, timed_out=timed, end_s=end)


# ---------------------------------------------------------------------------------------------- the host
@dataclass
class _Job:
    job_id: str
    pid: int
    start: float
    end: float | None
    exit_status: int
    output: bytes
    cancelled: bool = False
    deadline_s: float | None = None  # set when the monitor's deadline watcher killed it

    def done(self, now: float) -> bool:
        return self.end is not None and now >= self.end


def _seconds(word: str) -> float | None:
    try:
        value = float(word)
    except ValueError:
        return None
    return value if value > 0 else None


def _deadline_line(job: _Job, prefix: str) -> bytes:
    """The ``deadline`` line of a job its deadline killed (no survivors), else nothing."""
    if job.deadline_s is None:
        return b""
    return f"@@AT deadline {prefix}{job.deadline_s:g} 1\n".encode()


def _view(name: str, data: bytes, offset: int, head: int, tail: int) -> bytes:
    size = len(data)
    n = max(0, size - offset)
    hl, tl = (n, 0) if n <= head + tail else (head, tail)
    return (f"@@AT view {name} {size} {hl} {tl}\n".encode() + data[offset:offset + hl]
            + (data[size - tl:] if tl else b""))


class _Process:
    """An in-memory process: stdout chunks due at loop times; EOF early when stdin closes (if ``on_eof``)."""

    def __init__(self, chunks: list[tuple[float, bytes]], *, stderr: bytes = b"", status: int = 0,
                 end_on_stdin_eof: bool = False) -> None:
        self._chunks = list(chunks)
        self._stderr = stderr
        self._status = status
        self._end_on_eof = end_on_stdin_eof
        self._stdin_closed = anyio.Event()

    async def read_stdout(self, max_bytes: int = 65536) -> bytes:
        if not self._chunks:
            return b""
        due, data = self._chunks[0]
        delay = due - anyio.current_time()
        if delay > 0:
            if self._end_on_eof:
                with anyio.move_on_after(delay):
                    await self._stdin_closed.wait()
                if self._stdin_closed.is_set():
                    self._chunks.clear()
                    return b""
            else:
                await anyio.sleep(delay)
        self._chunks[0] = (due, data[max_bytes:])
        if not self._chunks[0][1]:
            self._chunks.pop(0)
        return data[:max_bytes]

    async def read_stderr(self, max_bytes: int = 65536) -> bytes:
        data, self._stderr = self._stderr[:max_bytes], self._stderr[max_bytes:]
        return data

    async def write_stdin(self, data: bytes) -> None:
        return None

    async def close_stdin(self) -> None:
        self._stdin_closed.set()

    async def wait(self) -> ExecResult:
        while self._chunks:
            await self.read_stdout()
        return ExecResult(self._status)

    async def close(self) -> None:
        self._stdin_closed.set()


class _HttpStream(ByteStream):
    def __init__(self, body: bytes) -> None:
        self._response = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: "
                          + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._response:
            raise anyio.EndOfStream
        data, self._response = self._response[:max_bytes], self._response[max_bytes:]
        return data

    async def send(self, item: bytes) -> None:
        return None

    async def send_eof(self) -> None:
        return None

    async def aclose(self) -> None:
        return None


class TranscriptHost:
    """A synthetic host answering agent_tools' job protocol from a :class:`Timeline` (loop time).

    :param timeline: what the transcript says happened.
    :param name: the host's name (the transcript's commands ran locally for the agent: ``local``).
    """

    def __init__(self, timeline: Timeline, name: str = "local") -> None:
        self.timeline = timeline
        self.name = name
        self.origin: float | None = None
        self.jobs: dict[str, _Job] = {}
        self._launched: set[int] = set()
        self._pid = 4000

    def _now(self) -> float:
        if self.origin is None:
            self.origin = anyio.current_time()
        return anyio.current_time()

    def _find(self, command: str) -> ShellCall | None:
        for c in self.timeline.calls:
            if c.index not in self._launched and c.command == command:
                self._launched.add(c.index)
                return c
        return None

    async def start(self, command: str, *, env: Mapping[str, str] | None = None) -> HostProcess:
        now = self._now()
        try:
            argv = shlex.split(command)
        except ValueError:
            argv = []
        for marker, handler in (("at-launch", self._launch), ("at-status", self._status),
                                ("at-cancel", self._cancel)):
            if marker in argv:
                args = argv[argv.index(marker) + 1:]
                if marker == "at-launch" and args and "\n" in args[0]:
                    args = args[1:]  # the functions the launcher hands its watcher (jobs/scripts.py: _WLIB)
                return handler(args, now)
        return _Process([], stderr=b"sh: this command is not in the transcript\n", status=127)

    def _launch(self, args: list[str], now: float) -> HostProcess:
        _base, job_id, _cwd, mode, head, tail, command = args[:7]
        deadline = _seconds(args[7]) if len(args) > 7 else None
        command = re.sub(r"^(export [A-Za-z_][A-Za-z0-9_]*=\S*; )+", "", command)
        call = self._find(command)
        self._pid += 1
        if call is None:
            job = _Job(job_id, self._pid, now, now, 127, b"sh: this command is not in the transcript\n")
        elif call.index in self.timeline.timed_out:
            info = self.timeline.timed_out[call.index]
            assert self.origin is not None
            end = None if info.end_s is None else max(now, self.origin + info.end_s)
            output = call.final_output if call.final_output is not None else call.output
            job = _Job(job_id, self._pid, now, end, info.exit_status or 0, output.encode())
        else:
            job = _Job(job_id, self._pid, now, now + self.timeline.duration_s[call.index], _replayed_status(call),
                       call.output.encode())
        if deadline is not None and (job.end is None or job.end > now + deadline):
            # the monitor's deadline watcher kills it at its deadline (TERM: 128 + 15)
            job.end, job.exit_status, job.cancelled, job.deadline_s = now + deadline, 143, True, deadline
        self.jobs[job_id] = job
        started = f"@@AT started {job_id} {job.pid}\n".encode()
        if mode == "bg":
            return _Process([(now, started)])
        chunks = [(now, started)]
        if job.end is not None:
            report = (_deadline_line(job, "") + f"@@AT exit {job.exit_status}\n".encode()
                      + _view("stdout", job.output, 0, int(head), int(tail))
                      + _view("stderr", b"", 0, int(head), int(tail)) + b"@@AT end\n")
            chunks.append((job.end, report))
        return _Process(chunks, end_on_stdin_eof=True)

    def _status(self, args: list[str], now: float) -> HostProcess:
        out = [f"@@AT boot {_BOOT_ID}\n".encode()]
        for spec in args[1:]:
            job_id, o, e, h, t = (spec.split(":") + ["0"] * 5)[:5]
            job = self.jobs.get(job_id)
            if job is None:
                out.append(f"@@AT job {job_id} missing\n".encode())
                continue
            done = job.done(now)
            data = job.output if done else b""
            rc = str(job.exit_status) if done else "-"
            alive = "0" if done else "1"
            out.append(f"@@AT job {job_id} present {rc} {job.pid} {_BOOT_ID} {alive} {alive} "
                       f"{int(job.cancelled)} {len(data)} 0 {job.pid - 1}\n".encode())
            if int(h) > 0 or int(t) > 0:
                out.append(_view("stdout", data, int(o), int(h), int(t)) + _view("stderr", b"", int(e), int(h), int(t)))
            if job.cancelled and done and job.deadline_s is not None:
                out.append(f"@@AT cancel {job_id} deadline: still running at its deadline\n".encode()
                           + _deadline_line(job, job_id + " "))
            elif job.cancelled:
                out.append(f"@@AT cancel {job_id} cancelled on request\n".encode())
        out.append(b"@@AT end\n")
        return _Process([(now, b"".join(out))])

    def _cancel(self, args: list[str], now: float) -> HostProcess:
        job = self.jobs.get(args[1]) if len(args) > 1 else None
        if job is None:
            return _Process([(now, b"@@AT missing\n")])
        if job.done(now):
            return _Process([(now, b"@@AT targets\n@@AT survivors\n")])
        job.cancelled, job.end, job.exit_status = True, now, 143
        return _Process([(now, f"@@AT targets {job.pid}\n@@AT survivors\n".encode())])

    async def open_tcp(self, host: str, port: int) -> ByteStream:
        now = self._now()
        found = self.timeline.http_ready_at(host, port)
        assert self.origin is not None
        if found is None or found[0] is None or now < self.origin + found[0]:
            raise ConnectionRefusedError(f"{host}:{port}: connection refused (per the transcript)")
        return _HttpStream(found[1].encode())

    async def aclose(self) -> None:
        return None

    def describe(self) -> list[dict[str, Any]]:
        """The inferred facts about timed-out calls, for cassette headers and people."""
        return [{"call": i, "command": t.call.command, "ends_at_s": t.end_s, "exit_status": t.exit_status,
                 "evidence": t.evidence, "probe_url": t.url, "superseded_calls": t.superseded,
                 **({"cancelled_at_s": round(t.cancel_at_s, 3)} if t.cancel_at_s is not None else {})}
                for i, t in self.timeline.timed_out.items()]


def _replayed_status(call: ShellCall) -> int:
    """The exit status the replay reports for a call that finished: its own; for one the transcript says only
    failed (:attr:`ShellCall.nonzero`) a stand-in 1, which the generated test does not assert (it asserts
    non-zero). Calls without an exit status otherwise are not imported (:attr:`ShellCall.skip_reason`)."""
    if call.exit_status is not None:
        return call.exit_status
    return 1 if call.nonzero else 0
