"""A log probe's line is an event: once seen after the start point it stays seen, for as long as the unit is
in the same invocation.

The race this guards (seen in the hicache demo): SGLang prints its ready line, the unit becomes ``active`` a
moment later. The log probe is read once the unit is in its new invocation (``activating`` counts: only that
invocation's lines are read, never the old process's), so a read finds the line, moves the cursor past it and
passes; the next polls read only the lines after the cursor and must still count the ready line, or readiness
never comes.
A new invocation (systemd restarted the unit after a crash) drops the line: it was the dead process's.
"""

from __future__ import annotations

import json

from agent_tools.hosts.base import ExecResult
from agent_tools.probes.checks import advance, check_probes
from agent_tools.testing import FunctionHost


def entry(n: int, msg: str) -> str:
    return json.dumps({"__CURSOR": f"c{n}", "MESSAGE": msg})


async def test_a_log_line_seen_once_stays_seen_after_the_cursor_moves_on() -> None:
    journal = [entry(1, "Loading weights"), entry(2, "The server is fired up and ready to roll!")]
    invocation = {"id": "new"}

    def handler(command: str, _stdin: bytes) -> ExecResult:
        if command.startswith("journalctl"):
            if "--after-cursor=c2" in command:
                return ExecResult(0, stdout=(entry(3, "Started sglang.service") + "\n").encode())
            return ExecResult(0, stdout=("\n".join(journal) + "\n").encode())
        if command.startswith("systemctl show"):
            state = "active" if sum(c.startswith("systemctl") for c in host.calls) > 1 else "activating"
            return ExecResult(0, stdout=f"ActiveState={state}\nSubState=running\nResult=success\nType=notify\n"
                                        f"InvocationID={invocation['id']}\n".encode())
        return ExecResult(1)

    host = FunctionHost(handler)
    specs = [{"kind": "systemd_unit", "unit": "sglang.service", "not_invocation": "old"},
             {"kind": "log", "unit": "sglang.service", "pattern": "fired up and ready", "cursor": "c0"}]
    invocation["id"] = "old"  # the restart has not begun: the log is not read (its lines would be the old process's)
    early = await check_probes(host, specs)
    assert [r.state for r in early] == ["not_yet", "not_yet"] and "not checked yet" in early[1].evidence
    assert not any(c.startswith("journalctl") for c in host.calls)
    invocation["id"] = "new"
    host.calls.clear()
    first = await check_probes(host, specs)
    # activating in its new invocation: the log is read (that invocation's lines only: the load's progress), and
    # the ready line, printed a moment before the unit turns active, is seen
    assert [r.state for r in first] == ["not_yet", "passed"], first
    specs = advance(specs, first)
    second = await check_probes(host, specs)
    assert [r.state for r in second] == ["passed", "passed"], second  # the line came before the unit was active
    specs = advance(specs, second)
    assert specs[1]["cursor"] == "c2"
    third = await check_probes(host, specs)
    assert [r.state for r in third] == ["passed", "passed"], third
    assert "fired up" in third[1].evidence
    assert sum(c.startswith("journalctl") for c in host.calls) == 1, "a matched log probe is not read again"

    invocation["id"] = "after-crash"  # systemd restarted it: the line seen was the old process's
    specs = advance(specs, third)
    fourth = await check_probes(host, [{"kind": "systemd_unit", "unit": "sglang.service", "not_invocation": "old"},
                                       specs[1]])
    assert [r.state for r in fourth] == ["passed", "not_yet"], fourth
