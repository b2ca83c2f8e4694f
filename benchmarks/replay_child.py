"""Replay one recorded hicache walkthrough cassette, in its own process (the replay runs its own virtual-clock
event loop and moves the process-wide wall clock, so it must not share a process with the benchmark's loop).

``python -m benchmarks.replay_child CASSETTE STATE_DIR`` prints one JSON line: ``seconds`` (wall time of
``CassetteSession.run``, imports excluded), ``recorded_s`` (the recording's span: the last event's offset),
``result`` (the walkthrough's verdict) and ``tool_calls``.
"""

from __future__ import annotations

import json
import sys
import time

from agent_tools.demo.hicache import run_walkthrough
from agent_tools.logs import configure_logging
from agent_tools.recording import CassetteSession

HOST = "gpu-node-1"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.replay_child CASSETTE STATE_DIR", file=sys.stderr)
        return 2
    configure_logging("warning")
    session = CassetteSession(argv[0], "none", state_dir=argv[1])
    assert session.cassette is not None
    recorded_s = max(float(e["t"]) for e in session.cassette.events if "t" in e)
    lines: list[str] = []
    t0 = time.perf_counter()
    res = session.run(lambda: run_walkthrough(session.toolkit, HOST, emit=lines.append))
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "recorded_s": recorded_s, "result": res.result,
                      "tool_calls": len(res.steps)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
