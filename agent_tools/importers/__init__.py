"""Transcript importers: turn an agent runtime's session into a cassette and a pytest file replaying it.

::

    parse_claude_code(path) / parse_opencode(path) / parse_codex(path)
                                 -> ShellCalls     the shell calls, what the old tool saw, what else was seen
    import_calls(calls, runtime=..., source=..., out_dir=...)       synthesise the cassette, write the test

What is inferred from a transcript (and why the cassette is *synthesised*, not recorded) is described in
:mod:`agent_tools.importers.synth` and docs/cassettes.md.
"""

from .claude_code import parse_claude_code
from .codex import parse_codex
from .generate import ImportFailed, ImportResult, import_calls, make_plan
from .model import ShellCall, ShellCalls
from .opencode import parse_opencode
from .plan import replay_plan, run_plan
from .synth import Timeline, TranscriptHost, infer_timeline

__all__ = [
    "ImportFailed",
    "ImportResult",
    "ShellCall",
    "ShellCalls",
    "Timeline",
    "TranscriptHost",
    "import_calls",
    "infer_timeline",
    "make_plan",
    "parse_claude_code",
    "parse_codex",
    "parse_opencode",
    "replay_plan",
    "run_plan",
]
