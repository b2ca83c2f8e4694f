"""The ``systemd_unit`` probe: is the unit up in its *new* invocation, and has it stayed up; and the journal
lines that explain a failure.

Facts this rests on (systemd.service(5), systemd.exec(5), systemctl(1), journalctl(1)):

* ``Type=`` decides when systemd calls a unit started: ``simple`` right after fork(), ``exec`` after execve(),
  ``forking`` when the parent exits, ``oneshot`` when the process exits, ``notify`` on READY=1, ``dbus`` once
  its bus name is taken. Only the last two say the service is ready; the others get a settle window.
* Every start of a unit gets a new ``InvocationID`` (systemd >= 232), automatic restarts included;
  ``NRestarts`` counts automatic restarts and is reset by an explicit start. Between a crash and the automatic
  restart the unit is ``activating/auto-restart`` with the old invocation and ``Result`` of the crash.
* ``ActiveEnterTimestampMonotonic`` is CLOCK_MONOTONIC in microseconds, the clock of ``/proc/uptime`` on a
  machine that never suspended: read together (one round trip) they give how long the unit has been active,
  on the host's own clock.
* A start refused before it makes an invocation (start limit hit, a failed ``Condition*=``/``Assert*=``, a
  dependency that failed) still moves ``ConditionTimestampMonotonic``, but the unit, inactive and without a job,
  is unloaded at once: the next ``systemctl show`` reads a fresh unit, whose ``ConditionResult``/``AssertResult``
  read ``no`` and whose timestamps read 0 whether or not it ever ran. What is left is the manager's line that ends
  the start job: ``JOB_TYPE=start`` with ``JOB_RESULT=done`` and "was skipped because of an unmet condition check"
  (a ``Condition*=``; MESSAGE_ID ``39f53479…`` as for a start), ``JOB_RESULT=assert`` ("Assertion failed for"),
  ``dependency``, ``failed`` (the start limit), each carrying the unit's invocation id as it was: none, or the old
  one. A start job that ended with no new invocation is this verdict, read from the journal at once.
* An ``ExecCondition=`` that fails runs in an invocation of its own and ends it with "Skipped due to
  'exec-condition'" (MESSAGE_ID ``0e4284a0…``, unit skipped).
* ``ExecMainStartTimestampMonotonic`` is 0 when the invocation's main process never started (an
  ``ExecStartPre=`` failed; a start resets it): ``ExecMainStatus`` then reads 0 and says nothing.
* An inactive unit without a job is soon unloaded (garbage-collected): ``systemctl show`` then reads
  ``inactive/dead`` with an empty ``InvocationID``, as if it never ran. Only failed units stay loaded. What an
  ended invocation did is then read from the journal: the manager's messages carry ``MESSAGE_ID``
  (sd-messages.h: ``de5b426a…`` unit stopping = a stop was requested, ``7ad2d189…`` deactivated
  successfully, ``be02cf68…`` failed with a result) and ``INVOCATION_ID``.
* systemd's own lines about a unit ("Main process exited, code=exited, status=1/FAILURE", "Failed with
  result 'exit-code'") carry ``UNIT=`` and ``INVOCATION_ID=``, the unit's output ``_SYSTEMD_UNIT=`` and
  ``_SYSTEMD_INVOCATION_ID=``; ``journalctl -u UNIT`` matches both, a ``_SYSTEMD_INVOCATION_ID=`` match only
  the second.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from ..clock import wall_time
from ..errors import HostError
from ..hosts.base import Host, run_on
from .parse import parse_systemctl_show
from .result import ProbeResult
from .specs import SystemdUnitProbe

__all__ = ["DEFAULT_SETTLE_S", "NOTIFY_TYPES", "UNIT_PROPS", "InvocationEnds", "check_unit", "invocation_ends",
           "judge_unit", "unit_journal"]

#: the evidence's ending while a unit is still in the invocation from before the restart
NOT_BEGUN = " (restart not begun yet)"

#: the unit properties a systemd_unit probe reads (systemctl(1) show -p)
UNIT_PROPS = ("ActiveState,SubState,Result,ExecMainStatus,ExecMainCode,NRestarts,InvocationID,TimeoutStartUSec,"
              "Type,MainPID,ActiveEnterTimestampMonotonic,ActiveExitTimestampMonotonic,"
              "ExecMainExitTimestampMonotonic,ConditionTimestampMonotonic,ConditionResult,AssertResult,"
              "InactiveExitTimestampMonotonic,ExecMainStartTimestampMonotonic,ExecStartPre,ExecStartPost,"
              "ExecReload,ExecStop,ExecStopPost")

#: a unit's control commands (systemd.service(5)): their runs are shown as ``{ path=... ; code=exited ;
#: status=N }`` (systemctl show), the last run of each
_CONTROL = ("ExecStartPre", "ExecStartPost", "ExecReload", "ExecStop", "ExecStopPost")

#: types whose "active" means ready (READY=1, the bus name): no settle window by default
NOTIFY_TYPES = frozenset({"notify", "notify-reload", "dbus"})

#: seconds a unit of another type must stay active in its new invocation before it counts as ready
DEFAULT_SETTLE_S = 3.0

#: the line with the host's /proc/uptime that the probe's command adds after systemctl's output
_UPTIME_KEY = "AgentToolsUptime"

#: keys a systemd_unit probe carries between checks in its spec (internal state, not part of the schema)
STATE_KEYS = frozenset({"passed_invocation", "passed_restarts", "active_seen", "ended_seen", "final"})

#: seconds the journal gets to record how an invocation ended (journald may write the manager's "Failed with
#: result"/"Deactivated successfully" line after ``systemctl show`` already reads the unit inactive, and a unit
#: read before its start shows no invocation while the journal already has the new one's first lines)
JOURNAL_GRACE_S = 5.0


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def settle_window_s(p: SystemdUnitProbe, unit_type: str) -> float:
    """The settle window of ``p`` for a unit of ``Type=unit_type`` (seconds): none for notify/dbus services, and
    none for units that are not services (no ``Type=``: a socket is ready once it listens, a target once
    reached)."""
    if p.settle_s is not None:
        return p.settle_s
    return 0.0 if unit_type in NOTIFY_TYPES or not unit_type else DEFAULT_SETTLE_S


#: waitid(2) si_code values systemd shows as ExecMainCode
_CLD_KILLED, _CLD_DUMPED = "2", "3"


def main_end(props: Mapping[str, str]) -> str:
    """How the unit's main process ended, in words: ``exit=N``, or ``signal=N`` when a signal killed it
    (ExecMainCode), followed by the control command that failed first when one did (``ExecStartPost=/bin/false
    exited 1``: systemd then stops the main process itself, so its end is a consequence). When the invocation's
    main process never started (``ExecMainStartTimestampMonotonic`` 0 in an activated unit: an ``ExecStartPre=``
    failed), its status means nothing and is left out:
    ``ExecStartPre=/bin/false exited 1 (the main process never started)``; "" when nothing is known."""
    code = props.get("ExecMainStatus", "?")
    text = f"signal={code}" if props.get("ExecMainCode") in (_CLD_KILLED, _CLD_DUMPED) else f"exit={code}"
    failed = failed_control(props)
    started = _int(props.get("ExecMainStartTimestampMonotonic"))
    entered = _int(props.get("InactiveExitTimestampMonotonic"))
    if started == 0 and entered is not None:  # (the main process may start before the unit leaves inactive)
        if not entered:  # no activation in this unit's record at all (a fresh load): nothing known of the process
            return failed
        return f"{failed} (the main process never started)" if failed else "the main process never started"
    return f"{text} ({failed})" if failed else text


def failed_control(props: Mapping[str, str]) -> str:
    """The first control command (ExecStartPre=, ExecStartPost=, ...) whose last run failed, as ``NAME=PATH exited
    N`` or ``NAME=PATH killed by signal N``; "" when none did (or systemctl did not show them)."""
    for name in _CONTROL:
        for run in props.get(name, "").split("} {"):
            fields = dict(f.strip().split("=", 1) for f in run.strip("{} ").split(" ; ") if "=" in f)
            code, status = fields.get("code", ""), fields.get("status", "")
            if code == "exited" and status not in ("", "0", "0/SUCCESS"):
                return f"{name}={fields.get('path', '?')} exited {status.split('/')[0]}"
            if code in ("killed", "dumped"):
                return f"{name}={fields.get('path', '?')} killed by signal {status.split('/')[0]}"
    return ""


#: sd-messages.h MESSAGE_IDs of the manager's lines about a unit
_MSG_STOPPING = "de5b426a63be47a7b6ac3eaac82e2f6f"
_MSG_SUCCESS = "7ad2d189f7e94e70a38c781354912448"
_MSG_FAILED = "be02cf6855d2428ba40df7e9d022f03d"
_MSG_SKIPPED = "0e4284a0caca4bfc81c0bb6786972673"

#: what a start job's JOB_RESULT says when it ended with no new invocation (job.c job_result_to_string)
_REFUSED = {"done": "a Condition*= is not met: systemd skipped the start",
            "assert": "an Assert*= failed", "dependency": "a unit it needs failed to start",
            "failed": "the start failed before it began (the start limit?)",
            "canceled": "the start was cancelled", "timeout": "the start job timed out"}


@dataclass(frozen=True)
class InvocationEnds:
    """How the unit's recent invocations ended, read from the journal (see :func:`invocation_ends`).

    :param order: invocation ids in the order of their first line (the newest last).
    :param how: invocation id -> ``stopped`` (a stop was requested), ``failed``, ``skipped`` (an
        ``ExecCondition=`` failed) or ``exited`` (deactivated successfully by itself); invocations without an end
        line are absent.
    :param refused: start jobs that ended without making a new invocation (a ``Condition*=`` not met, an
        ``Assert*=`` failed, a dependency failed, the start limit hit), oldest first: (``JOB_RESULT``, the
        manager's line).
    :param lines: the manager's line that ended each invocation (invocation id -> text), where there is one.
    """

    order: tuple[str, ...] = ()
    how: Mapping[str, str] = field(default_factory=dict)
    refused: tuple[tuple[str, str], ...] = ()
    lines: Mapping[str, str] = field(default_factory=dict)


def judge_unit(p: SystemdUnitProbe, state: dict[str, Any], props: dict[str, str], *, uptime_s: float | None,
               now: float, ends: InvocationEnds | None = None) -> ProbeResult:
    """The verdict on one ``systemctl show`` of the unit (pure; see :class:`SystemdUnitProbe` for the rules).

    :param state: what earlier checks of this probe carried (:data:`STATE_KEYS`).
    :param uptime_s: the host's ``/proc/uptime`` read with ``props`` (None: not available; the settle window is
        then timed from this controller's first sight of the invocation, ``now``).
    :param now: wall time (unix seconds) of this check.
    :param ends: the journal's record of how recent invocations ended; when the unit is inactive and this is
        None, the result asks for it (``details["ask_journal"]``: :func:`check_unit` reads it and judges again).
    :returns: a :class:`ProbeResult`; ``details`` holds the properties, ``new_active`` (active in a new
        invocation: other probes may count) and ``ended`` (``stopped``/``superseded``/``completed``: followed
        no further).
    """
    active, sub, result = props.get("ActiveState", "?"), props.get("SubState", "?"), props.get("Result", "?")
    inv = props.get("InvocationID", "")
    restarts = _int(props.get("NRestarts")) or 0
    unit_type = props.get("Type", "")
    code = main_end(props)
    code = f" {code}" if code else ""  # (written right after the evidence below)
    ev = f"{active}/{sub} result={result}" + (f" restarts={restarts}" if restarts else "")

    def res(verdict: str, evidence: str, updates: dict[str, Any] | None = None, *, new_active: bool = False,
            ended: str = "", ask: bool = False) -> ProbeResult:
        details: dict[str, Any] = {**props, "new_active": new_active, "ended": ended, "ask_journal": ask}
        return ProbeResult("systemd_unit", p.unit, verdict, evidence, updates or {}, details)  # type: ignore[arg-type]

    def final(evidence: str, ended: str, updates: dict[str, Any] | None = None) -> ProbeResult:
        return res("passed", evidence, {**(updates or {}), "final": {"evidence": evidence, "ended": ended}},
                   ended=ended)

    def gone(target: str, *, after_ready: bool, inferred: bool) -> ProbeResult:
        """The unit is inactive and invocation ``target`` ended, or (``inferred``: ``systemctl show`` names no
        invocation, so its properties are not ``target``'s) may have: how, from the journal. Without the
        journal's end line the verdict waits :data:`JOURNAL_GRACE_S`: the properties may have been read before
        the start (the invocation is running) or before journald wrote the line."""
        assert ends is not None
        how = ends.how.get(target)
        when = " after it was ready" if after_ready else ""
        if how == "stopped":
            return final(f"{ev}: stopped on request{when}; no longer followed", "stopped")
        if how == "failed":
            return res("failed", f"{ev}{code}: the invocation failed{when}")
        if how == "skipped":
            return res("failed", f"{ev}: systemd skipped the start: an ExecCondition= command failed"
                                 + (f" ({ends.lines[target]})" if ends.lines.get(target) else ""))
        if how is None:
            seen = state.get("ended_seen")
            first = float(seen[1]) if isinstance(seen, list) and len(seen) == 2 and seen[0] == target else now
            if now - first < JOURNAL_GRACE_S:
                doing = ("the journal shows it started; looking again" if inferred
                         else "the journal does not say yet how it ended")
                return res("not_yet", f"{ev}: invocation {target[:8]} {doing}", {"ended_seen": [target, first]})
        # a failed unit stays loaded (CollectMode=inactive): an unloaded one did not fail, nor did an inactive
        # one whose own Result reads success
        if unit_type == "oneshot" and (how == "exited" or (how is None and (inferred or result == "success"))):
            return final(ev + " (the oneshot ran to completion)", "completed",
                         {"passed_invocation": target, "passed_restarts": restarts})
        if how == "exited":
            return res("failed", f"{ev}: the process exited by itself{when} (deactivated successfully): the "
                                 "service is not running")
        return res("failed", f"{ev}{code}: the invocation ended{when}; the journal does not say how")

    def ask() -> ProbeResult:
        return res("not_yet", ev + " (reading the journal)", ask=True)

    pinned = state.get("passed_invocation")
    if pinned:  # passed before: is that very invocation still up?
        if inv == pinned or (not inv and active == "inactive"):
            if active in ("active", "reloading"):
                return res("passed", ev, new_active=True)
            if active == "deactivating":
                return res("not_yet", ev + ": the invocation that passed is stopping")
            if active == "inactive":
                return ask() if ends is None else gone(pinned, after_ready=True, inferred=not inv)
            return res("failed", f"{ev}{code}: the invocation that was ready is no longer running")
        if restarts > int(state.get("passed_restarts") or 0):
            return res("failed", f"{ev}: the invocation that was ready died and systemd restarted the unit "
                                 f"(restarts {state.get('passed_restarts') or 0} -> {restarts})")
        return final(f"{ev}: superseded by a later start of the unit (invocation {inv[:8]}); no longer followed",
                     "superseded")

    if active == "inactive" and inv and inv != p.not_invocation:  # a new invocation ended
        return ask() if ends is None else gone(inv, after_ready=False, inferred=False)
    if active == "inactive" and not inv:  # not started yet, or a new invocation ended and was unloaded
        if ends is None:
            return ask()
        target = next((i for i in reversed(ends.order) if i != p.not_invocation), "")
        if target:
            return gone(target, after_ready=False, inferred=True)
    if not inv or inv == p.not_invocation:
        if active in ("inactive", "failed"):  # the start may have been refused: its job's end line says so
            if ends is None:
                return ask()
            if ends.refused:
                job_result, line = ends.refused[-1]
                why = _REFUSED.get(job_result, f"its start job ended: {job_result}")
                return res("failed", f"{ev}: systemd made no new invocation ({why}): {line}")
        attempt = _int(props.get("ConditionTimestampMonotonic"))
        if (p.before_condition_us is not None and attempt is not None and attempt > p.before_condition_us
                and active in ("failed", "inactive")):
            why = ("a Condition*= is not met" if props.get("ConditionResult") == "no"
                   else "an Assert*= failed" if props.get("AssertResult") == "no"
                   else f"result={result}, the start limit may be hit")
            return res("failed", f"{ev}: systemd tried to start it but made no new invocation ({why})")
        if not inv and active == "active":
            return res("not_yet", ev + " (no InvocationID: this systemd is older than 232, or the unit never "
                                       "started; the probe needs a new invocation)")
        if active == "deactivating":  # the restart stops the old invocation first and waits for it
            return res("not_yet", ev + " (the old invocation is stopping; the start follows once it stopped)")
        return res("not_yet", ev + NOT_BEGUN)
    if active == "failed":
        return res("failed", f"{ev}{code}")
    looping = (f"; systemd restarted it {restarts} times since the restart: it keeps dying, service_status shows "
               "why" if restarts >= 2 else "")
    if active == "activating" and sub == "auto-restart":
        return res("not_yet", f"{ev}{code}: it died and systemd restarts it{looping}")
    if active not in ("active", "reloading"):
        return res("not_yet", ev)
    settle = settle_window_s(p, unit_type)
    entered = _int(props.get("ActiveEnterTimestampMonotonic"))
    updates: dict[str, Any] = {}
    if uptime_s is not None and entered:
        age = max(0.0, uptime_s - entered / 1e6)
    else:
        seen = state.get("active_seen")
        if isinstance(seen, list) and len(seen) == 2 and seen[0] == inv:
            age = max(0.0, now - float(seen[1]))
        else:
            age, updates = 0.0, {"active_seen": [inv, now]}
    if age >= settle:
        updates = {"passed_invocation": inv, "passed_restarts": restarts}
        return res("passed", ev + (f", up {age:.1f} s (settle window {settle:g} s)" if settle else ""), updates,
                   new_active=True)
    return res("not_yet", f"{ev}, up {age:.1f} s of its {settle:g} s settle window (Type={unit_type}: systemd "
                          f"counts it started before it is ready){looping}", updates, new_active=True)


def show_command(unit: str) -> str:
    """``systemctl show`` of the probe's properties, then the host's uptime (one round trip)."""
    return (f"systemctl show -p {UNIT_PROPS} {shlex.quote(unit)}; "
            f"read -r up _ 2>/dev/null </proc/uptime && echo \"{_UPTIME_KEY}=$up\"")


async def check_unit(host: Host, p: SystemdUnitProbe, state: dict[str, Any]) -> ProbeResult:
    """One check of ``p`` on ``host`` (one round trip). :raises HostError: the host cannot be reached."""
    res = await run_on(host, show_command(p.unit))
    props = parse_systemctl_show(res.stdout.decode("utf-8", "replace"))
    up = props.pop(_UPTIME_KEY, None)
    try:
        uptime_s = float(up) if up else None
    except ValueError:
        uptime_s = None
    now = wall_time()
    verdict = judge_unit(p, state, props, uptime_s=uptime_s, now=now)
    if verdict.details.get("ask_journal"):
        ends = await invocation_ends(host, p.unit, cursor=p.journal_cursor, not_invocation=p.not_invocation)
        verdict = judge_unit(p, state, props, uptime_s=uptime_s, now=now, ends=ends)
    return verdict


async def invocation_ends(host: Host, unit: str, *, cursor: str | None = None,
                          not_invocation: str | None = None) -> InvocationEnds:
    """How ``unit``'s invocations of this boot ended, and which start jobs ended without a new invocation, from
    the manager's journal lines about it (one round trip; ``journalctl --sync`` first, best effort). Only lines
    after ``cursor`` count, else only lines after the last one of ``not_invocation`` (the invocation before the
    restart), else all of this boot's.

    :raises HostError: the host cannot be reached.
    """
    res = await run_on(host, f"journalctl --sync >/dev/null 2>&1; journalctl -b -u {shlex.quote(unit)} -o json "
                             "-n 300 --no-pager", max_output_bytes=8 << 20)
    entries: list[tuple[str, str, str, str, str]] = []  # invocation, MESSAGE_ID, JOB_TYPE, JOB_RESULT, MESSAGE
    for raw in res.stdout.decode("utf-8", "replace").splitlines():
        try:
            entry = json.loads(raw)
        except json.JSONDecodeError:
            continue
        if not isinstance(entry, dict) or (cursor and not after_cursor(str(entry.get("__CURSOR", "")), cursor)):
            continue
        msg = entry.get("MESSAGE", "")
        if isinstance(msg, list):  # journald sends non-UTF-8 messages as byte arrays
            msg = bytes(msg).decode("utf-8", "replace")
        inv = str(entry.get("INVOCATION_ID") or entry.get("_SYSTEMD_INVOCATION_ID") or "")
        entries.append((inv, str(entry.get("MESSAGE_ID", "")), str(entry.get("JOB_TYPE", "")),
                        str(entry.get("JOB_RESULT", "")), str(msg)))
    if not cursor and not_invocation:
        last = max((k for k, e in enumerate(entries) if e[0] == not_invocation), default=-1)
        entries = entries[last + 1:]
    order: list[str] = []
    how: dict[str, str] = {}
    lines: dict[str, str] = {}
    refused: list[tuple[str, str]] = []
    for inv, mid, job_type, job_result, msg in entries:
        if job_type == "start" and job_result and inv in ("", not_invocation or ""):
            refused.append((job_result, msg.strip()))  # a start job ended, and no new invocation was made
            continue
        if not inv:
            continue
        if inv not in order:
            order.append(inv)
        if mid == _MSG_STOPPING:
            how[inv] = "stopped"
        elif mid == _MSG_SKIPPED and how.get(inv) != "stopped":
            how[inv], lines[inv] = "skipped", msg.strip()
        elif mid == _MSG_FAILED and how.get(inv) not in ("stopped", "skipped"):
            how[inv] = "failed"
        elif mid == _MSG_SUCCESS and inv not in how:
            how[inv] = "exited"
    return InvocationEnds(tuple(order), how, tuple(refused), lines)


def _cursor_key(cursor: str) -> tuple[str, int, int] | None:
    """(seqnum id, seqnum, realtime µs) of a journal cursor (``s=…;i=HEX;b=…;m=HEX;t=HEX;x=…``), or None."""
    fields = dict(part.split("=", 1) for part in cursor.split(";") if "=" in part)
    try:
        return fields.get("s", ""), int(fields.get("i", ""), 16), int(fields.get("t", ""), 16)
    except ValueError:
        return None


def after_cursor(entry_cursor: str, start: str) -> bool:
    """Whether the journal entry at ``entry_cursor`` comes after ``start`` (same seqnum id: by seqnum; else by
    realtime). journalctl's own ``--after-cursor`` is not used with a unit match: with a cursor of an entry that
    does not match, it skips the first matching entry (seen with systemd 252)."""
    a, b = _cursor_key(entry_cursor), _cursor_key(start)
    if a is None or b is None:
        return True
    return a[1] > b[1] if a[0] == b[0] else a[2] > b[2]


async def unit_journal(host: Host, unit: str, *, cursor: str | None = None, invocation: str | None = None,
                       lines: int = 30, timeout_s: float = 5.0) -> str:
    """The journal lines that explain ``unit``'s failure, systemd's own lines about it included
    (``journalctl -u UNIT``): its lines after ``cursor`` (taken before the restart), else the lines of
    ``invocation`` (``_SYSTEMD_INVOCATION_ID`` or ``INVOCATION_ID``), else its last lines. Best effort: ""
    when the journal cannot be read within ``timeout_s`` seconds.

    :param lines: at most this many lines (the newest).
    """
    # `--sync` first (root only; best effort): journald may read a dying process's last stdout lines after
    # systemd's own "Main process exited" message, and the lookup must not come in between
    cmd = f"journalctl --sync >/dev/null 2>&1; journalctl -u {shlex.quote(unit)} -o json -n 300 --no-pager"
    with anyio.move_on_after(timeout_s):
        try:
            res = await run_on(host, cmd, max_output_bytes=8 << 20)
        except HostError:
            return ""
        entries: list[tuple[str, str]] = []
        for raw in res.stdout.decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(raw)
            except json.JSONDecodeError:
                continue
            if cursor and not after_cursor(str(entry.get("__CURSOR", "")), cursor):
                continue
            msg = entry.get("MESSAGE", "")
            if isinstance(msg, list):  # journald sends non-UTF-8 messages as byte arrays
                msg = bytes(msg).decode("utf-8", "replace")
            inv = str(entry.get("_SYSTEMD_INVOCATION_ID") or entry.get("INVOCATION_ID") or "")
            entries.append((inv, str(msg)))
        if not cursor and invocation and any(i == invocation for i, _ in entries):
            entries = [(i, m) for i, m in entries if i == invocation]
        return "\n".join(m for _, m in entries[-lines:]).strip()
    return ""
