"""Smoke test of ``python -m benchmarks``: it runs, cleans up, and reports well-formed rows.

No timing thresholds: the numbers depend on the machine and its load; only their shape is checked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .sshd import require_real_sshd

pytestmark = pytest.mark.sshd

REPO_ROOT = Path(__file__).resolve().parent.parent


def test_quick_run_command_json() -> None:
    require_real_sshd()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "run_command", "--json"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=240, check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    assert data["mode"] == "quick"
    assert data["scenarios"] == ["run_command"]
    assert data["interrupted"] is False
    assert data["machine"]["cores"] >= 1
    assert [row["name"] for row in data["rows"]] == ["run_command", "run_command_b2b"]
    assert data["rows"][1]["target"] == "report"
    row = data["rows"][0]
    for side in (row["a"], row["b"]):
        assert side["unit"] == "ms"
        assert side["n"] == 50
        assert 0 < side["min"] <= side["median"] <= side["max"]
    assert row["ratio_of_medians"] > 0
    assert row["target"] == "<= 1.15x"
    assert row["status"] in ("met", "MISSED")


def test_agent_view_meets_its_goals() -> None:
    """Issue 14's measured goal, through the official MCP client over stdio against `agent-tools demo node`: at
    most 9 calls from the question to verified hicache, at most 2,000 result tokens, none over 600, tools/list at
    most 3,000 (tokens counted with tiktoken cl100k_base, installed with the test extra)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
    res = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "agent_view", "--json"], cwd=REPO_ROOT,
                         env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    data = json.loads(res.stdout)
    notes = "\n".join(data["notes"])
    assert "tokens tiktoken cl100k_base" in notes and "outcome verified" in notes, notes
    rows = {row["name"]: row for row in data["rows"]}
    assert list(rows) == ["agent_view_calls", "agent_view_tokens", "agent_view_max_result", "agent_view_tools_list",
                          "agent_view_tools_list_sent"]
    assert any(line.startswith("agent_view call 1: list_hosts: ") for line in notes.splitlines()), notes
    for name, row in rows.items():
        assert row["status"] == ("report" if name == "agent_view_tools_list_sent" else "met"), (row, notes)
    assert rows["agent_view_calls"]["a"]["max"] <= 9 and rows["agent_view_tokens"]["a"]["max"] <= 2000
