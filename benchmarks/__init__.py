"""Benchmarks of agent_tools against plain baselines, measured side by side in one run.

``python -m benchmarks [--quick] [--only NAME ...] [--json]`` starts its own servers on loopback (a real
OpenSSH ``sshd`` from :mod:`tests.sshd`, and a fleet of in-process asyncssh servers in a separate process),
runs every scenario and its baseline in alternating A/B rounds, prints min/median/max per side and the ratio
of medians, and removes every job, server and temp file it made (also on Ctrl-C). See
``docs/performance.md`` for the results and what they mean. ``agent_view`` is not a timing: it counts what a
model reads through the MCP client in the hicache scenario (:mod:`benchmarks.agent_view`), against issue 14's goals.
``fleet_rollout`` (the ``temporal`` extra) times a Temporal rollout against a plain loop
(:mod:`benchmarks.fleet_rollout`).
"""

from __future__ import annotations

SCENARIOS = ("run_command", "dispatch", "cli", "detach", "host_states", "fanout", "output", "replay", "agent_view",
             "fleet_rollout")

__all__ = ["SCENARIOS"]
