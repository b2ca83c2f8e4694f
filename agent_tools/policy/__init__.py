"""Per-host safety policies: parse a command line, decide allow / ask / deny, approvals.

::

    policies = PolicySet.load(["policies/default.yaml", "policies/gpu-node.yaml"])
    decision = policies.decide("gpu-node-1", "systemctl daemon-reload && systemctl restart sglang")
    decision.decision            # "ask"
    decision.detach_immediately  # True
    decision.probes              # [{"kind": "systemd_unit", "unit": "sglang.service"}, ...]

How decisions combine is described in :mod:`agent_tools.policy.engine`; the file format in
:mod:`agent_tools.policy.model`; what the parser sees through in :mod:`agent_tools.policy.shell`.
"""

from __future__ import annotations

from agent_tools.policy.approvals import Approval, ApprovalRefused, ApprovalStore
from agent_tools.policy.engine import PolicySet
from agent_tools.policy.errors import PolicyFileError
from agent_tools.policy.model import CommandDecision, Connection, Decision, Defaults, Examples, Policy, Rule
from agent_tools.policy.shell import Redirect, SimpleCommand, parse_command

__all__ = [
    "Approval",
    "ApprovalRefused",
    "ApprovalStore",
    "CommandDecision",
    "Connection",
    "Decision",
    "Defaults",
    "Examples",
    "Policy",
    "PolicyFileError",
    "PolicySet",
    "Redirect",
    "Rule",
    "SimpleCommand",
    "parse_command",
]
