"""Issue 15, item 6: a job started with ``-F cfg`` is followed with ``agent-tools status JOB`` without ``-F``: the
journal remembers how the host was reached (config files + alias) and uses it, saying so when the config changed
since. Real OpenSSH sshd on loopback; each CLI call is its own process, as a user runs them."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import agent_tools
from agent_tools.hosts.registry import HostRegistry

from .sshd import RealSshd

REPO = Path(agent_tools.__file__).resolve().parent.parent
pytestmark = pytest.mark.sshd


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    home.mkdir()  # no ~/.ssh/config: the alias exists only in the -F file
    return {**os.environ, "PYTHONPATH": str(REPO), "HOME": str(home), "AGENT_TOOLS_STATE_DIR": str(tmp_path / "st"),
            "XDG_STATE_HOME": str(tmp_path / "xdg")}


def _cli(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent_tools.cli", *args], env={**env, "AGENT_TOOLS_SSH_CONFIG": ""},
                          cwd=cwd, capture_output=True, text=True, timeout=60)


def _meta(env: dict[str, str], job_id: str) -> dict[str, Any]:
    db = sqlite3.connect(Path(env["AGENT_TOOLS_STATE_DIR"]) / "journal.sqlite3")
    try:
        (meta,) = db.execute("SELECT meta FROM jobs WHERE job_id=?", (job_id,)).fetchone()
    finally:
        db.close()
    return dict(json.loads(meta))


def test_a_job_started_with_F_is_followed_without_it(real_sshd: RealSshd, env: dict[str, str],
                                                     tmp_path: Path) -> None:
    cfg_dir = tmp_path / "cfg"
    cfg_dir.mkdir()
    cfg = cfg_dir / "ssh_config"
    cfg.write_text(real_sshd.config_path.read_text())
    started = _cli(env, cfg_dir, "run", "-F", "ssh_config", "--budget", "0.5", "--json", real_sshd.alias, "--",
                   "sleep 2; echo done")  # a relative -F, in another directory than the later calls
    out = json.loads(started.stdout)
    assert out["outcome"] == "detached", started.stdout + started.stderr
    job = out["job_id"]
    reached = _meta(env, job)["connection"]
    assert reached["via"] == "ssh" and reached["alias"] == real_sshd.alias and reached["ssh_config"] == [str(cfg)]

    status = _cli(env, tmp_path, "status", job, "--wait", "15", "--json")  # no -F
    data = json.loads(status.stdout)
    assert (data.get("state"), data.get("exit_status")) == ("exited", 0), status.stdout + status.stderr
    assert data["new_stdout"]["text"] == "done\n"
    assert "changed" not in data["why"] and "job.connection_note" not in status.stderr

    assert _cli(env, tmp_path, "output", job).stdout == "done\n"

    # the config changes since: still followed with it, and the result says so
    cfg.write_text(cfg.read_text() + "\n# edited after the job started\n")
    again = _cli(env, tmp_path, "status", job, "--json")
    data = json.loads(again.stdout)
    assert data["state"] == "exited", again.stdout + again.stderr
    assert f"the SSH config the job was started with ({cfg}) changed since" in data["why"], data
    assert "changed since" not in again.stderr  # said once, in the result (not again as a warning on stderr)


def test_cancel_without_F_and_an_explicit_F_still_wins(real_sshd: RealSshd, env: dict[str, str],
                                                      tmp_path: Path) -> None:
    cfg = tmp_path / "a.cfg"
    cfg.write_text(real_sshd.config_path.read_text())
    out = json.loads(_cli(env, tmp_path, "run", "-F", str(cfg), "--budget", "0.5", "--json", real_sshd.alias, "--",
                          "sleep 60").stdout)
    assert out["outcome"] == "detached", out
    other = tmp_path / "b.cfg"  # the same hosts under another file: given explicitly, it is used, and said
    other.write_text(cfg.read_text())
    st = json.loads(_cli(env, tmp_path, "status", out["job_id"], "-F", str(other), "--json").stdout)
    assert st["state"] == "running" and f"following it with {other} as given" in st["why"], st
    cancel = _cli(env, tmp_path, "cancel", out["job_id"], "--grace", "1", "--json")
    res = json.loads(cancel.stdout)
    assert res["state"] == "killed" and res["survivors"] == [], cancel.stdout + cancel.stderr


def test_a_journal_without_remembered_connections_still_opens_and_follows_local_jobs(
        env: dict[str, str], tmp_path: Path) -> None:
    out = json.loads(_cli(env, tmp_path, "run", "--budget", "0.3", "--json", "local", "--", "sleep 1; echo ok").stdout)
    assert "connection" not in _meta(env, out["job_id"])  # local: nothing to remember
    db = sqlite3.connect(Path(env["AGENT_TOOLS_STATE_DIR"]) / "journal.sqlite3")
    db.execute("UPDATE jobs SET meta='{}'")  # a row written before connections were remembered
    db.commit()
    db.close()
    st = json.loads(_cli(env, tmp_path, "status", out["job_id"], "--wait", "10", "--json").stdout)
    assert (st["state"], st["new_stdout"]["text"]) == ("exited", "ok\n"), st


def test_the_remembered_config_gone_falls_back_to_the_default_and_says_so(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("AGENT_TOOLS_SSH_CONFIG", raising=False)
    gone = str(tmp_path / "deleted.cfg")
    registry = HostRegistry()
    host, note = registry.for_job("gpu1", {"via": "ssh", "alias": "gpu1", "ssh_config": [gone], "digest": "x"})
    assert host is registry.get("gpu1") and note is not None and f"({gone}) is gone" in note
    assert registry.for_job("gpu1", None) == (registry.get("gpu1"), None)  # nothing remembered: as before


def test_another_home_is_not_a_config_change(real_sshd: RealSshd, env: dict[str, str], tmp_path: Path) -> None:
    """qa15 finding 11: the config's relative ``Include`` is read under ``$HOME/.ssh``; followed with another
    ``$HOME``, the files did not change: it says so, and says nothing at all once $HOME is the launch's again."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Include agent_tools_inc/*.conf\n" + real_sshd.config_path.read_text())
    launch_home = Path(env["HOME"])
    (launch_home / ".ssh" / "agent_tools_inc").mkdir(parents=True)
    (launch_home / ".ssh" / "agent_tools_inc" / "extra.conf").write_text("# nothing for this alias\n")
    started = _cli(env, tmp_path, "run", "-F", str(cfg), "--budget", "0.5", "--json", real_sshd.alias, "--",
                   "sleep 1; echo done")
    job = json.loads(started.stdout)["job_id"]
    other = tmp_path / "other-home"
    other.mkdir()
    status = _cli({**env, "HOME": str(other)}, tmp_path, "status", job, "--wait", "15", "--json")
    data = json.loads(status.stdout)
    assert data["state"] == "exited", status.stdout + status.stderr
    assert "changed since the launch" not in data["why"], data  # was: "... changed since the launch, when it ..."
    assert (f"the SSH config the job was started with ({cfg}) did not change, but its relative Include is read "
            f"under another $HOME now ({other}, not {launch_home} as at the launch)") in data["why"], data
    same = json.loads(_cli(env, tmp_path, "status", job, "--json").stdout)
    assert "SSH config" not in same["why"], same
