"""Argument models of the agent-facing tools: one typed model per tool, the source of every schema."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["HostArgs", "HttpGetArgs", "JobCancelArgs", "JobOutputArgs", "JobStatusArgs", "ListJobsArgs", "ReadFileArgs",
           "RestartServiceArgs", "RestoreFileArgs", "RunCommandArgs", "ServiceStatusArgs", "WaitForArgs",
           "WriteFileArgs"]


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
    cwd: str | None = Field(default=None, description="working directory on the host (~/ is the login home)")
    env: dict[str, str] | None = Field(default=None, description="extra environment variables for the command")
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


class RestartServiceArgs(_Args):
    host: str = Field(description="host alias")
    unit: str = Field(description="systemd unit, e.g. sglang.service")
    daemon_reload: bool = Field(default=True, description="run systemctl daemon-reload first (after editing "
                                                          "a unit file)")
    probes: list[dict[str, Any]] = Field(default_factory=list,
                                         description="extra readiness probes, e.g. {'kind':'http','url':"
                                                     "'http://127.0.0.1:30000/health'} or {'kind':'log','unit':"
                                                     "'sglang.service','pattern':'ready to roll'}; they count "
                                                     "only against the new process. {'kind':'systemd_unit',"
                                                     "'unit':UNIT,'settle_s':10} sets the unit's own probe: "
                                                     "seconds it must stay up (default 3 for non-notify types)")
    deadline_s: float | None = Field(default=None, gt=0, description="seconds until the restart counts as "
                                                                      "failed (default: the unit's "
                                                                      "TimeoutStartSec + 30)")
    approval_id: str | None = Field(default=None, description="approval id from a needs_approval outcome")


class ServiceStatusArgs(_Args):
    host: str = Field(description="host alias")
    unit: str = Field(description="systemd unit")
    journal_lines: int = Field(default=10, ge=0, le=200, description="recent journal lines to include")


class ReadFileArgs(_Args):
    host: str = Field(description="host alias")
    path: str = Field(description="absolute path on the host")
    offset: int = Field(default=0, ge=0, description="byte offset")
    limit: int = Field(default=65536, ge=1, le=1048576, description="bytes at most")


class WriteFileArgs(_Args):
    host: str = Field(description="host alias")
    path: str = Field(description="absolute path on the host")
    content: str = Field(description="the complete new content (UTF-8)")
    backup: bool = Field(default=True, description="keep a backup of the old content (restore_file undoes)")
    approval_id: str | None = Field(default=None, description="approval id from a needs_approval outcome")


class RestoreFileArgs(_Args):
    host: str = Field(description="host alias")
    path: str = Field(description="the file to restore")
    backup_id: str = Field(description="backup id from write_file (b_...)")


class HostArgs(_Args):
    host: str = Field(description="host alias")


class WaitForArgs(_Args):
    host: str = Field(description="host alias")
    probes: list[dict[str, Any]] = Field(min_length=1, description="probe specs that must all pass")
    deadline_s: float = Field(default=60.0, gt=0, le=3600, description="seconds to wait at most")


class HttpGetArgs(_Args):
    host: str = Field(description="host alias")
    url: str = Field(description="http:// URL as seen from the host, e.g. http://127.0.0.1:30000/get_server_info")
