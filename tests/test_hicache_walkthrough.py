"""Issue 3: the hicache walkthrough on the embedded simulated GPU node (in-process asyncssh server)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_tools.demo.hicache import add_hicache_flags, run_walkthrough
from agent_tools.demo.node import embedded_node
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit


def test_flags_are_appended_to_a_continued_execstart() -> None:
    unit = "[Service]\nExecStart=/usr/bin/python3 -m sglang \\\n    --tp 8 \\\n    --port 30000\nRestart=no\n"
    out = add_hicache_flags(unit)
    assert "    --port 30000 \\\n    --enable-hierarchical-cache --hicache-ratio 2.0 --hicache-write-policy " \
           "write_through --hicache-io-backend kernel\nRestart=no\n" in out
    with pytest.raises(ValueError, match="already has every flag"):
        add_hicache_flags(out)


@pytest.mark.parametrize(("profile", "expected"), [("default", "verified"), ("small_ram", "rolled_back")])
async def test_walkthrough_on_embedded_node(profile: str, expected: str, tmp_path: Path) -> None:
    lines: list[str] = []
    async with embedded_node(profile, load_s=2) as (alias, registry):
        tk = Toolkit(registry, journal=Journal(tmp_path / "j.sqlite3"))
        res = await run_walkthrough(tk, alias, emit=lines.append)
    assert res.result == expected, "\n".join(lines)
    tools = [s["tool"] for s in res.steps]
    assert tools[:3] == ["gpu_memory", "host_memory", "service_status"]
    restart = next(s for s in res.steps if s["tool"] == "restart_service")["result"]
    assert restart["outcome"] == "detached" and restart["deadline_s"] == 930.0  # TimeoutStartSec=900 + 30
    if expected == "verified":
        assert "enable_hierarchical_cache=True" in res.summary
    else:
        assert "restore_file" in tools and "Not enough host memory" in "\n".join(lines)
        assert tools.count("restart_service") == 2


def test_the_estimate_speaks_gib_throughout() -> None:
    from agent_tools.demo.hicache import HicacheFit

    text = HicacheFit(40 * 2**30, 2, 2.0, 160 * 2**30, 165 * 2**30).summary()
    assert "GiB per rank" in text and "160.0 GiB host RAM" in text and "available 165.0 GiB − 10 GiB" in text
    assert " GB" not in text and "does NOT fit" in text
