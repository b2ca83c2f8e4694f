"""Typed outcomes: what every agent-facing call returns.

A command always ends in exactly one outcome (the ``outcome`` field is the discriminator):

========================  ==================================================================
``finished``              exited within its budget: exit status or signal, bounded output
``needs_input``           ended (or is stuck) on a password/confirmation prompt; the prompt text
``detached``              still running when its budget ran out: a durable job to follow
``killed``                terminated on purpose (budget with ``on_timeout=kill``, deadline, cancel)
``needs_approval``        a policy rule says ``ask``: nothing ran; an approval id to approve with
``denied``                a policy rule says ``deny``: nothing ran
``error``                 the host was unreachable, auth failed, bad arguments...: nothing half-done
========================  ==================================================================

Job states (``JobStatus.state``): ``running``, ``exited``, ``killed``, ``lost``, and ``not_started`` (the
launch provably never reached the host: nothing ran; not lost work); with probes attached a
job's ``readiness`` is ``pending`` → ``ready`` | ``failed`` | ``deadline_exceeded``. Success is never
reported without a receipt: an exit status written by the job's monitor, or probes that passed.

Results lead with the state, stay small, carry evidence and name the next call (``next``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .output import OutputView

__all__ = [
    "Denied",
    "Detached",
    "ErrorOutcome",
    "Finished",
    "JobCancelResult",
    "JobInfo",
    "JobList",
    "JobOutput",
    "JobStatus",
    "Killed",
    "NeedsApproval",
    "NeedsInput",
    "Outcome",
    "ProbeReport",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ProbeReport(_Model):
    """One probe's latest result as the agent sees it."""

    kind: str = Field(description="probe kind: systemd_unit, http, log, port, gpu_memory, host_memory")
    target: str = Field(default="", description="what was probed (unit name, URL, file, port)")
    state: Literal["passed", "not_yet", "failed"] = Field(description="passed | not_yet | failed (terminal)")
    evidence: str = Field(default="", description="what was seen (unit state, HTTP status, matched line)")


class Finished(_Model):
    """The command exited within its budget."""

    outcome: Literal["finished"] = "finished"
    host: str
    command: str
    exit_status: int | None = Field(description="exit status; None when it died by a signal")
    signal: str | None = Field(default=None, description="signal name (TERM, KILL) when killed by one")
    duration_s: float
    stdout: OutputView
    stderr: OutputView
    job_id: str = Field(description="job id under which the full output stays on the host")


class NeedsInput(_Model):
    """The command wanted input from a person (a password or confirmation prompt). stdin is /dev/null, so it
    failed (or stopped) instead of hanging; run it non-interactively (``sudo -n``, ``--yes``, keys)."""

    outcome: Literal["needs_input"] = "needs_input"
    host: str
    command: str
    prompt: str = Field(description="the prompt or refusal text seen")
    exit_status: int | None = None
    duration_s: float
    stdout: OutputView
    stderr: OutputView
    job_id: str
    next: str


class Detached(_Model):
    """Still running when its budget ran out (or the rule said detach at once): a durable job on the host."""

    outcome: Literal["detached"] = "detached"
    host: str
    command: str
    job_id: str
    elapsed_s: float
    budget_s: float
    deadline_s: float | None = Field(default=None, description="seconds from start after which the job "
                                                               "counts as past its deadline")
    why: str
    probes: list[ProbeReport] = Field(default_factory=list)
    stdout: OutputView
    stderr: OutputView
    next: str


class Killed(_Model):
    """Terminated on purpose; survivors were checked."""

    outcome: Literal["killed"] = "killed"
    host: str
    command: str
    job_id: str
    signal: str = Field(description="the strongest signal that was needed (TERM or KILL)")
    by: Literal["budget", "deadline", "cancel"]
    reason: str
    survivors: list[int] = Field(default_factory=list, description="pids of the job still alive (should be [])")
    duration_s: float
    exit_status: int | None = None
    stdout: OutputView
    stderr: OutputView


class NeedsApproval(_Model):
    """A policy rule says ``ask``: nothing ran."""

    outcome: Literal["needs_approval"] = "needs_approval"
    host: str
    command: str
    approval_id: str
    command_digest: str = Field(default="", description="first 12 hex digits of the SHA-256 of the exact command "
                                                        "the approval is bound to (show it to the operator)")
    rule_id: str | None = None
    reason: str
    expires_s: float = Field(description="seconds until the approval id expires")
    next: str


class Denied(_Model):
    """A policy rule says ``deny``: nothing ran."""

    outcome: Literal["denied"] = "denied"
    host: str
    command: str
    rule_id: str | None = None
    reason: str
    next: str = "do not retry this command; choose a different approach or ask the operator"


class ErrorOutcome(_Model):
    """The call failed before or while reaching the host. Nothing was left half-done, except for kind
    ``start_unconfirmed``: the start request went out unanswered and the command may be running (``job_id``)."""

    outcome: Literal["error"] = "error"
    host: str | None = None
    command: str | None = None
    kind: str = Field(description="unreachable | auth | host_key | unknown_host | bad_arguments | "
                                  "connection_lost | channel_open_failed | busy | start_unconfirmed (the command "
                                  "may be running: follow job_id with job_status, do not rerun) | launch | "
                                  "job_not_found | journal | internal")
    message: str
    retryable: bool = Field(description="true: the same call may work later; false: change the arguments")
    job_id: str | None = Field(default=None, description="the job id the call reserved, when it got that far "
                                                          "(job_status on it tells what became of it)")


Outcome = Annotated[
    Finished | NeedsInput | Detached | Killed | NeedsApproval | Denied | ErrorOutcome,
    Field(discriminator="outcome"),
]


class JobStatus(_Model):
    """State of a durable job, with the output it wrote since the previous status call."""

    job_id: str
    host: str
    command: str
    state: Literal["running", "exited", "killed", "lost", "not_started"]
    exit_status: int | None = None
    signal: str | None = None
    readiness: Literal["none", "pending", "ready", "failed", "deadline_exceeded"] = "none"
    elapsed_s: float = Field(description="seconds since the job started while it runs or its readiness is "
                                         "pending; once it is over, frozen at its end (the host's record of the "
                                         "run time) or at the readiness verdict: the same on every later look")
    deadline_s: float | None = None
    why: str = ""
    probes: list[ProbeReport] = Field(default_factory=list)
    new_stdout: OutputView = Field(default_factory=OutputView)
    new_stderr: OutputView = Field(default_factory=OutputView)
    next: str = ""


class JobOutput(_Model):
    """A page of a job's raw output, by byte offsets."""

    job_id: str
    stream: Literal["stdout", "stderr"]
    offset: int
    next_offset: int
    total_bytes: int
    text: str
    eof: bool = Field(description="true when next_offset reached the stream's current end")


class JobCancelResult(_Model):
    """What a cancel did."""

    job_id: str
    host: str
    state: Literal["killed", "exited", "lost", "not_started"]
    signalled: list[int] = Field(default_factory=list, description="pids that were sent a signal")
    escalated: list[int] = Field(default_factory=list, description="pids that needed KILL after the grace")
    survivors: list[int] = Field(default_factory=list, description="pids still alive afterwards (want [])")
    message: str


class JobInfo(_Model):
    """One job in a listing."""

    job_id: str
    host: str
    command: str
    state: str
    readiness: str = "none"
    exit_status: int | None = None
    created_at: float = Field(description="unix time the job was started")
    summary: str = Field(default="", description="one line: state, exit status and readiness, e.g. 'exited 0, "
                                                 "readiness pending'")


class JobList(_Model):
    jobs: list[JobInfo]
    note: str = ""


def outcome_dict(outcome: BaseModel) -> dict[str, Any]:
    """JSON-ready dict of an outcome (``None`` fields kept: the model reads a stable shape)."""
    return outcome.model_dump(mode="json")
