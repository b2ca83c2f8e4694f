"""Argument models of the agent-facing tools: one typed model per tool, the source of every schema."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["JobCancelArgs", "JobOutputArgs", "JobStatusArgs", "ListJobsArgs", "RunCommandArgs"]


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunCommandArgs(_Args):
    host: str = Field(description="host alias: 'local' for this machine, or an SSH alias (e.g. 'gpu-node-1')")
    command: str = Field(description="shell command line (bash when the host has it). stdin is /dev/null and "
                                     "pagers are off; never interactive")
    budget_s: float | None = Field(default=None, gt=0, le=3600,
                                   description="seconds to wait before the command becomes a detached job "
                                               "(default: the host policy's, else 15)")
    on_timeout: Literal["detach", "kill"] | None = Field(
        default=None, description="when the budget runs out: 'detach' (keep running as a job) or 'kill'")
    cwd: str | None = Field(default=None, description="working directory on the host")
    idempotency_key: str | None = Field(default=None, max_length=128,
                                        description="retry-safe key: the same key on the same host never "
                                                    "starts a second job")
    approval_id: str | None = Field(default=None, description="approval id from a needs_approval outcome, "
                                                               "once the operator approved it")


class JobStatusArgs(_Args):
    job_id: str = Field(description="job id from run_command (j_...)")
    wait_s: float = Field(default=0.0, ge=0, le=600,
                          description="long-poll: wait up to this many seconds for the state to change")


class JobOutputArgs(_Args):
    job_id: str = Field(description="job id (j_...)")
    stream: Literal["stdout", "stderr"] = Field(default="stdout", description="which stream to page")
    offset: int = Field(default=0, ge=0, description="byte offset to start at")
    limit: int = Field(default=16384, ge=1, le=1048576, description="bytes to return at most")


class JobCancelArgs(_Args):
    job_id: str = Field(description="job id (j_...)")
    grace_s: float = Field(default=5.0, ge=0, le=120,
                           description="seconds between TERM and KILL for the job's whole process tree")


class ListJobsArgs(_Args):
    host: str | None = Field(default=None, description="only jobs on this host; also rediscovers jobs from "
                                                       "the host's job directories")
