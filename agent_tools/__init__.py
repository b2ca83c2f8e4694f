"""agent_tools: agent-callable tools that run shell commands on local and SSH hosts under per-command
budgets, with durable detached jobs for long work.

Public API (everything else is internal)::

    Toolkit                      the agent-facing tools (run_command, job_status, job_output, job_cancel, list_jobs)
    HostRegistry, LocalHost, SshHost, SshSettings, Host
    Journal, JobRunner
    outcomes: Finished, Detached, Killed, NeedsInput, NeedsApproval, Denied, ErrorOutcome, JobStatus, ...
    errors:   AgentToolsError and its tree (agent_tools.errors)
"""

from . import errors
from .hosts import Host, LocalHost, SshHost, SshSettings
from .hosts.registry import HostRegistry
from .jobs.journal import Journal
from .jobs.manager import JobRunner
from .outcomes import (
    Denied,
    Detached,
    ErrorOutcome,
    Finished,
    JobCancelResult,
    JobOutput,
    JobStatus,
    Killed,
    NeedsApproval,
    NeedsInput,
)
from .output import OutputView
from .tools.toolkit import Toolkit

__version__ = "0.1.0"

__all__ = [
    "Denied",
    "Detached",
    "ErrorOutcome",
    "Finished",
    "Host",
    "HostRegistry",
    "JobCancelResult",
    "JobOutput",
    "JobRunner",
    "JobStatus",
    "Journal",
    "Killed",
    "LocalHost",
    "NeedsApproval",
    "NeedsInput",
    "OutputView",
    "SshHost",
    "SshSettings",
    "Toolkit",
    "__version__",
    "errors",
]
