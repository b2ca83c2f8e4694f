"""agent_tools: agent-callable tools that run shell commands on local and SSH hosts under per-command
budgets, with durable detached jobs for long work.

Public API (everything else is internal)::

    Toolkit                      the agent-facing tools (run_command, job_status, job_output, job_cancel, list_jobs)
    HostRegistry, LocalHost, SshHost, SshSettings, Host
    Journal, JobRunner
    outcomes: Finished, Detached, Killed, NeedsInput, NeedsApproval, Denied, ErrorOutcome, JobStatus, ...
    errors:   AgentToolsError and its tree (agent_tools.errors)
    testing:  agent_tools.testing, for tests (FunctionHost, EmbeddedHost, wait_until, free_port, SSH client files;
              the pytest plugin); not imported here
"""

import logging as _logging

import structlog as _structlog

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
from .redact import redact_event
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

if not _structlog.is_configured():
    # A library must not print: until the application (or our CLI / MCP entry points) configures structlog,
    # agent_tools' events go to stdlib logging under "agent_tools.*", silent by default (NullHandler), redacted.
    # An application configuring structlog itself should add agent_tools.redact.redact_event to its processors.
    _structlog.configure(
        processors=[_structlog.stdlib.filter_by_level, redact_event,
                    _structlog.processors.TimeStamper(fmt="iso", utc=True), _structlog.stdlib.render_to_log_kwargs],
        logger_factory=_structlog.stdlib.LoggerFactory(),
        wrapper_class=_structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
_logging.getLogger("agent_tools").addHandler(_logging.NullHandler())
