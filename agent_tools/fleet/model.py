"""The wire types of the fleet workflows: plain dataclasses (Temporal's default data converter sends them as
JSON), importable inside the workflow sandbox."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FINAL_STATES", "HOST_STATES", "HostJobSpec", "RolloutSpec", "flag_problem", "unit_problem"]

#: a host's state in a rollout, in the order it moves through them
HOST_STATES = ("pending", "prechecking", "refused", "already_done", "editing", "awaiting_approval", "restarting",
               "verifying", "verified", "rolling_back", "rolled_back", "denied", "failed", "skipped", "cancelled")
#: states a host does not leave
FINAL_STATES = frozenset({"refused", "already_done", "verified", "rolled_back", "denied", "failed", "skipped",
                          "cancelled"})

#: the characters of a systemd unit name (as :func:`agent_tools.tools.ops.check_unit` accepts them)
_UNIT_NAME = re.compile(r"[A-Za-z0-9:_.@\\-]+")


#: a word ``--flag`` may add to ExecStart: no whitespace, quotes, ``\\``, ``%`` (specifiers), ``$`` (variables)
#: or ``;`` (systemd.service(5): ExecStart= words are unquoted, escaped, expanded and ``;``-separated)
_FLAG_WORD = re.compile(r"[A-Za-z0-9._:/=,+@-]+")


def flag_problem(flags: list[str]) -> str | None:
    """What is wrong with the words to add to ExecStart (one is not a plain word: a newline would add a unit
    line, a space or quote another argument, ``%``/``$``/``;`` systemd's expansions), or None."""
    for word in flags:
        if not _FLAG_WORD.fullmatch(word):
            return (f"flag {word!r} is not one plain word (letters, digits and . _ : / = , + @ - only): it would "
                    "put unit-file syntax into ExecStart")
    return None


def unit_problem(unit: str) -> str | None:
    """What is wrong with ``unit`` as a systemd unit name (empty, a leading ``-``, a character outside
    ``[A-Za-z0-9:_.@\\-]``: shell or unit-file syntax), or None."""
    if not unit or unit.startswith("-") or not _UNIT_NAME.fullmatch(unit):
        return f"{unit!r} is not a systemd unit name (letters, digits and : _ . @ \\ - only)"
    return None


@dataclass
class RolloutSpec:
    """What ``FleetRollout`` does.

    :param hosts: host aliases, in rollout order (the first ``canary`` are the canary wave).
    :param flags: words added to the unit's ExecStart command (the hicache walkthrough's flags by default).
    :param unit: the systemd unit (SGLang's).
    :param canary: hosts in the first wave (0: no canary wave).
    :param wave_size: hosts per later wave (>= 1), rolled out concurrently.
    :param failure_budget: host failures tolerated; the rollout halts (no further wave starts) once more hosts
        than this failed (``failed`` or ``rolled_back``). A host refused at the pre-check, already_done (its unit
        has every flag and the server runs them), or denied (the worker's policy refused a step; nothing is left
        changed on it) is not a failure.
    :param precheck: refuse a host whose RAM cannot hold the hicache host pool (the walkthrough's estimate);
        False rolls out regardless (the server then refuses to start there and the host is rolled back).
    :param probes: extra readiness probes of the restart (dicts, as ``restart_service`` takes); ``{port}`` in
        a probe's ``url`` is the server's port from the unit file. Default: HTTP ``/health`` and the ready line.
    :param heartbeat_s: every activity's heartbeat timeout, seconds (> 0): a worker silent this long is taken
        for dead and the step is retried (a long one re-attaching to its job).
    :param restart_timeout_s: how long one host's restart may take to become ready, seconds (> 0; its
        activity's start-to-close timeout; the job's own deadline is the unit's start timeout).
    """

    hosts: list[str]
    flags: list[str] = field(default_factory=list)
    unit: str = "sglang.service"
    canary: int = 1
    wave_size: int = 3
    failure_budget: int = 0
    precheck: bool = True
    probes: list[dict[str, Any]] = field(default_factory=list)
    heartbeat_s: float = 10.0
    restart_timeout_s: float = 1800.0


@dataclass
class HostJobSpec:
    """What ``HostJob`` runs: ``command`` on ``host`` as one job, followed to its end.

    :param budget_s: the launch's budget in seconds (then the job runs on detached and is followed).
    :param heartbeat_s: the activity's heartbeat timeout, seconds.
    :param timeout_s: the activity's start-to-close timeout, seconds.
    """

    host: str
    command: str
    budget_s: float = 5.0
    heartbeat_s: float = 10.0
    timeout_s: float = 3600.0
