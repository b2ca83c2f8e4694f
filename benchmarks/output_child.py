"""One side of the large-output scenario, in its own process so its peak RSS can be measured alone.

``python -m benchmarks.output_child wrap SIDE CONFIG ALIAS FILE JOBS_DIR STATE_DIR`` starts
``python -m benchmarks.output_child run SIDE ...`` as its only child, waits for it, and prints the child's
JSON result plus ``maxrss_kb`` = ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` (the peak resident set of
that one child, in KiB on Linux). ``SIDE`` is:

* ``agent``: ``JobRunner.run(host, "cat FILE")`` over :class:`~agent_tools.hosts.ssh.SshHost`. The output
  stays on the host (the job's ``stdout`` file); the client gets exit status + head/tail + byte count. The
  time is connect-excluded: from the call until the ``finished`` outcome.
* ``baseline``: asyncssh ``create_process("cat FILE")``, every stdout chunk read and dropped, until exit.
  The time is from opening the channel to the exit status.

Both connect first (untimed), so the measurement is "on an open connection".
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import anyio
import asyncssh

from agent_tools.hosts.ssh import SshHost, SshSettings
from agent_tools.jobs.journal import Journal
from agent_tools.jobs.manager import JobRunner
from agent_tools.logs import configure_logging
from agent_tools.outcomes import Finished


async def _agent(config: str, alias: str, path: str, jobs_dir: str, state_dir: str) -> dict[str, object]:
    host = SshHost(SshSettings(alias, config_paths=[config]))
    journal = Journal(Path(state_dir) / "journal.sqlite3")
    runner = JobRunner(journal, jobs_dir=jobs_dir)
    try:
        await host.connection()
        t0 = time.perf_counter()
        out = await runner.run(host, f"cat {path}", budget_s=600)
        seconds = time.perf_counter() - t0
        if not isinstance(out, Finished) or out.exit_status != 0:
            raise RuntimeError(f"run_command did not finish cleanly: {out.model_dump_json()[:500]}")
        return {"seconds": seconds, "bytes": out.stdout.total_bytes, "job_id": out.job_id,
                "shown_chars": len(out.stdout.text)}
    finally:
        await host.aclose()
        journal.close()


async def _baseline(config: str, alias: str, path: str) -> dict[str, object]:
    async with asyncssh.connect(alias, config=[config]) as conn:
        t0 = time.perf_counter()
        proc = await conn.create_process(f"cat {path}", encoding=None)
        total = 0
        while chunk := await proc.stdout.read(65536):
            total += len(chunk)
        await proc.wait()
        seconds = time.perf_counter() - t0
        if proc.exit_status != 0:
            raise RuntimeError(f"cat exited with {proc.exit_status}")
        return {"seconds": seconds, "bytes": total}


def _run(side: str, args: list[str]) -> int:
    config, alias, path, jobs_dir, state_dir = args
    configure_logging("warning")
    if side == "agent":
        result = anyio.run(_agent, config, alias, path, jobs_dir, state_dir)
    elif side == "baseline":
        result = anyio.run(_baseline, config, alias, path)
    else:
        raise SystemExit(f"unknown side {side!r}")
    print(json.dumps(result))
    return 0


def _wrap(side: str, args: list[str]) -> int:
    child = subprocess.run([sys.executable, "-m", "benchmarks.output_child", "run", side, *args],
                           capture_output=True, text=True, check=False)
    if child.returncode != 0:
        sys.stderr.write(child.stderr[-4000:])
        return child.returncode or 1
    result = json.loads(child.stdout.strip().splitlines()[-1])
    result["maxrss_kb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(json.dumps(result))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 7 or argv[0] not in ("wrap", "run"):
        print("usage: python -m benchmarks.output_child wrap|run agent|baseline CONFIG ALIAS FILE JOBS_DIR "
              "STATE_DIR", file=sys.stderr)
        return 2
    return _wrap(argv[1], argv[2:]) if argv[0] == "wrap" else _run(argv[1], argv[2:])


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
