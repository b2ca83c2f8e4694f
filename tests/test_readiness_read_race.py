"""A restart's first look can read the unit's properties before systemd started it and the journal after.

``systemd_unit`` readiness reads ``systemctl show`` and, when the unit is inactive, the journal, in two round
trips. A unit that never ran (``InvocationID`` empty before the restart) is inactive with no invocation until
its start job runs; when the start happens between the two reads, the journal already holds the new
invocation's first lines but no end line, and the properties are the unit's from before. Both ways of
reading that were false: a ``Type=simple`` unit that was running read ``failed`` ("the invocation ended; the
journal does not say how"), and a failing oneshot read ``ready`` ("ran to completion", from the stale
``Result=success``). Seen on the nspawn hosts under load in the CI runs of ``test_reliability_readiness.py``.

Here the two reads are sequenced by hand on a real host, so the race happens every time: properties read before
the start, the start, the journal read after the new invocation's first line.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import anyio
import pytest

from agent_tools.hosts.base import Host, run_on
from agent_tools.probes.parse import parse_systemctl_show
from agent_tools.probes.specs import SystemdUnitProbe
from agent_tools.probes.systemd import invocation_ends, judge_unit, show_command

from .reliability_harness import on_host, toolkit_for, wait_until

if TYPE_CHECKING:
    from pathlib import Path

    from tests.hosts.nspawn import HostPool

pytestmark = pytest.mark.systemd


async def _install(pool: HostPool, host: str, name: str, service: str) -> None:
    text = f"[Unit]\nDescription=agent-tools read race {name}\n[Service]\n{service}\n"
    res = await on_host(pool, host, f"systemctl stop {name} 2>/dev/null; printf '%s' {shlex.quote(text)} > "
                                    f"/etc/systemd/system/{name} && systemctl daemon-reload && "
                                    f"systemctl reset-failed {name} 2>/dev/null; true")
    assert res.returncode == 0, res.stderr


async def _props(h: Host, name: str) -> tuple[dict[str, str], float]:
    with anyio.fail_after(30):
        props = parse_systemctl_show((await run_on(h, show_command(name))).stdout.decode())
    return props, float(props.pop("AgentToolsUptime", "0") or 0)


@pytest.mark.parametrize(("name", "service", "line"), [
    ("rrace-simple.service", "Type=simple\nExecStart=/bin/bash -c 'echo race-up; sleep 30'", "race-up"),
    ("rrace-oneshot.service", "Type=oneshot\nExecStart=/bin/sh -c 'echo race-broke; sleep 3; exit 4'", "race-broke"),
])
async def test_props_before_the_start_and_journal_after_are_not_a_verdict(
        systemd_hosts: HostPool, tmp_path: Path, name: str, service: str, line: str) -> None:
    """Fault: the first look at a restart reads ``systemctl show`` before the start and the journal after the
    new invocation's first line. Protection: ``judge_unit`` gives no verdict from properties that name no
    invocation while the journal has not said how the new one ended (``JOURNAL_GRACE_S``); it read the running
    simple unit as failed and the failing oneshot as ran to completion."""
    pool, host = systemd_hosts, "at-h2"
    await _install(pool, host, name, service)
    async with toolkit_for(pool.ssh_config, tmp_path / "journal.sqlite3") as tk:
        h = tk.hosts.get(host)
        before, uptime = await _props(h, name)
        assert before["ActiveState"] == "inactive" and not before.get("InvocationID"), before
        with anyio.fail_after(30):
            cursor = (await run_on(h, "journalctl -n 0 --show-cursor --no-pager | sed -n 's/^-- cursor: //p'")
                      ).stdout.decode().strip()
        probe = SystemdUnitProbe(unit=name, not_invocation=before.get("InvocationID") or None,
                                 journal_cursor=cursor or None)
        await on_host(pool, host, f"systemctl start --no-block {name}")

        async def logged() -> bool:
            res = await on_host(pool, host, f"journalctl --sync; journalctl -u {name} -o cat --no-pager")
            return line in res.stdout
        await wait_until(logged, 30, f"{name}'s first line in the journal")
        with anyio.fail_after(30):
            ends = await invocation_ends(h, name, cursor=probe.journal_cursor, not_invocation=probe.not_invocation)
        assert ends.order and ends.how.get(ends.order[-1]) is None, ends  # started, not ended
        first = judge_unit(probe, {}, dict(before), uptime_s=uptime, now=1e6, ends=ends)
        assert first.state == "not_yet", (first.state, first.evidence)

        # what the probe says on the unit as it is now: the simple unit runs, the oneshot fails
        if name.startswith("rrace-oneshot"):
            async def failed() -> bool:
                return (await on_host(pool, host, f"systemctl is-failed {name}")).stdout.strip() == "failed"
            await wait_until(failed, 30, f"{name} failed on the host")
        now_props, now_up = await _props(h, name)
        with anyio.fail_after(30):
            ends = await invocation_ends(h, name, cursor=probe.journal_cursor, not_invocation=probe.not_invocation)
        verdict = judge_unit(probe, {}, now_props, uptime_s=now_up, now=1e6, ends=ends)
        want = "failed" if name.startswith("rrace-oneshot") else "not_yet"  # not_yet: inside its settle window
        assert verdict.state == want, (verdict.state, verdict.evidence)
    await on_host(pool, host, f"systemctl stop {name}; systemctl reset-failed {name} 2>/dev/null; true")
