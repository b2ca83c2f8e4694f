"""The fleet workflows: ``FleetRollout`` (a unit change across hosts in a canary wave and then waves) and
``HostJob`` (one command as a job on one host). Deterministic code only: every host contact is an activity of
:mod:`.activities`, named by string (this module imports no activity code).

``FleetRollout``, per host: ``fleet.precheck`` (refuse a host whose RAM cannot hold the hicache host pool; a unit
that has every flag while its server runs them, by ``/get_server_info``, is ``already_done``; a unit that has
them while the server does not run them is restarted without an edit) → ``fleet.edit`` (with a backup) →
``fleet.plan_restart`` → ``fleet.restart`` (daemon-reload + restart, followed by its probes to readiness) →
``fleet.verify`` (``/get_server_info`` shows the flags). On a failed restart or verification: ``fleet.restore``
(its result checked: a restore that fails leaves the host ``failed``, its note saying what the host was left in,
and nothing is restarted), then, when one of the rollout's restarts ran, a second planned restart followed to
readiness (``rolled_back`` when the host serves again, ``failed`` when not). Hosts of one wave run concurrently;
once more hosts failed than the failure budget allows, no further wave starts (``halted``; the hosts left are
``skipped``).

A step that the worker's policy answers with ``needs_approval`` puts the host in ``awaiting_approval`` until the
``approve`` signal names it, then the step is made again with the person's name (``agent-tools rollout
approve``). A step the policy denies makes the host ``denied``: an edit made before it is put back, nothing is
restarted (nothing ran), and it is no failure. The ``status`` query gives the whole state at any time.

Cancellation (``agent-tools rollout cancel``): the workflow looks for a cancel request after every step, so a step
that completed although it was asked to cancel (a short one) ends the host's steps there; activities heartbeat
about once a second (the worker's heartbeat throttle), so a running one learns of the cancel and stops (a job it
follows is cancelled on the host). Each host whose unit the rollout may have changed is then put back
(:meth:`FleetRollout._undo`: the unit restored; a restart only when one of the rollout's restarts ran there, which
is asked of the host when the workflow does not know). Meanwhile the status shows ``cancel_requested`` and the
phase ``cancelling``.

The status is also written to the workflow's memo after each wave and at the end (also when cancelled), so a
client reads a finished rollout's status, and the last one of a running rollout whose worker is gone, without a
worker (:func:`agent_tools.fleet.client.status`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from typing import Any, get_args

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.exceptions import TimeoutError as StepTimeout
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from ..errors import ErrorKind
    from ..jobs.manager import job_id_for_key
    from .model import FINAL_STATES, HostJobSpec, RolloutSpec, flag_problem, unit_problem

__all__ = ["FleetRollout", "FleetSteps", "HostJob", "approval_problem", "spec_problem", "waiting_hosts", "waves_of"]

#: retries of an activity whose host was unreachable (or whose worker died): 1 s, 2 s, 4 s, ... up to 10 s apart
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                     maximum_interval=timedelta(seconds=10), maximum_attempts=20)
#: default probes of a restart: the server's health endpoint and its ready line (a refusal fails it at once)
_DEFAULT_PROBES: list[dict[str, Any]] = [
    {"kind": "http", "url": "http://127.0.0.1:{port}/health"},
    {"kind": "log", "unit": "{unit}", "pattern": "The server is fired up and ready to roll!",
     "fail_pattern": "Not enough host memory|Traceback"},
]
#: the memo key holding the rollout's status (:meth:`FleetRollout._record`)
STATUS_MEMO = "status"


def waves_of(hosts: list[str], canary: int, wave_size: int) -> list[list[str]]:
    """``hosts`` in waves: the first ``canary`` hosts (when > 0), then ``wave_size`` at a time."""
    if wave_size < 1 or canary < 0:
        raise ValueError("wave_size must be >= 1 and canary >= 0")
    first = [hosts[:canary]] if canary > 0 and hosts else []
    rest = hosts[canary:] if canary > 0 else hosts
    return first + [rest[i:i + wave_size] for i in range(0, len(rest), wave_size)]


def spec_problem(spec: RolloutSpec) -> str | None:
    """What is wrong with ``spec`` (no hosts, a host twice, wave_size < 1, canary or failure_budget < 0,
    heartbeat_s or restart_timeout_s not > 0, a unit that is not a unit name, a flag that is not one plain word:
    :func:`~agent_tools.fleet.model.flag_problem`), or None."""
    if not spec.hosts:
        return "no hosts"
    twice = sorted({h for h in spec.hosts if spec.hosts.count(h) > 1})
    if twice:
        return f"hosts given more than once: {', '.join(twice)}"
    if spec.wave_size < 1 or spec.canary < 0 or spec.failure_budget < 0:
        return "wave_size must be >= 1, canary and failure_budget >= 0"
    if not spec.heartbeat_s > 0 or not spec.restart_timeout_s > 0:
        return ("heartbeat_s and restart_timeout_s must be > 0 seconds (the heartbeat timeout is what notices a "
                "dead worker and delivers a cancel)")
    return unit_problem(spec.unit) or flag_problem(list(spec.flags))


def waiting_hosts(status: dict[str, Any]) -> list[str]:
    """The hosts of a rollout's ``status`` that are ``awaiting_approval``, sorted."""
    hosts: dict[str, Any] = status.get("hosts") or {}
    return sorted(h for h, st in hosts.items() if st.get("state") == "awaiting_approval")


def approval_problem(status: dict[str, Any], host: str) -> str | None:
    """Why an approval for ``host`` (``"*"``: every host waiting now) does not fit the rollout whose ``status``
    this is (the host is not in it, or is not ``awaiting_approval``; for ``"*"``: no host waits), or None."""
    hosts: dict[str, Any] = status.get("hosts") or {}
    waiting = waiting_hosts(status)
    shown = ", ".join(waiting) or "none"
    if host == "*":
        return None if waiting else "no host of the rollout is waiting for approval"
    if host not in hosts:
        return f"{host} is not a host of this rollout (waiting for approval: {shown})"
    if host not in waiting:
        return f"{host} is {hosts[host].get('state')}, not waiting for approval (waiting: {shown})"
    return None


def _not_verified(v: dict[str, Any]) -> str:
    """The note of a failed ``fleet.verify``: each flag missing, what was expected and what the server showed."""
    if v.get("message"):
        return f"not verified: /get_server_info could not be read: {v['message']}"
    data, want = v.get("data") or {}, v.get("expected") or {}
    shown = "; ".join(f"{k} expected {'true' if want.get(k) is None else want.get(k)}, "
                      f"it shows {data[k] if k in data else 'nothing'}" for k in v.get("missing") or [])
    return f"not verified: /get_server_info (status {v.get('status')}): {shown}"


def _refusal(step: str, out: dict[str, Any]) -> str:
    """What a step's result that is not its success says: a policy's ``denied`` or ``needs_approval`` (rule and
    reason), or an ``error`` (its message)."""
    rule = f" (rule {out.get('rule_id')})" if out.get("rule_id") else ""
    if out.get("outcome") == "denied":
        return f"{step} denied by the worker's policy{rule}: {out.get('command')}: {out.get('reason')}"
    if out.get("outcome") == "needs_approval":
        return f"{step}: {out.get('command')} asks approval{rule}: {out.get('reason')}"
    return f"{step} {out.get('outcome')}: {out.get('message') or out.get('reason')}"


def _failure_kind(exc: ActivityError) -> str:
    """The ``kind`` of a step that failed for good (its retries spent): the tool error's kind the activity raised
    (``unreachable``, ``connection_lost``, ...: :class:`~agent_tools.errors.ErrorKind`), ``timeout`` when the
    worker went silent or the step ran out of time, else ``internal``."""
    kind = exc.cause.type if isinstance(exc.cause, ApplicationError) else None
    if kind in get_args(ErrorKind):
        return str(kind)
    return "timeout" if isinstance(exc.cause, StepTimeout) else "internal"


def _probes(spec: RolloutSpec, port: int) -> list[dict[str, Any]]:
    out = []
    for p in spec.probes or _DEFAULT_PROBES:
        out.append({k: (v.replace("{port}", str(port)).replace("{unit}", spec.unit) if isinstance(v, str) else v)
                    for k, v in p.items()})
    return out


@workflow.defn(name="FleetRollout")
class FleetRollout:
    """See the module docstring. Input :class:`~agent_tools.fleet.model.RolloutSpec`; result: the final
    ``status``."""

    def __init__(self) -> None:
        self._hosts: dict[str, dict[str, Any]] = {}
        self._approved: dict[str, str] = {}
        self._phase = "starting"
        self._wave = -1
        self._waves = 0
        self._halted: str | None = None
        self._budget = 0
        self._heartbeat_s = 10.0
        self._rejected: list[dict[str, str]] = []
        self._seq = 0
        #: per host whose unit the rollout may change: {"path", "text" (the pre-check's), "backup", "edit": none |
        #: maybe (in flight or its outcome unknown) | done, "probes", "jobs": {kind: {"job_id", "ran": maybe | yes}}}
        self._touched: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- signals and queries
    @workflow.signal
    def approve(self, req: dict[str, Any]) -> None:
        """``{"hosts": [ALIAS | "*", ...], "by": NAME}`` (or ``"host": ALIAS``): a person's yes for each named host's
        waiting step and its later steps in this rollout; ``"*"`` names every host waiting for approval when the
        signal arrives, never one that is not waiting yet. A name whose host is not ``awaiting_approval`` is
        rejected and listed in the status' ``rejected_approvals``."""
        by = str(req.get("by") or "unknown")
        names = [str(h) for h in (req.get("hosts") or [req.get("host") or ""])]
        now = self.status()
        for name in names:
            problem = approval_problem(now, name)
            if problem:
                self._rejected.append({"host": name, "by": by, "why": problem})
                continue
            for host in waiting_hosts(now) if name == "*" else [name]:
                self._approved[host] = by

    @workflow.query
    def status(self) -> dict[str, Any]:
        """``{"phase", "wave", "waves", "failures", "failure_budget", "halted", "cancel_requested", "counts":
        {state: n}, "hosts": {alias: {"state", "wave", "note", "job_id"?, "backup_id"?, "approval"?, "step"?,
        "restarts"...}}, "rejected_approvals": [{"host", "by", "why"}]}``. ``wave`` counts from 0; ``phase``:
        starting, canary, wave, cancelling (a cancel was requested: steps stop, hosts are put back), then done,
        halted or cancelled. A host's ``job_id`` is its restart's job while that step runs (known before the
        launch); ``step``: the activity it waits for (``activity``, ``activity_id``: the client adds its attempts
        and last failure from the workflow's description)."""
        counts: dict[str, int] = {}
        for h in self._hosts.values():
            counts[h["state"]] = counts.get(h["state"], 0) + 1
        cancel = workflow.cancellation_reason() is not None
        phase = "cancelling" if cancel and self._phase in ("starting", "canary", "wave") else self._phase
        return {"phase": phase, "wave": self._wave, "waves": self._waves, "failures": self._failures(),
                "failure_budget": self._budget, "halted": self._halted, "cancel_requested": cancel,
                "counts": counts, "hosts": {k: dict(v) for k, v in self._hosts.items()},
                "rejected_approvals": [dict(r) for r in self._rejected]}

    def _failures(self) -> int:
        return sum(1 for h in self._hosts.values() if h["state"] in ("rolled_back", "failed"))

    def _record(self) -> None:
        """The status into the workflow's memo (read by clients without a worker)."""
        workflow.upsert_memo({STATUS_MEMO: self.status()})

    # ---------------------------------------------------------------- the rollout
    @workflow.run
    async def run(self, spec: RolloutSpec) -> dict[str, Any]:
        self._budget = spec.failure_budget
        self._heartbeat_s = spec.heartbeat_s
        problem = spec_problem(spec)
        if problem:
            raise ApplicationError(f"invalid rollout: {problem}", non_retryable=True)
        waves = waves_of(list(spec.hosts), spec.canary, spec.wave_size)
        self._waves = len(waves)
        for i, wave in enumerate(waves):
            for h in wave:
                self._hosts[h] = {"state": "pending", "wave": i, "note": ""}
        try:
            for i, wave in enumerate(waves):
                if self._halted:
                    for h in wave:
                        self._set(h, "skipped", f"not started: {self._halted}")
                    continue
                self._cancelled()
                self._wave = i
                self._phase = "canary" if i == 0 and spec.canary > 0 else "wave"
                # every host's steps run to their end (a cancelled one's clean-up too) before the wave is over
                results = await asyncio.gather(*(self._guarded(spec, h) for h in wave), return_exceptions=True)
                self._cancelled()
                for r in results:
                    if isinstance(r, BaseException):
                        raise r
                if self._failures() > spec.failure_budget and i + 1 < len(waves):
                    self._halted = (f"halted after wave {i + 1}/{len(waves)}: {self._failures()} host(s) failed, "
                                    f"the failure budget is {spec.failure_budget}")
                self._record()
            self._phase = "halted" if self._halted else "done"
        except asyncio.CancelledError:
            self._phase = "cancelled"
            for h, st in self._hosts.items():
                if st["state"] not in FINAL_STATES:
                    self._set(h, "cancelled", "the rollout was cancelled before this host's steps began"
                              if st["state"] == "pending" else "the rollout was cancelled", step=None)
            self._record()
            raise
        self._record()
        return self.status()

    def _cancelled(self) -> None:
        """:raises asyncio.CancelledError: a cancel of the workflow was requested (also when the step that was
        running when it came completed instead of reporting itself cancelled: the request stays)."""
        if workflow.cancellation_reason() is not None:
            raise asyncio.CancelledError()

    def _set(self, host: str, state: str, note: str | None = None, **extra: Any) -> None:
        st = self._hosts[host]
        st["state"] = state
        if note is not None:
            st["note"] = note
        for k, v in extra.items():
            if v is None:
                st.pop(k, None)
            else:
                st[k] = v

    def _key(self, host: str, kind: str) -> str:
        """The idempotency key of the host's ``kind`` of restart (``restart``, ``rollback``, ``cancel``)."""
        info = workflow.info()
        return f"fleet/{info.workflow_id}/{info.run_id}/{host}/{kind}"

    async def _act(self, host: str, name: str, req: dict[str, Any], *, long: float | None = None,
                   cleanup: bool = False) -> dict[str, Any]:
        """Activity ``name`` for ``host``: every one heartbeats (:mod:`.activities`), so a worker that died during
        any step is noticed after ``heartbeat_s`` and the step retried, and a cancel reaches it. The host's status
        names the step while it runs (``step``).

        Not ``cleanup``: a cancel requested meanwhile raises :class:`asyncio.CancelledError` after the step
        (whatever it returned). ``cleanup`` (putting a host back): no such check, and retries that ran out are
        returned as an ``error`` result, not raised."""
        self._seq += 1
        activity_id = f"{self._seq}-{name}"
        self._hosts[host]["step"] = {"activity": name, "activity_id": activity_id}
        try:
            result: dict[str, Any] = await workflow.execute_activity(
                name, req, activity_id=activity_id,
                start_to_close_timeout=timedelta(seconds=long or 120.0),
                heartbeat_timeout=timedelta(seconds=self._heartbeat_s),
                retry_policy=_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
                result_type=dict)
        except ActivityError as exc:
            if not cleanup or isinstance(exc.cause, CancelledError):
                raise
            result = {"outcome": "error", "kind": _failure_kind(exc), "retryable": False,
                      "message": str(exc.cause or exc)}
        finally:
            self._hosts[host].pop("step", None)
        if not cleanup:
            self._cancelled()
        return result

    async def _step(self, host: str, name: str, req: dict[str, Any], *, long: float | None = None,
                    cleanup: bool = False, trying: Callable[[bool], None] | None = None) -> dict[str, Any]:
        """An activity whose call the policy may answer ``needs_approval``: then wait for the approve signal and
        make it again with the person's name. ``trying(True)`` is called before each attempt (it may act),
        ``trying(False)`` when it did not (the policy asked). A ``cleanup`` step, or one that still asks after the
        person's yes, does not wait: its ``needs_approval`` is returned."""
        while True:
            if trying is not None:
                trying(True)
            out = await self._act(host, name, {**req, "approved_by": self._approver(host)}, long=long,
                                  cleanup=cleanup)
            if out.get("outcome") != "needs_approval":
                return out
            if trying is not None:
                trying(False)
            if cleanup or self._approver(host) is not None:
                return out
            before = self._hosts[host]["state"]
            self._set(host, "awaiting_approval", f"{_refusal(name, out)}: agent-tools rollout approve",
                      approval={"step": name, "command": out.get("command"), "rule_id": out.get("rule_id"),
                                "reason": out.get("reason")})
            await workflow.wait_condition(lambda: self._approver(host) is not None)
            self._set(host, before, f"approved by {self._approver(host)}", approval=None)

    def _approver(self, host: str) -> str | None:
        return self._approved.get(host)

    async def _guarded(self, spec: RolloutSpec, host: str) -> None:
        """:meth:`_one`; a step whose retries ran out (a host unreachable for minutes) fails that host, not the
        rollout, and its note says what the host was left in; a cancellation goes on up, after :meth:`_undo` (not
        cancellable) put a host whose unit may have been edited back as it was."""
        try:
            await self._one(spec, host)
        except asyncio.CancelledError:
            await _uncancellable(self._undo(spec, host))
            raise
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):  # the rollout is being cancelled: its step was
                await _uncancellable(self._undo(spec, host))
                raise asyncio.CancelledError() from exc
            during = self._hosts[host]["state"]
            self._set(host, "failed", f"{during}: {exc.cause or exc}; {self._left(host)}", step=None)

    def _left(self, host: str) -> str:
        """What the host was left in when its steps stopped without putting it back (it did not answer)."""
        ctx = self._touched.get(host)
        if ctx is None:
            return "nothing was changed on it"
        path, backup = ctx["path"], ctx["backup"]
        if ctx["edit"] == "done":
            unit = (f"the unit {path} edited (restore_file(host={host}, path={path}, backup_id={backup}) puts it "
                    "back)" if backup else f"the unit {path} edited (no backup id: write back the pre-check's text)")
        elif ctx["edit"] == "maybe":
            unit = f"the unit {path} possibly edited (the edit's outcome is unknown: compare it with its backup)"
        else:
            unit = f"the unit {path} not changed"
        jobs = [f"{kind} job {j['job_id']} {'ran' if j['ran'] == 'yes' else 'may have run'}"
                for kind, j in ctx["jobs"].items()]
        return "LEFT as it was when its step stopped: " + "; ".join([unit, *jobs]) + "; nothing was put back"

    async def _one(self, spec: RolloutSpec, host: str) -> None:
        self._set(host, "prechecking")
        pre = await self._act(host, "fleet.precheck", {"host": host, "unit": spec.unit, "flags": spec.flags})
        if pre.get("outcome") == "already_done":
            self._set(host, "already_done", str(pre.get("message")))
            return
        if pre.get("outcome") in ("denied", "needs_approval"):
            state = "denied" if pre.get("outcome") == "denied" else "failed"
            self._set(host, state, f"pre-check: {_refusal(str(pre.get('step')), pre)}; nothing was changed")
            return
        if pre.get("outcome") != "precheck":
            self._set(host, "failed", f"pre-check: {pre.get('message')}")
            return
        if spec.precheck and not pre["fits"]:
            gib = 2**30
            self._set(host, "refused", f"refused at pre-check: the hicache pool needs {pre['needs_bytes'] / gib:.1f} "
                                       f"GiB of host RAM; {pre['available_bytes'] / gib:.1f} GiB available minus the "
                                       f"10 GiB reserve leaves {(pre['available_bytes'] - 10 * gib) / gib:.1f} GiB",
                      precheck=pre["summary"])
            return
        probes = _probes(spec, int(pre["port"]))
        ctx = self._touched[host] = {"path": pre["path"], "text": pre["text"], "backup": None, "edit": "none",
                                     "probes": probes, "jobs": {}}
        if pre.get("adds"):
            self._set(host, "editing", pre["summary"])

            def editing(on: bool) -> None:
                ctx["edit"] = "maybe" if on else "none"

            ed = await self._step(host, "fleet.edit", {"host": host, "path": pre["path"], "old": pre["old"],
                                                       "new": pre["new"], "text": pre["text"]}, trying=editing)
            if ed.get("outcome") != "written":
                ctx["edit"] = "none"  # edit_file changes nothing when it does not write
                self._set(host, "denied" if ed.get("outcome") == "denied" else "failed",
                          f"{_refusal('edit_file', ed)}; nothing was changed")
                return
            ctx["edit"], ctx["backup"] = "done", ed.get("backup_id")
            self._set(host, "editing", backup_id=ctx["backup"])
        else:
            self._set(host, "restarting", pre["summary"])
        verdict, why = await self._restart(spec, host, "restart", probes, "restarting")
        if verdict == "ready":
            self._set(host, "verifying")
            v = await self._act(host, "fleet.verify", {"host": host, "port": pre["port"], "flags": spec.flags})
            if v.get("outcome") == "verified":
                shown = ", ".join(f"{k}={val}" for k, val in (v.get("data") or {}).items())
                self._set(host, "verified", f"/get_server_info: {shown}")
                return
            why = _not_verified(v)
        # a rollback: a clean-up that a cancel does not interrupt (the cancel takes effect after it)
        self._set(host, "rolling_back", why)
        ok, note = await _uncancellable(self._put_back(spec, host, "rollback"))
        if verdict == "denied":
            self._set(host, "denied" if ok else "failed", f"{why}; {note}")
        else:
            self._set(host, "rolled_back" if ok else "failed", f"{why}; {note}")

    async def _restart(self, spec: RolloutSpec, host: str, kind: str, probes: list[dict[str, Any]], state: str,
                       *, cleanup: bool = False) -> tuple[str, str]:
        """Plan and make the host's ``kind`` of restart (``restart``, ``rollback``, ``cancel``), followed to
        readiness by ``probes``; the host shows its job id while it runs. Returns ``(verdict, why)``: ``ready``;
        ``failed`` (it ran and did not become ready: the evidence); or, when nothing was launched, ``denied``,
        ``needs_approval`` or ``error``. A launched restart is listed in the host's ``restarts``."""
        self._set(host, state)
        plan = await self._act(host, "fleet.plan_restart", {"host": host, "unit": spec.unit, "probes": probes},
                               cleanup=cleanup)
        if plan.get("outcome") != "plan":
            return (str(plan.get("outcome")) if plan.get("outcome") in ("denied", "needs_approval") else "error",
                    _refusal("restart", plan))
        key = self._key(host, kind)
        job = job_id_for_key(host, key)
        jobs: dict[str, Any] = self._touched[host]["jobs"] if host in self._touched else {}

        def trying(on: bool) -> None:
            if on:
                jobs[kind] = {"job_id": job, "ran": "maybe"}
            else:
                jobs.pop(kind, None)
            self._set(host, self._hosts[host]["state"], job_id=job if on else None)

        st = await self._step(host, "fleet.restart", {"host": host, "plan": plan, "key": key},
                              long=spec.restart_timeout_s, cleanup=cleanup, trying=trying)
        if not st.get("launched"):
            jobs.pop(kind, None)
            self._set(host, state, job_id=None)
            outcome = str(st.get("outcome"))
            return outcome if outcome in ("denied", "needs_approval") else "error", _refusal("restart", st)
        jobs[kind] = {"job_id": job, "ran": "yes"}
        self._add_restart(host, kind, job, st)
        if st.get("readiness") == "ready":
            return "ready", ""
        # the evidence that explains it: a failed log probe's line (the server's own words) first, else the last
        # line the unit's journal shows
        failed = sorted((p for p in st.get("probes") or [] if p.get("state") == "failed"),
                        key=lambda p: p.get("kind") != "log")
        evidence = str(failed[0].get("evidence", "")).splitlines()[-1:] if failed else []
        why = f"{kind} {st.get('readiness')}: {evidence[0] if evidence else st.get('why', '')}"
        if st.get("journal_tail") and not (failed and failed[0].get("kind") == "log"):
            why += f"; the unit's journal ends: {st['journal_tail']}"
        return "failed", why

    def _add_restart(self, host: str, kind: str, job: str, st: dict[str, Any]) -> None:
        restarts = self._hosts[host].setdefault("restarts", [])
        restarts.append({"key": kind, "job_id": job, "readiness": st.get("readiness"), "attempt": st.get("attempt"),
                         "reattached": st.get("reattached"), "approval_id": st.get("approval_id")})

    async def _ran(self, host: str) -> list[str]:
        """The job ids of the host's restarts that ran. One whose step was cut short (a cancel) is asked of the
        host (``fleet.job_facts``: is its job directory there?); listed in ``restarts`` when it ran. When the host
        cannot say, it counts as having run (the clean-up then restarts once more rather than leave the service
        on the edited unit)."""
        ctx = self._touched[host]
        ran: list[str] = []
        for kind, j in list(ctx["jobs"].items()):
            if j["ran"] == "maybe":
                facts = await self._act(host, "fleet.job_facts", {"host": host, "job_id": j["job_id"]}, cleanup=True)
                if facts.get("outcome") == "job" and not facts.get("present"):
                    del ctx["jobs"][kind]
                    continue
                j["ran"] = "yes"
                self._add_restart(host, kind, j["job_id"], {"readiness": "cancelled" if facts.get("present")
                                                            else "unknown"})
            ran.append(j["job_id"])
        return ran

    async def _put_back(self, spec: RolloutSpec, host: str, kind: str) -> tuple[bool, str]:
        """The host's unit restored (``fleet.restore``, its result checked) and, when one of the rollout's
        restarts ran with the changed unit, restarted (``kind``) and followed to its health probe. Returns
        ``(ok, note)``: ``ok`` when the host is as before the rollout (and serves, when restarted); the note says
        what was done, or what the host was left in and how to put it back. A clean-up: no approval is waited
        for, retries that ran out are reported."""
        ctx = self._touched[host]
        path, backup = ctx["path"], ctx["backup"]
        ran = await self._ran(host)
        ran_note = f"restart job {', '.join(ran)} ran" if ran else "no restart of the rollout ran"
        res = await self._act(host, "fleet.restore", {"host": host, "path": path, "backup_id": backup,
                                                      "text": ctx["text"], "approved_by": self._approver(host)},
                              cleanup=True)
        if res.get("outcome") != "restored":
            service = await self._service_state(spec, host)
            hint = (f"restore_file(host={host}, path={path}, backup_id={backup})" if backup else
                    "write back the unit text the pre-check read (no backup id was returned)")
            return False, (f"restoring the unit FAILED ({_refusal('restore', res)}): LEFT with {path} "
                           f"{'edited' if ctx['edit'] == 'done' else 'possibly edited'}; {ran_note}; service "
                           f"{service}; nothing was restarted; put it back with {hint}")
        how = res.get("how")
        ctx["edit"] = "none"
        if how == "unchanged":
            unit = f"the unit {path} was not changed"
        elif how == "backup":
            unit = f"restored the unit from backup {backup}"
        else:
            unit = f"restored the unit from the pre-check's copy{' (' + res['note'] + ')' if res.get('note') else ''}"
        if not ran:
            return True, f"{unit}; the service was not restarted (no restart of the rollout ran there)"
        if how == "unchanged":  # a restart without an edit (the unit had the flags): nothing to go back to
            service = await self._service_state(spec, host)
            return False, (f"{unit} (it had the flags before the rollout): {ran_note} with it, there is nothing "
                           f"to roll back to; service {service}")
        verdict, why = await self._restart(spec, host, kind, ctx["probes"][:1], "rolling_back", cleanup=True)
        job = job_id_for_key(host, self._key(host, kind))
        if verdict == "ready":
            return True, f"{unit}; {ran_note}, so it was restarted (job {job}): it serves again"
        service = await self._service_state(spec, host)
        if verdict != "failed":  # not launched: the service still runs what the rollout's restart started
            return False, (f"{unit}, but {ran_note} and restarting it again did not start: {why}; service {service}; "
                           f"restart it: restart_service(host={host}, unit={spec.unit})")
        return False, f"{unit}; {ran_note}; restarted it (job {job}) but it does not serve: {why}; service {service}"

    async def _undo(self, spec: RolloutSpec, host: str) -> None:
        """After a cancellation: a host whose unit may have been edited is put back (:meth:`_put_back`: the unit
        restored, and restarted when one of the rollout's restarts had run); its note says what was done, or what
        it was left in (unit, service state, job id, backup)."""
        ctx = self._touched.get(host)
        during = self._hosts[host]["state"]
        if ctx is None or during in FINAL_STATES:
            return  # nothing was changed on it (or it had finished): run() marks it cancelled
        self._set(host, "rolling_back", f"cancelled during {during}: putting the host back", approval=None,
                  job_id=None)
        _, note = await self._put_back(spec, host, "cancel")
        self._set(host, "cancelled", f"cancelled during {during}; {note}", backup_id=ctx["backup"])

    async def _service_state(self, spec: RolloutSpec, host: str) -> str:
        out = await self._act(host, "fleet.service_state", {"host": host, "unit": spec.unit}, cleanup=True)
        if out.get("outcome") == "error":
            return f"state unknown ({out.get('message')})"
        return str(out.get("state") or out.get("message") or "state unknown")


async def _uncancellable(coro: Any) -> Any:
    """Await ``coro`` to its end although the awaiting task is cancelled (again) meanwhile: a clean-up step. Its
    result; a cancellation of the awaiting task is not raised here (the caller checks for a cancel request)."""
    task = asyncio.ensure_future(coro)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise


@workflow.defn(name="HostJob")
class HostJob:
    """One command as a job on one host, followed to its end (:class:`~agent_tools.fleet.model.HostJobSpec`);
    cancelling the workflow cancels the job (its whole process tree). Result: the job's final status."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {"state": "starting"}

    @workflow.query
    def status(self) -> dict[str, Any]:
        """``{"state": "running", "host", "job_id"}`` while the job runs; then the job's final status, or
        ``{"state": "cancelled" | "failed", "host", "job_id", "note", "job"?}`` when the workflow was cancelled
        (``job``: the job's final status when it ended before the cancel reached it) or its step failed."""
        return dict(self._state)

    @workflow.run
    async def run(self, spec: HostJobSpec) -> dict[str, Any]:
        if not (spec.heartbeat_s > 0 and spec.timeout_s > 0 and spec.budget_s > 0):
            raise ApplicationError("invalid host job: heartbeat_s, timeout_s and budget_s must be > 0 seconds",
                                   non_retryable=True)
        info = workflow.info()
        key = f"hostjob/{info.workflow_id}/{info.run_id}"
        ident = {"host": spec.host, "job_id": job_id_for_key(spec.host, key)}
        self._state = {"state": "running", **ident}
        try:
            out: dict[str, Any] = await workflow.execute_activity(
                "fleet.run_command",
                {"host": spec.host, "command": spec.command, "budget_s": spec.budget_s, "key": key},
                start_to_close_timeout=timedelta(seconds=spec.timeout_s),
                heartbeat_timeout=timedelta(seconds=spec.heartbeat_s), retry_policy=_RETRY,
                cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED, result_type=dict)
        except asyncio.CancelledError:
            self._state = {"state": "cancelled", **ident, "note": "the workflow was cancelled; so was the job"}
            raise
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):
                self._state = {"state": "cancelled", **ident,
                               "note": "the workflow was cancelled; so was the job (its process tree killed)"}
                raise asyncio.CancelledError() from exc
            self._state = {"state": "failed", **ident, "note": str(exc.cause or exc)}
            raise
        if workflow.cancellation_reason() is not None:  # the job ended before the cancel reached it
            self._state = {"state": "cancelled", **ident, "job": out,
                           "note": f"the workflow was cancelled; the job had ended first ({out.get('state')})"}
            raise asyncio.CancelledError()
        self._state = out
        return out


@workflow.defn(name="FleetSteps")
class FleetSteps:
    """Activities of :mod:`.activities` run one after another, each recorded in the history: input ``[{"activity":
    "fleet.host_memory", "args": {...}}, ...]``; result: their results, in order (for scripts, and for the
    benchmark's per-activity overhead)."""

    @workflow.run
    async def run(self, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for step in steps:
            result: dict[str, Any] = await workflow.execute_activity(
                str(step["activity"]), dict(step.get("args") or {}), start_to_close_timeout=timedelta(seconds=120),
                heartbeat_timeout=timedelta(seconds=10), retry_policy=_RETRY, result_type=dict)
            out.append(result)
        return out
