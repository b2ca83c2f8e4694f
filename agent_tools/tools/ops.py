"""Operations tools: services, files, memory, readiness waits.

Files are read and written through the exec seam (``cat``/``mv`` over the host's shell), not SFTP: one seam
means recording, replay and policies see file writes too, and it works through any login shell. The write is
atomic all the same: content goes to a temp file in the same directory (created by ``cp -p`` of the old file,
so mode and owner are kept), then ``mv -f`` renames it over the target (rename(2) is atomic on one file
system).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import json
import re
import secrets
import shlex
from collections import Counter
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar
from urllib.parse import urlsplit

import anyio
import h11
import structlog
from pydantic import Field

from ..errors import (
    AgentToolsError,
    BadArguments,
    ConnectionLost,
    ConnectionRefused,
    HostError,
    NotFound,
    PermissionDenied,
    PolicyError,
    TargetTimeout,
    TargetUnreachable,
    Unsupported,
)
from ..hosts.base import Host, run_on
from ..jobs.hints import NextCall, render
from ..jobs.manager import _no_answer
from ..outcomes import Denied, Detached, Finished, NeedsApproval, ProbeReport, ResultModel
from ..output import VIEW_CONTEXT_BYTES
from ..probes.checks import UNIT_PROPS, advance, check_probes, port_holder, probe_target
from ..probes.parse import parse_free, parse_nvidia_smi, parse_systemctl_show, parse_timespan_s
from ..probes.result import ProbeResult
from ..probes.specs import probe_from_dict, with_log_units
from ..redact import MARK, redact_slice
from .kept_secrets import keep_secrets, shown_text

if TYPE_CHECKING:
    from ..jobs.journal import JobRecord
    from .toolkit import RunCommandResult, Toolkit

log = structlog.get_logger(__name__)

__all__ = ["FileContent", "FileRestored", "FileWritten", "GpuMemory", "HostInfo", "HostList", "HostMemory",
           "HttpResponse", "RestartPlan", "ServiceStatus", "WaitResult", "plan_restart", "unit_of_path"]

BACKUP_DIR = "${XDG_STATE_HOME:-$HOME/.local/state}/agent-tools/backups"
_UNIT_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:-_.@\\")
_GIB = 2**30
#: unit types of systemd.unit(5) (a file with one of these suffixes under a systemd unit directory is a unit)
_UNIT_SUFFIXES = ("service", "socket", "target", "timer", "mount", "automount", "path", "slice", "scope", "swap",
                  "device")
_UNIT_PATH_RE = re.compile(r"/systemd/(?:system|user)/(?P<unit>[^/]+\.(?:" + "|".join(_UNIT_SUFFIXES) + r"))"
                           r"(?:\.d/[^/]+\.conf)?$")
#: the most a diff in a result may take (characters); the file itself is whole on the host
_MAX_DIFF_CHARS = 4000


def _gib(n: int) -> float:
    return round(n / _GIB, 1)


class HostInfo(ResultModel):
    """One host alias the tools can use."""

    host: str = Field(description="the alias to pass as host")
    source: Literal["local", "registered", "ssh_config", "policy", "journal"] = Field(
        description="where the alias comes from (journal: only jobs of it are known)")
    hostname: str = Field(default="", description="HostName of the SSH config block, when it differs")
    user: str = Field(default="", description="User of the SSH config block (the login user), when it sets one")
    jobs_running: int = Field(default=0, description="jobs running on it now (the host was asked; when it did "
                                                     "not answer, as last seen: the note says so)")
    reachable: bool | None = Field(default=None, description="check=true: whether it answered a command now")
    error: str = Field(default="", description="check=true: why it did not")


class HostList(ResultModel):
    hosts: list[HostInfo]
    note: str = ""


class ServiceStatus(ResultModel):
    """A systemd unit as ``systemctl show`` reports it; fields at their usual value are left out."""

    host: str
    unit: str
    state: str = Field(description="ActiveState/SubState (active/running, activating/start, failed/failed...), "
                                   "or not-found when no such unit exists")
    note: str = Field(default="", description="what the state means when it needs saying")
    result: str = Field(default="success", description="systemd Result of the last run")
    exit_status: int = Field(default=0, description="exit status of the main process's last run")
    restarts: int = Field(default=0, description="NRestarts")
    main_pid: int = Field(default=0)
    unit_file: str = Field(default="", description="FragmentPath: the unit file to edit")
    drop_ins: list[str] = Field(default_factory=list, description="drop-in files that override it")
    unit_file_state: str = Field(default="", description="UnitFileState: enabled (starts at boot), disabled (does "
                                                         "not), static, masked...")
    need_daemon_reload: bool = Field(default=False, description="the unit file changed since systemd read it")
    timeout_start_s: float | None = Field(default=None, description="TimeoutStartSec in seconds (None: infinity)")
    journal: str = Field(default="", description="newest journal lines (matching grep, when given)")


class FileContent(ResultModel):
    host: str
    path: str
    offset: int = Field(description="byte offset of text's first byte")
    total_bytes: int
    text: str
    next_offset: int | None = Field(default=None, description="set when the file has more: read_file(offset="
                                                              "next_offset) reads on")


class FileWritten(ResultModel):
    host: str
    path: str
    bytes_written: int
    backup_id: str | None = Field(default=None, description="restore_file(host, path, backup_id) undoes this write")
    diff: str = Field(default="", description="unified diff old → new (left out for a new file: it is the content "
                                               "sent)")
    next: str = ""


class FileRestored(ResultModel):
    host: str
    path: str
    backup_id: str
    diff: str = Field(default="", description="unified diff current → restored (left out: nothing changed)")
    next: str = ""


class GpuMemory(ResultModel):
    """``nvidia-smi`` memory per GPU and in all, in MiB (free = total - used, given for the sum only)."""

    host: str
    gpus: list[dict[str, int]] = Field(description="per GPU: index, used_mib, total_mib")
    total_mib: int
    used_mib: int
    free_mib: int = 0


class HostMemory(ResultModel):
    """``free -b``: available is what can be allocated without swapping (it counts reclaimable cache)."""

    host: str
    total_bytes: int
    total_gib: float
    used_bytes: int
    used_gib: float
    available_bytes: int
    available_gib: float
    buff_cache_bytes: int = Field(default=0, description="page cache and buffers (mostly reclaimable)")


class WaitResult(ResultModel):
    host: str
    outcome: Literal["ready", "failed", "deadline_exceeded"]
    elapsed_s: float
    probes: list[ProbeReport]
    why: str
    next: str = ""


class HttpResponse(ResultModel):
    host: str
    url: str
    status: int
    data: Any = Field(default=None, description="the body parsed as JSON (only the fields asked for)")
    body: str = Field(default="", description="the body as text, when it is not JSON (first 16 KiB)")
    body_bytes: int = Field(default=0, description="size of the body in bytes")
    missing: list[str] = Field(default_factory=list, description="fields asked for that the body does not have")
    note: str = Field(default="", description="a field asked for that is close to one the body has; a port held by "
                                              "a process that is not the main process (or a child of it) of the "
                                              "unit a job follows on that port")


#: systemctl refused for the login user (polkit: "Access denied", "Interactive authentication required.")
_ACCESS_DENIED_RE = re.compile(r"Access denied|Interactive authentication required|authentication is required",
                               re.IGNORECASE)
_ENOENT = ("No such file or directory", "No such file", "Not a directory", "Directory nonexistent")
_EACCES = ("Permission denied", "Operation not permitted")
#: how a host's shell prefixes its own error lines ("bash: line 1: ", "/bin/sh: 1: ", "sh: 1: cannot open ")
_SHELL_PREFIX = re.compile(r"^(?:[\w/.-]*/)?(?:ba|da|z|k|mk)?sh: (?:line )?\d+: (?:cannot open )?", re.MULTILINE)


def file_error(host: str, path: str, doing: str, stderr: bytes | str, root: str = "") -> AgentToolsError:
    """The error of a failed file operation, by what the host's tools printed (strerror(3) texts of coreutils and
    the shell): ENOENT/ENOTDIR → :class:`NotFound`, EACCES/EPERM → :class:`PermissionDenied`, anything else →
    :class:`BadArguments` with the host's words.

    :param doing: the verb for the message ("read", "write", "restore").
    :param root: an alias that reaches the same machine as root (:func:`root_alias`), named for EACCES/EPERM.
    """
    text = (stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr).strip()
    # a known strerror(3) text is said as it is: the shell's or the tool's own prefix ("bash: line 1: PATH:",
    # "/bin/sh: 1: cannot open PATH:") is how that host's shell words it, not something the model can use
    known = next((m for m in (*_EACCES, *_ENOENT) if m in text), None)
    said = ("no such file or directory" if known in ("No such file", "Directory nonexistent") else known.lower()) \
        if known else _SHELL_PREFIX.sub("", text)[-300:] or "failed"
    message = f"cannot {doing} {path} on {host}: {said}"
    if known in _EACCES:
        other = f"host={root!r} reaches the same machine as root, " if root else ""
        return PermissionDenied(message + f" (the login user lacks the rights: {other}another path, or an operator)")
    if known in _ENOENT:
        return NotFound(message)
    return BadArguments(message)


def root_alias(tk: Toolkit, host: str) -> str:
    """Another alias of the SSH config that reaches the same ``HostName`` as ``root``, when ``host`` logs in as
    someone else (a permission failure there may be the login user's), else ``""``."""
    entries = _config_entries(tk)
    entry = next((e for e in entries if e.alias == host), None)
    if entry is None or not entry.hostname or entry.user in (None, "", "root"):
        return ""
    return next((e.alias for e in entries if e.alias != host and e.hostname == entry.hostname and e.user == "root"),
                "")


def _no_systemd(host: str, stdout: bytes, stderr: bytes) -> Unsupported | None:
    """:class:`Unsupported` when ``systemctl`` could not talk to systemd on the host (not installed, or not the
    init system: systemctl(1) prints "System has not been booted with systemd"), else None."""
    text = stderr.decode("utf-8", "replace")
    if "ActiveState=" in stdout.decode("utf-8", "replace") or not text.strip():
        return None
    if "not been booted with systemd" in text or "systemctl: not found" in text or "Failed to connect to bus" \
            in text or "command not found" in text:
        return Unsupported(f"{host} has no usable systemd (systemctl: {text.strip().splitlines()[0][:200]}): "
                           "units cannot be managed there; use run_command for the process")
    return None


def check_unit(unit: str) -> str:
    """Normalise a unit name (``sglang`` → ``sglang.service``). :raises BadArguments: illegal characters."""
    if not unit or not set(unit) <= _UNIT_CHARS or unit.startswith("-"):
        raise BadArguments(f"{unit!r} is not a systemd unit name")
    return unit if "." in unit else unit + ".service"


async def unit_props(host: Host, unit: str,
                     props: str = UNIT_PROPS + ",FragmentPath,NeedDaemonReload,LoadState") -> dict[str, str]:
    """``systemctl show -p PROPS UNIT`` as a dict."""
    res = await run_on(host, f"systemctl show -p {props} {shlex.quote(unit)}")
    return parse_systemctl_show(res.stdout.decode("utf-8", "replace"))


def unit_of_path(path: str) -> str | None:
    """The unit a file configures, when it is a unit file or a drop-in under a systemd unit directory
    (``/etc/systemd/system/x.service``, ``.../x.service.d/override.conf``; systemd.unit(5)), else None."""
    m = _UNIT_PATH_RE.search(path)
    return m.group("unit") if m else None


async def list_hosts(tk: Toolkit, check: bool = False) -> HostList:
    """The aliases the tools can use (:meth:`Toolkit.known_hosts`), with the jobs running on each now: every host
    the journal last saw running jobs on is asked their state (one round trip per host, at once, each within
    :data:`HOSTS_LOOK_S`; ended jobs are recorded as such); a host that does not answer keeps its last-seen count
    and the note says so. ``check`` runs ``true`` on every other host at once (same bound). The call has no time of
    its own: it answers within :data:`HOSTS_LOOK_S` (plus a moment), whatever the config's ``ConnectTimeout``; a
    host not answered by then is ``unreachable`` (or ``connecting``: the time ran out while the connect was under
    way, which goes on in the background for the next call)."""
    known = tk.known_hosts()
    running: dict[str, int] = {}
    for rec in tk.journal.list(limit=1000):
        if rec.state == "running":
            running[rec.host] = running.get(rec.host, 0) + 1
    for alias in running:
        known.setdefault(alias, "journal")
    entries = {e.alias: e for e in _config_entries(tk)}
    hosts = []
    for alias, source in known.items():
        entry = entries.get(alias)
        name = entry.hostname if entry is not None and entry.hostname and entry.hostname != alias else ""
        hosts.append(HostInfo(host=alias, source=source, hostname=name or "",
                              user=(entry.user or "") if entry is not None else ""))
    stale: list[str] = []

    async def count_running(info: HostInfo) -> None:
        if not running.get(info.host):
            return
        try:
            info.jobs_running = await _within(tk, info.host, _running_now(tk, info.host))
            if check:
                info.reachable = True
        except AgentToolsError as exc:
            info.jobs_running = running[info.host]
            stale.append(info.host)
            if check:
                info.reachable, info.error = False, exc.message

    async def probe(info: HostInfo) -> None:
        if info.source == "journal" or running.get(info.host):
            return  # (a journal-only alias has nothing to connect to; count_running asked the host already)
        try:
            await _within(tk, info.host, run_on(tk.hosts.get(info.host), "true"))
            info.reachable = True
        except AgentToolsError as exc:
            info.reachable, info.error = False, exc.message

    async with anyio.create_task_group() as tg:
        for info in hosts:
            tg.start_soon(count_running, info)
            if check:
                tg.start_soon(probe, info)
    notes = []
    if stale:
        notes.append(f"{', '.join(sorted(stale))}: did not answer; jobs_running is what was last seen there")
    if any(h.source == "journal" for h in hosts):
        notes.append("source=journal: jobs of an alias no config names any more (list_jobs(host) shows them)")
    return HostList(hosts=hosts, note="; ".join(notes))


async def _running_now(tk: Toolkit, alias: str) -> int:
    """How many of the journal's running jobs of ``alias`` still run, asking the host (one round trip); the ones
    that ended are recorded. Jobs started on another machine than the alias reaches now are left as they were
    (counted as last seen). :raises AgentToolsError: the host cannot be reached."""
    recs = [r for r in tk.journal.list(alias, limit=1000) if r.state == "running"]
    h, _ = tk._host_of_jobs(alias)
    elsewhere = await tk._started_elsewhere(h, alias)
    asked = [r for r in recs if r.job_id not in elsewhere]
    states = await tk.runner.host_states(h, [r.job_id for r in asked])
    still = len(recs) - len(asked)
    for rec in asked:
        st = states.get(rec.job_id)
        if st is None:
            still += 1
            continue
        state, *_ = tk.runner.apply_state(rec, st)
        still += state == "running"
    return still


def _config_entries(tk: Toolkit) -> list[Any]:
    from ..hosts.sshconfig import config_hosts

    return config_hosts(tk.hosts.config_paths)


T = TypeVar("T")

#: seconds list_hosts gives each host to answer (the call has no time of its own: the rule is its own time + 5 s)
HOSTS_LOOK_S = 4.0


async def _within(tk: Toolkit, alias: str, aw: Awaitable[T]) -> T:
    """``aw`` (a round trip to ``alias``) within :data:`HOSTS_LOOK_S`. :raises AgentToolsError: as ``aw`` does,
    or, when the time ran out, what the host was doing (``jobs.manager._no_answer``: no connection,
    a connect under way, or an open connection that did not answer)."""
    host = tk.hosts.get(alias)
    with anyio.move_on_after(HOSTS_LOOK_S):
        return await aw
    raise _no_answer(host, "list_hosts", HOSTS_LOOK_S)


_STATUS_PROPS = UNIT_PROPS + ",LoadState,FragmentPath,DropInPaths,NeedDaemonReload,MainPID,UnitFileState"


async def service_status(tk: Toolkit, host: str, unit: str, journal_lines: int = 10,
                         grep: str | None = None) -> ServiceStatus:
    """``systemctl show`` of the unit and its newest journal lines (``grep``: only lines matching a
    case-insensitive extended regex, as ``grep -iE``), in one round trip.

    A unit that does not exist (``LoadState=not-found``) says so in ``state`` and ``note``; its (empty) journal
    is not read.
    """
    h = tk.hosts.get(host)
    unit = check_unit(unit)
    q = shlex.quote(unit)
    script = f"systemctl show -p {_STATUS_PROPS} {q}"
    if journal_lines:
        # `--no-pager -o cat`: message text only; grep on the host so only matching lines travel
        filt = f" | grep -a -i -E -e {shlex.quote(grep)}" if grep else ""
        script += (f"; echo @@AT journal; journalctl -u {q} -o cat --no-pager -n {20000 if grep else journal_lines}"
                   f"{filt} | tail -n {journal_lines}")
    res = await run_on(h, script)
    missing = _no_systemd(host, res.stdout, res.stderr)
    if missing is not None:
        raise missing
    text = res.stdout.decode("utf-8", "replace")
    show, _, journal = text.partition("@@AT journal\n")
    # journalctl(1) prints "-- No entries --" when nothing matches: that is no journal line of the unit
    journal = _once(line for line in journal.splitlines() if line.strip() != "-- No entries --")
    props = parse_systemctl_show(show)
    load = props.get("LoadState", "")
    if load in ("not-found", "bad-setting", "error", "masked"):
        notes = {"not-found": f"{unit} does not exist on {host} (LoadState=not-found): check the name"
                              + (await _close_units(h, unit) if load == "not-found" else ""),
                 "masked": f"{unit} is masked on {host}: it cannot be started until unmasked",
                 "bad-setting": f"{unit} has an invalid setting: systemd refuses to load it (journalctl -u)",
                 "error": f"{unit} failed to load (LoadState=error)"}
        if load == "not-found":
            return ServiceStatus(host=host, unit=unit, state="not-found", note=notes[load])
    else:
        notes = {}
    active, sub = props.get("ActiveState", "?"), props.get("SubState", "?")
    note = notes.get(load, "")
    if not note and props.get("NeedDaemonReload") == "yes":
        note = (f"the unit file changed since systemd read it: restart_service(host='{host}', unit='{unit}', "
                "daemon_reload=true) applies it")
    if not note:
        note = _restarting(props)
    return ServiceStatus(
        host=host, unit=unit, state=f"{active}/{sub}", note=note, result=props.get("Result") or "success",
        exit_status=_int(props.get("ExecMainStatus")), restarts=_int(props.get("NRestarts")),
        main_pid=_int(props.get("MainPID")), unit_file=props.get("FragmentPath", ""),
        drop_ins=props.get("DropInPaths", "").split(), unit_file_state=props.get("UnitFileState", ""),
        need_daemon_reload=props.get("NeedDaemonReload") == "yes",
        timeout_start_s=parse_timespan_s(props.get("TimeoutStartUSec", "")), journal=journal[-4000:])


def _once(lines: Iterable[str]) -> str:
    """Journal lines with each line said once, where it was last, counted when it came more often (systemd logs
    a unit file's bad setting at every daemon-reload: the same lines again and again)."""
    seen = list(lines)
    counts = Counter(seen)
    last = {line: i for i, line in enumerate(seen)}
    return "".join(line + (f" ({counts[line]} times)" if counts[line] > 1 else "") + "\n"
                   for i, line in enumerate(seen) if last[line] == i)


def _restarting(props: dict[str, str]) -> str:
    """What ``NRestarts`` says (systemd.service(5) ``Restart=``: systemd started the unit again after its main
    process exited; the count starts again at a start by hand): a unit between two of those restarts
    (``auto-restart``), or one that needed several, is crash-looping, whatever its state at this instant."""
    n = _int(props.get("NRestarts"))
    active, sub = props.get("ActiveState", ""), props.get("SubState", "")
    if not n and sub != "auto-restart":
        return ""
    times = "once" if n == 1 else f"{n} times"
    if n < 2 and sub != "auto-restart":
        return f"systemd restarted it {times} after its main process exited (Restart=): the journal shows why"
    now = {"auto-restart": f"now it exited again ({props.get('Result') or 'exit-code'}, status "
                           f"{_int(props.get('ExecMainStatus'))}) and waits to be started again",
           "running": "it runs again for now"}.get(sub, f"now it is {active}/{sub}")
    return (f"crash-looping: systemd restarted it {times} after its main process exited (Restart=); {now}: the "
            "journal shows why each run ended")


async def _close_units(h: Host, unit: str) -> str:
    """"; did you mean 'X'?" with the unit names of the host closest to ``unit`` (difflib; the unit files and the
    units loaded, systemctl(1) list-unit-files / list-units --all), or "" (none close, or the host cannot list)."""
    try:
        with anyio.move_on_after(10):
            res = await run_on(h, "{ systemctl list-unit-files --no-legend --no-pager; systemctl list-units --all "
                                  "--no-legend --no-pager --plain; } 2>/dev/null | awk '{print $1}'")
            names = sorted({n for n in res.stdout.decode("utf-8", "replace").split() if "." in n and n != unit})
            scored = sorted(((difflib.SequenceMatcher(None, unit, n).ratio(), n) for n in names), reverse=True)
            # the best, and those nearly as close (a typo has one answer; at-helo is at-hello, not at-slow too)
            close = [n for r, n in scored[:3] if r >= 0.75 and r >= scored[0][0] - 0.08]
            if close:
                return f"; did you mean {' or '.join(repr(c) for c in close)}?"
    except AgentToolsError:
        pass
    return ""


def _int(text: str | None) -> int:
    try:
        return int(text or 0)
    except ValueError:
        return 0


#: systemd-system.conf(5) DefaultTimeoutStartSec: a unit's start timeout unless it sets TimeoutStartSec=
_DEFAULT_START_S = 90.0


@dataclass(frozen=True)
class RestartPlan:
    """What :func:`restart_service` runs, decided before anything changes (:func:`plan_restart`).

    :param command: ``systemctl daemon-reload && systemctl restart --no-block UNIT`` (or without the reload).
    :param probes: probe specs (dicts) that judge the restart: the unit up in an invocation other than
        ``InvocationID`` at planning time, then the extra probes (log probes from the unit's journal cursor then).
    :param deadline_s: seconds until a restart that is not ready counts as ``deadline_exceeded``.
    :param timeout_s: the unit's ``TimeoutStartUSec`` in seconds (None: unlimited).
    :param unit_file_state: the unit's ``UnitFileState`` (``enabled``, ``disabled``: it does not start at boot).
    :param was_active: the unit was active (or starting) before the restart.
    """

    command: str
    probes: list[dict[str, Any]]
    deadline_s: float
    timeout_s: float | None
    unit_file_state: str = ""
    was_active: bool = False


async def plan_restart(tk: Toolkit, host: str, unit: str, daemon_reload: bool = True,
                       probes: list[dict[str, Any]] | None = None, deadline_s: float | None = None) -> RestartPlan:
    """Steps (1) and the probes of :func:`restart_service`, without running the restart: a plan that can be kept
    (a Temporal workflow's history) and run later, or again, with the same probes (an invocation that started
    since the plan still counts as the restart's).

    :raises BadArguments: invalid unit name or probes, or a unit the host does not know.
    :raises HostError: the host cannot be reached.
    """
    unit = check_unit(unit)
    extra = with_log_units([probe_from_dict(p).model_dump(exclude_none=True) for p in (probes or [])], unit)
    probe_reads_allowed(tk, host, extra)
    own = next((p for p in extra if p.get("kind") == "systemd_unit" and check_unit(str(p["unit"])) == unit), {})
    extra = [p for p in extra if p is not own]
    h = tk.hosts.get(host)
    props, cursor, unit_cursor = await _unit_and_cursor(h, host, unit)
    if props.get("LoadState") == "not-found":
        raise NotFound(f"unit {unit} does not exist on {host} (LoadState=not-found): check the name "
                       f"(service_status(host='{host}', unit=...) or run_command 'systemctl list-units')"
                       + await _close_units(h, unit))
    timeout_s = parse_timespan_s(props.get("TimeoutStartUSec", ""))
    if props.get("LoadState") in ("bad-setting", "error"):
        # a unit systemd refused to load shows TimeoutStartUSec=infinity, not a start timeout of its own: the
        # manager's default (systemd-system.conf(5) DefaultTimeoutStartSec=90s) is what a fixed file gets
        timeout_s = _DEFAULT_START_S
    if deadline_s is None:
        deadline_s = (timeout_s + 30.0) if timeout_s is not None else 900.0
    for p in extra:  # a log probe counts only what is written from now on: never a line from before the restart
        if p.get("kind") != "log" or p.get("cursor") or p.get("offset"):
            continue
        if p.get("unit") == unit:
            p["cursor"] = unit_cursor
        elif p.get("unit"):
            p["cursor"] = await _journal_cursor(h, str(p["unit"]))
        elif p.get("path"):
            p["offset"] = await _file_size(h, str(p["path"]))
    condition = props.get("ConditionTimestampMonotonic", "")
    spec = [{**own, "kind": "systemd_unit", "unit": unit, "not_invocation": props.get("InvocationID") or None,
             "before_condition_us": int(condition) if condition.isdigit() else None, "journal_cursor": cursor,
             "old_main_pid": _int(props.get("MainPID")) or None},
            *extra]
    cmd = ("systemctl daemon-reload && " if daemon_reload else "") + f"systemctl restart --no-block {shlex.quote(unit)}"
    return RestartPlan(cmd, spec, deadline_s, timeout_s, props.get("UnitFileState", ""),
                       props.get("ActiveState") in ("active", "activating", "reloading"))


async def restart_service(tk: Toolkit, host: str, unit: str, daemon_reload: bool = True,
                          probes: list[dict[str, Any]] | None = None, deadline_s: float | None = None,
                          approval_id: str | None = None) -> RunCommandResult:
    """Restart a unit without blocking and return a ``detached`` job that follows it to readiness.

    Steps: (1) one round trip reads the unit's properties (``InvocationID``, ``ConditionTimestampMonotonic``,
    ``TimeoutStartUSec``: systemd.service(5)'s start timeout, after which systemd fails the start with
    Result=timeout) and the journal's cursor; (2) run ``systemctl daemon-reload && systemctl restart --no-block
    UNIT`` (``--no-block`` only enqueues the job; a plain restart blocks until Type=notify sends READY=1);
    (3) look at readiness once and return a job whose probes are the unit up in a *new* invocation for its
    settle window (:class:`~agent_tools.probes.specs.SystemdUnitProbe`) plus ``probes``, which count only
    against the new process; its deadline defaults to the unit's start timeout + 30 s. That deadline is also the
    restart job's kill deadline on the host (a ``systemctl`` that hangs is killed by the job's monitor), unless
    the policy's ``hard_deadline_s`` is smaller.

    :param probes: extra probe specs (dicts). A ``systemd_unit`` probe of ``unit`` itself sets that probe's
        options (e.g. ``settle_s``) instead of adding a second one.
    :param deadline_s: seconds until a restart that is not ready counts as ``deadline_exceeded`` (and the
        restart job's kill deadline on the host).
    :raises BadArguments: invalid unit name or probes, or a unit the host does not know.
    """
    try:
        plan = await plan_restart(tk, host, unit, daemon_reload, probes, deadline_s)
    except ConnectionLost as exc:
        # step (1) only reads: whatever the host seam says of its command ("it may be running"), no restart was
        # sent; nothing reserved a job id
        text = re.sub(r"; (?:nothing was started|it may be running)$", "", exc.message)
        raise ConnectionLost(exc.host, f"{text}; this was the read of {unit}'s state before the restart: no "
                                       "restart was sent (restart_service again once the host answers)") from exc
    h = tk.hosts.get(host)
    cmd, spec, deadline_s, timeout_s = plan.command, plan.probes, plan.deadline_s, plan.timeout_s
    # the deadline is also the restart job's kill deadline on the host (its monitor kills a hung systemctl)
    out = await tk.run_command(host=host, command=cmd, budget_s=30.0, approval_id=approval_id,
                               deadline_s=deadline_s, _probes=spec, _deadline_s=deadline_s)
    if isinstance(out, Finished) and out.exit_status != 0:
        # systemctl refused to enqueue the restart (a bad unit file, a missing unit, no rights): no restart began,
        # and the job's readiness is decided now, at the command's end (a later job_status says the same)
        unit_name = check_unit(unit)
        with contextlib.suppress(AgentToolsError):
            await tk.runner.job_status(h, out.job_id, wait_s=0)
        said = out.stderr.text
        if _ACCESS_DENIED_RE.search(said):
            # the login user may not manage units: no fix of the unit helps; another login does
            root = root_alias(tk, host)
            instead = (f"restart_service(host={root!r}, unit={unit_name!r}) does it as root on the same machine"
                       if root else "use a login that may (root), or ask an operator")
            return out.model_copy(update={"next": (
                f"the restart was not enqueued: the login user of {host} may not manage systemd units (systemctl "
                f"exited {out.exit_status}: access denied), so nothing restarted: {instead}")})
        return out.model_copy(update={"next": (
            f"the restart was not enqueued (systemctl exited {out.exit_status}; stderr says why), so nothing "
            f"restarted: service_status(host={host!r}, unit={unit_name!r}) shows the unit and its journal; fix the "
            "cause, then restart_service again")})
    if not isinstance(out, Finished):
        return out  # detached (systemctl hung: the job follows it), or the enqueue failed to start, or denied/asked
    # the enqueue finished within its budget: the job now follows readiness through its probes. The restart has
    # run: whatever the first look meets, the answer carries the job id (never "failed, try again")
    try:
        status = await tk.runner.job_status(h, out.job_id, wait_s=0)
    except Exception as exc:
        if not isinstance(exc, AgentToolsError):
            log.exception("restart_service.first_look_failed", host=host, job_id=out.job_id)
        why = exc.message if isinstance(exc, AgentToolsError) else f"{type(exc).__name__}: {exc}"
        return Detached(host=host, command=cmd, job_id=out.job_id, elapsed_s=out.duration_s,
                        deadline_s=deadline_s,
                        why=f"restart of {unit} enqueued; its first readiness look failed ({why})",
                        stdout=out.stdout, stderr=out.stderr,
                        next=render([NextCall("job_status", {"job_id": out.job_id, "wait_s": 30},
                                              "to follow the restart (do not restart again)")]))
    allows = f"{timeout_s:g} s" if timeout_s is not None else "unlimited time"
    # while pending, not status.why: it repeats the probes' evidence, which is right below; once decided (the unit
    # failed at once, or was ready already) the verdict and its evidence (the unit's journal) are the news
    why = (f"restart of {unit} enqueued; the probes judge readiness within {deadline_s:g} s (the unit allows "
           f"{allows} to start)" if status.readiness == "pending" else status.why)
    if plan.unit_file_state == "disabled" and not plan.was_active and status.readiness in ("pending", "ready"):
        # a unit started for the first time (a new deployment) that will not come back after a reboot
        why += (f"; {unit} is disabled: it will not start at boot (run_command 'systemctl enable "
                f"{shlex.quote(check_unit(unit))}' if it should)")
    return Detached(host=host, command=cmd, job_id=out.job_id, elapsed_s=out.duration_s,
                    deadline_s=deadline_s, hard_deadline_s=status.hard_deadline_s, readiness=status.readiness,
                    why=why, probes=status.probes, stdout=out.stdout, stderr=out.stderr, next=status.next)


async def _journal_cursor(h: Host, unit: str) -> str | None:
    """The cursor of ``unit``'s newest journal entry (journalctl(1) ``-n 0 --show-cursor``), None without one."""
    res = await run_on(h, f"journalctl -u {shlex.quote(unit)} -n 0 --show-cursor --no-pager -o cat 2>/dev/null")
    found = [ln for ln in res.stdout.decode("utf-8", "replace").splitlines() if ln.startswith("-- cursor: ")]
    return found[-1].removeprefix("-- cursor: ").strip() if found else None


async def _file_size(h: Host, path: str) -> int:
    """``path``'s size in bytes now (0 when it does not exist yet, or is not a regular file: all of it will be new),
    from stat(1): the file is not opened (a device or a FIFO never is)."""
    q = shlex.quote(path)
    res = await run_on(h, f"[ -f {q} ] && stat -L -c %s -- {q} 2>/dev/null || echo 0")
    text = res.stdout.decode("ascii", "replace").strip().splitlines()
    return int(text[-1]) if text and text[-1].isdigit() else 0


async def _unit_and_cursor(h: Host, host: str, unit: str) -> tuple[dict[str, str], str | None, str | None]:
    """The unit's properties (:func:`unit_props`' set) and two journal tail cursors (journalctl(1) ``-n 0
    --show-cursor``: "from now on"): the whole journal's, and the unit's own (None when it has no lines yet),
    in one round trip. A log probe reads ``-u UNIT --after-cursor``, which wants a cursor of an entry that
    matches (see :func:`agent_tools.probes.systemd.after_cursor`)."""
    props = UNIT_PROPS + ",FragmentPath,NeedDaemonReload,LoadState,UnitFileState"
    q = shlex.quote(unit)
    res = await run_on(h, f"systemctl show -p {props} {q}; journalctl -n 0 --show-cursor --no-pager -o cat "
                          f"2>/dev/null; echo '--unit--'; journalctl -u {q} -n 0 --show-cursor --no-pager -o cat "
                          "2>/dev/null")
    missing = _no_systemd(host, res.stdout, res.stderr)
    if missing is not None:
        raise missing
    text = res.stdout.decode("utf-8", "replace")
    cursors: list[str | None] = [None, None]
    part = 0
    for line in text.splitlines():
        if line == "--unit--":
            part = 1
        elif line.startswith("-- cursor: "):
            cursors[part] = line.removeprefix("-- cursor: ").strip()
    shown = "\n".join(ln for ln in text.splitlines() if not ln.startswith("--"))
    return parse_systemctl_show(shown), cursors[0], cursors[1]


async def read_file(tk: Toolkit, host: str, path: str, offset: int = 0, limit: int = 65536,
                    approval_id: str | None = None) -> FileContent | Denied | NeedsApproval:
    """Bytes ``[offset, offset+limit)`` of a file on the host, decoded for reading. With a policy, the read is
    decided as ``cat PATH`` (a file of password hashes or private keys asks first in the shipped policies).
    Secrets are hidden with the file's bytes on both sides of the page
    (:data:`~agent_tools.output.VIEW_CONTEXT_BYTES` before it in the same round trip, and after it in one more
    when the page ends before the file does), so a secret the page cuts (a private key read from its middle, a
    ``.netrc`` entry's ``password`` line) is found as in the whole file."""
    _check_path(path)
    if offset < 0 or not 0 < limit <= 1 << 20:
        raise BadArguments("offset must be >= 0 and limit between 1 and 1048576 bytes")
    h = tk.hosts.get(host)
    q = shlex.quote(path)
    decision = await tk.gate(host, f"cat {q}", approval_id, same_args="host, path")
    if decision is not None:
        return decision
    start = max(0, offset - VIEW_CONTEXT_BYTES)  # bytes before the page: only to find secrets the page cuts
    res = await run_on(h, f"wc -c < {q} && tail -c +{start + 1} -- {q} | head -c {offset - start + limit}")
    if res.exit_status != 0 and b"Is a directory" in res.stderr:  # wc: 'standard input': Is a directory (EISDIR)
        raise BadArguments(f"{path} is a directory on {host}: read_file reads files (run_command 'ls -la {q}' lists "
                           "it)")
    if res.exit_status != 0:
        raise file_error(host, path, "read", res.stderr, root_alias(tk, host))
    first, _, window = res.stdout.partition(b"\n")
    total = int(first.strip() or 0)
    before, data = window[: offset - start], window[offset - start :]
    end = offset + len(data)
    if b"\0" in data[:8000]:
        # a NUL in the first bytes: a binary file (grep(1) and git decide so), not text to read
        raise BadArguments(f"{path} on {host} is a binary file ({total} bytes, it holds NUL bytes): read_file shows "
                           f"text; run_command 'file {q}' says what it is, 'od -A d -c {q} | head' shows its bytes")
    after = b""
    if end < total:
        more = await run_on(h, f"tail -c +{end + 1} -- {q} | head -c {VIEW_CONTEXT_BYTES}")
        after = more.stdout
    parts = [b.decode("utf-8", "replace") for b in (before, data, after)]
    text = redact_slice("".join(parts), len(parts[0]), len(parts[0]) + len(parts[1]))
    return FileContent(host=host, path=path, offset=offset, total_bytes=total, text=text,
                       next_offset=end if end < total else None)


async def _read_all(h: Host, path: str) -> bytes | None:
    res = await run_on(h, f"cat -- {shlex.quote(path)}", max_output_bytes=8 << 20)
    return res.stdout if res.exit_status == 0 else None


async def _read_existing(tk: Toolkit, h: Host, host: str, path: str) -> bytes:
    """The whole file. :raises NotFound: no such file; :raises PermissionDenied: not readable by the login user."""
    res = await run_on(h, f"cat -- {shlex.quote(path)}", max_output_bytes=8 << 20)
    if res.exit_status != 0:
        raise file_error(host, path, "read", res.stderr, root_alias(tk, host))
    return res.stdout


async def _replace(tk: Toolkit, host: str, path: str, old: bytes | None, data: bytes, backup: bool) -> FileWritten:
    """Write ``data`` over ``path`` atomically: a temp file in the same directory made by ``cp -p`` of the old
    file (mode and owner kept), filled, then ``mv -f`` over the target (rename(2) is atomic on one file
    system). With ``old`` given, the file must still hold exactly those bytes (sha256) when the temp file is
    renamed over it: an edit never overwrites a change made in between. ``backup`` copies the old file to the
    backup directory first.

    :raises BadArguments: the write failed (permissions, missing directory) or the file changed meanwhile.
    """
    h = tk.hosts.get(host)
    backup_id = None
    q = shlex.quote(path)
    parent = path.rsplit("/", 1)[0] or "/"
    script = "set -e; umask 077\n"
    if old is not None:
        digest = hashlib.sha256(old).hexdigest()
        script += (f'[ "$(sha256sum < {q} | cut -d" " -f1)" = {digest} ] || '
                   f'{{ echo "{path} changed since it was read: read it again" >&2; exit 4; }}\n')
    if backup and old is not None:
        backup_id = "b_" + secrets.token_hex(8)
        script += (f'bd="{BACKUP_DIR}"; mkdir -p "$bd"; cp -p -- {q} "$bd/{backup_id}"; '
                   f'printf "%s" {q} > "$bd/{backup_id}.path"\n')
    script += (f"t={q}.at-tmp.$$; umask 022; if [ -e {q} ]; then cp -p -- {q} \"$t\"; fi; cat > \"$t\"; "
               f"mv -f -- \"$t\" {q}")
    res = await run_on(h, script, stdin=data)
    if res.exit_status != 0 and any(m.encode() in res.stderr for m in _ENOENT) and \
            (await run_on(h, f"[ -d {shlex.quote(parent)} ]")).exit_status != 0:
        raise NotFound(f"cannot write {path} on {host}: the directory {parent} does not exist (run_command 'mkdir -p "
                       f"{shlex.quote(parent)}' makes it)")
    if res.exit_status != 0:
        # the shell's words about the temp file are about the path (`bash: line 2: P.at-tmp.93: Permission denied`)
        temp = r"^(?:\S*sh: (?:line \d+: |\d+: )?(?:cannot create )?)?" + re.escape(path) + r"\.at-tmp\.\d+"
        err = re.sub(temp, path, res.stderr.decode("utf-8", "replace"), flags=re.MULTILINE)
        raise file_error(host, path, "write", err, root_alias(tk, host))
    if old is None:  # a new file: its diff would be the content just sent, line for line
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        hint = _after_write_hint(host, path, None)
        return FileWritten(host=host, path=path, bytes_written=len(data),
                           next=f"created {path} ({lines} lines)" + (f"; {hint}" if hint else ""))
    return FileWritten(host=host, path=path, bytes_written=len(data), backup_id=backup_id,
                       diff=_diff(old, data, path), next=_after_write_hint(host, path, backup_id))


def _after_write_hint(host: str, path: str, backup_id: str | None) -> str:
    unit = unit_of_path(path)
    undo = f"restore_file(host={host!r}, path={path!r}, backup_id={backup_id!r}) undoes it" if backup_id else ""
    if unit is None:
        return undo
    apply = f"restart_service(host={host!r}, unit={unit!r}, daemon_reload=true) applies it"
    return apply + ("; " + undo if undo else "")


def _after_restore_hint(host: str, path: str) -> str:
    unit = unit_of_path(path)
    if unit is not None:
        return f"restart_service(host={host!r}, unit={unit!r}, daemon_reload=true) applies the restored file"
    return "the file is as it was before the write; restart or reload whatever reads it for the change to apply"


async def write_file(tk: Toolkit, host: str, path: str, content: str, backup: bool = True,
                     approval_id: str | None = None) -> FileWritten | Denied | NeedsApproval:
    """Write ``content`` to ``path`` atomically (temp file + rename), keeping a backup; returns the diff.

    ``[REDACTED]`` where the file's text as results show it hides a secret keeps that secret
    (:mod:`agent_tools.tools.kept_secrets`).

    :raises BadArguments: ``content`` holds ``[REDACTED]`` where the file hides no secret (the value is unknown).
    """
    _check_path(path)
    h = tk.hosts.get(host)
    decision = await tk.gate(host, f"tee {shlex.quote(path)}", approval_id, payload=content,
                             shown_payload=_shown_content(path, content), same_args="host, path, content")
    if decision is not None:
        return decision
    old = await _read_all(h, path)
    kept = keep_secrets(None if old is None else old.decode("utf-8", "surrogateescape"), content,
                        _redact_patterns(tk, host))
    if kept.unknown:
        raise BadArguments(_unknown_marks("content", path, kept.unknown, old is not None))
    written = await _replace(tk, host, path, old, kept.text.encode("utf-8", "surrogateescape"), backup)
    return _said_kept(written, kept.lines)


def _redact_patterns(tk: Toolkit, host: str) -> list[str]:
    """The ``redact:`` patterns results of ``host`` are redacted with (as :meth:`Toolkit.dispatch` does)."""
    return tk.policy.redact_patterns(host) if tk.policy is not None else []


def _unknown_marks(what: str, path: str, lines: list[int], exists: bool) -> str:
    where = "" if exists else " (there is no such file yet)"
    return (f"{what} holds {MARK} on line {', '.join(map(str, lines[:8]))}, where {path} hides no secret{where}: "
            f"{MARK} stands for a secret that results hide, and its value is unknown here; write the real value, "
            "or keep the line as read_file showed it")


def _said_kept(written: FileWritten, lines: list[int]) -> FileWritten:
    if not lines:
        return written
    said = (f"the {MARK} on line {', '.join(map(str, lines[:8]))} kept the file's secret (results hide it; the file "
            "holds the real value)")
    return written.model_copy(update={"next": said + ("; " + written.next if written.next else "")})


#: characters of a write's content shown to the person approving it (head and tail; the digest binds all of it)
_SHOWN_CONTENT_CHARS = 65536


def _shown_content(path: str, content: str) -> str:
    """What a person approving ``write_file`` reads: the whole new content of ``path`` (head and tail past
    :data:`_SHOWN_CONTENT_CHARS`, the cut said)."""
    size = len(content.encode("utf-8", "surrogateescape"))
    head = f"write_file replaces the whole content of {path} with these {size} bytes:\n"
    if len(content) <= _SHOWN_CONTENT_CHARS:
        return head + content
    half = _SHOWN_CONTENT_CHARS // 2
    return (head + content[:half] + f"\n… [{len(content) - 2 * half} characters not shown here; the digest binds "
            "them too] …\n" + content[-half:])


def _edit_payload(path: str, old: str, new: str) -> tuple[str, str]:
    """What an ``edit_file`` approval binds (the exact old and new text, canonical JSON) and shows (a diff of
    them)."""
    bound = json.dumps({"path": path, "old": old, "new": new}, ensure_ascii=False, separators=(",", ":"))
    lines = "\n".join(difflib.unified_diff(old.split("\n"), new.split("\n"), fromfile="old", tofile="new",
                                           lineterm=""))
    return bound, f"edit_file replaces the one occurrence of old with new in {path}:\n{lines}\n"


async def edit_file(tk: Toolkit, host: str, path: str, old: str, new: str, backup: bool = True,
                    approval_id: str | None = None) -> FileWritten | Denied | NeedsApproval:
    """Replace the one occurrence of ``old`` in the file by ``new`` (exact text, not a pattern), atomically and
    with a backup, as :func:`write_file` writes; returns the diff.

    Bytes that are not UTF-8 are kept as they are (decoded and encoded back with ``surrogateescape``).

    :raises BadArguments: no such file; ``old`` does not occur (the message shows the closest line) or occurs
        more than once (the message gives the lines: add context to make it unique); the file changed between
        the read and the write.
    """
    _check_path(path)
    h = tk.hosts.get(host)
    bound, shown = _edit_payload(path, old, new)
    decision = await tk.gate(host, f"tee {shlex.quote(path)}", approval_id, payload=bound, shown_payload=shown,
                             same_args="host, path, old, new")
    if decision is not None:
        return decision
    try:
        raw = await _read_existing(tk, h, host, path)
    except NotFound as exc:
        raise NotFound(f"{exc.message}: edit_file changes an existing file; write_file creates one") from exc
    text = raw.decode("utf-8", "surrogateescape")
    patterns = _redact_patterns(tk, host)
    shown, hidden = shown_text(text, patterns)
    lines: list[int] = []
    if MARK in old or MARK in new:
        # old and new as results show the file (secrets as [REDACTED]): matched against that text, and each
        # secret whose marker they keep put back
        count = shown.count(old)
        if count != 1:
            raise BadArguments(_no_single_match(path, shown, old, count, bool(hidden)))
        at = shown.index(old)
        kept = keep_secrets(text, shown[:at] + new + shown[at + len(old):], patterns)
        if kept.unknown:
            first = shown.count("\n", 0, at)
            raise BadArguments(_unknown_marks("new", path, [n - first for n in kept.unknown], True))
        changed, lines = kept.text, kept.lines
    else:
        count = text.count(old)
        if count != 1:
            raise BadArguments(_no_single_match(path, shown, old, count, bool(hidden)))
        changed = text.replace(old, new, 1)
    data = changed.encode("utf-8", "surrogateescape")
    if data == raw:
        raise BadArguments(f"old and new are the same text: {path} is unchanged")
    return _said_kept(await _replace(tk, host, path, raw, data, backup), lines)


def _no_single_match(path: str, text: str, old: str, count: int, secrets: bool = False) -> str:
    """Why ``old`` does not occur once in ``text`` (the file as results show it, ``secrets``: some hidden)."""
    lines = text.splitlines()
    if count > 1:
        first = old.splitlines()[0] if old.strip() else old
        at = [i + 1 for i, line in enumerate(lines) if first and first in line][:8]
        return (f"old occurs {count} times in {path} (lines {', '.join(map(str, at))}): include more of the "
                "surrounding text so it occurs once")
    want = (old.strip().splitlines() or [old])[0].strip()
    raw_lines = text.split("\n")  # (not splitlines: the line as it is, a CR at its end and tabs kept)
    close = difflib.get_close_matches(want, [line.strip() for line in raw_lines], n=1, cutoff=0.5)
    hint = ""
    if close:
        number, line = next((i + 1, line) for i, line in enumerate(raw_lines) if line.strip() == close[0])
        # the line quoted with its whitespace escaped (a tab is \t, a CR \r), and what differs said in words
        ws = []
        if line.endswith("\r") and "\r" not in old:
            ws.append("the file has CRLF line ends (\\r\\n)")
        if "\t" in line and "\t" not in old:
            ws.append("the line is indented with a tab (\\t)")
        hint = (f"; the closest line is {number}: {line[:200]!r} ("
                + ("; ".join(ws) + ": " if ws else "") + "whitespace and line ends must match exactly)")
        if MARK in line:
            hint += f"; {MARK} hides a secret: old and new may hold it as shown, and the file keeps the secret"
    shows = f"the exact text, secrets as {MARK}" if secrets else "the exact text"
    return f"old does not occur in {path}{hint}; read_file shows {shows}"


async def restore_file(tk: Toolkit, host: str, path: str, backup_id: str,
                       approval_id: str | None = None) -> FileRestored | Denied | NeedsApproval:
    """Put a backup made by write_file/edit_file back in place (atomically); returns the diff current →
    restored. With a policy, decided as ``tee PATH`` (a write), the approval bound to the backup id."""
    _check_path(path)
    if not backup_id.startswith("b_") or not backup_id[2:].isalnum():
        raise BadArguments(f"{backup_id!r} is not a backup id (b_...)")
    h = tk.hosts.get(host)
    decision = await tk.gate(host, f"tee {shlex.quote(path)}", approval_id, payload=f"restore {backup_id}",
                             shown_payload=f"restore_file puts backup {backup_id} back over {path} (the content it "
                                           "had before the write that made the backup)",
                             same_args="host, path, backup_id")
    if decision is not None:
        return decision
    current = await _read_all(h, path)
    q = shlex.quote(path)
    script = (f'set -e; bd="{BACKUP_DIR}"; p="$(cat "$bd/{backup_id}.path")"; [ "$p" = {q} ] || '
              f'{{ echo "backup {backup_id} is not of {path}" >&2; exit 3; }}; '
              f't={q}.at-tmp.$$; cp -p -- "$bd/{backup_id}" "$t"; mv -f -- "$t" {q}; cat -- {q}')
    res = await run_on(h, script)
    if res.exit_status == 3:
        raise BadArguments(f"backup {backup_id} is not of {path}: restore_file puts a backup back where it was taken")
    if res.exit_status != 0:
        err = res.stderr.decode("utf-8", "replace")
        if f"{backup_id}.path" in err or f"/{backup_id}:" in err or f"'{backup_id}'" in err:
            raise NotFound(f"no backup {backup_id} on {host} (backups are kept per host under {BACKUP_DIR})")
        raise file_error(host, path, "restore", err, root_alias(tk, host))
    if current == res.stdout:
        return FileRestored(host=host, path=path, backup_id=backup_id,
                            next=f"nothing changed: {path} already held backup {backup_id}'s content")
    return FileRestored(host=host, path=path, backup_id=backup_id, diff=_diff(current or b"", res.stdout, path),
                        next=_after_restore_hint(host, path))


async def gpu_memory(tk: Toolkit, host: str) -> GpuMemory:
    """Per-GPU memory from ``nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits``."""
    h = tk.hosts.get(host)
    res = await run_on(h, "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits")
    gpus = parse_nvidia_smi(res.stdout.decode("utf-8", "replace"))
    if res.exit_status == 127:  # POSIX shell: command not found
        raise Unsupported(f"{host} has no nvidia-smi (no NVIDIA driver installed, or not on PATH): no GPU memory to "
                          "show there")
    if res.exit_status != 0:
        raise BadArguments(f"nvidia-smi failed on {host}: {res.stderr.decode('utf-8', 'replace').strip()[:300]}")
    total, used = sum(g["total_mib"] for g in gpus), sum(g["used_mib"] for g in gpus)
    return GpuMemory(host=host, gpus=[{k: g[k] for k in ("index", "used_mib", "total_mib")} for g in gpus],
                     total_mib=total, used_mib=used, free_mib=total - used)


async def host_memory(tk: Toolkit, host: str) -> HostMemory:
    """Host memory from ``free -b`` (procps): total, used, available (what can be allocated without swapping),
    in bytes (int) and GiB (2**30 bytes, one decimal)."""
    h = tk.hosts.get(host)
    res = await run_on(h, "free -b")
    mem = parse_free(res.stdout.decode("utf-8", "replace"))
    total, used, avail = (mem.get(k, 0) for k in ("total_bytes", "used_bytes", "available_bytes"))
    return HostMemory(host=host, total_bytes=total, total_gib=_gib(total), used_bytes=used, used_gib=_gib(used),
                      available_bytes=avail, available_gib=_gib(avail), buff_cache_bytes=mem.get("buff_cache_bytes", 0))


def probe_reads_allowed(tk: Toolkit, host: str, probes: list[dict[str, Any]]) -> None:
    """A ``log`` probe of a file reads it as ``cat PATH`` does, so with a policy it is decided as that read
    (:func:`read_file` is too) before anything is read: where the policy denies it or asks first (a file of
    password hashes or private keys), the probe is refused, as it has no approval of its own.

    :raises PolicyError: a probe's file may not be read without approval (kind ``policy``).
    """
    for p in probes:
        path = p.get("path")
        if p.get("kind") != "log" or not path:
            continue
        q = shlex.quote(str(path))
        decision = tk.decide(host, f"cat {q}")
        if decision is None or decision.decision == "allow":
            continue
        verb = "denies" if decision.decision == "deny" else "asks first for"
        raise PolicyError(f"a log probe reads {path} as `cat {q}` does, and the policy {verb} that (rule "
                          f"{decision.rule_id}: {decision.reason}): probe a file the policy lets you read, or read "
                          f"this one with read_file(host={host!r}, path={str(path)!r}), which can be approved")


#: seconds a round of probe checks may run past a wait's deadline before it is given up (the round's commands are
#: cancelled; a log probe's read is bounded on the host too: :data:`agent_tools.probes.checks.READ_LIMIT_S`)
_CHECK_GRACE_S = 1.0


async def wait_for(tk: Toolkit, host: str, probes: list[dict[str, Any]], deadline_s: float = 60.0) -> WaitResult:
    """Poll ``probes`` on ``host`` (backoff 0.2 → 2 s) until all pass, one fails, or ``deadline_s`` passes.

    As for a job (:func:`agent_tools.probes.checks.check_probes`): ``systemd_unit`` probes are checked first
    and must see their unit up for its settle window; the other probes count only while every unit is active.
    A round of checks that has not answered by the deadline (plus a second) is given up: the wait ends
    ``deadline_exceeded``, or with the host's error when the host itself no longer answers. A ``log`` probe's
    file is decided as ``cat PATH`` first (:func:`probe_reads_allowed`).

    :raises PolicyError: the policy denies or asks before a probe's file is read.
    """
    specs = with_log_units([probe_from_dict(p).model_dump() for p in probes], None)
    probe_reads_allowed(tk, host, specs)
    h = tk.hosts.get(host)
    t0 = anyio.current_time()
    delay = 0.2
    units = [str(s["unit"]) for s in specs if s.get("kind") == "systemd_unit"]
    look = f"service_status(host={host!r}, unit={units[0]!r}) shows the unit and its journal" if units else ""
    while True:
        left = deadline_s - (anyio.current_time() - t0)
        with anyio.move_on_after(max(left, 0.0) + _CHECK_GRACE_S) as scope:
            results = await check_probes(h, specs)
        if scope.cancelled_caught:  # the round did not answer within the deadline: the host, or a check hangs?
            lost = await _link_down(h)
            if lost is not None:
                raise lost
            results = [ProbeResult(str(s.get("kind")), probe_target(s), "not_yet",
                                   f"no answer within deadline_s={deadline_s:g}") for s in specs]
        specs = advance(specs, results)
        reports = [r.report() for r in results]
        elapsed = round(anyio.current_time() - t0, 3)
        if any(r.state == "failed" for r in results):
            return WaitResult(host=host, outcome="failed", elapsed_s=elapsed, probes=reports,
                              why="failed: " + ", ".join(f"{r.kind} {r.target}" for r in results
                                                         if r.state == "failed"),
                              next=(look + "; " if look else "") + "the failed probe's evidence says why: fix the "
                                                                   "cause before waiting again")
        if all(r.state == "passed" for r in results):
            return WaitResult(host=host, outcome="ready", elapsed_s=elapsed, probes=reports, why="all probes passed")
        remaining = deadline_s - (anyio.current_time() - t0)
        if remaining <= 0:
            waiting = [r for r in results if r.state != "passed"]
            # a probe that could not reach the host did not fail to pass: the host did not answer
            errors = [e for r in waiting if isinstance(e := r.details.get("host_error"), HostError)]
            if errors and len(errors) == len(waiting):
                raise errors[-1]
            if any(r.details.get("timeout") for r in waiting):
                lost = await _link_down(h)  # a silent port, or no answer from the host itself?
                if lost is not None:
                    raise lost
            return WaitResult(host=host, outcome="deadline_exceeded", elapsed_s=elapsed, probes=reports,
                              why=f"not passed within {deadline_s:g} s: " + ", ".join(
                                  f"{r.kind} {r.target}" for r in waiting),
                              next="wait_for again with a larger deadline_s if it is still coming up"
                                   + (f"; {look}" if look else "; the probes' evidence says where they stand"))
        await anyio.sleep(min(delay, remaining))
        delay = min(delay * 1.6, 2.0)


async def http_get(tk: Toolkit, host: str, url: str, fields: list[str] | None = None,
                   timeout_s: float = 10.0) -> HttpResponse:
    """GET ``url`` as seen from ``host`` (an SSH direct-tcpip channel for remote hosts; no curl needed).

    A JSON body comes back parsed (``data``; with ``fields``, only those top-level keys of an object), any other
    body as text (first 16 KiB).

    :raises BadArguments: a malformed URL (only ``http://HOST[:PORT]/...``).
    :raises ConnectionRefused: nothing listens there; :raises TargetTimeout: no answer within ``timeout_s``;
        :raises TargetUnreachable: another network failure. All three are retryable; when a job of this
        toolkit's journal follows a unit with a probe on the same port, the message gives the unit's state (a
        refusal while that unit is failed or stopped is not retryable: it lasts until the unit runs again).
    """
    from ..probes.checks import http_get as _get

    parts = urlsplit(url)
    try:
        port = parts.port or 80
    except ValueError as exc:
        raise BadArguments(f"{url!r} is not a valid URL ({exc})") from exc
    if parts.scheme == "https":
        raise Unsupported(f"{url!r}: https is not supported (no TLS): services on the host itself are reached with "
                          "http://127.0.0.1:PORT")
    if parts.scheme != "http" or not parts.hostname:
        raise BadArguments(f"{url!r} is not an http:// URL (e.g. http://127.0.0.1:30000/health)")
    h = tk.hosts.get(host)
    where = f"{parts.hostname}:{port}"
    try:
        status, body = await _get(h, url, timeout_s)
    except ConnectionRefusedError as exc:
        elsewhere = await _listening_elsewhere(h, parts.hostname, port)
        if elsewhere:
            # the port is open on other addresses only (a server bound to 127.0.0.1): retrying will not help
            alt = url.replace(parts.netloc, f"{_url_host(elsewhere[0])}:{port}", 1)
            raise ConnectionRefused(host, f"GET {url} from {host}: connection refused: nothing listens on {where}; "
                                          f"port {port} listens on {', '.join(elsewhere)} only: GET {alt}",
                                    retryable=False) from exc
        owner = await _port_owner(tk, h, host, port)
        # the port's unit failed or is stopped: the same GET is refused until it is fixed and started
        # (not while a restart of it is under way: then the port opens once the unit is up)
        down = bool(re.match(r"; \S+ is (?:failed|inactive)/", owner)) and "a restart is under way" not in owner
        raise ConnectionRefused(host, f"GET {url} from {host}: connection refused: nothing listens on {where}" + owner,
                                retryable=not down) from exc
    except TimeoutError as exc:
        lost = await _link_down(h)  # the server is silent, or the host itself does not answer?
        if lost is not None:
            raise lost from exc
        raise TargetTimeout(host, f"GET {url} from {host}: no answer within {timeout_s:g} s"
                            + await _port_owner(tk, h, host, port, listening=True)) from exc
    except (OSError, ValueError, h11.ProtocolError) as exc:  # reset, closed without an answer, not HTTP
        raise TargetUnreachable(host, f"GET {url} from {host} failed: {type(exc).__name__}: {exc}") from exc
    data: Any = None
    text = ""
    missing: list[str] = []
    stripped = body.lstrip()[:1]
    if stripped in (b"{", b"["):
        try:
            data = json.loads(body)
        except ValueError:
            data = None
    if data is None:
        text = body[:16384].decode("utf-8", "replace")
    said = ""
    if data is not None and fields:
        if isinstance(data, dict):
            missing = [f for f in fields if f not in data]
            said = _close_fields(missing, [str(k) for k in data])
            data = {f: data[f] for f in fields if f in data}
        else:
            missing = list(fields)
            said = f"the body is a JSON {type(data).__name__}, not an object: fields picks keys of an object"
    note = "; ".join(n for n in (said, await _foreign_holder(tk, h, host, port)) if n)
    return HttpResponse(host=host, url=url, status=status, data=data, body=text, body_bytes=len(body),
                        missing=missing, note=note)


def _close_fields(missing: list[str], keys: list[str]) -> str:
    """"did you mean 'version' for 'vers'?" for fields asked for that the body lacks, or the keys it has."""
    if not missing:
        return ""
    close = {f: difflib.get_close_matches(f, keys, n=1, cutoff=0.5) for f in missing}
    meant = [f"{c[0]!r} for {f!r}" for f, c in close.items() if c]
    if meant:
        return f"did you mean {', '.join(meant)}?"
    return f"the body's fields are {', '.join(repr(k) for k in keys[:12])}" + (" …" if len(keys) > 12 else "")


#: listening addresses that take connections to any address of the host (IPv4 and, dual-stack, IPv6)
_ANY_ADDRESS = frozenset({"0.0.0.0", "*", "::", "[::]"})


async def _listening_elsewhere(h: Host, address: str, port: int) -> list[str]:
    """The addresses ``port`` listens on (ss(8) ``-ltn``) when none of them takes connections to ``address``
    (``localhost`` is 127.0.0.1 and ::1), else [] (also when it cannot be told: no ss, the host did not answer)."""
    try:
        with anyio.move_on_after(5):
            res = await run_on(h, f"ss -Hltn {shlex.quote(f'sport = :{port}')} 2>/dev/null")
            found: list[str] = []
            for line in res.stdout.decode("utf-8", "replace").splitlines():
                words = line.split()
                if len(words) >= 4 and ":" in words[3]:
                    local = words[3].rsplit(":", 1)[0].strip("[]").split("%", 1)[0]
                    if local not in found:
                        found.append(local)
            wanted = {"127.0.0.1", "::1"} if address == "localhost" else {address.strip("[]")}
            if found and not any(a in _ANY_ADDRESS or a in wanted for a in found):
                return found
    except AgentToolsError:
        pass
    return []


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


#: seconds the host gets to answer a trivial command when a probe or GET timed out (is it the target or the host?)
_LINK_CHECK_S = 3.0


async def _link_down(h: Host) -> HostError | None:
    """Whether the host itself stopped answering (a partition, a stalled SSH link) when a TCP probe or GET through
    it timed out: it gets ``_LINK_CHECK_S`` seconds to run ``true``. The error to report instead of blaming the
    target, or None when the host answers (the target itself was silent)."""
    try:
        with anyio.fail_after(_LINK_CHECK_S):
            await run_on(h, "true")
    except HostError as exc:
        return exc
    except TimeoutError:
        return ConnectionLost(h.name, f"{h.name}: the host itself did not answer within {_LINK_CHECK_S:g} s (the SSH "
                                      "connection stopped passing packets): the target was not reached, so nothing "
                                      "is known of it")
    return None


async def _port_owner(tk: Toolkit, h: Host, host: str, port: int, *, listening: bool = False) -> str:
    """"; UNIT is STATE ..." when a job in the journal follows a unit with a probe on ``port`` of ``host`` (the
    unit the port belongs to, as far as the tools know), else "".

    :param listening: something accepted the connection (a timeout): when the port's listener is not the unit's
        process (:func:`port_holder`), that process is named instead of the unit's state."""
    found = _unit_for_port(tk.journal.list(host, limit=100), port)
    if found is None:
        if listening:
            return (" (something took the connection and sent no answer in time: a busy or stuck server, or a "
                    "firewall dropping packets)")
        return " (a server that is still starting refuses connections; try again later)"
    unit, rec = found
    try:
        with anyio.move_on_after(5):
            held = await port_holder(h, port, unit) if listening else None
            if held is not None and not held[3]:
                pid, main, comm, _ = held
                owner = f"{unit}'s main process is {main}" if main else f"{unit} has no main process (not running)"
                return (f"; port {port} is held by pid {pid} ({comm}), not by {unit} (job {rec.job_id} follows "
                        f"it): {owner}; that process does not answer")
            props = await unit_props(h, unit, "ActiveState,SubState,Result")
            active, sub = props.get("ActiveState", "?"), props.get("SubState", "?")
            if rec.readiness == "pending":
                return (f"; {unit} is {active}/{sub}: a restart is under way (job {rec.job_id} follows it: "
                        f"job_status(job_id='{rec.job_id}', wait_s=60))")
            if active in ("activating", "reloading"):
                return f"; {unit} is {active}/{sub}: still starting"
            if active == "active":
                return (f"; {unit} is {active}/{sub} but nothing listens on port {port} (the unit may not serve it, "
                        "or not yet)")
            return (f"; {unit} is {active}/{sub} (result {props.get('Result', '?')}): service_status(host='{host}', "
                    f"unit='{unit}') shows why")
    except AgentToolsError:
        pass
    return f"; {unit} (job {rec.job_id}) serves this port"


async def _foreign_holder(tk: Toolkit, h: Host, host: str, port: int) -> str:
    """A note when a job of the journal follows a unit with a probe on ``port`` and the port's listener is not
    that unit's main process (or a child of it): the answer came from another process (an old server that kept
    the port, a stray one), else ""."""
    found = _unit_for_port(tk.journal.list(host, limit=100), port)
    if found is None:
        return ""
    unit, rec = found
    try:
        with anyio.move_on_after(5):
            held = await port_holder(h, port, unit)
            if held is None or held[3]:
                return ""
            pid, main, comm, _ = held
            owner = f"{unit}'s main process is {main}" if main else f"{unit} has no main process (not running)"
            return (f"port {port} is held by pid {pid} ({comm}), not by {unit} (job {rec.job_id} follows it): "
                    f"{owner}, so this answer comes from another process (an old server that kept the port?)")
    except AgentToolsError:
        pass
    return ""


def _unit_for_port(records: list[JobRecord], port: int) -> tuple[str, JobRecord] | None:
    for rec in records:  # newest first
        unit = next((str(p.get("unit")) for p in rec.probes if p.get("kind") == "systemd_unit"), None)
        if unit is None:
            continue
        for p in rec.probes:
            probe_port: int | None = None
            if p.get("kind") == "http":
                try:
                    probe_port = urlsplit(str(p.get("url"))).port or 80
                except ValueError:
                    continue
            elif p.get("kind") == "port":
                probe_port = int(p.get("port") or 0)
            if probe_port == port:
                return unit, rec
    return None


def _check_path(path: str) -> None:
    if not path.startswith("/") or "\0" in path:
        raise BadArguments(f"path {path!r} must be absolute")


def _diff(old: bytes, new: bytes, path: str) -> str:
    a = old.decode("utf-8", "replace").splitlines(keepends=True)
    b = new.decode("utf-8", "replace").splitlines(keepends=True)
    name = path.rsplit("/", 1)[-1]
    text = "".join(difflib.unified_diff(a, b, fromfile=f"{name} (before)", tofile=f"{name} (after)"))
    return text if len(text) <= _MAX_DIFF_CHARS else text[:_MAX_DIFF_CHARS] + "\n… [diff truncated]\n"
