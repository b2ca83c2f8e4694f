"""The fleet workflows: ``FleetRollout`` (a unit change across hosts in a canary wave and then waves) and
``HostJob`` (one command as a job on one host). Deterministic code only: every host contact is an activity of
:mod:`.activities`, named by string (this module imports no activity code).

``FleetRollout``, per host: ``fleet.precheck`` (refuse a host whose RAM cannot hold the hicache host pool) →
``fleet.edit`` (with a backup) → ``fleet.plan_restart`` → ``fleet.restart`` (daemon-reload + restart, followed by
its probes to readiness) → ``fleet.verify`` (``/get_server_info`` shows the flags). On a failed restart or
verification: ``fleet.restore``, then a second planned restart followed to readiness (``rolled_back`` when the
host serves again, ``failed`` when not). Hosts of one wave run concurrently; once more hosts failed than the
failure budget allows, no further wave starts (``halted``; the hosts left are ``skipped``).

A step that the worker's policy answers with ``needs_approval`` puts the host in ``awaiting_approval`` until the
``approve`` signal names it (or ``"*"``), then the step is made again with the person's name
(``agent-tools rollout approve``). The ``status`` query gives the whole state at any time.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError, CancelledError
from temporalio.workflow import ActivityCancellationType

with workflow.unsafe.imports_passed_through():
    from ..jobs.manager import job_id_for_key
    from .model import FINAL_STATES, HostJobSpec, RolloutSpec, flag_problem

__all__ = ["FleetRollout", "FleetSteps", "HostJob", "approval_problem", "spec_problem", "waves_of"]

#: retries of an activity whose host was unreachable (or whose worker died): 1 s, 2 s, 4 s, ... up to 10 s apart
_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), backoff_coefficient=2.0,
                     maximum_interval=timedelta(seconds=10), maximum_attempts=20)
#: default probes of a restart: the server's health endpoint and its ready line (a refusal fails it at once)
_DEFAULT_PROBES: list[dict[str, Any]] = [
    {"kind": "http", "url": "http://127.0.0.1:{port}/health"},
    {"kind": "log", "unit": "{unit}", "pattern": "The server is fired up and ready to roll!",
     "fail_pattern": "Not enough host memory|Traceback"},
]


def waves_of(hosts: list[str], canary: int, wave_size: int) -> list[list[str]]:
    """``hosts`` in waves: the first ``canary`` hosts (when > 0), then ``wave_size`` at a time."""
    if wave_size < 1 or canary < 0:
        raise ValueError("wave_size must be >= 1 and canary >= 0")
    first = [hosts[:canary]] if canary > 0 and hosts else []
    rest = hosts[canary:] if canary > 0 else hosts
    return first + [rest[i:i + wave_size] for i in range(0, len(rest), wave_size)]


def spec_problem(spec: RolloutSpec) -> str | None:
    """What is wrong with ``spec`` (no hosts, a host twice, wave_size < 1, canary or failure_budget < 0, a flag
    that is not one plain word: :func:`~agent_tools.fleet.model.flag_problem`), or None."""
    if not spec.hosts:
        return "no hosts"
    twice = sorted({h for h in spec.hosts if spec.hosts.count(h) > 1})
    if twice:
        return f"hosts given more than once: {', '.join(twice)}"
    if spec.wave_size < 1 or spec.canary < 0 or spec.failure_budget < 0:
        return "wave_size must be >= 1, canary and failure_budget >= 0"
    return flag_problem(list(spec.flags))


def approval_problem(status: dict[str, Any], host: str) -> str | None:
    """Why an approval for ``host`` (``"*"``: any) does not fit the rollout whose ``status`` this is (the host is
    not in it, or is not ``awaiting_approval``), or None."""
    hosts: dict[str, Any] = status.get("hosts") or {}
    waiting = sorted(h for h, st in hosts.items() if st.get("state") == "awaiting_approval")
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
        #: per host whose unit the rollout may have changed: {"path", "text", "backup", "probes", "restart_key"}
        self._touched: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- signals and queries
    @workflow.signal
    def approve(self, req: dict[str, Any]) -> None:
        """``{"host": ALIAS | "*", "by": NAME}``: a person's yes for the host's waiting step (and its later
        ones); ``"*"`` for every host of the rollout. Taken only while that host (for ``"*"``: some host) is
        ``awaiting_approval``; else it is rejected and listed in the status' ``rejected_approvals``."""
        host, by = str(req.get("host") or "*"), str(req.get("by") or "unknown")
        problem = approval_problem(self.status(), host)
        if problem:
            self._rejected.append({"host": host, "by": by, "why": problem})
            return
        self._approved[host] = by

    @workflow.query
    def status(self) -> dict[str, Any]:
        """``{"phase", "wave", "waves", "failures", "failure_budget", "halted", "counts": {state: n},
        "hosts": {alias: {"state", "wave", "note", "job_id"?, "approval"?, "restarts"...}},
        "rejected_approvals": [{"host", "by", "why"}]}``."""
        counts: dict[str, int] = {}
        for h in self._hosts.values():
            counts[h["state"]] = counts.get(h["state"], 0) + 1
        return {"phase": self._phase, "wave": self._wave, "waves": self._waves, "failures": self._failures(),
                "failure_budget": self._budget, "halted": self._halted, "counts": counts,
                "hosts": {k: dict(v) for k, v in self._hosts.items()},
                "rejected_approvals": [dict(r) for r in self._rejected]}

    def _failures(self) -> int:
        return sum(1 for h in self._hosts.values() if h["state"] in ("rolled_back", "failed"))

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
                self._wave = i
                self._phase = "canary" if i == 0 and spec.canary > 0 else "wave"
                await asyncio.gather(*(self._guarded(spec, h) for h in wave))
                if self._failures() > spec.failure_budget:
                    self._halted = (f"halted after wave {i}: {self._failures()} host(s) failed, the failure budget "
                                    f"is {spec.failure_budget}")
            self._phase = "halted" if self._halted else "done"
        except asyncio.CancelledError:
            self._phase = "cancelled"
            for h, st in self._hosts.items():
                if st["state"] not in FINAL_STATES:
                    self._set(h, "cancelled", "the rollout was cancelled")
            raise
        return self.status()

    def _set(self, host: str, state: str, note: str | None = None, **extra: Any) -> None:
        st = self._hosts[host]
        st["state"] = state
        if note is not None:
            st["note"] = note
        st.update(extra)

    async def _act(self, name: str, req: dict[str, Any], *, long: float | None = None) -> dict[str, Any]:
        """Activity ``name``: every one heartbeats (:mod:`.activities`), so a worker that died during any step is
        noticed after ``heartbeat_s`` and the step retried (the spec's heartbeat timeout, on short steps too)."""
        result: dict[str, Any] = await workflow.execute_activity(
            name, req,
            start_to_close_timeout=timedelta(seconds=long or 120.0),
            heartbeat_timeout=timedelta(seconds=self._heartbeat_s),
            retry_policy=_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
            result_type=dict)
        return result

    async def _step(self, host: str, name: str, req: dict[str, Any], **opts: Any) -> dict[str, Any]:
        """An activity whose call the policy may answer ``needs_approval``: then wait for the approve signal and
        make it again with the person's name."""
        out = await self._act(name, {**req, "approved_by": self._approver(host)}, **opts)
        if out.get("outcome") != "needs_approval":
            return out
        before = self._hosts[host]["state"]
        self._set(host, "awaiting_approval", f"{name}: {out.get('command')} asks approval "
                                             f"(rule {out.get('rule_id')}): agent-tools rollout approve",
                  approval={"step": name, "command": out.get("command"), "rule_id": out.get("rule_id"),
                            "reason": out.get("reason")})
        await workflow.wait_condition(lambda: self._approver(host) is not None)
        self._set(host, before, f"approved by {self._approver(host)}", approval=None)
        return await self._act(name, {**req, "approved_by": self._approver(host)}, **opts)

    def _approver(self, host: str) -> str | None:
        return self._approved.get(host) or self._approved.get("*")

    async def _guarded(self, spec: RolloutSpec, host: str) -> None:
        """:meth:`_one`; a step whose retries ran out (a host unreachable for minutes) fails that host, not the
        rollout; a cancellation goes on up, after :meth:`_undo` (not cancellable) put a host whose unit was edited
        back as it was."""
        try:
            await self._one(spec, host)
        except asyncio.CancelledError:
            await _uncancellable(self._undo(spec, host))
            raise
        except ActivityError as exc:
            if isinstance(exc.cause, CancelledError):  # the rollout is being cancelled: its step was
                await _uncancellable(self._undo(spec, host))
                raise asyncio.CancelledError() from exc
            self._set(host, "failed", f"{self._hosts[host]['state']}: {exc.cause or exc}")

    async def _undo(self, spec: RolloutSpec, host: str) -> None:
        """After a cancellation: a host whose unit may have been edited gets the unit back (its backup, or the
        pre-check's text) and, when a restart had begun, is restarted and followed to its health probe; its note
        says so. When that cannot be done, the note says what the host was left in: the unit edited or not, the
        service's state, the restart's job id and the backup to restore."""
        ctx = self._touched.get(host)
        during = self._hosts[host]["state"]
        if ctx is None or during in FINAL_STATES:
            return  # nothing was changed on it (or it had finished): run() marks it cancelled
        job = job_id_for_key(host, ctx["restart_key"]) if ctx.get("restart_key") else None
        backup = ctx.get("backup")
        restore_hint = (f"restore it with restore_file(path={ctx['path']}, backup_id={backup})" if backup else
                        "write back the unit text the pre-check read (no backup id was returned)")
        self._set(host, "rolling_back", f"cancelled during {during}: restoring the unit")
        try:
            await self._act("fleet.restore", {"host": host, "path": ctx["path"], "backup_id": backup,
                                              "text": ctx["text"], "approved_by": self._approver(host)})
        except ActivityError as exc:
            service = await self._service_state(spec, host)
            self._set(host, "cancelled", f"cancelled during {during}; LEFT with the unit {ctx['path']} edited "
                                         f"(restoring it failed: {exc.cause or exc}); service {service}"
                                         + (f"; restart job {job}" if job else "") + f"; {restore_hint}",
                      job_id=job, backup_id=backup)
            return
        if not job:
            self._set(host, "cancelled", f"cancelled during {during}; the unit {ctx['path']} is restored "
                                         "(the service was not restarted)", backup_id=backup)
            return
        try:
            back, why = await self._restart(spec, host, ctx["restart_key"].rsplit("/", 1)[0] + "/cancel",
                                            ctx["probes"][:1], "rolling_back")
        except ActivityError as exc:
            back, why = False, f"restart: {exc.cause or exc}"
        if back:
            self._set(host, "cancelled", f"cancelled during {during} (restart job {job}); restored the unit "
                                         + (f"from backup {backup} " if backup else "")
                                         + "and restarted it: it serves again", backup_id=backup)
            return
        service = await self._service_state(spec, host)
        self._set(host, "cancelled", f"cancelled during {during} (restart job {job}); the unit {ctx['path']} is "
                                     f"restored but the service does not serve: {why}; service {service}",
                  backup_id=backup)

    async def _service_state(self, spec: RolloutSpec, host: str) -> str:
        try:
            out = await self._act("fleet.service_state", {"host": host, "unit": spec.unit})
        except ActivityError as exc:
            return f"state unknown ({exc.cause or exc})"
        return str(out.get("state") or out.get("message") or "state unknown")

    async def _one(self, spec: RolloutSpec, host: str) -> None:
        info = workflow.info()
        key = f"fleet/{info.workflow_id}/{info.run_id}/{host}"
        self._set(host, "prechecking")
        pre = await self._act("fleet.precheck", {"host": host, "unit": spec.unit, "flags": spec.flags})
        if pre.get("outcome") == "already_done":
            self._set(host, "already_done", str(pre.get("message")))
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
        self._set(host, "editing", pre["summary"])
        self._touched[host] = {"path": pre["path"], "text": pre["text"], "backup": None,
                               "probes": _probes(spec, int(pre["port"]))}
        ed = await self._step(host, "fleet.edit", {"host": host, "path": pre["path"], "old": pre["old"],
                                                   "new": pre["new"], "text": pre["text"]})
        if ed.get("outcome") != "written":
            self._set(host, "failed", f"edit_file: {ed.get('outcome')}: {ed.get('message') or ed.get('reason')}")
            return
        backup = ed.get("backup_id")
        self._touched[host]["backup"] = backup
        probes = _probes(spec, int(pre["port"]))
        ok, why = await self._restart(spec, host, key + "/restart", probes, "restarting")
        if ok:
            self._set(host, "verifying")
            v = await self._act("fleet.verify", {"host": host, "port": pre["port"], "flags": spec.flags})
            if v.get("outcome") == "verified":
                shown = ", ".join(f"{k}={val}" for k, val in (v.get("data") or {}).items())
                self._set(host, "verified", f"/get_server_info: {shown}")
                return
            why = _not_verified(v)
        self._set(host, "rolling_back", why)
        await self._act("fleet.restore", {"host": host, "path": pre["path"], "backup_id": backup,
                                          "text": pre["text"], "approved_by": self._approver(host)})
        back, why2 = await self._restart(spec, host, key + "/rollback", probes[:1], "rolling_back")
        if back:
            self._set(host, "rolled_back", f"{why}; restored the unit and it serves again")
        else:
            self._set(host, "failed", f"{why}; restored the unit but it does not serve: {why2}")

    async def _restart(self, spec: RolloutSpec, host: str, key: str, probes: list[dict[str, Any]],
                       state: str) -> tuple[bool, str]:
        self._set(host, state)
        plan = await self._act("fleet.plan_restart", {"host": host, "unit": spec.unit, "probes": probes})
        if plan.get("outcome") != "plan":
            return False, f"restart: {plan.get('message')}"
        if host in self._touched and not key.endswith("/cancel"):
            self._touched[host]["restart_key"] = key
        st = await self._step(host, "fleet.restart", {"host": host, "plan": plan, "key": key},
                              long=spec.restart_timeout_s)
        restarts = self._hosts[host].setdefault("restarts", [])
        restarts.append({"key": key.rsplit("/", 1)[-1], "job_id": st.get("job_id"),
                         "readiness": st.get("readiness"), "attempt": st.get("attempt"),
                         "reattached": st.get("reattached"), "approval_id": st.get("approval_id")})
        self._set(host, state, job_id=st.get("job_id"))
        if st.get("readiness") == "ready":
            return True, ""
        if st.get("outcome") in ("denied", "error"):
            return False, f"restart {st.get('outcome')}: {st.get('reason') or st.get('message')}"
        # the evidence that explains it: a failed log probe's line (the server's own words) first
        failed = sorted((p for p in st.get("probes") or [] if p.get("state") == "failed"),
                        key=lambda p: p.get("kind") != "log")
        evidence = str(failed[0].get("evidence", "")).splitlines()[-1:] if failed else []
        return False, f"restart {st.get('readiness')}: {evidence[0] if evidence else st.get('why', '')}"


async def _uncancellable(coro: Any) -> None:
    """Await ``coro`` to its end although the awaiting task is cancelled (again) meanwhile: a cleanup step."""
    task = asyncio.ensure_future(coro)
    while True:
        try:
            await asyncio.shield(task)
            return
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
        """``{"state": ...}``, then the job's final status."""
        return dict(self._state)

    @workflow.run
    async def run(self, spec: HostJobSpec) -> dict[str, Any]:
        info = workflow.info()
        self._state = {"state": "running", "host": spec.host}
        out: dict[str, Any] = await workflow.execute_activity(
            "fleet.run_command",
            {"host": spec.host, "command": spec.command, "budget_s": spec.budget_s,
             "key": f"hostjob/{info.workflow_id}/{info.run_id}"},
            start_to_close_timeout=timedelta(seconds=spec.timeout_s),
            heartbeat_timeout=timedelta(seconds=spec.heartbeat_s), retry_policy=_RETRY,
            cancellation_type=ActivityCancellationType.WAIT_CANCELLATION_COMPLETED, result_type=dict)
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
