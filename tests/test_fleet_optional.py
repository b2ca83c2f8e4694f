"""Issue 18: the Temporal extra is optional: the core and the CLI import and run without temporalio, and the
fleet commands say which extra they need."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# temporalio made unimportable for the child interpreter, as on an install without the extra
_BLOCK = """
import importlib.abc, sys
class _NoTemporal(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "temporalio" or name.startswith("temporalio."):
            raise ImportError("No module named 'temporalio' (blocked by the test)")
        return None
sys.meta_path.insert(0, _NoTemporal())
"""


def _child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK + code], capture_output=True, text=True, timeout=120)


def test_core_and_cli_import_without_temporalio() -> None:
    res = _child("import agent_tools.cli, agent_tools.adapters.mcp_server, agent_tools.tools.toolkit\n"
                 "import agent_tools.demo.hicache, agent_tools.demo.node, agent_tools.fleet.model\n"
                 "print(sorted(m for m in sys.modules if m.startswith('temporalio')))")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def test_fleet_commands_name_the_extra_they_need() -> None:
    res = _child("import sys\nfrom agent_tools.cli import app\n"
                 "sys.argv = ['agent-tools', 'rollout', 'status', 'r1', '--temporal', '127.0.0.1:1']\napp()")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "pip install 'agent-tools[temporal]'" in res.stderr


def test_rollout_hosts_may_be_globs_over_the_ssh_config(tmp_path: Path) -> None:
    from agent_tools.cli_fleet import expand_hosts

    config = tmp_path / "ssh_config"
    config.write_text("Host gpu-b gpu-a\n  HostName 127.0.0.1\nHost cpu-c\n  HostName 127.0.0.1\nHost *\n  User x\n")
    assert expand_hosts(["gpu-*", "cpu-c", "gpu-a"], [str(config)]) == ["gpu-a", "gpu-b", "cpu-c"]
    assert expand_hosts(["db-1"], [str(config)]) == ["db-1"]  # a plain alias is taken as given
    with pytest.raises(ValueError, match="matches no Host alias"):
        expand_hosts(["dgx-*"], [str(config)])


def test_demo_node_runs_under_the_alias_given(tmp_path: Path) -> None:
    """Several ``demo node --alias NAME`` processes form a fleet: each node's SSH config names it by its alias."""
    import json
    import signal

    node = subprocess.Popen([sys.executable, "-m", "agent_tools.cli", "demo", "node", "--json", "--load-s", "0.2",
                             "--alias", "n7"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert node.stdout is not None
        facts = json.loads(node.stdout.readline())
        assert facts["alias"] == "n7"
        assert "Host n7\n" in Path(facts["ssh_config"]).read_text()
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(timeout=60)
    bad = subprocess.run([sys.executable, "-m", "agent_tools.cli", "demo", "node", "--alias", "a b\nHost *"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a plain host name" in bad.stderr, bad.stderr


def test_status_table_keeps_one_line_per_host_at_80_columns_and_piped_live_output_ends_with_a_newline() -> None:
    import io

    from rich.console import Console

    from agent_tools.cli_fleet import live_view, status_table

    note = "not verified: /get_server_info (status 200): " + "; ".join(
        f"hicache_field_{i} expected 2.0, it shows nothing" for i in range(6))
    st = {"phase": "done", "wave": 0, "waves": 1, "failures": 1, "failure_budget": 0, "counts": {"failed": 2},
          "hosts": {"n1": {"state": "failed", "wave": 0, "note": note, "job_id": "j_abcdefghijklmnop"},
                    "n2": {"state": "failed", "wave": 0, "note": "line one\nline two"}}}
    out = io.StringIO()
    Console(file=out, width=80, force_terminal=False, color_system=None).print(status_table(st))
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if " n1 " in line or " n2 " in line]
    assert len(rows) == 2, out.getvalue()  # one line each: the note is cut, not wrapped
    assert rows[0].rstrip(" │|").endswith("…") and "line one line two" in rows[1]
    piped = io.StringIO()
    with live_view(Console(file=piped, width=80, force_terminal=False)) as live:
        live.update("RESULT-LESS TABLE", refresh=True)
    assert piped.getvalue().endswith("RESULT-LESS TABLE\n"), repr(piped.getvalue())


def test_no_dsa_deprecation_warning_on_cli_calls() -> None:
    """asyncssh names DSA key types at import and cryptography warns about each (ten lines of
    ``CryptographyDeprecationWarning: DSA is deprecated`` on every CLI call: qa18 finding 17); agent_tools imports
    asyncssh through :mod:`agent_tools._asyncssh`, which ignores exactly that warning while asyncssh loads. A fleet
    command is checked in tests/test_fleet_rollout_truth.py."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS",)}
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "--help"], capture_output=True, text=True,
                         timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "DSA" not in res.stderr and "Warning" not in res.stderr, res.stderr
    # the filter is exactly that warning, while asyncssh loads: any other warning still shows
    res = subprocess.run([sys.executable, "-c", "import warnings, agent_tools._asyncssh\n"
                          "warnings.warn('DSA is deprecated and then some', DeprecationWarning)"],
                         capture_output=True, text=True, timeout=60, env={**env, "PYTHONWARNINGS": "default"})
    assert "DSA is deprecated and then some" in res.stderr, res.stderr
