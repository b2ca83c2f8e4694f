"""Issue 17, items 1-2 on the real systemd test hosts (Debian bookworm, systemd-nspawn): a pipe-fed ``python3 -i``
and a ``tty`` job (util-linux ``script``, ``env --default-signal``) as an unprivileged user over SSH."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd
HOST = "at-h1-agent"


@pytest.fixture
async def tk(systemd_hosts: HostPool, tmp_path: Path) -> AsyncIterator[Toolkit]:
    toolkit = Toolkit(HostRegistry(ssh_config=[str(systemd_hosts.ssh_config)]),
                      journal=Journal(tmp_path / "journal.sqlite3"))
    try:
        yield toolkit
    finally:
        for rec in toolkit.journal.list():
            if rec.state == "running":
                await toolkit.dispatch("job_cancel", {"job_id": rec.job_id, "grace_s": 1})
        await toolkit.aclose()


def _text(view: Any) -> str:
    return "" if view is None else view if isinstance(view, str) else str(view.get("text", ""))


async def test_pipe_and_tty_jobs_on_a_systemd_host(tk: Toolkit) -> None:
    d = await tk.dispatch("run_command", {"host": HOST, "command": "python3 -i", "stdin": "pipe", "budget_s": 2})
    assert d["outcome"] == "detached", d
    job = d["job_id"]
    await tk.dispatch("job_input", {"job_id": job, "text": "import os"})
    a = await tk.dispatch("job_input", {"job_id": job, "text": "print(os.getuid() != 0, 6 * 7)"})
    assert _text(a.get("new_stdout")) == "True 42\n", a
    end = await tk.dispatch("job_input", {"job_id": job, "text": "", "eof": True})
    assert end["input"] == "written", end
    st = await tk.dispatch("job_status", {"job_id": job, "wait_s": 10})
    assert st["state"] == "exited" and st["exit_status"] == 0, st

    t = await tk.dispatch("run_command", {"host": HOST, "stdin": "tty", "budget_s": 10,
                                          "command": "test -t 0 && echo tty-yes; stty size; top -b -n1 | head -1"})
    assert t["outcome"] == "finished" and t["exit_status"] == 0, t
    out = _text(t["stdout"])
    assert "tty-yes" in out and "24 80" in out and "load average" in out, out
    s = await tk.dispatch("run_command", {"host": HOST, "stdin": "tty", "budget_s": 1, "command": "sleep 600"})
    assert s["outcome"] == "detached", s
    await tk.dispatch("job_input", {"job_id": s["job_id"], "text": "\x03"})
    st = await tk.dispatch("job_status", {"job_id": s["job_id"], "wait_s": 10})
    assert st["state"] == "exited" and st["exit_status"] == 130, st
