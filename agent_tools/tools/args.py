"""Argument models of the agent-facing tools: one typed model per tool, the source of every schema.

Descriptions are what a model reads in ``tools/list`` on every turn: each says the unit and the default in as
few words as it takes (the schema carries ``default`` and bounds itself).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..probes.specs import ProbeSpec

__all__ = ["EditFileArgs", "HostArgs", "HttpGetArgs", "JobCancelArgs", "JobInputArgs", "JobOutputArgs", "JobStatusArgs",
           "ListHostsArgs", "ListJobsArgs", "ReadFileArgs", "RestartServiceArgs", "RestoreFileArgs", "RunCommandArgs",
           "ServiceStatusArgs", "WaitForArgs", "WriteFileArgs"]

HOST = "host alias"
#: what bounds a page: ``limit``, and the result size (600 tokens by default: a page is cut to fit, next_offset says
#: where it ends)
PAGE_LIMIT = "bytes at most (results stop near 2 KB; next_offset reads on)"
APPROVAL = "approved needs_approval id"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunCommandArgs(_Args):
    host: str = Field(description=HOST)
    command: str = Field(description="shell command line; pagers off")
    budget_s: float | None = Field(default=None, gt=0, le=3600,
                                   description="seconds, then detached (default: the policy's, else 15)")
    on_timeout: Literal["detach", "kill"] | None = Field(
        default=None, description="at the budget: detach (default: runs on as a job) or kill")
    deadline_s: float | None = Field(default=None, gt=0, description="host kills it this many s after start")
    cwd: str | None = Field(default=None, description="working directory")
    env: dict[str, str] | None = Field(default=None, description="extra environment variables")
    idempotency_key: str | None = Field(default=None, max_length=128,
                                        description="one job per key and host")
    approval_id: str | None = Field(default=None, description=APPROVAL)
    stdin: Literal["none", "pipe", "tty"] = Field(default="none", description="pipe or tty (80x24), for job_input")


class JobInputArgs(_Args):
    job_id: str = Field(description="job id (j_...)")
    text: str = Field(description="typed, then Enter; \\x03 = Ctrl-C")
    eof: bool = Field(default=False, description="end its input after")
    idempotency_key: str | None = Field(default=None, description="a retry with it types once")


class JobStatusArgs(_Args):
    job_id: str = Field(description="job id (j_...)")
    wait_s: float = Field(default=0.0, ge=0, le=600, description="long-poll: seconds to wait for a change")


class JobOutputArgs(_Args):
    job_id: str = Field(description="job id (j_...)")
    stream: Literal["stdout", "stderr"] = "stdout"
    offset: int = Field(default=0, ge=0, description="byte offset to start at")
    limit: int = Field(default=16384, description=PAGE_LIMIT)  # 1..1 MiB: checked by the runner (BadArguments)
    tail_lines: int | None = Field(default=None, description="the last N lines")
    grep: str | None = Field(default=None, description="only lines matching it (grep -iE), as OFFSET:line")


class JobCancelArgs(_Args):
    job_id: str = Field(description="job id (j_...)")
    grace_s: float = Field(default=5.0, ge=0, le=120, description="seconds between TERM and KILL")


class ListJobsArgs(_Args):
    host: str | None = Field(default=None, description="only this host")
    state: Literal["running", "exited", "killed", "lost"] | None = Field(default=None, description="only these")
    limit: int = Field(default=10, ge=1, le=100, description="jobs at most")
    offset: int = Field(default=0, ge=0, description="jobs to skip (next_offset)")


class ListHostsArgs(_Args):
    check: bool = Field(default=False, description="connect to each")


class RestartServiceArgs(_Args):
    host: str = Field(description=HOST)
    unit: str = Field(description="systemd unit, e.g. sglang.service")
    daemon_reload: bool = Field(default=True, description="daemon-reload first")
    probes: list[ProbeSpec] = Field(default_factory=list,
                                    description="more probes (health URL, ready line); systemd_unit of the unit: "
                                                "its settle_s")
    deadline_s: float | None = Field(default=None, gt=0, description="s until failed (default: "
                                                                      "TimeoutStartSec + 30)")
    approval_id: str | None = Field(default=None, description=APPROVAL)


class ServiceStatusArgs(_Args):
    host: str = Field(description=HOST)
    unit: str = Field(description="systemd unit")
    journal_lines: int = Field(default=10, ge=0, le=200, description="newest journal lines to include")
    grep: str | None = Field(default=None, description="journal lines matching it only (grep -iE)")


class ReadFileArgs(_Args):
    host: str = Field(description=HOST)
    path: str = Field(description="absolute path on the host")
    offset: int = Field(default=0, ge=0, description="byte offset to start at")
    limit: int = Field(default=65536, description=PAGE_LIMIT)  # 1..1 MiB: checked by read_file (BadArguments)
    approval_id: str | None = Field(default=None, description=APPROVAL)


class WriteFileArgs(_Args):
    host: str = Field(description=HOST)
    path: str = Field(description="absolute path on the host")
    content: str = Field(description="complete new content (UTF-8)")
    backup: bool = Field(default=True, description="keep a backup for restore_file")
    approval_id: str | None = Field(default=None, description=APPROVAL)


class EditFileArgs(_Args):
    host: str = Field(description=HOST)
    path: str = Field(description="absolute path on the host")
    old: str = Field(min_length=1, description="exact text to replace (found once)")
    new: str = Field(description="its replacement text")
    backup: bool = Field(default=True, description="keep a backup for restore_file")
    approval_id: str | None = Field(default=None, description=APPROVAL)


class RestoreFileArgs(_Args):
    host: str = Field(description=HOST)
    path: str = Field(description="file to restore")
    backup_id: str = Field(description="backup id from write_file/edit_file (b_...)")
    approval_id: str | None = Field(default=None, description=APPROVAL)


class HostArgs(_Args):
    host: str = Field(description=HOST)


class WaitForArgs(_Args):
    host: str = Field(description=HOST)
    probes: list[ProbeSpec] = Field(min_length=1, description="probes that must all pass")
    deadline_s: float = Field(default=60.0, gt=0, le=3600, description="seconds to wait at most")


class HttpGetArgs(_Args):
    host: str = Field(description=HOST)
    url: str = Field(description="http:// URL from the host")
    fields: list[str] | None = Field(default=None, description="JSON body: only these top-level keys")
    timeout_s: float = Field(default=10.0, gt=0, le=300, description="seconds the request may take")
