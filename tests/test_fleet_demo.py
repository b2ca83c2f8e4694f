"""Issue 18: ``agent-tools demo fleet`` end to end (dev server, embedded nodes, a worker SIGKILLed mid-wave and
replaced), as a person runs it, on a small fleet. Needs the temporal extra (skipped without it unless
``AGENT_TOOLS_REQUIRE_TEMPORAL=1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

if os.environ.get("AGENT_TOOLS_REQUIRE_TEMPORAL") != "1":
    pytest.importorskip("temporalio")

pytestmark = pytest.mark.temporal


def test_demo_fleet_verifies_all_but_the_small_node_and_duplicates_no_restart() -> None:
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "demo", "fleet", "--hosts", "4", "--load-s", "3",
                          "--json"], capture_output=True, text=True, timeout=240, check=False)
    assert res.returncode == 0, (res.stdout[-2000:], res.stderr[-3000:])
    summary = json.loads(res.stdout)
    assert summary["ok"] is True
    assert (summary["verified"], summary["refused"], summary["duplicated_restarts"]) == (3, 1, 0)
    assert summary["line"].startswith("3 verified, 1 refused at pre-check, 0 duplicated restarts")
    assert any(e.startswith("SIGKILL worker 1") for e in summary["events"]), summary["events"]
    (refused,) = [h for h in summary["status"]["hosts"].values() if h["state"] == "refused"]
    assert "GiB of host RAM" in refused["note"] and " GB" not in refused["note"], refused  # one unit throughout
    assert not res.stderr.endswith("│") and res.stderr.rstrip(" ").endswith("\n"), res.stderr[-300:]
    reattached = [r for h in summary["status"]["hosts"].values() for r in h.get("restarts", [])
                  if r["reattached"]]
    assert reattached, "the killed worker's restart was followed to its end by the new worker"
