"""Issue 15, item 10: ``--help`` names what options and arguments take (no ``<bool>``/``<int>``/``<str>`` type
placeholders, no ``{host}`` usage placeholders), its prose is not cut mid-sentence, and a test run
on a machine without ``openssh-server`` ends by saying what did not run and the one command that installs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

import agent_tools
from agent_tools.cli import app

REPO = Path(agent_tools.__file__).resolve().parent.parent
TYPE_PLACEHOLDER = re.compile(r"<(?:bool|int|float|str|Path|list\[[^\]]*\])>")


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _options_panel(text: str) -> str:
    return text[text.index("Options"):] if "Options" in text else ""


COMMANDS = list(_commands(typer.main.get_command(app)))


def _help(*path: str) -> str:
    """``agent-tools PATH --help`` as a user runs it (its own process: the CLI configures logging globally)."""
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", *path, "--help"], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "agent-tools")
def test_help_shows_no_type_placeholders_for_options(path: tuple[str, ...]) -> None:
    options = _options_panel(_help(*path))
    assert "--help" in options
    found = TYPE_PLACEHOLDER.findall(options)
    assert not found, f"`agent-tools {' '.join(path)} --help` shows {found}:\n{options}"
    assert re.search(r"--help\s+Show this message", options), options  # a flag: nothing between name and help


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "agent-tools")
def test_help_usage_and_arguments_show_names_not_types(path: tuple[str, ...]) -> None:
    text = _help(*path)
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    assert not re.search(r"[{}<>]", usage), usage  # click's HOST COMMAND..., not typer's {host} {command}...
    found = TYPE_PLACEHOLDER.findall(text)
    assert not found, f"`agent-tools {' '.join(path)} --help` shows {found}:\n{text}"
    assert "``" not in text, text  # reST literals are not shown with their backquotes


def test_run_help_reads_as_prose() -> None:
    text = _help("run")
    assert re.search(r"Usage: .* run \[OPTIONS\] HOST COMMAND\.\.\.", text), text
    assert re.search(r"\*\s+HOST\s+host alias", text) and re.search(r"\*\s+COMMAND\.\.\.\s+the command", text), text
    body = " ".join(text.split())
    assert "you are asked at once; otherwise run the same command again with --approve ID." in body
    assert "asked at\n" not in text, text  # lines are cut where the screen ends, not where the docstring's did


def test_value_options_name_what_they_take() -> None:
    run = _options_panel(_help("run"))
    for option, metavar in (("--budget", "SECONDS"), ("--on-timeout", "detach|kill"), ("--ssh-config", "FILE"),
                            ("--approve", "ID")):
        assert re.search(rf"{re.escape(option)}\b.*?\s{re.escape(metavar)}\s", run), (option, run)
    assert re.search(r"--json\s+print the outcome", run), run
    top = _help()
    assert re.search(r"--verbose\s+-v\s+more logs", top) and not TYPE_PLACEHOLDER.search(top), top


def test_a_run_without_sshd_says_what_was_skipped_and_how_to_install_it(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_TOOLS_REQUIRE_SSHD", "AGENT_TOOLS_REQUIRE_SYSTEMD")}
    env.update(PYTHONPATH=str(REPO), AGENT_TOOLS_SSHD=str(tmp_path / "no-sshd-here"))  # as if not installed
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                          "tests/test_sshd_harness.py"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
    assert res.returncode == 0 and re.fullmatch(r"\d+ skipped in .*", lines[-1]), res.stdout
    closing = "\n".join(lines[-5:])
    assert "real parts that did not run" in closing, res.stdout
    assert re.search(r"\d+ test\(s\) of the real OpenSSH sshd on loopback skipped: .*no-sshd-here is missing", closing)
    assert "to run them: apt-get install -y openssh-server" in closing, closing
    assert "asyncio_default_fixture_loop_scope" not in res.stdout + res.stderr  # set in pyproject: no deprecation
