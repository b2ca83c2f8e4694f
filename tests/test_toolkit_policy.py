"""Issue 4 end to end: run_command through a policy (denied / needs_approval without touching the host,
approvals bound to command + host and used once, an approved restart detached with the rule's probes),
redaction, and the policy CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent_tools.demo.node import embedded_node
from agent_tools.hosts.base import ExecResult
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.policy import PolicySet
from agent_tools.testing import FunctionHost
from agent_tools.tools.toolkit import Toolkit

ROOT = Path(__file__).resolve().parents[1]
GPU_POLICY = PolicySet.load([ROOT / "policies" / "gpu-node.yaml"])


def _fake() -> FunctionHost:
    return FunctionHost(lambda cmd, stdin: ExecResult(0, stdout=b""), name="gpu-node-1")


@pytest.mark.parametrize("command", ["bash -c \"rm -rf /\"", "sudo rm -rf / --no-preserve-root", "echo ok; rm -rf /",
                                     "ssh other 'reboot'", "dd if=/dev/zero of=/dev/sda"])
async def test_denied_never_touches_the_host(command: str, tmp_path: Path) -> None:
    host = _fake()
    tk = Toolkit(HostRegistry({"gpu-node-1": host}), journal=Journal(tmp_path / "j"), policy=GPU_POLICY)
    out = await tk.dispatch("run_command", {"host": "gpu-node-1", "command": command})
    assert out["outcome"] == "denied" and out["rule_id"], out
    assert host.calls == [] and tk.journal.list() == []


async def test_ask_returns_needs_approval_and_approval_is_bound_and_single_use(tmp_path: Path) -> None:
    host = _fake()
    tk = Toolkit(HostRegistry({"gpu-node-1": host}), journal=Journal(tmp_path / "j"), policy=GPU_POLICY)
    cmd = "systemctl daemon-reload && systemctl restart sglang.service"
    out = await tk.dispatch("run_command", {"host": "gpu-node-1", "command": cmd})
    assert out["outcome"] == "needs_approval" and out["approval_id"].startswith("a_"), out
    assert out["rule_id"] == "restart-sglang" and host.calls == []
    aid = out["approval_id"]
    # unapproved id: still needs approval, nothing runs
    again = await tk.dispatch("run_command", {"host": "gpu-node-1", "command": cmd, "approval_id": aid})
    assert again["outcome"] == "needs_approval" and "not usable" in again["reason"] and host.calls == []
    tk.approvals.approve(aid)  # type: ignore[union-attr]
    # bound to the exact command: another command with this id is refused
    other = await tk.dispatch("run_command", {"host": "gpu-node-1", "command": "systemctl restart other.service",
                                              "approval_id": aid})
    assert other["outcome"] == "needs_approval" and host.calls == []


async def test_approved_restart_runs_detached_with_the_rules_probes(tmp_path: Path) -> None:
    async with embedded_node("default", load_s=2) as (alias, registry):
        tk = Toolkit(registry, journal=Journal(tmp_path / "j"), policy=GPU_POLICY)
        cmd = "systemctl daemon-reload && systemctl restart sglang.service"
        ask = await tk.dispatch("run_command", {"host": alias, "command": cmd})
        assert ask["outcome"] == "needs_approval"
        tk.approvals.approve(ask["approval_id"])  # type: ignore[union-attr]
        out = await tk.dispatch("run_command", {"host": alias, "command": cmd, "approval_id": ask["approval_id"]})
        assert out["outcome"] == "detached", out  # the rule says detach at once
        assert out["deadline_s"] == 930.0  # deadline_from: unit_timeout (TimeoutStartSec=900) + 30 s
        rec = tk.journal.get(out["job_id"])
        kinds = {p["kind"]: p for p in rec.probes}
        assert kinds["systemd_unit"]["unit"] == "sglang.service" and kinds["systemd_unit"]["not_invocation"]
        assert kinds["http"]["url"] == "http://127.0.0.1:30000/health"
        st = await tk.dispatch("job_status", {"job_id": out["job_id"], "wait_s": 1})
        assert st["readiness"] == "pending" and {p["kind"] for p in st["probes"]} == {"systemd_unit", "http"}
        reuse = await tk.dispatch("run_command", {"host": alias, "command": cmd, "approval_id": ask["approval_id"]})
        # used once: a second use is told so, with the job the first started (no new approval to ask for)
        assert reuse["outcome"] == "error" and reuse["kind"] == "approval" and "already used" in reuse["message"]
        assert reuse["job_id"] == out["job_id"] and "approval_id" not in reuse, reuse


async def test_secrets_are_redacted_in_outcomes_and_journal(tmp_path: Path) -> None:
    from agent_tools.hosts.local import LocalHost

    tk = Toolkit(HostRegistry({"local": LocalHost()}), journal=Journal(tmp_path / "j"))
    token = "hf_" + "Q" * 34
    out = await tk.dispatch("run_command", {"host": "local", "command": f"HF_TOKEN={token} sh -c 'echo $HF_TOKEN'"})
    assert out["outcome"] == "finished", out
    assert token not in json.dumps(out)
    assert token not in tk.journal.get(out["job_id"]).command


def test_policy_cli_check_explain_and_approve_flow(tmp_path: Path) -> None:
    env = dict(os.environ, AGENT_TOOLS_STATE_DIR=str(tmp_path / "state"))
    cli = [sys.executable, "-m", "agent_tools.cli"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nhosts: ['*']\nrules:\n  - id: r1\n    match: [rm]\n    decision: maybe\n")
    res = subprocess.run([*cli, "policy", "check", str(bad)], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 1 and f"{bad}:6" in res.stdout.replace("\n", ""), res.stdout
    res = subprocess.run([*cli, "policy", "explain", "gpu-node-1", "--json", "--", "ssh other 'reboot'"],
                         capture_output=True, text=True, env=env, check=False)
    assert json.loads(res.stdout)["decision"] == "deny"
    target = tmp_path / "made-by-approval"
    policy = ["--policy", str(ROOT / "policies" / "default.yaml")]
    run = [*cli, "run", "local", *policy, "--json", "--", f"touch {target}"]
    first = json.loads(subprocess.run(run, capture_output=True, text=True, env=env, check=False).stdout)
    assert first["outcome"] == "needs_approval" and not target.exists(), first
    run2 = [*cli, "run", "local", *policy, "--approve", first["approval_id"], "--json", "--", f"touch {target}"]
    second = json.loads(subprocess.run(run2, capture_output=True, text=True, env=env, check=False).stdout)
    assert second["outcome"] == "finished" and target.exists(), second
