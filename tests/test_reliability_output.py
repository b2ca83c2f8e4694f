"""Issue 7, output faults: floods and bytes that are not UTF-8.

One fault family of the reliability suite (its conventions: ``tests/reliability_harness.py``).
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from agent_tools.output import clean_text

from .reliability_harness import (
    ROOT_JOBS,
    Rel,
    bounded,
    child_env,
    on_host,
    read_all,
    same,
    toolkit_for,
)

if TYPE_CHECKING:
    from tests.hosts.nspawn import HostPool


# ================================================================================================ 8. floods
FLOOD = r'''
import json, resource, sys
import anyio
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

async def main() -> None:
    cfg = json.loads(sys.argv[1])
    res = {}
    async with Toolkit(HostRegistry(ssh_config=[cfg["ssh_config"]]), journal=Journal(cfg["journal"])) as tk:
        for tag, cmd in cfg["cases"].items():
            out = (await tk.run_command(host=cfg["host"], command=cmd, budget_s=120)).model_dump(mode="json")
            pages = []
            if out.get("job_id"):
                total = out["stdout"]["total_bytes"]
                for off in sorted({0, total // 2, max(0, total - 5000)}):
                    p = (await tk.job_output(job_id=out["job_id"], offset=off, limit=1 << 20)).model_dump()
                    pages.append({k: p.get(k) for k in ("offset", "next_offset", "total_bytes", "eof")})
            res[tag] = {"outcome": out["outcome"], "job_id": out.get("job_id"), "exit": out.get("exit_status"),
                        "total": out.get("stdout", {}).get("total_bytes"), "text": out.get("stdout", {}).get("text"),
                        "pages": pages}
    res["self_maxrss_kib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(res))

anyio.run(main)
'''

GEN_BAD = ("import sys; w=sys.stdout.buffer.write\n"
           "for i in range(2000):\n"
           "    w(bytes(range(256)) + 'é€😀 ünïcödé\\n'.encode() + b'\\x1b[31mred\\x1b[0m\\r 10%\\r100%\\n')")


def repeated_sha256(byte: bytes, n: int) -> str:
    """sha256 of ``byte * n`` without holding it in memory."""
    h = hashlib.sha256()
    chunk = byte * (1 << 20)
    for _ in range(n >> 20):
        h.update(chunk)
    h.update(byte * (n & ((1 << 20) - 1)))
    return h.hexdigest()


def _bad_bytes() -> bytes:
    out = bytearray()
    for _ in range(2000):
        out += bytes(range(256)) + "é€😀 ünïcödé\n".encode() + b"\x1b[31mred\x1b[0m\r 10%\r100%\n"
    return bytes(out)


async def test_floods_and_bad_bytes(systemd_hosts: HostPool, tmp_path: Path, rel: Rel) -> None:
    """Fault: 1 GiB of output, NUL and invalid UTF-8, ANSI/CR progress bars, a 100 MB line without newline.

    Protections: all bytes stay in files on the host; the controller only ever receives head + tail views and
    bounded pages (``jobs/scripts.py`` views, ``JobRunner.job_output``), so its memory is bounded; byte counts
    come from the host; pages never split a UTF-8 character.
    """
    pool, name = systemd_hosts, "at-h2"
    gib = 1 << 30
    line_bytes = 100_000_000
    rel.set(fault="output floods and bad bytes (1 GiB, NUL/invalid UTF-8, ANSI/CR bars, 100 MB line)", trials=4,
            checked="controller peak RSS < 200 MB (RUSAGE_CHILDREN of a wrapper), exact byte counts, sha256 of the "
                    "raw bytes on the host, pages concatenate to the cleaned text")
    (tmp_path / "gen_bad.py").write_text(GEN_BAD)
    pool.install_file(name, tmp_path / "gen_bad.py", "/opt/rel/gen_bad.py")
    cases = {
        "gib": f"head -c {gib} /dev/zero",
        "bad": "python3 /opt/rel/gen_bad.py",
        "bars": "for i in $(seq 1 100); do printf '\\r[%-50s] %3d%%' $(printf '#%.0s' $(seq 1 $((i/2+1)))) $i; "
                "done; printf '\\n'",
        "line": f"head -c {line_bytes} /dev/zero | tr '\\000' x",
        "utf8": "python3 -c \"import sys; sys.stdout.write('é€😀\\\\n' * 20000)\"",
    }
    (tmp_path / "flood.py").write_text(FLOOD)
    cfg = {"ssh_config": str(pool.ssh_config), "journal": str(tmp_path / "journal.sqlite3"), "host": name,
           "cases": cases}
    wrapper = ("import resource, subprocess, sys; r = subprocess.run(sys.argv[1:], capture_output=True); "
               "sys.stderr.buffer.write(r.stderr); sys.stdout.buffer.write(r.stdout); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    proc = await bounded(rel, anyio.run_process(
        [sys.executable, "-c", wrapper, sys.executable, str(tmp_path / "flood.py"), json.dumps(cfg)],
        env=child_env(), check=False), 300, "flood controller")
    lines = proc.stdout.decode().strip().splitlines()
    assert len(lines) >= 2, proc.stderr.decode()[-3000:]
    res = json.loads(lines[-2])
    peak_mib = int(lines[-1]) / 1024
    rel.set(controller_peak_rss_mib=round(peak_mib, 1))
    assert peak_mib < 200, f"controller peak RSS {peak_mib:.0f} MiB"
    bad = _bad_bytes()
    want = {"gib": (gib, repeated_sha256(b"\0", gib)), "bad": (len(bad), hashlib.sha256(bad).hexdigest()),
            "line": (line_bytes, repeated_sha256(b"x", line_bytes))}
    lost_bytes = 0
    for tag, (size, digest) in want.items():
        r = res[tag]
        assert (r["outcome"], r["exit"]) == ("finished", 0), (tag, r)
        assert r["total"] == size, (tag, r["total"], size)
        for p in r["pages"]:
            assert p["total_bytes"] == size and p["next_offset"] <= size, (tag, p)
        got = (await on_host(pool, name, f"sha256sum {ROOT_JOBS}/{r['job_id']}/stdout; "
                                         f"wc -c < {ROOT_JOBS}/{r['job_id']}/stdout")).stdout.split()
        lost_bytes += abs(size - int(got[-1]))
        assert got[0] == digest, f"{tag}: raw bytes differ on the host"
    assert "\\0" in res["bad"]["text"] and "\x1b[" not in res["bad"]["text"] and "\ufffd" in res["bad"]["text"]
    assert res["bars"]["text"].strip().endswith("100%") and "\r" not in res["bars"]["text"], res["bars"]
    rel.add("lost_bytes", lost_bytes)
    # pages concatenate to exactly the cleaned whole: page size 9997 cuts "é€😀\n" (10 bytes) inside the emoji
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        text, total = await read_all(rel, tk, res["bad"]["job_id"], limit=99_999)
        assert total == len(bad)
        same(text, clean_text(bad), "paged text of the bad bytes")
        text, total = await read_all(rel, tk, res["utf8"]["job_id"], limit=9997)
        assert total == 200_000
        same(text, "é€😀\n" * 20_000, "paged UTF-8 text (a character split across two pages?)")
    await on_host(pool, name, f"rm -rf {ROOT_JOBS}/{res['gib']['job_id']} {ROOT_JOBS}/{res['line']['job_id']}")
