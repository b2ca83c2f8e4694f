"""A log probe's line is an event: once seen after the start point it stays seen.

The race this guards (seen in the hicache demo): SGLang prints its ready line, the unit becomes ``active`` a
moment later. A poll in between sees the line (log probe passed, cursor moved past it) but not yet the active
unit, so readiness stays pending; the next poll reads only the lines after the cursor and must still count
the ready line, or readiness never comes.
"""

from __future__ import annotations

import json

from agent_tools.hosts.base import ExecResult
from agent_tools.hosts.function import FunctionHost
from agent_tools.probes.checks import advance, check_probes


def entry(n: int, msg: str) -> str:
    return json.dumps({"__CURSOR": f"c{n}", "MESSAGE": msg})


async def test_a_log_line_seen_once_stays_seen_after_the_cursor_moves_on() -> None:
    journal = [entry(1, "Loading weights"), entry(2, "The server is fired up and ready to roll!")]

    def handler(command: str, _stdin: bytes) -> ExecResult:
        if command.startswith("journalctl"):
            if "--after-cursor=c2" in command:
                return ExecResult(0, stdout=(entry(3, "Started sglang.service") + "\n").encode())
            return ExecResult(0, stdout=("\n".join(journal) + "\n").encode())
        if command.startswith("systemctl show"):
            state = "active" if sum(c.startswith("systemctl") for c in host.calls) > 1 else "activating"
            return ExecResult(0, stdout=f"ActiveState={state}\nSubState=running\nResult=success\n"
                                        "InvocationID=new\n".encode())
        return ExecResult(1)

    host = FunctionHost(handler)
    specs = [{"kind": "systemd_unit", "unit": "sglang.service", "not_invocation": "old"},
             {"kind": "log", "unit": "sglang.service", "pattern": "fired up and ready", "cursor": "c0"}]
    first = await check_probes(host, specs)
    assert [r.state for r in first] == ["not_yet", "passed"]  # the line came before the unit was active
    specs = advance(specs, first)
    assert specs[1]["cursor"] == "c2"
    second = await check_probes(host, specs)
    assert [r.state for r in second] == ["passed", "passed"], second
    assert "fired up" in second[1].evidence
    assert sum(c.startswith("journalctl") for c in host.calls) == 1, "a matched log probe is not read again"
