"""``agent-tools import``: turn an agent runtime's session transcript into a cassette and a pytest file.

Register with ``app.add_typer(import_app, name="import")`` (see :mod:`agent_tools.cli`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Annotated

import typer

from .cli_help import HelpGroup
from .display import safe_text
from .importers import ShellCall, ShellCalls, import_calls, parse_claude_code, parse_codex, parse_opencode
from .importers.generate import NAME_RE
from .importers.opencode import SessionChoiceError
from .redact import redact

__all__ = ["import_app"]

import_app = typer.Typer(cls=HelpGroup, no_args_is_help=True,
                         help="Import an agent session's shell calls as a replayable cassette plus a generated pytest "
                              "file.")

OutDirOpt = Annotated[Path, typer.Option("--out-dir", metavar="DIR",
                                         help="where to write test_transcript_NAME.py and cassettes/NAME.jsonl")]
def _check_name(name: str | None) -> str | None:
    if name is not None and not NAME_RE.fullmatch(name):
        raise typer.BadParameter(f"{name!r}: use letters, digits and _ only (it names the files and the test "
                                 "function)")
    return name


NameOpt = Annotated[str | None, typer.Option("--name", metavar="NAME", callback=_check_name,
                                             help="NAME: letters, digits, _ (default: from the transcript's file "
                                                  "name)")]


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _run(calls: list[ShellCall], runtime: str, source: Path, out_dir: Path, name: str | None) -> None:
    try:
        result = import_calls(calls, runtime=runtime, source=source, out_dir=out_dir, name=name)
    except ValueError as exc:
        sys.stderr.write(safe_text(redact(f"agent-tools import: {exc}")) + "\n")
        raise typer.Exit(1) from exc

    def w(line: str) -> None:  # names and outcomes read from the transcript: shown as text, secrets redacted
        sys.stdout.write(safe_text(redact(line)))
    skipped = [c for c in calls if not c.ran]
    by_index = {c.index: c for c in calls}
    replaced = result.replaced
    also = f", {len(replaced)} replaced" if replaced else ""
    w(f"{len(calls)} shell call(s) read from {source}: {len(calls) - len(skipped) - len(replaced)} imported{also}, "
      f"{len(skipped)} not\n")
    for c in skipped:
        w(f"  not imported: call {c.index} `{_short(c.command)}` — {c.skip_reason}\n")
    for c in calls:
        if c.ran and c.output_cut:
            w(f"  output cut: call {c.index} `{_short(c.command)}` — {c.output_cut}: the replay shows only that "
              "part\n")
    for i, n in sorted(replaced.items()):
        w(f"  replaced: call {i} `{_short(by_index[i].command)}` — a check of call {n}, not run: call {n}'s job is "
          "followed with job_status instead\n")
    saw = calls.describe() if isinstance(calls, ShellCalls) else ""
    if saw:
        w(f"  also seen: {saw}\n")
    for step in result.results:
        what = step["outcome"] or (step["state"] if step["tool"] == "job_cancel" else
                                   f"{step['state']} / readiness {step['readiness']}")
        extra = f" after {step['polls']} job_status call(s)" if step.get("polls") else ""
        w(f"  call {step['call']}: {step['tool']} -> {what}{extra}\n")
    w(f"wrote {result.cassette_path} (synthesised from the transcript)\n")
    w(f"wrote {result.test_path}\nrun it: python3 -m pytest {result.test_path}\n")


@import_app.command("claude-code")
def claude_code(
    transcript: Annotated[Path, typer.Argument(help="a Claude Code session file (~/.claude/projects/<slug>/<id>.jsonl)",
                                               exists=True, dir_okay=False, readable=True)],
    out_dir: OutDirOpt = Path("."),
    name: NameOpt = None,
) -> None:
    """Import the Bash calls of a Claude Code session (JSONL)."""
    _run(parse_claude_code(transcript), "claude-code", transcript, out_dir, name)


@import_app.command("opencode")
def opencode(
    session: Annotated[Path, typer.Argument(
        help="the JSON printed by `opencode export SESSION_ID`; or opencode's database (opencode.db, or the data "
             "directory ~/.local/share/opencode holding it); or the storage/ directory of older releases",
        exists=True, readable=True)],
    session_id: Annotated[str | None, typer.Option("--session", metavar="ID", help=(
        "the session (ses_...) when the database or storage holds several"))] = None,
    out_dir: OutDirOpt = Path("."),
    name: NameOpt = None,
) -> None:
    """Import the bash calls of an opencode session (export JSON, or opencode's own storage)."""
    try:
        calls = parse_opencode(session, session=session_id)
    except SessionChoiceError as exc:  # opencode's storage, but which session?
        sys.stderr.write(safe_text(redact(f"agent-tools import: {exc}")) + "\n")
        raise typer.Exit(1) from exc
    except ValueError as exc:
        sys.stderr.write(safe_text(redact(f"agent-tools import: {session}: not an opencode session: {exc}")) + "\n")
        raise typer.Exit(1) from exc
    if name is None and session_id is not None:  # name the files after the session, not the database
        name = re.sub(r"[^A-Za-z0-9_]+", "_", session_id).strip("_").lower() or None
    _run(calls, "opencode", session, out_dir, name)


@import_app.command("codex")
def codex(
    rollout: Annotated[Path, typer.Argument(
        help="a Codex rollout file (~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl) or the output of codex exec "
             "--json", exists=True, dir_okay=False,
        readable=True)],
    out_dir: OutDirOpt = Path("."),
    name: NameOpt = None,
) -> None:
    """Import the shell calls of a Codex CLI session (rollout JSONL, or a codex exec --json event stream)."""
    _run(parse_codex(rollout), "codex", rollout, out_dir, name)
