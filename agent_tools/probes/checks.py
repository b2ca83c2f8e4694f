"""Running probes against a host. Each check makes at most one round trip (one exec or one TCP exchange).

A job's probes are checked in two steps (:func:`check_probes`): first its ``systemd_unit`` probes, then the
others, and those count only against the new process: while a unit is not active in its new invocation (the
old process may still be answering during ``deactivating/stop-sigterm``), an ``http``, ``port`` or ``log``
probe is not checked and reads ``not_yet``; a log line seen earlier stops counting when the unit's
invocation changes, and journal lines of other invocations never count. An ``http`` or ``port`` probe of an
address on the host itself that passed does not count when every process holding the listening socket is in
the unit's cgroup and started before the units' new activation began (one more round trip): a process of the
old invocation that survived the restart (``KillMode=process``/``mixed``/``none``) can answer while the unit's
new process is not serving. A listener of another unit or program (a reverse proxy in front of the unit)
is left alone: what answers through it cannot be told from here.

Facts: proc(5): ``/proc/PID/stat`` field 22 is the process's start time in clock ticks since boot
(``getconf CLK_TCK``), the clock of ``CLOCK_MONOTONIC`` on a machine that never suspended, the clock of
systemd's ``*TimestampMonotonic`` properties (microseconds); ``InactiveExitTimestampMonotonic`` is when the unit
left ``inactive``/``failed`` for its current activation (its ``ExecStartPre=`` included; stamped just after the
first process of the activation was forked, as ``ExecMainStartTimestampMonotonic`` is after the main one).
ss(8) ``-ltnpH`` lists listening TCP sockets with the processes holding them (only one's own processes unless
root).
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import anyio
import h11
import structlog
from pydantic import BaseModel

from ..errors import AgentToolsError, HostError
from ..hosts.base import Host, run_on
from .parse import parse_free, parse_nvidia_smi
from .result import ProbeResult
from .specs import (
    GpuMemoryProbe,
    HostMemoryProbe,
    HttpProbe,
    LogProbe,
    PortProbe,
    SystemdUnitProbe,
    probe_from_dict,
)
from .systemd import STATE_KEYS as UNIT_STATE_KEYS
from .systemd import UNIT_PROPS, check_unit

__all__ = ["STATE_KEYS", "UNIT_PROPS", "ProbeResult", "advance", "check_probe", "check_probes", "port_holder",
           "probe_target"]

log = structlog.get_logger(__name__)

#: key a passed log probe's spec carries into later checks (the line it saw); internal, not part of the schema
MATCHED = "matched_line"
#: with MATCHED: the invocations of the job's units when the line was seen (another invocation drops the line)
MATCHED_GATE = "matched_gate"

#: keys a log probe's spec carries between checks: lines read since its start, the newest of them, and a failure
#: line seen whose explanation may still be on its way (a traceback being written)
SEEN, NEWEST, PENDING = "lines_seen", "newest_line", "failure_line"
#: a log file probe's file identity (inode) at its offset: another file at the path is read from its start
INODE = "file_inode"

#: spec keys that carry a check's state to the next check (not part of any probe's schema)
STATE_KEYS = frozenset({MATCHED, MATCHED_GATE, SEEN, NEWEST, PENDING, INODE}) | UNIT_STATE_KEYS

#: seconds of slack between a file's modification time and a unit's activation stamp (the two clocks are read
#: apart: /proc/uptime has 10 ms steps, systemd stamps just after the fork)
_MTIME_SLACK_S = 0.5
#: how a line that *explains* a failure looks: an exception with its message (``ValueError: Not enough host
#: memory...``), possibly after a log prefix; a traceback's first line only says that one follows
_EXPLAINS_RE = re.compile(r"(?:^|[\s\]:])(?:[A-Za-z_][\w.]*\.)?(?:[A-Z]\w*)?(?:Error|Exception|Exit|Failure|"
                          r"Interrupt):\s*\S")
_TRACEBACK = "Traceback (most recent call last)"
#: lines after a matching failure line searched for the line that explains it
_EXPLAIN_WINDOW = 80


def advance(specs: list[dict[str, Any]], results: list[ProbeResult]) -> list[dict[str, Any]]:
    """The specs to check next time: each spec with its result's ``updates`` (log cursor / file offset; for a
    log probe that passed, the line it saw: it stays passed; for a unit, the invocation that passed)."""
    return [dict(spec, **r.updates) for spec, r in zip(specs, results, strict=True)]


async def http_get(host: Host, url: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
    """GET ``url`` from the host's point of view (SSH direct-tcpip for remote hosts); HTTP/1.1 via h11.

    :returns: (status code, body bytes, at most 1 MiB).
    :raises ConnectionRefusedError: nothing listens there. :raises OSError, TimeoutError: other failures.
    """
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// URLs are supported, got {url!r}")
    port = parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with anyio.fail_after(timeout_s):
        stream = await host.open_tcp(parts.hostname, port)
        try:
            conn = h11.Connection(h11.CLIENT)
            req = h11.Request(method="GET", target=target,
                              headers=[("Host", f"{parts.hostname}:{port}"), ("Connection", "close"),
                                       ("User-Agent", "agent-tools-probe")])
            await stream.send(conn.send(req) + (conn.send(h11.EndOfMessage()) or b""))
            status = 0
            body = bytearray()
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await stream.receive(65536)
                    except anyio.EndOfStream:
                        data = b""
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    if len(body) < 1 << 20:
                        body.extend(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            return status, bytes(body)
        finally:
            await stream.aclose()


async def _http(host: Host, p: HttpProbe) -> ProbeResult:
    try:
        status, body = await http_get(host, p.url, p.timeout_s)
    except ConnectionRefusedError:
        return ProbeResult("http", p.url, "not_yet", "connection refused (normal while the server loads)")
    except TimeoutError:
        return ProbeResult("http", p.url, "not_yet", f"no answer within {p.timeout_s:g} s", details={"timeout": True})
    except (OSError, h11.ProtocolError) as exc:
        return ProbeResult("http", p.url, "not_yet", f"{type(exc).__name__}: {exc}")
    text = body[:200].decode("utf-8", "replace").strip()
    matched = p.body_regex is None or re.search(p.body_regex, body.decode("utf-8", "replace")) is not None
    # what was checked is said with the answer: "HTTP 200" alone reads as a pass
    regex = "" if p.body_regex is None else f", body {'matches' if matched else 'does not match'} {p.body_regex!r}"
    wanted = "" if status == p.expect_status else f" (expected {p.expect_status})"
    if status == p.expect_status and matched:
        return ProbeResult("http", p.url, "passed", f"HTTP {status}{regex}", details={"status": status})
    return ProbeResult("http", p.url, "not_yet", f"HTTP {status}{wanted}{regex}: {text[:80]}".strip().rstrip(":"),
                       details={"status": status})


@dataclass(frozen=True)
class _FileLook:
    """One look at a log file: its inode, the offset read from (0 when the file is another one than the probe's
    inode, or shorter than its offset), the bytes from there, its modification time on the host's uptime clock
    (seconds; None when unknown), its size, and whether it is something other than a regular file (``special``:
    a device, a FIFO, a socket or a directory, never opened)."""

    inode: str
    offset: int
    data: bytes
    mtime_s: float | None
    size: int = 0
    special: bool = False


#: seconds a log probe's read of its file may take on the host before timeout(1) kills it (a regular file only: a
#: slow or hung file system must not leave a reader behind)
READ_LIMIT_S = 10


async def _file_look(host: Host, path: str, offset: int, inode: Any, *, read: bool) -> _FileLook:
    """Look at a log file in one round trip (stat(1), date(1) -r and /proc/uptime; with ``read``, the bytes from the
    offset, at most 4 MiB, read within :data:`READ_LIMIT_S`). Only a regular file is ever opened (``test -f``,
    which follows links): a device (``/dev/watchdog``: opening it arms the watchdog and the host reboots), a FIFO
    (an open blocks until a writer comes) or a directory is only looked at with stat(1), and reported ``special``.
    :raises HostError: the host cannot be reached."""
    q = shlex.quote(path)
    known = shlex.quote(str(inode)) if inode else "''"
    cmd = (f"read -r up _ </proc/uptime; n=$(date +%s.%N); m=$(date -r {q} +%s.%N 2>/dev/null); "
           f"i=$(stat -L -c %i -- {q} 2>/dev/null); s=; t=-; if [ -f {q} ]; then t=f; "
           f"s=$(stat -L -c %s -- {q} 2>/dev/null); elif [ -e {q} ]; then t=x; fi; o={int(offset)}; "
           f"{{ [ -z {known} ] || [ \"$i\" = {known} ]; }} && [ \"${{s:-0}}\" -ge \"$o\" ] || o=0; "
           'echo "@@file ${i:--} ${s:-0} $o $up $n ${m:--} $t"'
           + (f"; [ -z \"$s\" ] || {{ if command -v timeout >/dev/null 2>&1; then timeout -k 1 {READ_LIMIT_S} "
              f"tail -c +$((o + 1)) -- {q}; else tail -c +$((o + 1)) -- {q}; fi; }} | head -c 4194304"
              if read else ""))
    res = await run_on(host, cmd)
    head, _, data = res.stdout.partition(b"\n")
    words = head.decode("ascii", "replace").split()
    if len(words) != 8 or words[0] != "@@file":
        return _FileLook(str(inode or ""), offset, b"", None, offset)
    _, ino, size, used, up, now_s, mtime, kind = words
    try:
        mtime_s: float | None = float(up) - (float(now_s) - float(mtime))
    except ValueError:
        mtime_s = None
    return _FileLook("" if ino == "-" else ino, int(used) if used.isdigit() else 0, data, mtime_s,
                     int(size) if size.isdigit() else 0, special=kind == "x")


async def file_floor(host: Host, spec: dict[str, Any]) -> dict[str, Any]:
    """A log file probe's updates while its unit is not yet up in its new invocation: its offset moves to the
    file's end (what is written now, the old process stopping included, never counts), with the file's inode."""
    look = await _file_look(host, str(spec["path"]), int(spec.get("offset") or 0), spec.get(INODE), read=False)
    return {INODE: look.inode} | ({"offset": look.size} if look.inode else {})


async def _log(host: Host, p: LogProbe, invocation: str | None = None,
               state: dict[str, Any] | None = None, since_s: float | None = None) -> ProbeResult:
    """One check of a log probe. ``since_s``: when the units' new invocation began (host uptime seconds): a file
    not written to since does not count."""
    state = state or {}
    target = p.unit or p.path or "?"
    if p.unit:
        cmd = (f"journalctl -u {shlex.quote(p.unit)} -o json --no-pager"
               + (f" --after-cursor={shlex.quote(p.cursor)}" if p.cursor else " -n 200"))
        res = await run_on(host, cmd, max_output_bytes=8 << 20)
        lines: list[str] = []
        cursor = p.cursor
        for raw in res.stdout.decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue
            cursor = entry.get("__CURSOR", cursor)
            inv = entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID")
            if invocation and inv and inv != invocation:
                continue  # another invocation's line (the old process stopping, a crashed attempt): never counts
            msg = entry.get("MESSAGE", "")
            if isinstance(msg, list):  # journald sends non-UTF-8 messages as byte arrays
                msg = bytes(msg).decode("utf-8", "replace")
            lines.append(str(msg))
        updates: dict[str, Any] = {"cursor": cursor} if cursor != p.cursor else {}
    else:
        assert p.path is not None
        look = await _file_look(host, p.path, p.offset, state.get(INODE), read=True)
        updates = {"offset": look.offset + len(look.data), INODE: look.inode}
        if look.special:
            return ProbeResult("log", target, "failed", f"{p.path} is not a regular file (a device, a FIFO, a socket "
                               "or a directory): a log probe reads regular files only, and opening a device may act "
                               "on it (a watchdog reboots the host)", updates)
        if since_s is not None and look.mtime_s is not None and look.mtime_s < since_s - _MTIME_SLACK_S:
            # nothing was written to the file since the units' new invocation began: whatever is in it after the
            # probe's start was written before (the old process, while it stopped): it does not count
            return ProbeResult("log", target, "not_yet", f"nothing written to {p.path} since the new invocation "
                               "began", {**updates, SEEN: int(state.get(SEEN) or 0), NEWEST: state.get(NEWEST) or ""})
        lines = look.data.decode("utf-8", "replace").splitlines()
    seen = int(state.get(SEEN) or 0) + len(lines)
    newest = next((ln.strip() for ln in reversed(lines) if ln.strip()), str(state.get(NEWEST) or ""))
    updates.update({SEEN: seen, NEWEST: newest[:300]})
    pending = state.get(PENDING)
    if pending:
        # the failure line of the previous check opened a traceback: its explanation is in these lines, or it
        # never came (the process died mid-write); either way the probe has failed
        found = next((ln for ln in lines[:_EXPLAIN_WINDOW] if _EXPLAINS_RE.search(ln)), None)
        return ProbeResult("log", target, "failed", (found or str(pending)).strip()[:300], updates)
    for i, line in enumerate(lines):
        if p.fail_pattern and re.search(p.fail_pattern, line):
            why = _explaining(lines, i)
            if why is None:  # a traceback has begun and its exception line is not written yet: one more look
                updates[PENDING] = line.strip()[:300]
                return ProbeResult("log", target, "not_yet", f"a failure is being logged: {line.strip()[:200]}",
                                   updates)
            return ProbeResult("log", target, "failed", why.strip()[:300], updates)
        if re.search(p.pattern, line):
            return ProbeResult("log", target, "passed", line.strip()[:300], {**updates, MATCHED: line.strip()[:300]})
    if seen == 0:
        evidence = f"no line matching {p.pattern!r} yet; nothing logged since the start"
    else:
        evidence = f"no line matching {p.pattern!r} yet; {seen} lines since the start, newest: {newest[:160]}"
    return ProbeResult("log", target, "not_yet", evidence, updates, details={"lines": lines[-5:]})


def _explaining(lines: list[str], i: int) -> str | None:
    """The line that says why, for a failure line that matched at ``lines[i]``: that line when it names an
    exception with its message; else the first such line among the next few (the exception line that ends a
    Python traceback); None when ``lines[i]`` opens a traceback whose exception line has not arrived yet;
    else ``lines[i]`` itself."""
    if _EXPLAINS_RE.search(lines[i]):
        return lines[i]
    found = next((ln for ln in lines[i + 1:i + 1 + _EXPLAIN_WINDOW] if _EXPLAINS_RE.search(ln)), None)
    if found is not None:
        return found
    return None if _TRACEBACK in lines[i] else lines[i]


async def _port(host: Host, p: PortProbe) -> ProbeResult:
    target = f"{p.address}:{p.port}"
    try:
        with anyio.fail_after(5):
            stream = await host.open_tcp(p.address, p.port)
        await stream.aclose()
    except (OSError, TimeoutError) as exc:
        return ProbeResult("port", target, "not_yet", f"not accepting connections ({type(exc).__name__})",
                           details={"timeout": isinstance(exc, TimeoutError)})
    return ProbeResult("port", target, "passed", "accepting connections")


async def _gpu(host: Host, p: GpuMemoryProbe) -> ProbeResult:
    res = await run_on(host, "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits")
    gpus = parse_nvidia_smi(res.stdout.decode("utf-8", "replace"))
    if res.exit_status != 0 or not gpus:
        return ProbeResult("gpu_memory", "nvidia-smi", "not_yet", "nvidia-smi gave no GPUs: "
                           + res.stderr.decode("utf-8", "replace").strip()[:200])
    used = [g["used_mib"] for g in gpus]
    ok = all((p.min_used_mib is None or u >= p.min_used_mib) and (p.max_used_mib is None or u <= p.max_used_mib)
             for u in used)
    return ProbeResult("gpu_memory", "nvidia-smi", "passed" if ok else "not_yet",
                       f"used MiB per GPU: {used}", details={"gpus": gpus})


async def _hostmem(host: Host, p: HostMemoryProbe) -> ProbeResult:
    res = await run_on(host, "free -b")
    mem = parse_free(res.stdout.decode("utf-8", "replace"))
    avail = mem.get("available_bytes", 0)
    return ProbeResult("host_memory", "free -b", "passed" if avail >= p.min_available_bytes else "not_yet",
                       f"available {avail / 2**30:.1f} GiB", details=mem)


#: addresses that mean the probe's host itself (a listener there is a process of that host)
_LOCAL = frozenset({"localhost", "0.0.0.0", "::", "::1", "ip6-localhost"})


def _local_port(spec: dict[str, Any]) -> int | None:
    """The TCP port an ``http``/``port`` probe spec reaches on the probe's host itself, or None (another host)."""
    if spec.get("kind") == "port":
        address, port = str(spec.get("address") or "127.0.0.1"), spec.get("port")
    elif spec.get("kind") == "http":
        parts = urlsplit(str(spec.get("url") or ""))
        try:
            address, port = parts.hostname or "", parts.port or 80
        except ValueError:
            return None
    else:
        return None
    if address in _LOCAL or address.startswith("127."):
        return int(port) if isinstance(port, int) else None
    return None


#: systemd stamps a unit's activation (InactiveExit, ExecMainStart) just after it forked the process, which the
#: kernel stamps at fork, cut to a clock tick: 14 ms earlier was seen on an idle host. A process started at most
#: this long before the stamp counts as the new activation's.
_SPAWN_SLACK_US = 500_000


def listeners_command(ports: list[int] | None = None) -> str:
    """A shell command printing ``clk TICKS`` and, per listening TCP socket (on one of ``ports``; None: on any port),
    ``listen PORT PID START_TICKS CGROUP COMM`` for each process holding it that this user can see (see the module
    docstring; CGROUP is the process's cgroup v2 path, proc(5) ``/proc/PID/cgroup``, or ``-``)."""
    filt = " or ".join(f"sport = :{p}" for p in sorted(set(ports))) if ports else ""
    return ("echo clk $(getconf CLK_TCK 2>/dev/null || echo 100); "
            f"ss -ltnpH {shlex.quote(filt) if filt else ''} 2>/dev/null | while read -r _s _r _q local _peer procs; do "
            "port=${local##*:}; for pid in $(printf '%s\\n' \"$procs\" | grep -o 'pid=[0-9]*' | cut -d= -f2); do "
            "st=$(sed 's/.*) //' /proc/$pid/stat 2>/dev/null | cut -d' ' -f20); "
            "cg=$(sed -n 's/^0:://p' /proc/$pid/cgroup 2>/dev/null); c=$(cat /proc/$pid/comm 2>/dev/null); "
            "[ -n \"$st\" ] && echo listen $port $pid $st \"${cg:--}\" \"${c:-?}\"; done; done; true")


@dataclass(frozen=True)
class Listener:
    """A process holding a listening socket: ``pid``, its start (``start_us``, microseconds since boot), its
    cgroup v2 path (``cgroup``, "" when unknown) and name (``comm``)."""

    pid: int
    start_us: float
    cgroup: str
    comm: str = "?"


def parse_listeners(text: str) -> dict[int, list[Listener]]:
    """``listeners_command``'s output: port -> the processes holding its listening sockets."""
    clk = 100.0
    out: dict[int, list[Listener]] = {}
    for line in text.splitlines():
        words = line.split()
        try:
            if len(words) == 2 and words[0] == "clk":
                clk = float(words[1]) or 100.0
            elif len(words) >= 4 and words[0] == "listen":
                cg = words[4] if len(words) >= 5 and words[4] != "-" else ""
                comm = " ".join(words[5:]) or "?"
                out.setdefault(int(words[1]), []).append(
                    Listener(int(words[2]), int(words[3]) / clk * 1e6, cg, comm))
        except ValueError:
            continue
    return out


def _in_unit(cgroup: str, units: set[str]) -> bool:
    """Whether a cgroup v2 path is one of ``units``' (``/system.slice/NAME`` or below it)."""
    parts = cgroup.split("/")
    return any(u in parts for u in units)


async def _only_new_listeners(host: Host, specs: list[dict[str, Any]], results: list[ProbeResult | None],
                              since_us: int, units: set[str]) -> None:
    """A passed local ``http``/``port`` probe counts only when a process of ``units``' new invocation (in the unit's
    cgroup, started at or after ``since_us``: host monotonic microseconds, the units' new activation) holds the
    port's listening socket; one round trip (ss(8) and /proc). Otherwise it is turned to ``not_yet``: when every
    holder is a process of the old invocation (it survived the restart: ``KillMode=process``), or when the port is
    held by another program while the units' new processes listen on no port at all (a stray server that was
    there before the restart answered; the new one could not bind it). A port held by another program while the
    units' new processes listen elsewhere (a reverse proxy in front of them), held by the service manager
    (socket activation), or whose holders cannot be seen (no ``ss``, another user's processes, a host error)
    passes, and its evidence says that it could not tell whether the new process answered."""
    ports = {i: port for i, spec in enumerate(specs)
             if (r := results[i]) is not None and r.state == "passed" and (port := _local_port(spec)) is not None}
    if not ports:
        return
    try:
        res = await run_on(host, listeners_command(None))
        seen = parse_listeners(res.stdout.decode("utf-8", "replace"))
    except HostError:
        seen = None
    unit_ports = {port for port, owners in (seen or {}).items() for o in owners
                  if _in_unit(o.cgroup, units) and o.start_us >= since_us - _SPAWN_SLACK_US}
    for i, port in ports.items():
        r = results[i]
        assert r is not None
        owners = (seen or {}).get(port, [])
        new = [o for o in owners if _in_unit(o.cgroup, units) and o.start_us >= since_us - _SPAWN_SLACK_US]
        if new:
            continue  # the new invocation holds it
        named = ", ".join(f"{o.pid} ({o.comm})" for o in owners[:3])
        old = [o for o in owners if _in_unit(o.cgroup, units)]
        unit = "/".join(sorted(units))
        if owners and len(old) == len(owners):
            why = (f"but from a process of the old invocation (port {port} held by pid {named}, in the unit's cgroup "
                   "and started before its new activation: it survived the restart, e.g. KillMode=process): not the "
                   "new process")
        elif owners and not unit_ports and not any(o.pid == 1 for o in owners):
            why = (f"but port {port} is held by pid {named}, not a process of {unit}, and {unit}'s new invocation "
                   "listens on no port: the answer came from another server (one that was there before the "
                   "restart?), not the new process")
        else:
            results[i] = ProbeResult(r.kind, r.target, r.state, r.evidence + (
                f" (port {port} is held by pid {named}, not {unit}'s new process: a proxy or the service manager in "
                "front of it? whether the new process answered cannot be told)" if owners else
                f" (who holds port {port} cannot be seen here: whether the new process answered cannot be told)"),
                r.updates, r.details)
            continue
        results[i] = ProbeResult(r.kind, r.target, "not_yet", f"{r.evidence}, {why}", r.updates, r.details)


def probe_target(spec: dict[str, Any]) -> str:
    """What a probe spec looks at, as its results name it (a unit, a path, a URL, ``ADDRESS:PORT``)."""
    return _target(spec)


def _target(spec: dict[str, Any]) -> str:
    return str(spec.get("unit") or spec.get("path") or spec.get("url")
               or (f"{spec.get('address', '127.0.0.1')}:{spec['port']}" if spec.get("port") else spec.get("kind")))


async def check_probe(host: Host, spec: dict[str, Any] | Any, *, gate: str | None = None,
                      invocation: str | None = None, since_s: float | None = None) -> ProbeResult:
    """Run one probe on ``host``.

    :param spec: a probe spec model or dict (``{"kind": ...}``), possibly carrying state from earlier checks
        (:data:`STATE_KEYS`, put there by :func:`advance`).
    :param gate: the invocations of the job's units now (see :func:`check_probes`): a log line seen under
        another gate no longer counts.
    :param invocation: for a log probe of a unit's journal: only lines of this invocation count.
    :param since_s: for a log probe of a file: when the units' new invocation began (the host's uptime, seconds):
        a file not written to since then has nothing new.
    :returns: a :class:`ProbeResult`; never raises for one probe's problem: a host problem gives ``not_yet``
        with the error as evidence (a transient fault); a spec that cannot be checked (kept in a job's journal
        row by an older version that did not refuse it: an ``https://`` URL, a malformed regex) gives ``failed``
        (it can never pass), saying why; any other error in the check gives ``not_yet`` naming it (logged), so
        the job and its other probes still report.
    """
    try:
        return await _check_probe(host, spec, gate=gate, invocation=invocation, since_s=since_s)
    except AgentToolsError as exc:
        if isinstance(exc, HostError) or exc.retryable:
            return ProbeResult(_kind(spec), _target(_plain(spec)), "not_yet", f"host error: {exc.message}")
        return ProbeResult(_kind(spec), _target(_plain(spec)), "failed",
                           f"cannot be checked ({_one_line(exc.message)})")
    except Exception as exc:  # a bug in a check must not take the job's status (and its other probes) with it
        log.exception("probe.check_error", kind=_kind(spec))
        return ProbeResult(_kind(spec), _target(_plain(spec)), "not_yet",
                           f"the check failed inside agent_tools ({type(exc).__name__}: {_one_line(str(exc))}); "
                           "this is a bug")


def _plain(spec: dict[str, Any] | Any) -> dict[str, Any]:
    """A probe spec (model or dict) as a dict, for naming it when it cannot be validated."""
    if isinstance(spec, BaseModel):
        return spec.model_dump()
    return spec if isinstance(spec, dict) else {}


def _kind(spec: dict[str, Any] | Any) -> str:
    return str(_plain(spec).get("kind") or "probe")


def _one_line(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[:n - 1] + "…"


async def _check_probe(host: Host, spec: dict[str, Any] | Any, *, gate: str | None,
                       invocation: str | None, since_s: float | None) -> ProbeResult:
    state: dict[str, Any] = {}
    if isinstance(spec, dict) and STATE_KEYS & spec.keys():
        state = {k: spec[k] for k in STATE_KEYS & spec.keys()}
        spec = {k: v for k, v in spec.items() if k not in STATE_KEYS}
        if spec.get("kind") == "log" and state.get(MATCHED) and state.get(MATCHED_GATE) == gate:
            # a log line is an event: once seen after the start point it stays seen, even though the cursor
            # has moved past it (another probe may pass only later), as long as the unit's invocation is the same
            return ProbeResult("log", _target(spec), "passed", str(state[MATCHED]))
        final = state.get("final")
        if spec.get("kind") == "systemd_unit" and isinstance(final, dict):
            return ProbeResult("systemd_unit", _target(spec), "passed", str(final.get("evidence", "")),
                               details={"ended": final.get("ended", ""), "new_active": False})
    p = probe_from_dict(spec)
    try:
        if isinstance(p, SystemdUnitProbe):
            return await check_unit(host, p, state)
        if isinstance(p, HttpProbe):
            return await _http(host, p)
        if isinstance(p, LogProbe):
            r = await _log(host, p, invocation if p.unit else None, state, None if p.unit else since_s)
            if r.state == "passed":
                r.updates[MATCHED_GATE] = gate
            elif state.get(MATCHED):
                r.updates[MATCHED] = ""  # the line seen before counted for another invocation: forget it
            return r
        if isinstance(p, PortProbe):
            return await _port(host, p)
        if isinstance(p, GpuMemoryProbe):
            return await _gpu(host, p)
        return await _hostmem(host, p)
    except HostError as exc:
        return ProbeResult(p.kind, _target(spec if isinstance(spec, dict) else p.model_dump()), "not_yet",
                           f"host error: {exc.message}", details={"host_error": exc})


async def port_holder(h: Host, port: int, unit: str, main_pid: int | None = None
                      ) -> tuple[int, int, str, bool] | None:
    """Who holds TCP ``port`` on the host: ``(listener pid, unit's MainPID, listener's comm, whether the listener
    is the unit's main process or a descendant of it)``, from ``ss -Hltnp`` (iproute2: the listening socket's
    owner) and ``systemctl show -p MainPID``, walking ``PPid:`` of /proc/PID/status up; None when no listener's
    pid can be seen (nothing listens, or ss is missing or may not see other users' processes).

    :param main_pid: compare with this process instead of the unit's MainPID now (e.g. the one before a restart).
    """
    q = shlex.quote(unit)
    main = f"m={int(main_pid)}; " if main_pid else f"m=$(systemctl show -p MainPID --value {q} 2>/dev/null); "
    script = (main +
              f"l=$(ss -Hltnp 'sport = :{port}' 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2); "
              '[ -n "$l" ] || exit 0; c=$(cat /proc/$l/comm 2>/dev/null); in=no; p=$l; '
              'while [ -n "$p" ] && [ "$p" -gt 1 ]; do [ "$p" = "$m" ] && { in=yes; break; }; '
              "p=$(sed -n 's/^PPid:[[:space:]]*//p' /proc/$p/status 2>/dev/null); done; "
              'echo "$l ${m:-0} $in $c"')
    res = await run_on(h, script)
    parts = res.stdout.decode("utf-8", "replace").split(maxsplit=3)
    if len(parts) < 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    return int(parts[0]), int(parts[1]), parts[3].strip() if len(parts) > 3 else "?", parts[2] == "yes"


async def check_probes(host: Host, specs: list[dict[str, Any]]) -> list[ProbeResult]:
    """Check a job's probes on one host: its ``systemd_unit`` probes first (concurrently), then the others
    (concurrently; each at most one round trip), which count only against the units' new processes.

    While any unit probe does not see its unit active in a new invocation, the other probes are not checked:
    they read ``not_yet`` (the old process may still answer while it stops) — except a log probe of a unit
    that is in its new invocation already (``activating``): it reads that invocation's lines only, so it shows
    the load's progress, or the line that explains a failure. A log probe of a unit's journal counts only that
    unit's current invocation's lines, and a line it saw under other invocations is dropped.
    Without unit probes every probe is checked at once.

    :returns: one :class:`ProbeResult` per spec, in order.
    """
    results: list[ProbeResult | None] = [None] * len(specs)
    units = [i for i, s in enumerate(specs) if s.get("kind") == "systemd_unit"]

    async def one(i: int, gate: str | None = None, invocation: str | None = None,
                  since_s: float | None = None) -> None:
        results[i] = await check_probe(host, specs[i], gate=gate, invocation=invocation, since_s=since_s)

    async def floor(i: int, evidence: str) -> None:
        # a log file probe while the unit is not up in its new invocation yet: what the file holds now (the old
        # process stopping included) never counts; its offset moves to the file's end
        spec = specs[i]
        try:
            updates = await file_floor(host, spec)
        except HostError as exc:
            updates, evidence = {}, f"host error: {exc.message}"
        results[i] = ProbeResult("log", _target(spec), "not_yet", evidence,
                                 {**updates, **({MATCHED: ""} if spec.get(MATCHED) else {})})

    async with anyio.create_task_group() as tg:
        for i in units:
            tg.start_soon(one, i)
    gate: str | None = None
    invocations: dict[str, str] = {}
    waiting: list[ProbeResult] = []
    for i in units:
        r = results[i]
        assert r is not None
        invocations[r.target] = str(r.details.get("InvocationID", ""))
        if not r.details.get("new_active"):
            waiting.append(r)
    if units:
        gate = "|".join(invocations.values())
    others = [i for i in range(len(specs)) if i not in units]
    if waiting:
        w = waiting[0]
        # a log probe of a unit that is in its new invocation already (activating: a Type=notify server loading
        # its model) reads that invocation's lines only, so they cannot be the old process's: it is checked, and
        # shows the load's progress (or the line that says why it failed) while the unit probe waits
        fresh = {unit for unit, inv in invocations.items()
                 if inv and inv != next((s.get("not_invocation") for s in specs
                                         if s.get("kind") == "systemd_unit" and s.get("unit") == unit), None)}
        checked = [i for i in others if specs[i].get("kind") == "log" and specs[i].get("unit") in fresh]
        waits = f"not checked yet: it counts only once {w.target} is active in its new invocation"
        async with anyio.create_task_group() as tg:
            for i in others:
                if i in checked:
                    continue
                spec = specs[i]
                if spec.get("kind") == "log" and spec.get("path"):
                    tg.start_soon(floor, i, waits)
                    continue
                results[i] = ProbeResult(str(spec.get("kind")), _target(spec), "not_yet", waits,
                                         {MATCHED: ""} if spec.get(MATCHED) else {})
    else:
        checked = others
    began = [t / 1e6 for i in units if (r := results[i]) is not None and r.details.get("new_active")
             and (t := _int(r.details.get("InactiveExitTimestampMonotonic")))]
    async with anyio.create_task_group() as tg:
        for i in checked:
            tg.start_soon(one, i, gate, invocations.get(str(specs[i].get("unit") or "")), min(began, default=None))
    if units and not waiting:
        starts = [t for i in units if (r := results[i]) is not None and r.details.get("new_active")
                  for key in ("InactiveExitTimestampMonotonic", "ExecMainStartTimestampMonotonic")
                  if (t := _int(r.details.get(key)))]
        if starts:
            await _only_new_listeners(host, specs, results, min(starts),
                                      {r.target for i in units if (r := results[i]) is not None})
    old = [(str(specs[i].get("unit")), int(specs[i]["old_main_pid"])) for i in units if specs[i].get("old_main_pid")]
    if old and not waiting:  # the same for hosts whose cgroups cannot be read: the old main process by its pid
        await _answered_by_old_process(host, specs, results, old)
    return [r for r in results if r is not None]


def _int(value: object) -> int | None:
    try:
        return int(str(value)) if value not in (None, "") else None
    except ValueError:
        return None


async def _answered_by_old_process(host: Host, specs: list[dict[str, Any]], results: list[ProbeResult | None],
                                   old: list[tuple[str, int]]) -> None:
    """An http or port probe that passed does not count while its port is held by a unit's main process from
    before the restart (or a child of it: :func:`port_holder`; the old server kept alive past the restart, e.g.
    ``KillMode=none``, still answering): it is turned into ``not_yet``, naming that process."""
    for i, spec in enumerate(specs):
        r = results[i]
        if r is None or r.state != "passed" or spec.get("kind") not in ("http", "port"):
            continue
        try:
            port = int(spec["port"]) if spec.get("kind") == "port" else (urlsplit(str(spec.get("url"))).port or 80)
        except (KeyError, TypeError, ValueError):
            continue
        for unit, pid_before in old:
            try:
                held = await port_holder(host, port, unit, main_pid=pid_before)
            except HostError as exc:  # who answered cannot be told this time: not counted yet
                results[i] = ProbeResult(r.kind, r.target, "not_yet", f"{r.evidence}, but whether {unit}'s process "
                                         f"from before the restart answered could not be seen ({exc.message})")
                break
            if held is not None and held[3]:
                pid, _, comm, _ = held
                results[i] = ProbeResult(r.kind, r.target, "not_yet",
                                         f"{r.evidence}, but from pid {pid} ({comm}): port {port} is still held by "
                                         f"{unit}'s process from before the restart ({pid_before}), not the new one")
                break
