"""Typed outcomes: what every agent-facing call returns.

A command always ends in exactly one outcome (the ``outcome`` field is the discriminator):

========================  ==================================================================
``finished``              exited within its budget: exit status or signal, bounded output
``needs_input``           ended (or is stuck) on a password/confirmation prompt or needed a terminal
``detached``              still running when its budget ran out: a durable job to follow
``killed``                terminated on purpose (budget with ``on_timeout=kill``, deadline, cancel)
``needs_approval``        a policy rule says ``ask``: nothing ran; an approval id to approve with
``denied``                a policy rule says ``deny``: nothing ran
``error``                 the host was unreachable, auth failed, bad arguments...: nothing half-done
========================  ==================================================================

Job states (``JobStatus.state``): ``running``, ``exited``, ``killed``, ``lost``, ``not_started`` (the
launch provably never reached the host: nothing ran; not lost work) and ``unconfirmed`` (the start request went
out unanswered and the host has not received it so far: settled within its launch window); with probes attached a
job's ``readiness`` is ``pending`` → ``ready`` | ``failed`` | ``deadline_exceeded`` | ``superseded`` (a newer
restart of the same unit took over: its job says what became of the unit). Success is never
reported without a receipt: an exit status written by the job's monitor, or probes that passed.

Results lead with the state, stay small, carry evidence and name the next call (``next``).

What the model reads is :func:`result_view` of a result: every field that is at its default (``None``, ``""``,
``[]``, an empty output view, ``readiness="none"``) is left out, required fields are always there, and an
output view that holds its whole stream is just its ``text`` (with its ``note`` when cleaning changed something:
colours removed, a redraw collapsed, escapes shown). The JSON Schema of each model says what may
appear; a left-out field means "nothing to say" (a default), never "unknown".
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, field_serializer

from .errors import ErrorKind
from .output import OutputView

__all__ = [
    "SHOWN",
    "Denied",
    "Detached",
    "ErrorOutcome",
    "Finished",
    "JobCancelResult",
    "JobInfo",
    "JobInput",
    "JobList",
    "JobOutput",
    "JobStatus",
    "Killed",
    "Leftover",
    "NeedsApproval",
    "NeedsInput",
    "Outcome",
    "ProbeReport",
    "ResultModel",
    "drop_repeated_evidence",
    "result_view",
]


class ResultModel(BaseModel):
    """Base of every tool result model: no extra fields; :func:`result_view` is what a model reads of it."""

    model_config = ConfigDict(extra="forbid")


class _Shown:
    """``Annotated[T, SHOWN]``: :func:`result_view` keeps the field even at its default (a receipt such as
    ``survivors: []``, or advice that is the same every time)."""


SHOWN = _Shown()


class ProbeReport(ResultModel):
    """One probe's latest result as the agent sees it."""

    kind: str = Field(description="probe kind: systemd_unit, http, log, port, gpu_memory, host_memory")
    target: str = Field(default="", description="what was probed (unit name, URL, file, port)")
    state: Literal["passed", "not_yet", "failed", "not_passed"] = Field(
        description="passed | not_yet | failed (terminal) | not_passed (readiness was decided first; not checked "
                    "any more)")
    evidence: str = Field(default="", description="what was seen (unit state, HTTP status, matched line)")


class Leftover(ResultModel):
    """A process the command started that still ran after the command itself exited."""

    pid: int
    command: str = Field(description="its command line (/proc/PID/cmdline, spaces for NULs, first 200 bytes)")


class Finished(ResultModel):
    """The command exited within its budget. Processes it started that still run are ``leftovers``; ``next`` then
    names the call that stops them."""

    outcome: Literal["finished"] = "finished"
    host: str
    command: str
    exit_status: int | None = Field(description="exit status; None when it died by a signal")
    signal: str | None = Field(default=None, description="signal name (TERM, KILL) when killed by one")
    duration_s: float
    stdout: OutputView = Field(default_factory=OutputView)
    stderr: OutputView = Field(default_factory=OutputView)
    job_id: str = Field(description="job id under which the full output stays on the host")
    leftovers: list[Leftover] = Field(default_factory=list, description="processes it started that still run "
                                                                        "(first 20); job_cancel stops them")
    unchecked: str = Field(default="", description="what the look for leftovers could not see")
    next: str = ""


class NeedsInput(ResultModel):
    """The command wanted input from a person (a password or confirmation prompt) or a terminal (vim, top).
    stdin is /dev/null and there is no terminal, so it failed (or stopped) instead of hanging; ``next`` says how
    to run it non-interactively (``sudo -n``, ``--yes``, keys; ``top -b -n 1``; edit_file instead of vim).
    What a full-screen program drew is left out of ``stdout`` (its byte count stays). With ``secret`` the job is
    still running (``stdin="pipe"``/``"tty"``), waiting on a password a person gives out of band."""

    outcome: Literal["needs_input"] = "needs_input"
    host: str
    command: str
    prompt: str = Field(description="the prompt or refusal text seen")
    secret: bool = Field(default=False, description="true: the job is running, waiting on a password or passphrase "
                                                    "that a person types out of band (never the model)")
    exit_status: int | None = None
    duration_s: float
    stdout: OutputView = Field(default_factory=OutputView)
    stderr: OutputView = Field(default_factory=OutputView)
    job_id: str
    next: str


class Detached(ResultModel):
    """Still running when its budget ran out (or the rule said detach at once): a durable job on the host."""

    outcome: Literal["detached"] = "detached"
    host: str
    command: str
    job_id: str
    elapsed_s: float
    budget_s: float | None = Field(default=None, description="the budget it outlived, in seconds (left out when it "
                                                             "detached at once: a restart, a rule's detach)")
    deadline_s: float | None = Field(default=None, description="seconds from start after which the job "
                                                               "counts as past its deadline")
    hard_deadline_s: float | None = Field(default=None, description="the host kills it this many seconds after start "
                                                                    "(shown while it runs)")
    readiness: Literal["none", "pending", "ready", "failed", "deadline_exceeded", "superseded"] = Field(
        default="none", description="with probes: the readiness at the first look (as job_status)")
    why: str
    probes: list[ProbeReport] = Field(default_factory=list)
    stdout: OutputView = Field(default_factory=OutputView)
    stderr: OutputView = Field(default_factory=OutputView)
    next: str


class Killed(ResultModel):
    """Terminated on purpose; survivors were checked."""

    outcome: Literal["killed"] = "killed"
    host: str
    command: str
    job_id: str
    signal: str = Field(description="the strongest signal that was needed (TERM or KILL)")
    by: Literal["budget", "deadline", "cancel"]
    reason: str
    survivors: Annotated[list[int], SHOWN] = Field(default_factory=list,
                                                  description="pids of the job still alive (should be [])")
    unchecked: str = Field(default="", description="what the survivor check could not see (empty: it could see "
                                                   "every process of the job)")
    duration_s: float
    exit_status: int | None = None
    stdout: OutputView = Field(default_factory=OutputView)
    stderr: OutputView = Field(default_factory=OutputView)


class NeedsApproval(ResultModel):
    """A policy rule says ``ask``: nothing ran."""

    outcome: Literal["needs_approval"] = "needs_approval"
    host: str
    command: str
    cwd: str | None = Field(default=None, description="working directory the command would run in (None: the "
                                                      "login directory)")
    env: dict[str, str] | None = Field(default=None, description="environment variables it would run with")
    approval_id: str
    command_digest: str = Field(default="", description="first 12 hex digits of the SHA-256 of the exact call (host, "
                                                        "command, cwd, env) the approval is bound to (show it to the "
                                                        "operator)")
    rule_id: str | None = None
    reason: str
    expires_s: float = Field(description="seconds until the approval id expires")
    next: str


class Denied(ResultModel):
    """A policy rule says ``deny``: nothing ran."""

    outcome: Literal["denied"] = "denied"
    host: str
    command: str
    rule_id: str | None = None
    reason: str
    next: Annotated[str, SHOWN] = "do not retry this command; choose a different approach or ask the operator"


class ErrorOutcome(ResultModel):
    """The call failed before or while reaching the host. Nothing was left half-done, except for kind
    ``start_unconfirmed``: the start request went out unanswered and the command may be running (``job_id``)."""

    outcome: Literal["error"] = "error"
    host: str | None = None
    command: str | None = None
    kind: ErrorKind = Field(description="connecting: time ran out while connecting (retry with more); ssh_config: "
                                        "the SSH config or a file it names cannot be used (fix it); host_changed: "
                                        "the alias now reaches another machine than the job's (nothing is known of "
                                        "the job there); start_unconfirmed: the command may be running (follow "
                                        "job_id with job_status, do not rerun); unsupported: the host lacks it "
                                        "(no systemd, no nvidia-smi, nothing to own a tty); input_refused: the job "
                                        "takes no input (no stdin pipe, ended, or its input ended)")
    message: str
    retryable: bool = Field(description="true: the same call may work later; false: change the arguments")
    job_id: str | None = Field(default=None, description="the job id the call reserved, when it got that far "
                                                          "(job_status on it tells what became of it)")


Outcome = Annotated[
    Finished | NeedsInput | Detached | Killed | NeedsApproval | Denied | ErrorOutcome,
    Field(discriminator="outcome"),
]


class JobStatus(ResultModel):
    """State of a durable job, with the output it wrote since the previous status call."""

    job_id: str
    host: str
    command: str
    state: Literal["running", "exited", "killed", "lost", "not_started", "unconfirmed"] = Field(
        description="unconfirmed: the start request went out unanswered and the host has not received it (yet); "
                    "not_started: it never will")
    exit_status: int | None = None
    signal: str | None = None
    readiness: Literal["none", "pending", "ready", "failed", "deadline_exceeded", "superseded"] = "none"
    by: Literal["budget", "deadline", "cancel"] | None = Field(default=None, description="who killed it (absent: not "
                                                                                        "agent-tools)")
    elapsed_s: float = Field(description="seconds since the job started while it runs or its readiness is "
                                         "pending; once it is over, frozen at its end (the host's record of the "
                                         "run time) or at the readiness verdict: the same on every later look; 0 "
                                         "when nothing ran (not_started, unconfirmed)")
    deadline_s: float | None = None
    hard_deadline_s: float | None = Field(default=None, description="the host kills it this many seconds after "
                                                                    "start (shown while it runs, and when it did)")
    why: str = ""
    probes: list[ProbeReport] = Field(default_factory=list)
    new_stdout: OutputView = Field(default_factory=OutputView)
    new_stderr: OutputView = Field(default_factory=OutputView)
    leftovers: list[Leftover] = Field(default_factory=list, description="what its ended command left running; "
                                                                        "job_cancel stops them")
    unchecked: str = Field(default="", description="what the look for its processes could not see")
    prompt: str | None = Field(default=None, description="the prompt the running job waits on (its newest output)")
    secret: bool = Field(default=False, description="true: that prompt asks for a password a person types out of "
                                                    "band (agent-tools input JOB --secret), never the model")
    next: str = ""


class JobInput(JobStatus):
    """Input written to a job's stdin (``job_input``), then the job's state and the output it wrote since the
    previous look, as :class:`JobStatus`."""

    input: Literal["written", "queued", "duplicate"] = Field(
        description="written: the job's pipe took it; queued: the job is not reading yet, it is written when it "
                    "does; duplicate: this idempotency key was written before (not written again)")
    input_bytes: int = Field(description="bytes of this write (the text, plus the newline when added)")


class JobOutput(ResultModel):
    """A page of a job's raw output, by byte offsets (with ``grep``: its matching lines)."""

    job_id: str
    stream: Literal["stdout", "stderr"]
    offset: int
    next_offset: int = Field(description="offset=next_offset reads on (with grep: searches on)")
    total_bytes: int
    grep: str | None = Field(default=None, description="the regex the lines of text match; each line is OFFSET:line")
    matches: int | None = Field(default=None, description="with grep: lines from offset on that match")
    text: str
    eof: bool = Field(description="true when next_offset reached the stream's current end (with grep: every match "
                                  "was shown)")
    cut_before: int | None = Field(default=None, description="with tail_lines: the page ends at the output's end, "
                                                             "and this many bytes of those lines before offset are "
                                                             "not shown (0: none)")
    next: str = Field(default="", description="with grep and no match: the other stream's matches")


class JobCancelResult(ResultModel):
    """What a cancel did."""

    job_id: str
    host: str
    state: Literal["killed", "exited", "lost", "not_started"]
    signalled: list[int] = Field(default_factory=list, description="pids that were sent a signal")
    escalated: list[int] = Field(default_factory=list, description="pids that needed KILL after the grace")
    survivors: Annotated[list[int], SHOWN] = Field(default_factory=list,
                                                  description="pids still alive afterwards (want [])")
    unchecked: str = Field(default="", description="what the survivor check could not see (empty: it could see "
                                                   "every process of the job)")
    message: str


class JobInfo(ResultModel):
    """One job in a listing."""

    job_id: str
    host: str
    command: str
    state: str
    readiness: str = "none"
    exit_status: int | None = None
    by: str | None = Field(default=None, description="who killed a killed job: budget | deadline | cancel")
    leftovers: list[int] = Field(default_factory=list, description="pids its ended command left running (last seen)")
    created_at: float = Field(description="when the job was started, UTC (ISO 8601 in JSON; unix seconds in "
                                          "Python)")
    changed: str | None = Field(default=None, description="what changed since a result last showed this job "
                                                          "(e.g. 'exited (was running)'); absent: nothing")

    @field_serializer("created_at", when_used="json")
    def _utc(self, value: float) -> str:
        """The start time a reader can read: UTC, to the second (a unix float such as 1796669304.8565435 is not)."""
        return datetime.fromtimestamp(value, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobList(ResultModel):
    """A page of the known jobs, newest first."""

    jobs: list[JobInfo]
    total: int = Field(description="jobs that match (on every page)")
    next_offset: int | None = Field(default=None, description="set when more match: list_jobs(offset=next_offset) "
                                                              "shows the next page")
    note: str = ""


_SEE_PROBES = "(see probes)"


def drop_repeated_evidence(node: Any) -> bool:
    """In every dict with a ``why`` and ``probes``, the probes' evidence said again in ``why`` is replaced by
    "(see probes)" (each fact once: the evidence stays in its probe). True when something was dropped."""
    changed = False
    if isinstance(node, dict):
        why, probes = node.get("why"), node.get("probes")
        if isinstance(why, str) and isinstance(probes, list):
            for p in probes:
                ev = p.get("evidence") if isinstance(p, dict) else None
                if isinstance(ev, str) and len(ev) > len(_SEE_PROBES) and ev in why:
                    why = why.replace(ev, _SEE_PROBES)
                    changed = True
            node["why"] = why
        for v in node.values():
            changed = drop_repeated_evidence(v) or changed
    elif isinstance(node, list):
        for v in node:
            changed = drop_repeated_evidence(v) or changed
    return changed


def result_view(result: BaseModel) -> dict[str, Any]:
    """The model-facing JSON of a tool result (what every adapter sends and the CLI's ``--json`` prints).

    Rules, applied to nested models too: the discriminator (``outcome``: a one-value ``Literal``) and fields
    marked :data:`SHOWN` (``survivors``, ``denied``'s advice) are always kept; any other field whose value
    equals its default is left out (``None``, ``""``,
    ``[]``, an empty :class:`~agent_tools.output.OutputView`, ``readiness="none"``); a required field is always
    kept, ``None`` included (``exit_status: null`` means "died by a signal"); an output view holding its whole
    stream is ``{"text": ...}`` (its byte counts appear only when bytes were left out, its ``note`` when cleaning
    said something); a float with an integral
    value is written as an integer (``15`` for ``15.0``: the same text JavaScript's ``JSON.stringify`` gives,
    so clients that compare the text content with ``structuredContent`` see one payload).

    :param result: a tool result. A :class:`ResultModel` is compacted by the rules above; any other pydantic
        model (a tool registered by a user) is dumped whole (``model_dump(mode="json")``), integers aside.
    :returns: a JSON-ready dict (a new object).
    """
    dumped = result.model_dump(mode="json")
    return _ints(_view(result, dumped) if isinstance(result, ResultModel) else dumped)  # type: ignore[no-any-return]


def _view(model: BaseModel, dumped: dict[str, Any]) -> dict[str, Any]:
    if isinstance(model, OutputView):
        if not model.text and not model.truncated:
            return {}
        keep = ("text", "total_bytes", "omitted_bytes") if model.truncated else ("text",)
        return ({k: dumped[k] for k in keep} | ({"offset": model.offset} if model.offset else {})
                | ({"note": model.note} if model.note else {}))
    out: dict[str, Any] = {}
    for name, info in type(model).model_fields.items():
        if name not in dumped:
            continue  # excluded from serialization by the model itself
        value = getattr(model, name)
        required = info.is_required() or _is_tag(info)
        if not required and value == info.get_default(call_default_factory=True):
            continue
        shown = _view_value(value, dumped[name])
        if shown == {} and isinstance(value, OutputView) and not required:
            continue  # no output on this stream
        out[name] = shown
    for name, value in (model.model_extra or {}).items():
        out[name] = dumped.get(name, value)
    return out


def _is_tag(info: Any) -> bool:
    """A discriminator such as ``outcome: Literal["finished"] = "finished"``, or a field marked ``SHOWN``: always
    shown."""
    return (get_origin(info.annotation) is Literal and len(get_args(info.annotation)) == 1) or any(
        m is SHOWN for m in info.metadata)


def _view_value(value: Any, dumped: Any) -> Any:
    if isinstance(value, BaseModel) and isinstance(dumped, dict):
        return _view(value, dumped)
    if isinstance(value, list | tuple) and isinstance(dumped, list) and len(value) == len(dumped):
        return [_view_value(v, d) for v, d in zip(value, dumped, strict=True)]
    return dumped


def _ints(data: Any) -> Any:
    if isinstance(data, float) and math.isfinite(data) and data.is_integer() and abs(data) < 2**53:
        return int(data)
    if isinstance(data, dict):
        return {k: _ints(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_ints(v) for v in data]
    return data
