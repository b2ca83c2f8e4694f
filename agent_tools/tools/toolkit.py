"""``Toolkit``: the agent-facing tools, typed, with one registry that every adapter (MCP, OpenAI,
Anthropic, CLI) reads.

Each tool is an async method taking keyword arguments validated by its args model
(:mod:`agent_tools.tools.args`) and returning a pydantic outcome. :meth:`Toolkit.dispatch` is the
JSON-in/JSON-out entry point for agent runtimes: bad arguments come back as an ``error`` outcome with
``kind="bad_arguments"`` (fix and retry), host failures as ``error`` with ``retryable`` set — never a
traceback.
"""

from __future__ import annotations

import difflib
import json
import re
import shlex
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import structlog
from pydantic import BaseModel, ValidationError

from ..errors import (
    AgentToolsError,
    ApprovalUsed,
    BadArguments,
    ConnectionLost,
    HostChanged,
    HostError,
    HostUnreachable,
)
from ..hosts.base import Host, run_on
from ..hosts.reach import check_same_machine, host_identity
from ..hosts.registry import HostRegistry
from ..jobs.discover import split_env_values
from ..jobs.journal import Journal
from ..jobs.manager import JobRunner, _answer_within, _error, killed_by
from ..outcomes import (
    Denied,
    Detached,
    ErrorOutcome,
    Finished,
    JobCancelResult,
    JobInfo,
    JobInput,
    JobList,
    JobOutput,
    JobStatus,
    Killed,
    NeedsApproval,
    NeedsInput,
    drop_repeated_evidence,
    result_view,
)
from ..output import name_job
from ..redact import MARK, add_secret_values, redact, redact_obj, secret_env_values
from . import ops
from .args import (
    EditFileArgs,
    HostArgs,
    HttpGetArgs,
    JobCancelArgs,
    JobInputArgs,
    JobOutputArgs,
    JobStatusArgs,
    ListHostsArgs,
    ListJobsArgs,
    ReadFileArgs,
    RestartServiceArgs,
    RestoreFileArgs,
    RunCommandArgs,
    ServiceStatusArgs,
    WaitForArgs,
    WriteFileArgs,
)

# policy objects (agent_tools.policy.PolicySet / ApprovalStore / Decision), typed loosely so this layer does
# not depend on the policy package at import time
PolicySet = Any
ApprovalStore = Any
Decision = Any

#: the idempotency key of a run under an approval (``approval:ID``): the job a used approval started is found by it
APPROVAL_KEY_PREFIX = "approval:"
#: an approver callback: given the needs_approval outcome, return True to approve (Python API / CLI prompt)
Approver = Callable[[NeedsApproval], Awaitable[bool]]

__all__ = ["RunCommandResult", "ToolSpec", "Toolkit"]

#: what ``run_command`` (and ``restart_service``) can return: every outcome of :mod:`agent_tools.outcomes`
RunCommandResult = Finished | NeedsInput | Detached | Killed | NeedsApproval | Denied | ErrorOutcome

log = structlog.get_logger(__name__)

#: a result model type (what _explained returns is what it was given)
_M = TypeVar("_M", bound=BaseModel)

DEFAULT_BUDGET_S = 15.0

#: the own time (seconds, from the arguments) of tools that wait on purpose: such a call returns within it plus
#: the runner's ``answer_timeout_s``. Other ops tools are bounded by their parts: every round trip's liveness
#: check and connect deadline (``SshSettings``), and the runner's bounds for the jobs they start.
_OWN_TIME_S: dict[str, Callable[[dict[str, Any]], float]] = {
    "wait_for": lambda kw: float(kw.get("deadline_s", 60.0)),
}


@dataclass(frozen=True)
class ToolSpec:
    """One agent-facing tool: its name, the description a model reads, and its arguments model."""

    name: str
    description: str
    args_model: type[BaseModel]

    def json_schema(self) -> dict[str, Any]:
        """The arguments' JSON Schema (pydantic, with descriptions)."""
        schema = self.args_model.model_json_schema()
        schema.pop("title", None)
        return schema


RUN_COMMAND_DESC = (
    "Run a shell command on a host within budget_s. Outcomes: finished (exit status, output head+tail), detached "
    "(still running: follow the job with job_status), killed, needs_input (a prompt or terminal), needs_approval, "
    "denied, error (start_unconfirmed: it may run; follow job_id, don't rerun). Units: restart_service.")
JOB_STATUS_DESC = "A job's state, readiness (with probes) and new output; wait_s long-polls for a change."
JOB_INPUT_DESC = "Type into a stdin pipe/tty job; returns what it printed since."
JOB_OUTPUT_DESC = "A job's kept output: a page by byte offset, its last lines, or lines matching grep."
JOB_CANCEL_DESC = "Stop a job's whole process tree (TERM, KILL after grace_s) and check nothing is left."
LIST_JOBS_DESC = "Known jobs, newest first, a page at a time; with host, refreshed there."
LIST_HOSTS_DESC = "Hosts: 'local', SSH config and policy aliases, with running jobs; check=true tries each."
RESTART_SERVICE_DESC = (
    "Restart a systemd unit, not blocking: a detached job; probes (its new invocation, plus yours) judge "
    "readiness by TimeoutStartSec + 30 s. Follow with job_status.")
SERVICE_STATUS_DESC = "A systemd unit's state, unit file and newest journal lines (grep filters them)."
READ_FILE_DESC = "Read a file on a host, a page at a time."
WRITE_FILE_DESC = "Replace a file's whole content atomically (mode kept, backup made); returns diff and backup_id."
EDIT_FILE_DESC = "Replace old (found once) with new in a file, atomically (backup made); returns diff and backup_id."
RESTORE_FILE_DESC = "Restore a file from a write_file/edit_file backup_id; returns the diff."
GPU_MEMORY_DESC = "Per-GPU memory used/total/free in MiB (nvidia-smi)."
HOST_MEMORY_DESC = "Host memory total/used/available in bytes and GiB (free -b)."
HTTP_GET_DESC = "HTTP GET from the host (reaches its 127.0.0.1 services): status and body (JSON parsed)."
WAIT_FOR_DESC = "Wait until every probe passes, one fails for good, or deadline_s passes."


#: ``unchecked`` of a result after the first on the same host said it in full
UNCHECKED_AGAIN = "as an earlier result on this host said (the same for each of its jobs)"


class Toolkit:
    """The agent-facing tools over a set of hosts.

    :param hosts: a :class:`HostRegistry` (or None: ``local`` plus SSH aliases from ~/.ssh/config).
    :param journal: the job journal (default: the user's state dir).
    :param runner: a :class:`JobRunner` (default: one over ``journal``).
    :param policy: a policy set deciding allow/ask/deny and per-command budgets (optional).
    :param default_budget_s: budget when neither the call nor a policy gives one (seconds, float).
    """

    def __init__(
        self,
        hosts: HostRegistry | None = None,
        *,
        journal: Journal | None = None,
        runner: JobRunner | None = None,
        policy: PolicySet | None = None,
        approvals: ApprovalStore | None = None,
        approver: Approver | None = None,
        default_budget_s: float = DEFAULT_BUDGET_S,
    ) -> None:
        self.hosts = hosts or HostRegistry()
        self.journal = journal or (runner.journal if runner else Journal())
        self.runner = runner or JobRunner(self.journal)
        self.policy = policy
        if policy is not None and approvals is None:
            from ..policy import ApprovalStore

            approvals = ApprovalStore()
        self.approvals = approvals
        self.approver = approver
        #: jobs whose call's secrets this process knows (it launched them, or read them back: :meth:`_secrets_of`)
        self._secrets_known: set[str] = set()
        #: the ``unchecked`` text each host's results said in full (later results refer to it)
        self._unchecked_said: dict[str, str] = {}
        self.default_budget_s = default_budget_s
        self._specs: dict[str, tuple[ToolSpec, Callable[..., Awaitable[BaseModel]]]] = {}
        self.register(ToolSpec("run_command", RUN_COMMAND_DESC, RunCommandArgs), self.run_command)
        self.register(ToolSpec("job_status", JOB_STATUS_DESC, JobStatusArgs), self.job_status)
        self.register(ToolSpec("job_input", JOB_INPUT_DESC, JobInputArgs), self.job_input)
        self.register(ToolSpec("job_output", JOB_OUTPUT_DESC, JobOutputArgs), self.job_output)
        self.register(ToolSpec("job_cancel", JOB_CANCEL_DESC, JobCancelArgs), self.job_cancel)
        self.register(ToolSpec("list_jobs", LIST_JOBS_DESC, ListJobsArgs), self.list_jobs)
        for name, desc, model, fn in (
            ("list_hosts", LIST_HOSTS_DESC, ListHostsArgs, ops.list_hosts),
            ("restart_service", RESTART_SERVICE_DESC, RestartServiceArgs, ops.restart_service),
            ("service_status", SERVICE_STATUS_DESC, ServiceStatusArgs, ops.service_status),
            ("read_file", READ_FILE_DESC, ReadFileArgs, ops.read_file),
            ("write_file", WRITE_FILE_DESC, WriteFileArgs, ops.write_file),
            ("edit_file", EDIT_FILE_DESC, EditFileArgs, ops.edit_file),
            ("restore_file", RESTORE_FILE_DESC, RestoreFileArgs, ops.restore_file),
            ("gpu_memory", GPU_MEMORY_DESC, HostArgs, ops.gpu_memory),
            ("host_memory", HOST_MEMORY_DESC, HostArgs, ops.host_memory),
            ("wait_for", WAIT_FOR_DESC, WaitForArgs, ops.wait_for),
            ("http_get", HTTP_GET_DESC, HttpGetArgs, ops.http_get),
        ):
            self.register(ToolSpec(name, desc, model), self._bind(fn, _OWN_TIME_S.get(name)))

    def _bind(self, fn: Callable[..., Awaitable[BaseModel]],
              own_s: Callable[[dict[str, Any]], float] | None = None) -> Callable[..., Awaitable[BaseModel]]:
        """``fn`` as a tool: errors become ``error`` outcomes; with ``own_s`` (the call's own time from its
        arguments, seconds) the call returns within that plus the runner's ``answer_timeout_s`` when the host
        stops answering (then ``unreachable``, ``busy`` or ``connection_lost``; see ``_answer_within``)."""
        async def call(**kwargs: Any) -> BaseModel:
            try:
                if own_s is None:
                    return self._explained(await fn(self, **kwargs))
                limit_s = own_s(kwargs) + self.runner.answer_timeout_s
                with _answer_within(self.hosts.get(kwargs["host"]), limit_s, fn.__name__):
                    return self._explained(await fn(self, **kwargs))
            except AgentToolsError as exc:
                return self._explained(_error(exc, kwargs.get("host"), None))

        call.__name__ = fn.__name__
        call.__doc__ = fn.__doc__
        call.__wrapped__ = fn  # type: ignore[attr-defined]  # its return annotation is the tool's result type
        return call

    def __getattr__(self, name: str) -> Callable[..., Awaitable[BaseModel]]:
        # toolkit.restart_service(...), toolkit.write_file(...): the registered ops tools as methods
        specs = self.__dict__.get("_specs", {})
        if name in specs:
            return specs[name][1]  # type: ignore[no-any-return]
        raise AttributeError(name)

    # ---------------------------------------------------------------- hosts
    def known_hosts(self) -> dict[str, str]:
        """Every alias the tools can name without guessing → where it comes from: ``local``, hosts given to the
        registry (``registered``), ``Host`` aliases of the SSH config files (``ssh_config``) and host patterns of
        the policy files that are plain names, not globs (``policy``)."""
        known = self.hosts.known()
        for pattern in _policy_hosts(self.policy):
            if not any(c in pattern for c in "*?[") and pattern:
                known.setdefault(pattern, "policy")
        return known

    def unknown_host_hint(self, alias: str) -> str:
        """Words for an ``unknown_host`` error about ``alias``: the closest known aliases (difflib ratio), or
        where to look when the alias is in the SSH config but its HostName does not resolve."""
        known = self.known_hosts()
        if alias in known or self.hosts.in_ssh_config(alias):
            return "; it is in the SSH config: check its HostName"
        # (compared in lower case: `AT-H1` is 'at-h1'; host names are case-insensitive, aliases are not)
        lower = {k.lower(): k for k in known}
        given = alias.lower()
        # an alias the name begins with, then a port, domain or path (at-h1:22, at-h1.lan): that alias alone;
        # else the closest, those sharing the longest beginning first (at-h1x: at-h1 before at-h2)
        whole = [k for k in lower if given.startswith(k) and given[len(k):][:1] in (":", ".", "/", " ")]
        close = sorted(difflib.get_close_matches(given, list(lower), n=3, cutoff=0.6),
                       key=lambda k: -_common_start(k, given))
        close = [lower[c] for c in ([max(whole, key=len)] if whole else close)]
        said = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        return f"; {alias!r} is in no SSH config or policy file{said} (list_hosts lists the known hosts)"

    def other_name_hint(self, name: str) -> str:
        """Words for an error about a host given by another name than its alias: the machine's own names
        (``localhost``, ``127.0.0.1``, its host name: ``local`` needs no SSH), or the ``HostName`` of SSH config
        aliases (the alias brings the config's user, key and known_hosts); ``""`` otherwise."""
        if name in self.known_hosts():
            return ""
        if name.lower() in ("localhost", "127.0.0.1", "::1", socket.gethostname().lower()):
            return "; this machine is host='local' (no SSH needed)"
        from ..hosts.sshconfig import config_hosts

        aliases = [e for e in config_hosts(self.hosts.config_paths)
                   if e.hostname and e.hostname.lower() == name.lower()]
        if not aliases:
            return ""
        named = " or ".join(f"{e.alias!r}" + (f" (user {e.user})" if e.user else "") for e in aliases[:3])
        return (f"; {name} is the HostName of {named} in the SSH config: use that alias as host (it brings the "
                "config's user, key and known_hosts)")

    def _explained(self, out: _M) -> _M:
        if isinstance(out, ErrorOutcome) and out.host and out.kind in _HOST_KINDS:
            other = self.other_name_hint(out.host)
            if other and other not in out.message:
                # this machine by another name: the call with host='local' is the one to make, not this one again
                local = "host='local'" in other
                out = out.model_copy(update={"message": out.message + other,
                                             "retryable": out.retryable and not local})
        if isinstance(out, JobStatus) and out.state == "not_started" and out.host:
            # a launch that never reached the host: the same words about the host as its launch's error had
            other = self.other_name_hint(out.host)
            if other and other not in out.why:
                out = out.model_copy(update={"why": out.why + other})
        if isinstance(out, ErrorOutcome) and out.kind == "unknown_host" and out.host:
            hint = self.unknown_host_hint(out.host)
            # a result passes here once per layer (the tool's wrapper, dispatch): the hint is added once
            if "list_hosts" not in out.message and hint not in out.message:
                return out.model_copy(update={"message": out.message + hint})
            return out
        if isinstance(out, Finished) and out.exit_status == 0 and not out.next and "--no-block" in out.command:
            units = _started_units(out.command)
            if units:
                # systemctl --no-block only enqueued the start: the unit may be loading, failing or up
                return out.model_copy(update={"next": (
                    f"--no-block only enqueued the start of {units[0]}: nothing is known yet about whether it is up; "
                    f"service_status(host='{out.host}', unit='{units[0]}') shows its state now; restart_service(host="
                    f"'{out.host}', unit='{units[0]}') restarts it and judges readiness with probes")})
        if isinstance(out, Detached) and "restart_service" not in out.next:
            unit = _restarted_unit(out.command)
            if unit is not None:
                # a blocking `systemctl restart` outlived its budget: it goes on (calling restart_service now
                # would restart the unit a second time); say how to watch it, and the call that fits next time
                return out.model_copy(update={"next": (
                    f"job_status(job_id='{out.job_id}', wait_s=60) follows it (systemctl returns once {unit} has "
                    f"started); service_status(host='{out.host}', unit='{unit}') shows the unit meanwhile; next "
                    f"time restart_service(host='{out.host}', unit='{unit}') returns at once and judges readiness "
                    "with probes")})
        return out

    # ---------------------------------------------------------------- policy
    def decide(self, host: str, command: str, *, cwd: str | None = None,
               env: dict[str, str] | None = None) -> Decision | None:
        """The policy decision for ``command`` on ``host`` in ``cwd`` with ``env`` (None without a policy)."""
        return self.policy.decide(host, command, cwd=cwd, env=env) if self.policy is not None else None

    def check_policy(self, host: str, command: str, approval_id: str | None,
                     decision: Decision | None = None, *, cwd: str | None = None,
                     env: dict[str, str] | None = None, payload: str | None = None,
                     shown_payload: str | None = None,
                     same_args: str = "host, command, cwd, env") -> Denied | NeedsApproval | None:
        """Apply the policy: a ``denied`` or ``needs_approval`` outcome when the command may not run now,
        else None (allowed, or asked and approved — the approval, bound to host, command, cwd, env and ``payload``,
        is used up).

        :param payload: what the call writes besides its command (write_file's content, edit_file's old and new
            text), bound by the approval (:func:`agent_tools.policy.approvals.call_sha256`): an approval of one
            content never covers another. :param shown_payload: the payload as the approver is shown it (a diff).
        :param same_args: the arguments the agent must repeat with ``approval_id`` (named in ``next``).
        """
        if self.policy is None:
            return None
        decision = decision or self.policy.decide(host, command, cwd=cwd, env=env)
        shown = redact(command)
        if decision.decision == "deny":
            return Denied(host=host, command=shown, rule_id=decision.rule_id, reason=decision.reason)
        if decision.decision == "ask":
            from ..policy import ApprovalRefused

            assert self.approvals is not None
            if approval_id is not None:
                try:
                    self.approvals.consume(host, command, cwd=cwd, env=env, approval_id=approval_id, payload=payload)
                    return None
                except ApprovalRefused as exc:
                    if exc.code == "used":  # it ran once already: never ask (and run) again for it
                        raise self._approval_used(host, approval_id) from exc
                    refused = f" (approval {approval_id} not usable: {exc})"
            else:
                refused = ""
            appr = self.approvals.request(host, command, decision.rule_id, cwd=cwd, env=env, payload=payload,
                                          shown_payload=shown_payload, reason=decision.reason)
            outcome = NeedsApproval(host=host, command=shown, cwd=cwd, env=dict(env) if env else None,
                                    approval_id=appr.id,
                                    command_digest=appr.command_sha256[:12], rule_id=decision.rule_id,
                                    reason=(decision.reason or "the policy asks for approval") + refused,
                                    expires_s=round(appr.expires_at - appr.created_at, 1),
                                    next=f"ask the operator to approve {appr.id} (`agent-tools approvals approve "
                                         f"{appr.id}`, or the client's approval prompt); then call again with the same "
                                         f"arguments ({same_args}) and approval_id='{appr.id}'")
            return outcome
        return None

    async def gate(self, host: str, command: str, approval_id: str | None, decision: Decision | None = None, *,
                   cwd: str | None = None, env: dict[str, str] | None = None, payload: str | None = None,
                   shown_payload: str | None = None,
                   same_args: str = "host, command, cwd, env") -> Denied | NeedsApproval | None:
        """:meth:`check_policy`, and when it asks and an ``approver`` callback is set, the callback's yes approves
        the request and the call goes on (None), its no leaves the ``needs_approval`` outcome."""
        blocked = self.check_policy(host, command, approval_id, decision, cwd=cwd, env=env, payload=payload,
                                    shown_payload=shown_payload, same_args=same_args)
        if isinstance(blocked, NeedsApproval) and self.approver is not None and await self.approver(blocked):
            assert self.approvals is not None
            self.approvals.approve(blocked.approval_id, by="approver")
            blocked = self.check_policy(host, command, blocked.approval_id, decision, cwd=cwd, env=env,
                                        payload=payload, shown_payload=shown_payload, same_args=same_args)
        return blocked

    def _approval_used(self, host: str, approval_id: str) -> ApprovalUsed:
        """The error for an approval presented after its one use, naming the job that use started (found by the
        idempotency key ``approval:ID`` a run under an approval carries) when the journal has it."""
        rec = self.journal.find_idempotent(host, APPROVAL_KEY_PREFIX + approval_id)
        if rec is not None:
            return ApprovalUsed(f"approval {approval_id} was already used: the command ran once under it, as job "
                                f"{rec.job_id} (follow it with job_status(job_id='{rec.job_id}')); it is not run "
                                "again and needs no new approval", job_id=rec.job_id)
        return ApprovalUsed(f"approval {approval_id} was already used: the call it approved ran once (or is starting) "
                            f"under it; it is not run again and needs no new approval (list_jobs(host='{host}') shows "
                            "a command's job)")

    # ---------------------------------------------------------------- registry
    def register(self, spec: ToolSpec, handler: Callable[..., Awaitable[BaseModel]]) -> None:
        """Add a tool (name must be unique)."""
        self._specs[spec.name] = (spec, handler)

    def result_type(self, name: str) -> Any:
        """The result type of tool ``name`` (a model class, or a union of them) as its handler's return annotation
        says (every tool may also return :class:`ErrorOutcome` from :meth:`dispatch`); None when the handler
        declares only ``BaseModel`` or the tool is unknown. Adapters generate output schemas from it (MCP
        ``outputSchema``, :func:`agent_tools.adapters.schemas.output_schema`)."""
        entry = self._specs.get(name)
        if entry is None:
            return None
        import inspect
        import sys
        import typing

        try:  # names an ops module imports only for type checking (Toolkit, RunCommandResult) are found here
            hint = typing.get_type_hints(inspect.unwrap(entry[1]), localns=vars(sys.modules[__name__])).get("return")
        except (NameError, TypeError):
            return None
        return None if hint in (None, BaseModel) else hint

    @property
    def specs(self) -> list[ToolSpec]:
        """Every registered tool, in registration order."""
        return [s for s, _ in self._specs.values()]

    async def dispatch(self, name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """Call tool ``name`` with JSON ``arguments`` (a JSON object text or a dict); returns a JSON-ready dict.

        Never raises for bad input or host failures: they come back as ``{"outcome": "error", ...}``. Every
        string in the result is redacted (:func:`agent_tools.redact.redact_obj`, plus the ``redact:`` patterns of
        the policy files of the result's host).
        """
        entry = self._specs.get(name)
        if entry is None:
            return dict(redact_obj(result_view(ErrorOutcome(
                kind="bad_arguments", retryable=False,
                message=f"unknown tool {name!r}; tools: {', '.join(self._specs)}"))))
        spec, handler = entry
        raw: dict[str, Any] = {}
        try:
            if arguments is None or arguments == "":
                pass
            elif isinstance(arguments, str):
                loaded = json.loads(arguments)
                if not isinstance(loaded, dict):
                    raise BadArguments("arguments must be a JSON object")
                raw = loaded
            else:
                raw = dict(arguments)
            _check_unicode(raw)
            args = spec.args_model.model_validate(raw)
            result = await handler(**args.model_dump())
        except json.JSONDecodeError as exc:
            result = ErrorOutcome(kind="bad_arguments", retryable=False,
                                  message=f"arguments are not valid JSON ({exc.msg} at {exc.pos}); fix and retry")
        except ValidationError as exc:
            problems = "; ".join(_problem(spec, e, exc.errors()) for e in exc.errors())
            given = raw.get("host")
            result = ErrorOutcome(host=given if isinstance(given, str) else None, kind="bad_arguments",
                                  retryable=False, message=f"invalid arguments for {name}: {problems}; fix and retry")
        except AgentToolsError as exc:
            result = _error(exc, raw.get("host") if isinstance(raw.get("host"), str) else None,
                            raw.get("command") if isinstance(raw.get("command"), str) else None)
        except Exception as exc:  # a bug must reach the model as an outcome it can report, not as a traceback
            log.exception("tool.internal_error", tool=name)
            result = ErrorOutcome(host=raw.get("host") if isinstance(raw.get("host"), str) else None,
                                  kind="internal", retryable=False,
                                  message=f"{name} failed inside agent_tools ({type(exc).__name__}: {exc}); this is "
                                          "a bug: report it, and try another way meanwhile")
        data = result_view(self._explained(result))
        if "state" in data or "outcome" in data:  # (a job_output page shows no state)
            self._note_look(data.get("job_id"))
        if isinstance(data.get("job_id"), str):
            _name_job(data, data["job_id"])
        drop_repeated_evidence(data)  # each fact once: a probe's evidence stays in its probe
        self._unchecked_once(data)
        host = data.get("host") or (raw.get("host") if isinstance(raw.get("host"), str) else None)
        extra: list[str] = []
        if self.policy is not None and isinstance(host, str):
            extra = self.policy.redact_patterns(host)  # a policy file's own secret shapes (redact: [...])
        # the one seam of what an agent is shown: every string of every result, whichever path produced it
        # (outcomes, rediscovered jobs, error messages, probe evidence); text that is not valid Unicode (a lone
        # surrogate from undecodable input) is shown as its escape, so every result can be encoded (JSON-RPC)
        return dict(_valid_unicode(redact_obj(data, extra)))

    def _note_look(self, job_id: Any) -> None:
        """A result naming job ``job_id`` was given to the agent: what the journal says of it now (its state and
        readiness, which that result reflects) is the agent's newest look (``list_jobs``'s ``changed``)."""
        if not isinstance(job_id, str):
            return
        try:
            rec = self.journal.get(job_id)
        except AgentToolsError:  # an id the journal does not know (a refused call naming one): nothing seen
            return
        self.journal.set_look(job_id, rec.state, rec.readiness)

    def _unchecked_once(self, data: dict[str, Any]) -> None:
        """A result's ``unchecked`` (what looks for a job's processes cannot see on its host: the same on every job
        of the host, and nothing a model can change) said in full once per host, then by reference."""
        text, host = data.get("unchecked"), data.get("host")
        if not isinstance(text, str) or not text or not isinstance(host, str):
            return
        if self._unchecked_said.get(host) == text:
            data["unchecked"] = UNCHECKED_AGAIN
        else:
            self._unchecked_said[host] = text

    # ---------------------------------------------------------------- tools
    async def run_command(
        self,
        host: str,
        command: str,
        budget_s: float | None = None,
        on_timeout: str | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        idempotency_key: str | None = None,
        approval_id: str | None = None,
        deadline_s: float | None = None,
        stdin: str = "none",
        tty: bool = False,
        _probes: list[dict[str, Any]] | None = None,
        _deadline_s: float | None = None,
        _key_on_host: bool = False,
    ) -> RunCommandResult:
        """Run ``command`` on ``host`` under a budget; see :data:`RUN_COMMAND_DESC` and
        :meth:`JobRunner.run`. With a policy: ``deny`` → ``denied`` and ``ask`` → ``needs_approval`` without
        touching the host (unless ``approval_id`` is an approved, unused approval for exactly this host,
        command, ``cwd`` and ``env``, or the ``approver`` callback says yes); the policy decides ``env`` (like
        ``export NAME=VALUE`` before the command) and ``cwd`` with the command. ``allow`` runs with the rule's
        budget, on_timeout, deadline, detach and probes. ``_key_on_host`` (Python callers only: not in the tool's
        schema) claims ``idempotency_key`` on the host itself (:meth:`JobRunner.run`'s ``key_on_host``).
        ``stdin="pipe"`` (or ``"tty"``, the same as ``tty=True``: a pseudo-terminal) gives the job an input
        :meth:`job_input` writes to (see :meth:`JobRunner.run`). Returns an outcome model (never raises for host
        failures).

        ``deadline_s`` (seconds, > 0) is a kill deadline enforced on the host by the job's monitor (it holds with
        this process gone): past it the job's whole tree is killed and the job reads ``killed`` by ``deadline``.
        The smallest of it, the policy's ``hard_deadline_s`` (the deciding rule's, else the files' defaults) and,
        with ``deadline_from: unit_timeout``, the unit's start timeout + 30 s applies (:func:`kill_deadline`);
        the outcome's ``why`` says which."""
        add_secret_values(secret_env_values(env))  # a command echoing them must not show them anywhere
        shown = redact(command)
        try:
            if stdin not in ("none", "pipe", "tty"):
                raise BadArguments(f"stdin must be 'none', 'pipe' or 'tty', got {stdin!r}")
            h = self.hosts.get(host)
            decision = self.decide(host, command, cwd=cwd, env=env)
            used = approval_id if decision is not None and decision.decision == "ask" else None
            blocked = self.check_policy(host, command, approval_id, decision, cwd=cwd, env=env)
            if isinstance(blocked, NeedsApproval) and self.approver is not None and await self.approver(blocked):
                assert self.approvals is not None
                self.approvals.approve(blocked.approval_id, by="approver")
                used = blocked.approval_id
                blocked = self.check_policy(host, command, blocked.approval_id, decision, cwd=cwd, env=env)
            if blocked is not None:
                return blocked
            if used is not None and idempotency_key is None:  # a second use is told which job the first started
                idempotency_key = APPROVAL_KEY_PREFIX + used
            probes = list(_probes or [])
            ready_deadline_s = _deadline_s
            unit_deadline_s: float | None = None
            detach_now = False
            if decision is not None:
                budget_s = budget_s if budget_s is not None else decision.budget_s
                on_timeout = on_timeout or decision.on_timeout
                detach_now = decision.detach_immediately
                if not probes and decision.probes:
                    probes = await _prepare_probes(h, decision.probes)
                ready_deadline_s = ready_deadline_s or decision.deadline_s
                if decision.deadline_from == "unit_timeout":
                    unit_deadline_s = await _unit_deadline(h, probes)
                    ready_deadline_s = unit_deadline_s or ready_deadline_s
            hard_s, hard_why = kill_deadline(decision, deadline_s, unit_deadline_s)
            return self._launched(await self.runner.run(
                h, command,
                budget_s=budget_s if budget_s is not None else self.default_budget_s,
                on_timeout=on_timeout or "detach",  # type: ignore[arg-type]
                cwd=cwd, env=env, idempotency_key=idempotency_key, key_on_host=_key_on_host, probes=probes or None,
                deadline_s=ready_deadline_s, detach_immediately=detach_now, display_command=shown,
                hard_deadline_s=hard_s, hard_deadline_why=hard_why,
                stdin="pipe" if stdin in ("pipe", "tty") else "none", tty=tty or stdin == "tty"))
        except AgentToolsError as exc:
            return self._explained(_error(exc, host, shown))

    def _launched(self, outcome: _M) -> _M:
        """:meth:`_explained`, and the job counted among those whose secrets this process knows (it launched it)."""
        job_id = getattr(outcome, "job_id", None)
        if isinstance(job_id, str):
            self._secrets_known.add(job_id)
        return self._explained(outcome)

    async def _job_host(self, job_id: str, notes: list[str], limit_s: float, what: str) -> Any:
        """The host a job runs on, reached the way it was at launch (the journal remembers the SSH config files:
        :meth:`HostRegistry.for_job`), and a note when that config changed since (logged). When the launch
        recorded the machine's host key, the host reached now must have the same key, checked within the call's
        own time (``limit_s`` seconds, the call ``what``: its time + the runner's answer time, as
        the runner bounds its own). The note is appended to ``notes`` (before anything is checked, so an
        error said next can name the likely cause).

        :raises JobNotFound: no such job in the journal.
        :raises HostChanged: the alias now reaches another machine (nothing is concluded about the job).
        :raises HostError: connecting to check that failed."""
        rec = self.journal.get(job_id)
        remembered = rec.meta.get("connection")
        host, note = self.hosts.for_job(rec.host, remembered)
        if note:
            log.info("job.connection_note", job_id=job_id, host=rec.host, note=note)
            notes.append(note)
        if rec.state != "not_started":
            with _answer_within(host, limit_s, what):
                await check_same_machine(host, remembered, job_id=job_id)
        return host

    async def _secrets_of(self, host: Host, job_id: str) -> None:
        """Make this process hide the secrets of ``job_id``'s call wherever its output shows them, also when another
        process launched it (a restarted MCP server, a later CLI call): the values of the call's secret ``env``
        variables and the values a certain rule finds in its command (``mysql -pVALUE``, then ``VALUE`` bare in the
        output). The journal keeps only the redacted command, so they are read back from the job's ``command`` file
        on the host (where the raw bytes stay), once per job and process, for a job whose stored command hid
        something, that had ``env``, or that was rediscovered. A failed read leaves it to the next call (the
        output's own read then fails or shows what the shapes find)."""
        if job_id in self._secrets_known:
            return
        rec = self.journal.get(job_id)
        if MARK not in rec.command and not rec.meta.get("env") and not rec.meta.get("rediscovered"):
            self._secrets_known.add(job_id)
            return
        try:
            with anyio.fail_after(self.runner.answer_timeout_s):
                res = await run_on(host, f'exec cat "{rec.base}"/{job_id}/command 2>/dev/null',
                                   max_output_bytes=1 << 20)
        except (AgentToolsError, TimeoutError) as exc:
            log.info("job.secrets_not_read", job_id=job_id, error=repr(exc))
            return
        command, env = split_env_values(res.stdout.decode("utf-8", "surrogateescape"))
        add_secret_values(secret_env_values(env))
        redact(command)  # learns what a certain rule finds, as at launch
        self._secrets_known.add(job_id)

    async def job_status(self, job_id: str, wait_s: float = 0.0) -> JobStatus | ErrorOutcome:
        """State of a job and its new output; long-polls up to ``wait_s`` seconds."""
        notes: list[str] = []
        try:
            host = await self._job_host(job_id, notes, wait_s + self.runner.answer_timeout_s, "job_status")
            await self._secrets_of(host, job_id)
            note = notes[0] if notes else None
            status = await self.runner.job_status(host, job_id, wait_s=wait_s)
            if note:
                status.why = f"{status.why} ({note})" if status.why else note
            return status
        except AgentToolsError as exc:
            return _noted(_error(_not_a_launch(exc, "job_status", job_id), None, None), notes[0] if notes else None)

    async def job_input(self, job_id: str, text: str, eof: bool = False, newline: bool = True,
                        idempotency_key: str | None = None, wait_s: float = 2.0,
                        secret: bool = False) -> JobInput | ErrorOutcome:
        """Type ``text`` into a job's stdin and return its new output; see :meth:`JobRunner.job_input`. The text is
        in no result, log or journal (only its byte count); with ``secret`` (a password a person typed: not a tool
        argument, the model never has it) it is hidden in every later result of this process too."""
        notes: list[str] = []
        try:
            host = await self._job_host(job_id, notes, wait_s + self.runner.answer_timeout_s, "job_input")
        except AgentToolsError as exc:  # nothing was written yet
            return _noted(_error(_not_a_launch(exc, "job_input", job_id), None, None), notes[0] if notes else None)
        try:
            await self._secrets_of(host, job_id)
            return await self.runner.job_input(host, job_id, text, eof=eof, newline=newline, key=idempotency_key,
                                               wait_s=wait_s, secret=secret)
        except AgentToolsError as exc:
            return _noted(_error(exc, None, None), notes[0] if notes else None)

    async def job_info(self, job_id: str) -> JobInfo:
        """Job ``job_id`` as :meth:`list_jobs` lists it, after one look at its host (:meth:`JobRunner.look`: its
        state, and its readiness when probes can still change it; no output is read, so what the agent has not seen
        stays new for its next ``job_status``, and it is not the agent's look). Used to tell a client that a job
        ended or its readiness changed.

        :raises JobNotFound, HostError: as :meth:`job_status` (the host unreachable, or another machine now)."""
        host = await self._job_host(job_id, [], self.runner.answer_timeout_s, "the look at the job")
        rec = await self.runner.look(host, job_id)
        return JobInfo(job_id=rec.job_id, host=rec.host, command=rec.command, state=rec.state,
                       readiness=rec.readiness, exit_status=rec.exit_status, by=killed_by(rec),
                       leftovers=[p for p, _ in rec.meta.get("leftovers") or []], created_at=rec.created_at)

    async def newest_output(self, job_id: str, max_bytes: int = 400) -> str:
        """The newest lines job ``job_id`` printed that the agent has not been shown (they stay unseen); see
        :meth:`JobRunner.newest_output`.

        :raises JobNotFound, HostError: as :meth:`job_status`."""
        host = await self._job_host(job_id, [], self.runner.answer_timeout_s, "the job's newest output")
        await self._secrets_of(host, job_id)
        return await self.runner.newest_output(host, job_id, max_bytes=max_bytes)

    async def job_output(self, job_id: str, stream: str = "stdout", offset: int = 0, limit: int = 16384,
                         tail_lines: int | None = None, grep: str | None = None) -> JobOutput | ErrorOutcome:
        """A page of a job's output by byte offset, its last ``tail_lines`` lines, or its lines matching ``grep``
        (:meth:`JobRunner.job_output`)."""
        notes: list[str] = []
        try:
            host = await self._job_host(job_id, notes, self.runner.answer_timeout_s, "job_output")
            await self._secrets_of(host, job_id)
            return await self.runner.job_output(host, job_id, stream=stream,  # type: ignore[arg-type]
                                                offset=offset, limit=limit, tail_lines=tail_lines, grep=grep)
        except AgentToolsError as exc:
            return _noted(_error(_not_a_launch(exc, "job_output", job_id), None, None), notes[0] if notes else None)

    async def job_cancel(self, job_id: str, grace_s: float = 5.0) -> JobCancelResult | ErrorOutcome:
        """Kill a job's whole process tree and verify nothing of it is left."""
        notes: list[str] = []
        try:
            host = await self._job_host(job_id, notes, grace_s + self.runner.answer_timeout_s, "job_cancel")
            note = notes[0] if notes else None
            result = await self.runner.cancel(host, job_id, grace_s=grace_s)
            if note:
                result.message = f"{result.message} ({note})"
            starting = await self._units_still_starting(host, self.journal.get(job_id))
            if starting:
                units = " ".join(shlex.quote(u.split(" ", 1)[0]) for u in starting)
                result.message += (
                    f"; systemd goes on with the start it was asked for, without the job: {', '.join(starting)}. "
                    f"run_command 'systemctl stop {units}' stops it (restart_service restarts it)")
            return result
        except AgentToolsError as exc:
            return _noted(_error(_not_a_launch(exc, "job_cancel", job_id), None, None), notes[0] if notes else None)

    async def _units_still_starting(self, host: Any, rec: Any) -> list[str]:
        """``UNIT (ActiveState/SubState)`` of the units a job started or restarted (its probes' units, the units
        its command starts) that systemd is still starting, reloading or stopping: cancelling the ``systemctl``
        that asked does not stop systemd's own job. Best effort ([] when the host cannot tell)."""
        units = list(dict.fromkeys([str(p["unit"]) for p in rec.probes if p.get("kind") == "systemd_unit"
                                    and p.get("unit")] + _started_units(rec.command)))
        busy = []
        for unit in units[:4]:
            try:
                with anyio.move_on_after(5):
                    props = await ops.unit_props(host, ops.check_unit(unit), "ActiveState,SubState")
                    if props.get("ActiveState") in ("activating", "reloading", "deactivating"):
                        busy.append(f"{unit} ({props['ActiveState']}/{props.get('SubState', '?')})")
            except AgentToolsError:
                continue
        return busy

    async def list_jobs(self, host: str | None = None, state: str | None = None, limit: int = 10,
                        offset: int = 0) -> JobList | ErrorOutcome:
        """A page of the known jobs, newest first: ``limit`` jobs after the first ``offset``, only those in
        ``state`` when given (running, exited, killed, lost); ``total`` counts the matches and ``next_offset`` is
        set while more follow. With ``host``, one round trip to that host (bounded by the runner's
        ``answer_timeout_s``) refreshes their states and readiness and rediscovers jobs found in its job
        directories that the journal does not know (deleted or damaged journal, another controller), adding them
        to the journal.

        Launches that provably never started (journal state ``not_started``: the host was unreachable, refused
        the session or the launch) are not listed: nothing of them ran, so they are not work to follow or lost;
        the note counts them (``job_status`` on such an id says why it did not start)."""
        try:
            notes: list[str] = []
            recovered = getattr(self.journal, "recovered_from", None)
            if recovered is not None:
                notes.append(f"the job journal was damaged and was moved aside to {recovered} at startup; a fresh "
                             "one was started (list_jobs(host=...) rediscovers each host's jobs)")
            if host is not None:
                h, note = self._host_of_jobs(host)
                if note:
                    notes.append(note)
                elsewhere = await self._started_elsewhere(h, host)
                added = await self.runner.refresh_host(h, exclude=elsewhere)
                await self.runner.refresh_readiness(h)
                notes.append(f"states and readiness refreshed from {host}" + (
                    f"; rediscovered {len(added)} job(s) from its job directories that the journal did not know"
                    if added else ""))
                if elsewhere:
                    notes.append(f"{len(elsewhere)} job(s) were started on another machine than {host} reaches now "
                                 "(its host key differs from the one recorded at their launch): their states are "
                                 "left as they were, not concluded from this machine")
            states = None if state is None else [state]
            hidden = ("not_started",)
            jobs = self.journal.list(host, limit, offset=offset, states=states, not_states=hidden)
            total = self.journal.count(host, states=states, not_states=hidden)
            never = self.journal.count(host, states=hidden) if state is None else 0
            if never:
                notes.append(f"{never} launch(es) that never started (nothing ran) are not listed")
            end = offset + len(jobs)
            looks = self.journal.looks([r.job_id for r in jobs])
            rows = [JobInfo(job_id=r.job_id, host=r.host, command=r.command, state=r.state, readiness=r.readiness,
                            exit_status=r.exit_status, by=killed_by(r),
                            leftovers=[p for p, _ in r.meta.get("leftovers") or []], created_at=r.created_at,
                            changed=_changed(looks.get(r.job_id), r.state, r.readiness))
                    for r in jobs]
            for r in jobs:  # this listing is the agent's newest look at them
                self.journal.set_look(r.job_id, r.state, r.readiness)
            left = [j.job_id for j in rows if j.leftovers]
            if left:
                notes.append("what an ended command left running (leftovers) stops with "
                             + ", ".join(f"job_cancel(job_id='{j}')" for j in left))
            if host is None and any(j.state == "running" or j.leftovers or (j.readiness in ("pending", "ready") and
                                                                           j.state != "not_started") for j in rows):
                notes.append("states, readiness and leftovers as last recorded, not looked at on the hosts now: "
                             "list_jobs(host=...) refreshes them")
            return JobList(jobs=rows, total=total, next_offset=end if end < total else None, note="; ".join(notes))
        except AgentToolsError as exc:
            return _error(exc, host, None)

    def _host_of_jobs(self, alias: str) -> tuple[Any, str | None]:
        """The host to list ``alias``'s jobs on: reached as its newest job with a remembered connection was (so
        ``list_jobs(host)`` needs no config again, like ``job_status``), else as configured now."""
        remembered = next((r.meta["connection"] for r in self.journal.list(alias)
                           if isinstance(r.meta.get("connection"), dict)), None)
        host, note = self.hosts.for_job(alias, remembered)
        if note:
            log.info("jobs.connection_note", host=alias, note=note)
        return host, note

    async def _started_elsewhere(self, host: Any, alias: str) -> set[str]:
        """Ids of ``alias``'s unsettled jobs whose launch recorded another host key than the machine ``host``
        reaches now (see :func:`agent_tools.hosts.reach.check_same_machine`)."""
        recorded = {r.job_id: r.meta["connection"].get("host_key") for r in self.journal.list(alias)
                    if isinstance(r.meta.get("connection"), dict) and r.meta["connection"].get("host_key")}
        if not recorded:
            return set()
        with _answer_within(host, self.runner.answer_timeout_s, "list_jobs"):  # as the listing itself is
            now_key = await host_identity(host)
        return {j for j, k in recorded.items() if now_key is not None and k != now_key}

    async def aclose(self) -> None:
        """Close host connections (jobs keep running on their hosts)."""
        await self.hosts.aclose()

    async def __aenter__(self) -> Toolkit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _check_unicode(value: Any, where: str = "arguments") -> None:
    """:raises BadArguments: a string in ``value`` holds a lone surrogate (bytes that were not UTF-8, or a JSON
    ``\\udcff``): it could not be sent to a host, stored or shown."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            bad = value[exc.start]
            raise BadArguments(f"{where} holds text that is not valid UTF-8 ({_escaped(bad)} at character "
                               f"{exc.start}, from an undecodable byte or a lone surrogate): write such bytes with an "
                               "escape in the command ($'\\xff', printf '\\377') and retry") from None
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_unicode(key, f"{where}.{_escaped(str(key))}")
            _check_unicode(item, f"{where}.{_escaped(str(key))}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            _check_unicode(item, f"{where}[{index}]")


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _common_start(a: str, b: str) -> int:
    """How many characters ``a`` and ``b`` begin with alike."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _name_job(node: Any, job_id: str) -> None:
    """The output views of a result (every ``text`` of a dict in it) with their markers' ``job_output`` calls
    naming the result's job (:func:`agent_tools.output.name_job`)."""
    if isinstance(node, dict):
        if isinstance(node.get("text"), str) and "bytes omitted" in node["text"]:
            node["text"] = name_job(node["text"], job_id)
        for value in node.values():
            _name_job(value, job_id)
    elif isinstance(node, list):
        for value in node:
            _name_job(value, job_id)


def _valid_unicode(value: Any) -> Any:
    if isinstance(value, str):
        return value if value.isascii() else _escaped(value)
    if isinstance(value, dict):
        return {_valid_unicode(k): _valid_unicode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_valid_unicode(v) for v in value]
    return value


#: what the host seam says about a command it could not start or confirm: true of a launch, but the command of a
#: job_status, job_output or job_cancel is the call's own script, not the job
_LAUNCH_WORDS_RE = re.compile(r"; (?:nothing was started|it may be running)$")


def _not_a_launch(exc: AgentToolsError, what: str, job_id: str) -> AgentToolsError:
    """``exc`` of a call about job ``job_id`` (``what``: job_status, job_output, job_cancel, or job_input before it
    wrote) in words about that call: what the host seam says of its script ("nothing was started", "it may be
    running") is not about the job. A lost connection is ``connection_lost`` (never ``start_unconfirmed``); a
    cancel whose request may have reached the host says it may have taken effect."""
    if not isinstance(exc, HostError) or isinstance(exc, HostChanged):
        return exc
    if what != "job_cancel" and isinstance(exc, HostUnreachable) and "untouched" not in exc.message:
        # a read of the job that could not reach the host: it did nothing to the job ("nothing was started" is
        # about the call's own script)
        text = re.sub(r"; nothing was started(?=\.|$)", "", exc.message)
        return type(exc)(exc.host, f"{text}; the job on the host is untouched by this {what}: ask again once the "
                                   "host answers")
    if not isinstance(exc, ConnectionLost):
        return exc
    text = _LAUNCH_WORDS_RE.sub("", exc.message)
    if what == "job_cancel":
        # lost before the session opened: nothing was sent; else the cancel script may have run on the host
        if exc.message.endswith("nothing was started"):
            tail = (f"; the cancel was not sent: the job is untouched; job_cancel(job_id='{job_id}') again once the "
                    "host answers")
        else:
            tail = (f"; the cancel may have reached the host and taken effect: job_status(job_id='{job_id}') tells "
                    "whether the job still runs")
    else:  # job_status, job_output only read the job's files
        tail = f"; the job on the host is untouched by this {what}: ask again once the host answers"
    return ConnectionLost(exc.host, text + tail)


def _noted(error: ErrorOutcome, note: str | None) -> ErrorOutcome:
    """``error`` with the connection note (a changed SSH config is a likely cause) added to its message."""
    if note:
        error.message = f"{error.message} ({note})"
    return error


#: error kinds about reaching a host (an alias's other name may be the cause: see Toolkit.other_name_hint)
_HOST_KINDS = frozenset({"unknown_host", "unreachable", "connecting", "auth", "host_key", "ssh_config"})

_SYSTEMCTL_START_RE = re.compile(r"\bsystemctl\s+(?:--?[\w-]+(?:=\S+)?\s+)*(?:restart|start|try-restart|"
                                 r"reload-or-restart|try-reload-or-restart)\s+(?:--?[\w-]+(?:=\S+)?\s+)*"
                                 r"(?P<unit>[A-Za-z0-9][\w:.@\\-]*)")
#: service(8): ``service NAME start|restart`` hands the start to systemd on systemd hosts
_SERVICE_START_RE = re.compile(r"\bservice\s+(?P<unit>[A-Za-z0-9][\w:.@\\-]*)\s+(?:start|restart|"
                               r"try-restart|force-reload)\b")


def _started_units(command: str) -> list[str]:
    """The units a command starts or restarts with ``systemctl (re)start UNIT`` (any options, ``--no-block``
    included) or ``service NAME (re)start`` (``sglang`` → ``sglang.service``), in order."""
    found = [m.group("unit") for m in _SYSTEMCTL_START_RE.finditer(command)]
    found += [m.group("unit") for m in _SERVICE_START_RE.finditer(command)]
    units = [u if "." in u else u + ".service" for u in found]
    return list(dict.fromkeys(units))


def _restarted_unit(command: str) -> str | None:
    """The unit a blocking start in ``command`` starts (``systemctl (re)start UNIT``, ``service NAME (re)start``),
    else None; ``--no-block`` starts return at once and are not meant."""
    if "--no-block" in command:
        return None
    units = _started_units(command)
    return units[0] if units else None


def _problem(spec: ToolSpec, error: Any, errors: list[Any]) -> str:
    """One validation problem in words, with the nearest valid name for a misspelt argument, probe field or
    probe kind (difflib, among the names the schema allows at that place; a required name missing at that
    place, of all ``errors``, comes first: ``cmd`` for a missing ``command`` is ``command``, not ``cwd``)."""
    loc = tuple(error.get("loc", ()))
    where = ".".join(str(p) for p in loc) or "arguments"
    if error.get("type") == "extra_forbidden" and loc:
        names = _names_at(spec.json_schema(), loc[:-1])
        missing = [str(e["loc"][-1]) for e in errors if e.get("type") == "missing"
                   and tuple(e.get("loc", ()))[:-1] == loc[:-1] and e.get("loc")]
        close = (difflib.get_close_matches(str(loc[-1]), missing, n=1, cutoff=0.5)
                 or difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.5))
        hint = f"; did you mean {close[0]!r}?" if close else (f" (known: {', '.join(names)})" if names else "")
        return f"{where}: unknown argument{hint}"
    if error.get("type") == "union_tag_invalid":
        ctx = error.get("ctx") or {}
        tags = [t.strip(" '") for t in str(ctx.get("expected_tags", "")).split(",") if t.strip(" '")]
        close = difflib.get_close_matches(str(ctx.get("tag", "")), tags, n=1, cutoff=0.5)
        return (f"{where}: unknown kind {ctx.get('tag')!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                + f" (kinds: {', '.join(tags)})")
    if error.get("type") == "missing":
        return f"{where}: required"
    return f"{where}: {str(error.get('msg')).removeprefix('Value error, ')}"


def _names_at(schema: dict[str, Any], loc: tuple[Any, ...]) -> list[str]:
    """Property names the (pydantic) JSON schema allows at ``loc`` (list indexes and union tags followed)."""
    defs = schema.get("$defs", {})

    def resolve(node: dict[str, Any]) -> dict[str, Any]:
        ref = node.get("$ref")
        return resolve(defs[ref.rsplit("/", 1)[-1]]) if isinstance(ref, str) and ref.rsplit("/", 1)[-1] in defs \
            else node

    node = resolve(schema)
    for part in loc:
        node = resolve(node)
        alternatives = [resolve(a) for a in node.get("oneOf", node.get("anyOf", []))]
        if alternatives:
            node = next((a for a in alternatives if a.get("properties", {}).get("kind", {}).get("const") == part),
                        next((a for a in alternatives if a.get("type") != "null"), node))
            if node.get("properties", {}).get("kind", {}).get("const") == part:
                continue
        if isinstance(part, int):
            node = resolve(node.get("items", {}))
        else:
            node = resolve(node.get("properties", {}).get(str(part), {}))
    node = resolve(node)
    alternatives = [resolve(a) for a in node.get("oneOf", node.get("anyOf", []))]
    if alternatives:
        node = next((a for a in alternatives if a.get("type") != "null"), node)
    return list(node.get("properties", {}))


def _policy_hosts(policy: PolicySet | None) -> list[str]:
    if policy is None:
        return []
    return [pattern for doc in getattr(policy, "policies", []) for pattern in getattr(doc.policy, "hosts", [])]


async def _prepare_probes(host: Any, probes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Pin systemd_unit probes to a *new* invocation (the one before the command runs must not count; a start
    attempt after this moment that made none fails the probe)."""
    from ..probes.specs import with_log_units

    units = [str(p["unit"]) for p in probes if p.get("kind") == "systemd_unit" and p.get("unit")]
    out = []
    for p in with_log_units(probes, units[0] if units else None):
        p = dict(p)
        if p.get("kind") == "systemd_unit" and "not_invocation" not in p:
            props = await ops.unit_props(host, str(p["unit"]), "InvocationID,ConditionTimestampMonotonic")
            p["not_invocation"] = props.get("InvocationID") or None
            condition = props.get("ConditionTimestampMonotonic", "")
            if condition.isdigit():
                p.setdefault("before_condition_us", int(condition))
        out.append(p)
    return out


def kill_deadline(decision: Decision | None, call_s: float | None,
                  unit_s: float | None = None) -> tuple[float | None, str]:
    """The kill deadline a launch gets (seconds from its start, None: none) and where it comes from, in words:
    the smallest of the policy's ``hard_deadline_s`` (``decision``), the call's ``deadline_s`` (``call_s``) and
    the unit-derived one (``unit_s``: TimeoutStartSec + 30 s, systemd.service(5)); on a tie the policy's wins.

    :raises BadArguments: ``call_s`` is not a number of seconds > 0.
    """
    if call_s is not None and not 0 < call_s < float("inf"):
        raise BadArguments(f"deadline_s must be a number of seconds > 0, got {call_s}")
    found: list[tuple[float, str, str]] = []  # (seconds, what, where from)
    if decision is not None and decision.hard_deadline_s is not None:
        found.append((decision.hard_deadline_s, "the policy's hard_deadline_s",
                      f" from the {decision.hard_deadline_from}"))
    if unit_s is not None:
        found.append((unit_s, "the unit's TimeoutStartSec + 30 s", ""))
    if call_s is not None:
        found.append((call_s, "this call's deadline_s", ""))
    if not found:
        return None, ""
    limit, what, where = min(found, key=lambda f: f[0])
    others = [f"{w} of {v:g} s{src}" for v, w, src in found if w != what]
    return limit, what + where + (f", not {' or '.join(others)}" if others else "")


async def _unit_deadline(host: Any, probes: list[dict[str, Any]]) -> float | None:
    """systemd.service(5): TimeoutStartSec bounds a start; the unit's own value (+30 s) is the natural deadline."""
    from ..probes.parse import parse_timespan_s

    for p in probes:
        if p.get("kind") == "systemd_unit":
            props = await ops.unit_props(host, str(p["unit"]), "TimeoutStartUSec")
            t = parse_timespan_s(props.get("TimeoutStartUSec", ""))
            return t + 30.0 if t is not None else None
    return None


def _changed(seen: str | None, state: str, readiness: str) -> str | None:
    """``list_jobs``'s ``changed``: what differs from what the agent was last shown of a job (``seen``,
    ``"STATE/READINESS"`` from :meth:`Journal.looks`), None when nothing does."""
    if seen is None:
        return "not seen before"
    was_state, _, was_ready = seen.partition("/")
    parts = ([f"{state} (was {was_state})"] if state != was_state else []) + (
        [f"readiness {readiness} (was {was_ready})"] if readiness != was_ready else [])
    return ", ".join(parts) or None
