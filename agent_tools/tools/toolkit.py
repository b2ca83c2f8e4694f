"""``Toolkit``: the agent-facing tools, typed, with one registry that every adapter (MCP, OpenAI,
Anthropic, CLI) reads.

Each tool is an async method taking keyword arguments validated by its args model
(:mod:`agent_tools.tools.args`) and returning a pydantic outcome. :meth:`Toolkit.dispatch` is the
JSON-in/JSON-out entry point for agent runtimes: bad arguments come back as an ``error`` outcome with
``kind="bad_arguments"`` (fix and retry), host failures as ``error`` with ``retryable`` set — never a
traceback.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import BaseModel, ValidationError

from ..errors import AgentToolsError, BadArguments
from ..hosts.registry import HostRegistry
from ..jobs.journal import Journal
from ..jobs.manager import JobRunner, _error
from ..outcomes import ErrorOutcome, JobInfo, JobList
from .args import JobCancelArgs, JobOutputArgs, JobStatusArgs, ListJobsArgs, RunCommandArgs

__all__ = ["ToolSpec", "Toolkit"]

log = structlog.get_logger(__name__)

DEFAULT_BUDGET_S = 15.0


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
    "Run a shell command on a host under a time budget. Always returns one outcome: 'finished' (exit "
    "status + bounded output), 'detached' (still running when the budget ran out: it keeps running as a "
    "durable job; follow it with job_status), 'killed', 'needs_input' (it wanted a password/confirmation; "
    "stdin is /dev/null), 'needs_approval' (policy: ask the operator, then call again with approval_id), "
    "'denied' (policy: do not retry), or 'error' (host unreachable/auth/bad arguments; 'retryable' says if "
    "trying later may work). Long operations (service restarts, model loads, builds) are safe: they detach "
    "instead of being killed. Output is shown as head+tail with byte counts; job_output pages the rest.")
JOB_STATUS_DESC = (
    "State of a job started by run_command: running | exited | killed | lost, its exit status, readiness "
    "(when probes are attached: pending | ready | failed | deadline_exceeded), and the output written since "
    "the previous job_status call. With wait_s > 0 it long-polls until the state changes or wait_s passes. "
    "'lost' means the job's fate is unknown (never success).")
JOB_OUTPUT_DESC = "Page a job's full output by byte offset (stdout or stderr); all bytes are kept on the host."
JOB_CANCEL_DESC = ("Stop a job: TERM to its whole process tree (including daemons it spawned), KILL after "
                   "grace_s, then verify no process of it is left. Reports what was killed and any survivors.")
LIST_JOBS_DESC = "List known jobs (newest first), optionally for one host, with their last known state."


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
        policy: Any = None,
        default_budget_s: float = DEFAULT_BUDGET_S,
    ) -> None:
        self.hosts = hosts or HostRegistry()
        self.journal = journal or (runner.journal if runner else Journal())
        self.runner = runner or JobRunner(self.journal)
        self.policy = policy
        self.default_budget_s = default_budget_s
        self._specs: dict[str, tuple[ToolSpec, Callable[..., Awaitable[BaseModel]]]] = {}
        self.register(ToolSpec("run_command", RUN_COMMAND_DESC, RunCommandArgs), self.run_command)
        self.register(ToolSpec("job_status", JOB_STATUS_DESC, JobStatusArgs), self.job_status)
        self.register(ToolSpec("job_output", JOB_OUTPUT_DESC, JobOutputArgs), self.job_output)
        self.register(ToolSpec("job_cancel", JOB_CANCEL_DESC, JobCancelArgs), self.job_cancel)
        self.register(ToolSpec("list_jobs", LIST_JOBS_DESC, ListJobsArgs), self.list_jobs)

    # ---------------------------------------------------------------- registry
    def register(self, spec: ToolSpec, handler: Callable[..., Awaitable[BaseModel]]) -> None:
        """Add a tool (name must be unique)."""
        self._specs[spec.name] = (spec, handler)

    @property
    def specs(self) -> list[ToolSpec]:
        """Every registered tool, in registration order."""
        return [s for s, _ in self._specs.values()]

    async def dispatch(self, name: str, arguments: str | dict[str, Any] | None) -> dict[str, Any]:
        """Call tool ``name`` with JSON ``arguments`` (a JSON object text or a dict); returns a JSON-ready dict.

        Never raises for bad input or host failures: they come back as ``{"outcome": "error", ...}``.
        """
        entry = self._specs.get(name)
        if entry is None:
            return ErrorOutcome(kind="bad_arguments", retryable=False,
                                message=f"unknown tool {name!r}; tools: {', '.join(self._specs)}").model_dump(
                                    mode="json")
        spec, handler = entry
        try:
            if arguments is None or arguments == "":
                raw: dict[str, Any] = {}
            elif isinstance(arguments, str):
                loaded = json.loads(arguments)
                if not isinstance(loaded, dict):
                    raise BadArguments("arguments must be a JSON object")
                raw = loaded
            else:
                raw = dict(arguments)
            args = spec.args_model.model_validate(raw)
            result = await handler(**args.model_dump())
        except json.JSONDecodeError as exc:
            result = ErrorOutcome(kind="bad_arguments", retryable=False,
                                  message=f"arguments are not valid JSON ({exc.msg} at {exc.pos}); fix and retry")
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                                 for e in exc.errors())
            result = ErrorOutcome(kind="bad_arguments", retryable=False,
                                  message=f"invalid arguments for {name}: {problems}; fix and retry")
        except AgentToolsError as exc:
            result = _error(exc, raw.get("host") if isinstance(raw.get("host"), str) else None,
                            raw.get("command") if isinstance(raw.get("command"), str) else None)
        return result.model_dump(mode="json")

    # ---------------------------------------------------------------- tools
    async def run_command(
        self,
        host: str,
        command: str,
        budget_s: float | None = None,
        on_timeout: str | None = None,
        cwd: str | None = None,
        idempotency_key: str | None = None,
        approval_id: str | None = None,
    ) -> BaseModel:
        """Run ``command`` on ``host`` under a budget; see :data:`RUN_COMMAND_DESC` and
        :meth:`JobRunner.run`. Returns an outcome model (never raises for host failures)."""
        try:
            h = self.hosts.get(host)
            return await self.runner.run(
                h, command,
                budget_s=budget_s if budget_s is not None else self.default_budget_s,
                on_timeout=on_timeout or "detach",  # type: ignore[arg-type]
                cwd=cwd, idempotency_key=idempotency_key)
        except AgentToolsError as exc:
            return _error(exc, host, command)

    async def job_status(self, job_id: str, wait_s: float = 0.0) -> BaseModel:
        """State of a job and its new output; long-polls up to ``wait_s`` seconds."""
        try:
            rec = self.journal.get(job_id)
            return await self.runner.job_status(self.hosts.get(rec.host), job_id, wait_s=wait_s)
        except AgentToolsError as exc:
            return _error(exc, None, None)

    async def job_output(self, job_id: str, stream: str = "stdout", offset: int = 0,
                         limit: int = 16384) -> BaseModel:
        """A page of a job's output by byte offset."""
        try:
            rec = self.journal.get(job_id)
            return await self.runner.job_output(self.hosts.get(rec.host), job_id,
                                                stream=stream, offset=offset, limit=limit)  # type: ignore[arg-type]
        except AgentToolsError as exc:
            return _error(exc, None, None)

    async def job_cancel(self, job_id: str, grace_s: float = 5.0) -> BaseModel:
        """Kill a job's whole process tree and verify nothing of it is left."""
        try:
            rec = self.journal.get(job_id)
            return await self.runner.cancel(self.hosts.get(rec.host), job_id, grace_s=grace_s)
        except AgentToolsError as exc:
            return _error(exc, None, None)

    async def list_jobs(self, host: str | None = None) -> BaseModel:
        """Known jobs, newest first; with ``host``, states are refreshed from that host in one round trip."""
        try:
            recs = self.journal.list(host)
            note = ""
            if host is not None:
                running = [r.job_id for r in recs if not r.terminal]
                if running:
                    states = await self.runner.host_states(self.hosts.get(host), running)
                    for r in recs:
                        if r.job_id in states:
                            self.runner.apply_state(r, states[r.job_id])
                note = f"states refreshed from {host}"
            return JobList(jobs=[JobInfo(job_id=r.job_id, host=r.host, command=r.command, state=r.state,
                                         readiness=r.readiness, exit_status=r.exit_status,
                                         created_at=r.created_at) for r in recs], note=note)
        except AgentToolsError as exc:
            return _error(exc, host, None)

    async def aclose(self) -> None:
        """Close host connections (jobs keep running on their hosts)."""
        await self.hosts.aclose()

    async def __aenter__(self) -> Toolkit:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
