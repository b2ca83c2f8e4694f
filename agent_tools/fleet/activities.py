"""Temporal activities over a :class:`~agent_tools.tools.toolkit.Toolkit`: the worker's host registry, journal and
policies decide what runs (a ``deny`` stays a ``denied`` result, an ``ask`` a ``needs_approval`` one that the
workflow answers with a person's yes from a signal).

Every activity takes one JSON object and returns one (the tools' results as the model reads them, redacted).
A host problem the tools call retryable (unreachable, connection lost, busy) is raised as a retryable
:class:`~temporalio.exceptions.ApplicationError`, so Temporal's retry policy tries again; anything else is
returned for the workflow to judge.

Long jobs (``fleet.restart``, ``fleet.run_command``) are one activity each that starts *or re-attaches*: the
launch is keyed by the workflow's key for the step and claimed on the host (``key_on_host``), so the activity
retried after its worker died (heartbeat timeout) or on another worker finds the job already on the host and
follows it; it never launches it twice. While it follows, it heartbeats ``{"job_id", "host", "state",
"readiness", "probes": [{"kind", "state"}...]}`` (the latest probe results); Temporal's cancellation, which
arrives through a heartbeat, becomes ``job_cancel`` of the job (its whole process tree) before the activity
reports itself cancelled.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import structlog
from pydantic import BaseModel
from temporalio import activity
from temporalio.exceptions import ApplicationError

from ..demo.hicache import HICACHE_FLAGS, KV_LINE_GREP, estimate_hicache, hicache_edit, missing_flags, port_of
from ..errors import AgentToolsError
from ..jobs.journal import now
from ..jobs.manager import check_job_id, job_id_for_key
from ..outcomes import NeedsApproval, result_view
from ..redact import redact, redact_obj
from ..tools import ops
from ..tools.toolkit import Toolkit

__all__ = ["FleetActivities", "server_info_fields"]

log = structlog.get_logger(__name__)

#: readiness values a restart's job settles in
_SETTLED_READINESS = frozenset({"ready", "failed", "deadline_exceeded"})


def server_info_fields(flags: list[str]) -> dict[str, str | None]:
    """What ``/get_server_info`` must show for ``flags``: ``--name value`` → ``name`` (dashes as underscores) equal
    to ``value``; a flag without a value → ``name`` true (None here)."""
    want: dict[str, str | None] = {}
    i = 0
    while i < len(flags):
        word = flags[i]
        if word.startswith("--"):
            name = word[2:].replace("-", "_")
            if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
                want[name] = flags[i + 1]
                i += 2
                continue
            want[name] = None
        i += 1
    return want


def _matches(value: Any, want: str | None) -> bool:
    if want is None:
        return value is True or str(value).lower() == "true"
    try:
        return float(value) == float(want)
    except (TypeError, ValueError):
        return str(value) == want


_Activity = Callable[["FleetActivities", dict[str, Any]], Awaitable[dict[str, Any]]]


#: a journal line of the service manager's, not of the service (``systemd[1]: ...``; ``UNIT: Main process exited``,
#: ``Failed to start UNIT``, ``Started ...``; journalctl's ``-- No entries --``)
_SERVICE_MANAGER_LINE = re.compile(r"systemd\[\d+\]: |^[\w@.:-]+\.(service|socket|target|timer): |"
                                   r"^(Failed to start|Started|Starting|Stopped|Stopping|Deactivated|Consumed|"
                                   r"Scheduled restart job) |^-- ")


class _Refused(Exception):
    """A read of the pre-check that the policy denied or asks approval for (``out``: its result, with ``step``)."""

    def __init__(self, out: dict[str, Any]) -> None:
        super().__init__(out.get("outcome"))
        self.out = out


def _beating(fn: _Activity) -> _Activity:
    """A short activity that heartbeats ``{"host", "step"}`` every ``beat_s`` while it runs, so the heartbeat
    timeout the workflow gives every step notices a dead worker within seconds (not the start-to-close
    timeout's minutes), and a step slower than that timeout is not taken for dead."""

    @functools.wraps(fn)
    async def run(self: FleetActivities, req: dict[str, Any]) -> dict[str, Any]:
        if not activity.in_activity():  # called directly (a script, a test): nobody to heartbeat to
            return await fn(self, req)
        beat = asyncio.create_task(self._beat({"host": req.get("host"), "step": activity.info().activity_type}))
        try:
            return await fn(self, req)
        finally:
            beat.cancel()

    return run


class FleetActivities:
    """The activities a fleet worker runs, over ``toolkit`` (see the module docstring).

    :param toolkit: the worker's Toolkit (its hosts, journal, policies and approval store).
    :param poll_s: seconds each ``job_status`` long-poll waits while a long activity follows its job.
    :param beat_s: seconds between heartbeats of a long activity (keep it well below the heartbeat timeout the
        workflow sets; the SDK throttles what it sends to the server).
    """

    def __init__(self, toolkit: Toolkit, *, poll_s: float = 1.0, beat_s: float = 0.5) -> None:
        self.tk = toolkit
        self.poll_s = poll_s
        self.beat_s = beat_s

    def all(self) -> list[Callable[..., Any]]:
        """Every activity, for ``Worker(activities=...)``."""
        return [self.precheck, self.edit, self.plan_restart, self.restart, self.verify, self.restore,
                self.service_state, self.job_facts, self.run_command, self.host_memory, self.http_get]

    # ------------------------------------------------------------------ helpers
    def _view(self, out: BaseModel, host: str | None) -> dict[str, Any]:
        """A result as :meth:`Toolkit.dispatch` shows it (redacted with the host's policy patterns too)."""
        extra = self.tk.policy.redact_patterns(host) if self.tk.policy is not None and host else []
        return dict(redact_obj(result_view(out), extra))

    def _checked(self, out: dict[str, Any], what: str) -> dict[str, Any]:
        """``out``, unless it is a retryable error: raised for Temporal to retry the activity."""
        if out.get("outcome") == "error" and out.get("retryable"):
            raise ApplicationError(f"{what}: {out.get('message')}", out, type=str(out.get("kind") or "error"))
        return out

    async def _approved(self, host: str, call: Callable[[str | None], Awaitable[BaseModel]],
                        approved_by: str | None) -> dict[str, Any]:
        """``call(None)``; when the policy asks and the workflow carries a person's yes (``approved_by``), the ask
        is approved in this worker's approval store in that person's name and the call made again with it (its
        result then carries ``approval_id``)."""
        out = await call(None)
        if isinstance(out, NeedsApproval) and approved_by and self.tk.approvals is not None:
            approval_id = out.approval_id
            self.tk.approvals.approve(approval_id, by=approved_by)
            log.info("fleet.approved", host=host, approval_id=approval_id, by=approved_by)
            return {**self._view(await call(approval_id), host), "approval_id": approval_id}
        return self._view(out, host)

    async def _follow(self, host: str, key: str, launch: Callable[[str | None], Awaitable[BaseModel]],
                      approved_by: str | None, settled: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """Launch (or re-attach to) the job keyed ``key`` and follow it until ``settled`` says so, heartbeating; on
        cancellation (during the launch too: the job id is known before, :func:`job_id_for_key`), cancel the job
        first."""
        info = activity.info()
        t0 = now()
        job_id = job_id_for_key(host, key)
        progress: dict[str, Any] = {"host": host, "job_id": job_id, "state": "launching", "attempt": info.attempt}
        beat = asyncio.create_task(self._beat(progress))
        try:
            out = self._checked(await self._approved(host, launch, approved_by), "launch")
            if out.get("outcome") not in ("detached", "finished") or out.get("job_id") != job_id:
                return {**out, "launched": False}  # denied, needs_approval, or an error before the job started
            # re-attached: the host had the job already (another worker's launch), or this worker's journal did
            # (its own earlier attempt)
            rec = self.tk.journal.get(job_id)
            reattached = bool(rec.meta.get("found_on_host")) or rec.created_at < t0
            progress.update(state="running", reattached=reattached)
            activity.heartbeat(dict(progress))
            log.info("fleet.job", host=host, job_id=job_id, attempt=info.attempt, reattached=reattached)
            while True:
                st = self._view(await self.tk.job_status(job_id=job_id, wait_s=self.poll_s), host)
                if st.get("outcome") == "error":
                    self._checked(st, f"job_status of {job_id}")
                    return {**st, "job_id": job_id, "launched": True}
                progress.update(state=st.get("state"), readiness=st.get("readiness"),
                                probes=[{"kind": p.get("kind"), "state": p.get("state")}
                                        for p in st.get("probes") or []])
                if settled(st):
                    return {**st, "launch": out.get("outcome"), "launched": True, "reattached": reattached,
                            "attempt": info.attempt, "approval_id": out.get("approval_id")}
        except asyncio.CancelledError:
            with anyio.CancelScope(shield=True):
                res = self._view(await self.tk.job_cancel(job_id=job_id, grace_s=2.0), host)
            log.info("fleet.job_cancelled", host=host, job_id=job_id, result=res.get("outcome"))
            raise
        finally:
            beat.cancel()

    async def _beat(self, progress: dict[str, Any]) -> None:
        while True:
            activity.heartbeat(dict(progress))
            await anyio.sleep(self.beat_s)

    # ------------------------------------------------------------------ activities
    @activity.defn(name="fleet.precheck")
    @_beating
    async def precheck(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "unit", "flags"}`` → ``{"outcome": "precheck", "fits", "summary", "adds", "path", "text", "old",
        "new", "port"}`` (the walkthrough's memory estimate, when the change adds the hicache pool, and the edit
        adding the flags the unit lacks; ``adds`` empty, ``old``/``new`` None: the unit has every flag but the
        server does not run them, so a restart alone applies them), ``{"outcome": "already_done", "message"}`` (the
        unit has every flag and ``/get_server_info`` shows the server runs them), a read's ``denied`` or
        ``needs_approval`` (with ``step``: which read), or an ``error``.

        Steps: ``gpu_memory``, ``host_memory``, ``service_status`` (the KV pool's journal line), ``read_file`` of
        the unit file, ``http_get`` of ``/get_server_info`` (only when the unit has every flag),
        :func:`~agent_tools.demo.hicache.estimate_hicache`."""
        host, unit = str(req["host"]), str(req.get("unit") or "sglang.service")
        flags = list(req.get("flags") or HICACHE_FLAGS)
        try:
            gpu = self._read("gpu_memory", self._view(await self.tk.gpu_memory(host=host), host))
            mem = self._read("host_memory", self._view(await self.tk.host_memory(host=host), host))
            svc = self._read("service_status", self._view(await self.tk.service_status(
                host=host, unit=unit, grep=KV_LINE_GREP, journal_lines=1), host))
            if svc.get("outcome") == "error" or not svc.get("unit_file"):
                return {"outcome": "error", "host": host, "kind": "not_found", "retryable": False,
                        "message": f"cannot use {unit} on {host}: {svc.get('message') or svc.get('state')}"}
            path = str(svc["unit_file"])
            unit_file = self._read("read_file", self._view(await self.tk.read_file(host=host, path=path), host))
            if unit_file.get("outcome") == "error":
                return unit_file
            text = str(unit_file.get("text", ""))
            port = port_of(text)
            add = missing_flags(text, flags)
            not_live: list[str] = []
            shown = ""
            if not add:  # the unit has them all: does the server run them?
                not_live, shown = await self._not_live(host, port, flags)
                if not not_live:
                    return {"outcome": "already_done", "host": host, "path": path,
                            "message": f"{path} already has {' '.join(flags)} and the server runs them "
                                       f"(/get_server_info: {shown}): nothing to change"}
        except _Refused as refused:
            return refused.out
        old: str | None = None
        new: str | None = None
        if add:
            try:
                old, new = hicache_edit(text, add)
            except ValueError as exc:
                return {"outcome": "error", "host": host, "kind": "bad_arguments", "retryable": False,
                        "message": f"cannot edit {path}: {exc}"}
        fit = estimate_hicache(gpu, mem, str(svc.get("journal", "")), text, flags)
        change = (f"adds {' '.join(add)}" if add else
                  f"{path} has {' '.join(flags)} already but the server does not run them ({shown}): a restart "
                  "applies them, no edit")
        if "--enable-hierarchical-cache" in add or "enable_hierarchical_cache" in not_live:
            fits, summary = fit.fits, fit.summary()  # the restart adds the hicache host pool: it must fit
        else:
            fits, summary = True, f"{change} (no hicache host pool added: no memory estimate)"
        return {"outcome": "precheck", "host": host, "fits": fits, "summary": summary, "adds": add,
                "needs_bytes": fit.host_pool_bytes, "available_bytes": fit.available_bytes, "path": path,
                "text": text, "old": old, "new": new, "port": port}

    async def _not_live(self, host: str, port: int, flags: list[str]) -> tuple[list[str], str]:
        """The ``/get_server_info`` fields of ``flags`` the server on ``port`` does not show as set (every one when
        it cannot be read), and what it showed."""
        want = server_info_fields(flags)
        got = self._read("http_get", self._view(await self.tk.http_get(
            host=host, url=f"http://127.0.0.1:{port}/get_server_info", fields=list(want)), host))
        data = got.get("data") if isinstance(got.get("data"), dict) else None
        if got.get("outcome") == "error" or data is None:
            return list(want), f"it could not be read: {got.get('message') or got.get('status')}"
        missing = [k for k, v in want.items() if not _matches(data.get(k), v)]
        return missing, ", ".join(f"{k}={data.get(k)}" for k in want)

    def _read(self, step: str, out: dict[str, Any]) -> dict[str, Any]:
        """A read's result; a retryable error raised (:meth:`_checked`).

        :raises _Refused: the worker's policy denied the read or asks approval for it."""
        if out.get("outcome") in ("denied", "needs_approval"):
            raise _Refused({**out, "step": step})
        return self._checked(out, step)

    @activity.defn(name="fleet.edit")
    @_beating
    async def edit(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "path", "old", "new", "text", "approved_by"?}`` → ``edit_file``'s result (with
        ``backup_id``) and ``"outcome": "written"``, or its ``denied``/``needs_approval``/``error``. A retry that
        finds the edit already made (``text`` with ``old`` replaced is what the file holds) returns
        ``{"outcome": "written", "already": true}`` without a backup id: the rollback then writes ``text``
        back."""
        host, path, old, new = str(req["host"]), str(req["path"]), str(req["old"]), str(req["new"])
        approved_by = req.get("approved_by")

        async def call(approval_id: str | None) -> BaseModel:
            return await self.tk.edit_file(host=host, path=path, old=old, new=new, approval_id=approval_id)

        out = self._checked(await self._approved(host, call, approved_by), "edit_file")
        if "bytes_written" in out:  # a FileWritten (its model has no outcome field)
            return {**out, "outcome": "written"}
        if out.get("outcome") == "error":
            now = self._checked(self._view(await self.tk.read_file(host=host, path=path), host), "read_file")
            if now.get("text") == str(req.get("text", "")).replace(old, new, 1):
                return {"outcome": "written", "host": host, "path": path, "already": True, "backup_id": None}
        return out

    @activity.defn(name="fleet.plan_restart")
    @_beating
    async def plan_restart(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "unit", "probes"}`` → ``{"outcome": "plan", "command", "probes", "deadline_s", "timeout_s",
        "unit"}``
        (:func:`~agent_tools.tools.ops.plan_restart`: the unit's invocation *now* is the one the restart must
        replace, so the plan is made once, kept in the workflow's history, and every attempt follows it)."""
        host = str(req["host"])
        try:
            plan = await ops.plan_restart(self.tk, host, str(req["unit"]), True, list(req.get("probes") or []))
        except AgentToolsError as exc:
            if exc.retryable:
                raise ApplicationError(f"plan_restart: {exc.message}", type=exc.kind) from exc
            return {"outcome": "error", "host": host, "kind": exc.kind, "retryable": False,
                    "message": redact(exc.message)}
        return {"outcome": "plan", "command": plan.command, "probes": plan.probes, "deadline_s": plan.deadline_s,
                "timeout_s": plan.timeout_s, "unit": str(req["unit"])}

    @activity.defn(name="fleet.restart")
    async def restart(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "plan", "key", "approved_by"?}`` → the final ``job_status`` of the restart (readiness
        ``ready``/``failed``/``deadline_exceeded``; when not ready, ``journal_tail``: the unit's last journal line
        that is not the service manager's), or the launch's result when it did not start (``denied``,
        ``needs_approval``, ``error``); ``launched`` says which. Starts the plan's command keyed by ``key`` on the
        host, or re-attaches to the job an earlier attempt started."""
        host, plan, key = str(req["host"]), dict(req["plan"]), str(req["key"])

        async def launch(approval_id: str | None) -> BaseModel:
            return await self.tk.run_command(host=host, command=str(plan["command"]), budget_s=30.0,
                                             idempotency_key=key, approval_id=approval_id,
                                             _probes=list(plan["probes"]), _deadline_s=float(plan["deadline_s"]),
                                             _key_on_host=True)

        st = await self._follow(host, key, launch, req.get("approved_by"),
                                lambda st: st.get("readiness") in _SETTLED_READINESS)
        if st.get("launched") and st.get("readiness") != "ready" and plan.get("unit"):
            tail = await self._journal_tail(host, str(plan["unit"]))
            if tail:
                st["journal_tail"] = tail
        return st

    async def _journal_tail(self, host: str, unit: str) -> str:
        """The last line the unit's journal shows that is not the service manager's own (the server's last
        words: argparse's refusal of an argument, an exception), or ''."""
        svc = self._view(await self.tk.service_status(host=host, unit=unit, journal_lines=8), host)
        lines = [line.strip() for line in str(svc.get("journal") or "").splitlines() if line.strip()]
        words = [line for line in lines if not _SERVICE_MANAGER_LINE.search(line)]
        return words[-1][:300] if words else ""

    @activity.defn(name="fleet.run_command")
    async def run_command(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "command", "key", "budget_s"?, "approved_by"?}`` → the job's final ``job_status`` (exited,
        killed, lost), or the launch's result when it ended within its budget or did not start. Starts or
        re-attaches (as ``fleet.restart``)."""
        host, command, key = str(req["host"]), str(req["command"]), str(req["key"])
        budget_s = float(req.get("budget_s") or 5.0)

        async def launch(approval_id: str | None) -> BaseModel:
            return await self.tk.run_command(host=host, command=command, budget_s=budget_s, idempotency_key=key,
                                             approval_id=approval_id, _key_on_host=True)

        return await self._follow(host, key, launch, req.get("approved_by"),
                                  lambda st: st.get("state") not in ("running", "unconfirmed"))

    @activity.defn(name="fleet.verify")
    @_beating
    async def verify(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "port", "flags"}`` → ``{"outcome": "verified"|"not_verified", "data", "missing", "expected":
        {field: value | None (true)}, "status", "message"?}``: the server's ``/get_server_info`` shows every flag
        (:func:`server_info_fields`)."""
        host, port = str(req["host"]), int(req["port"])
        want = server_info_fields(list(req.get("flags") or HICACHE_FLAGS))
        got = self._checked(self._view(await self.tk.http_get(
            host=host, url=f"http://127.0.0.1:{port}/get_server_info", fields=list(want)), host), "http_get")
        data = got.get("data") if isinstance(got.get("data"), dict) else {}
        assert isinstance(data, dict)
        missing = [k for k, v in want.items() if not _matches(data.get(k), v)]
        return {"outcome": "not_verified" if missing or got.get("outcome") == "error" else "verified",
                "host": host, "data": data, "missing": missing, "status": got.get("status"),
                "expected": {k: want[k] for k in missing},
                **({"message": got.get("message")} if got.get("outcome") == "error" else {})}

    @activity.defn(name="fleet.restore")
    @_beating
    async def restore(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "path", "backup_id"?, "text", "approved_by"?}`` → ``{"outcome": "restored", "how": "unchanged" |
        "backup" | "text", "note"?}``: the unit file back as the pre-check read it (``text``). ``unchanged``: it
        already is (the edit never landed: nothing written); ``backup``: ``restore_file`` of the edit's backup;
        ``text``: ``write_file`` of ``text`` (no backup id, or the backup could not be restored: ``note`` says
        why). Else the failure: the policy's ``denied``/``needs_approval`` (both calls are decided as ``tee PATH``;
        ``approved_by``: the person who approved the host's edit, whose yes covers the write that undoes it) or an
        ``error``: the file is not restored."""
        host, path, text = str(req["host"]), str(req["path"]), str(req["text"])
        now = self._checked(self._view(await self.tk.read_file(host=host, path=path), host), "read_file")
        if now.get("outcome") != "error" and now.get("text") == text:
            return {"outcome": "restored", "host": host, "path": path, "how": "unchanged"}
        note = None
        if req.get("backup_id"):

            async def restore(approval_id: str | None) -> BaseModel:
                return await self.tk.restore_file(host=host, path=path, backup_id=str(req["backup_id"]),
                                                  approval_id=approval_id)

            out = self._checked(await self._approved(host, restore, req.get("approved_by")), "restore_file")
            if out.get("outcome") in ("denied", "needs_approval"):
                return out  # writing the text is the same tee PATH: decided the same
            if out.get("outcome") != "error":  # a FileRestored
                return {"outcome": "restored", "host": host, "path": path, "how": "backup"}
            note = f"restoring backup {req['backup_id']} failed: {out.get('message')}"

        async def write(approval_id: str | None) -> BaseModel:
            return await self.tk.write_file(host=host, path=path, content=text, approval_id=approval_id)

        out = self._checked(await self._approved(host, write, req.get("approved_by")), "write_file")
        if "bytes_written" in out:  # a FileWritten
            return {"outcome": "restored", "host": host, "path": path, "how": "text",
                    **({"note": note} if note else {})}
        if note and out.get("outcome") == "error":
            out = {**out, "message": f"{note}; writing the pre-check's text failed too: {out.get('message')}"}
        return out

    @activity.defn(name="fleet.service_state")
    @_beating
    async def service_state(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "unit"}`` → ``service_status``'s result (its ``state``: active, inactive, failed, ...)."""
        host = str(req["host"])
        return self._checked(self._view(await self.tk.service_status(host=host, unit=str(req["unit"]),
                                                                     journal_lines=0), host), "service_status")

    @activity.defn(name="fleet.job_facts")
    @_beating
    async def job_facts(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "job_id"}`` → ``{"outcome": "job", "present", "running", "exit_code"}``: what the host's job
        directory says of the job (``present`` false: it was never launched there), whichever worker launched
        it (the host is the source of truth, not this worker's journal)."""
        host, job_id = str(req["host"]), str(req["job_id"])
        try:
            check_job_id(job_id)
            st = (await self.tk.runner.host_states(self.tk.hosts.get(host), [job_id]))[job_id]
        except AgentToolsError as exc:
            if exc.retryable:
                raise ApplicationError(f"job_facts: {exc.message}", type=exc.kind) from exc
            return {"outcome": "error", "host": host, "kind": exc.kind, "retryable": False,
                    "message": redact(exc.message)}
        return {"outcome": "job", "host": host, "job_id": job_id, "present": st.present,
                "running": st.alive, "exit_code": st.exit_code}

    @activity.defn(name="fleet.host_memory")
    @_beating
    async def host_memory(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host"}`` → ``host_memory``'s result."""
        host = str(req["host"])
        return self._checked(self._view(await self.tk.host_memory(host=host), host), "host_memory")

    @activity.defn(name="fleet.http_get")
    @_beating
    async def http_get(self, req: dict[str, Any]) -> dict[str, Any]:
        """``{"host", "url", "fields"?}`` → ``http_get``'s result (the URL is fetched from the host)."""
        host = str(req["host"])
        return self._checked(self._view(await self.tk.http_get(host=host, url=str(req["url"]),
                                                               fields=req.get("fields")), host), "http_get")
