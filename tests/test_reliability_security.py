"""Issue 7, security: what an agent sends cannot escape the job's quoting or read another user's jobs.

One fault family of the reliability suite (its conventions: ``tests/reliability_harness.py``).
"""

from __future__ import annotations

import math
import re
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from agent_tools.jobs.manager import new_job_id

from .reliability_harness import (
    AGENT_JOBS,
    ROOT_JOBS,
    Rel,
    child_env,
    dump,
    on_host,
    toolkit_for,
)

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool


# ================================================================================================ 10. security
async def test_security(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: a host key that is unknown or changed; another user poking at job directories; guessed job ids.

    Protections: strict known_hosts checking by default (``SshHost``); job directories created under umask 077
    (0700 dirs, 0600 files); job ids from :mod:`secrets` (80 bits).
    """
    pool, name = systemd_hosts, "at-h1"
    rel.set(fault="security: unknown/changed host key, another user reading job dirs, guessable job ids", trials=4,
            checked="host_key errors by default; nothing of root's job readable by `agent`, agent's job dirs 0700 "
                    "and files 0600 and unreadable by `nobody`; ids j_ + 16 chars from 32, unique, uniform")
    cfg = pool.ssh_config.read_text()
    empty_kh = tmp_path / "known_hosts_empty"
    empty_kh.write_text("")
    other = [ln for ln in pool.known_hosts.read_text().splitlines() if ln.startswith("at-h2,")]
    changed_kh = tmp_path / "known_hosts_changed"
    h1, h2 = pool.hosts["at-h1"].address, pool.hosts["at-h2"].address
    changed_kh.write_text("".join(ln.replace(f"at-h2,{h2}", f"at-h1,{h1}") + "\n" for ln in other))
    for label, kh in (("unknown", empty_kh), ("changed", changed_kh)):
        c = tmp_path / f"ssh_config_{label}"
        c.write_text(cfg.replace(str(pool.known_hosts), str(kh)))
        async with toolkit_for(c, tmp_path / f"j-{label}.sqlite3") as tk:
            out = dump(await tk.run_command(host=name, command="echo should-not-run", budget_s=10))
            assert out["outcome"] == "error" and out["kind"] == "host_key", (label, out)
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        secret = secrets.token_hex(8)
        out = dump(await tk.run_command(host=name, command=f"echo {secret}", budget_s=10))
        assert out["outcome"] == "finished", out
        d = f"{ROOT_JOBS}/{out['job_id']}"
        peek = dump(await tk.run_command(host=f"{name}-agent", budget_s=10, command=(
            f"ls -la {ROOT_JOBS} {d}; cat {d}/stdout {d}/command; "
            f"grep -rs {secret} {ROOT_JOBS} /root; echo rc=$?")))
        assert peek["outcome"] == "finished", peek
        seen = peek["stdout"]["text"] + peek["stderr"]["text"]
        assert secret not in seen and "Permission denied" in seen, seen
        mine = dump(await tk.run_command(host=f"{name}-agent", command=f"echo agent-{secret}", budget_s=10))
        assert mine["outcome"] == "finished", mine
        ad = f"{AGENT_JOBS}/{mine['job_id']}"
        modes = (await on_host(pool, name, f"stat -c '%a %U %n' {ad} {ad}/*")).stdout.split("\n")
        for line in filter(None, modes):
            mode, owner, path = line.split(" ", 2)
            assert owner == "agent" and mode == ("700" if path == ad else "600"), line
        nob = await on_host(pool, name, f"cat {ad}/stdout; ls {ad}", user="nobody")
        assert f"agent-{secret}" not in nob.stdout and nob.returncode != 0, nob
    ids = [new_job_id() for _ in range(20000)]
    assert all(re.fullmatch(r"j_[a-z2-7]{16}", i) for i in ids) and len(set(ids)) == len(ids)
    counts = Counter(c for i in ids for c in i[2:])
    expected = len(ids) * 16 / 32
    chi2 = sum((counts.get(c, 0) - expected) ** 2 / expected for c in "abcdefghijklmnopqrstuvwxyz234567")  # base32
    assert len(counts) == 32 and chi2 < 80, (len(counts), chi2)  # 31 dof: p(chi2 > 80) < 1e-5
    bits = 16 * math.log2(len(counts))
    rel.set(job_id_entropy_bits=bits)
    assert bits >= 80
    child = await anyio.run_process([sys.executable, "-c", "from agent_tools.jobs.manager import new_job_id as n; "
                                     "print(' '.join(n() for _ in range(100)))"], env=child_env())
    assert not set(child.stdout.decode().split()) & set(ids)
