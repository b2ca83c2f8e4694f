"""structlog setup for entry points only (CLI, MCP server). Library modules only call ``get_logger``."""

from __future__ import annotations

import logging
import sys

import structlog

from .redact import redact_event

__all__ = ["configure_logging"]


def configure_logging(level: str = "warning", *, json_logs: bool | None = None) -> None:
    """Send structured logs to **stderr** (stdout carries results, or the MCP protocol), secrets redacted
    (:func:`agent_tools.redact.redact_event`).

    :param level: minimum level name (``debug``, ``info``, ``warning``, ``error``).
    :param json_logs: JSON lines (default when stderr is not a TTY) or the console renderer.
    """
    if json_logs is None:
        json_logs = not sys.stderr.isatty()
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            redact_event,  # every string of every event redacted before it is rendered anywhere
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[level.upper()]),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=False,
    )
