#!/usr/bin/env python3
"""Run the reliability-under-faults suite (``tests/test_reliability*.py``) and write ``docs/reliability.md``.

Usage (as root, from the repository root; the suite needs the real sshd and the systemd test hosts)::

    python3 scripts/reliability_report.py                  # normal mode (~2 min)
    python3 scripts/reliability_report.py --long           # AGENT_TOOLS_LONG=1: more trials, longer jobs
    python3 scripts/reliability_report.py --from-json F    # re-render a report from an earlier run's results

This file is also the pytest plugin that collects the results: run with ``-p reliability_report`` (the
directory of this file on ``PYTHONPATH``) and ``AGENT_TOOLS_RELIABILITY_JSON=FILE``, it appends one JSON line
per test (outcome, duration, and the user properties each fault test records: ``fault``, ``trials``,
``checked``, ``lost_jobs``, ``lost_bytes``, ``survivors``, ``hangs``, and test-specific measurements).
"""

from __future__ import annotations

import argparse
import ast
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: the fault suite: every ``tests/test_reliability*.py`` module (one per fault family), in name order
SUITE = sorted((REPO / "tests").glob("test_reliability*.py"))
JSON_ENV = "AGENT_TOOLS_RELIABILITY_JSON"
COUNTERS = ("lost_jobs", "lost_bytes", "survivors", "hangs")
FIXED = {"fault", "trials", "checked", *COUNTERS}


# ------------------------------------------------------------------------------------------ pytest plugin
def pytest_runtest_logreport(report: Any) -> None:
    """Append one JSON line per test phase worth reporting (the call, or a failed setup/teardown)."""
    path = os.environ.get(JSON_ENV)
    if not path or (report.when != "call" and not report.failed):
        return
    rec = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome,
           "duration_s": round(float(report.duration), 2),
           "properties": {str(k): v for k, v in report.user_properties},
           "error": _short(str(report.longrepr)) if report.failed else ""}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(rec, default=str) + "\n")


def _short(text: str, limit: int = 1200) -> str:
    lines = [ln for ln in text.splitlines() if ln.startswith("E ")] or text.splitlines()[-15:]
    out = "\n".join(lines)
    return out[-limit:]


# ------------------------------------------------------------------------------------------ report
def docstrings() -> dict[str, str]:
    """Test function name -> its docstring (each names the fault and the protection it covers)."""
    out: dict[str, str] = {}
    for module in SUITE:
        for node in ast.parse(module.read_text()).body:
            if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef) and node.name.startswith("test_"):
                out[node.name] = ast.get_docstring(node) or ""
    return out


def load(path: Path) -> list[dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        prev = merged.get(rec["nodeid"])
        if prev is None or rec["when"] == "call" or rec["outcome"] == "failed":
            if prev is not None and prev["outcome"] == "failed" and rec["outcome"] != "failed":
                continue
            rec["properties"] = {**(prev or {}).get("properties", {}), **rec["properties"]}
            merged[rec["nodeid"]] = rec
    return list(merged.values())


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 0


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render(results: list[dict[str, Any]], *, mode: str, command: str, wall_s: float | None) -> str:
    docs = docstrings()
    order = list(docs)
    results.sort(key=lambda r: order.index(_name(r)) if _name(r) in order else len(order))
    totals = dict.fromkeys(COUNTERS, 0)
    tests_s = sum(float(r["duration_s"]) for r in results)
    passed = sum(1 for r in results if r["outcome"] == "passed")
    rows = []
    for i, r in enumerate(results, 1):
        p = r["properties"]
        for k in COUNTERS:
            totals[k] += _int(p.get(k))
        outcome = {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}.get(r["outcome"], r["outcome"])
        rows.append(f"| {i} | {_cell(_title(r))} | {_cell(p.get('trials', '?'))} | "
                    f"{_cell(p.get('checked', ''))} | **{outcome}** | "
                    + " | ".join(str(_int(p.get(k))) for k in COUNTERS) + f" | {r['duration_s']:.1f} |")
    out = [
        "# Reliability under faults",
        "",
        "Nothing an agent starts may be lost or misreported. Each row is one fault injected into real parts —",
        "the nspawn systemd test hosts (real systemd + OpenSSH, each in its own network namespace) or a private",
        "OpenSSH sshd on loopback — with the outcome checked against ground truth read on the host itself.",
        "",
        f"Generated by `scripts/reliability_report.py` on {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, "
        f"{mode} mode, Python {platform.python_version()}, {platform.system()} {platform.release()} "
        f"({os.cpu_count()} CPUs). Command: `{command}`; the fault tests took {tests_s:.0f} s"
        + (f" (wall time {wall_s:.0f} s, including booting or waiting for the shared test hosts)." if wall_s else "."),
        "",
        "| # | fault | trials | what was checked | outcome | lost jobs | lost bytes | survivors | hangs | s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"**Totals:** {passed}/{len(results)} faults passed; lost jobs **{totals['lost_jobs']}**, lost bytes "
        f"**{totals['lost_bytes']}**, surviving processes after cancel **{totals['survivors']}**, hangs "
        f"**{totals['hangs']}**.",
        "",
        "## Per fault: the protection it covers, and what was measured",
        "",
    ]
    for i, r in enumerate(results, 1):
        p = r["properties"]
        extra = {k: v for k, v in p.items() if k not in FIXED}
        out += [f"### {i}. {_title(r)}", "", f"`{r['nodeid']}` — {r['outcome']}, "
                f"{r['duration_s']:.1f} s", "", docs.get(_name(r), "").strip(), ""]
        if extra:
            out += ["Measured: " + "; ".join(f"`{k}` = {v}" for k, v in extra.items()), ""]
        if r["error"]:
            out += ["```", r["error"], "```", ""]
    return "\n".join(out).rstrip() + "\n"


def _title(r: dict[str, Any]) -> str:
    """The fault's name, with the round of a repeated test (``test_x[round_2]`` -> ``(round 3)``)."""
    title = str(r["properties"].get("fault", _name(r)))
    param = str(r["nodeid"]).rpartition("[")[2].rstrip("]") if str(r["nodeid"]).endswith("]") else ""
    return f"{title} (round {int(param) + 1})" if param.isdigit() and param != "0" else title


def _name(r: dict[str, Any]) -> str:
    return str(r["nodeid"]).split("::")[-1].split("[")[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--long", action="store_true", help="long variants (AGENT_TOOLS_LONG=1)")
    ap.add_argument("--output", type=Path, default=REPO / "docs" / "reliability.md")
    ap.add_argument("--json", type=Path, default=None, help="keep the per-test JSON lines here")
    ap.add_argument("--from-json", type=Path, default=None, help="render from an earlier run's JSON lines")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (e.g. -k partition)")
    args = ap.parse_args(argv)
    mode = "long" if args.long else "normal"
    if args.from_json is not None:
        results = load(args.from_json)
        args.output.write_text(render(results, mode=mode, command=f"--from-json {args.from_json}", wall_s=None))
        sys.stdout.write(f"wrote {args.output} ({len(results)} faults)\n")
        return 0 if results and all(r["outcome"] == "passed" for r in results) else 1
    json_path = args.json or Path(tempfile.mkstemp(prefix="reliability-", suffix=".jsonl")[1])
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text("")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))
    env[JSON_ENV] = str(json_path)
    if args.long:
        env["AGENT_TOOLS_LONG"] = "1"
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "reliability_report",
           *(str(m.relative_to(REPO)) for m in SUITE), *args.pytest_args]
    started = dt.datetime.now(dt.UTC)
    proc = subprocess.run(cmd, cwd=REPO, env=env, check=False)
    wall_s = (dt.datetime.now(dt.UTC) - started).total_seconds()
    results = load(json_path)
    shown = ("AGENT_TOOLS_LONG=1 " if args.long else "") + "python3 -m pytest " + " ".join(cmd[3:])
    args.output.write_text(render(results, mode=mode, command=shown, wall_s=wall_s))
    if args.json is None:
        json_path.unlink()
    sys.stdout.write(f"wrote {args.output} ({len(results)} faults, pytest exit {proc.returncode})\n")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
