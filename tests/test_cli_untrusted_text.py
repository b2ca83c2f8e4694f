"""Untrusted text is shown as text on a real terminal (issue 13): the CLI run on a pseudo-terminal (pexpect)
with a corpus of hostile commands and outputs. Nothing of them may reach the terminal as Rich markup or as a
control sequence; each control character shows visibly (``\\x1b``, ``\\r``, ``\\u202e``); the approval prompt
shows the whole command (every line, paged when long, nothing cut), host, rule and digest, and binds the yes to
that digest."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

import agent_tools
from agent_tools.display import safe_text
from agent_tools.policy.approvals import call_digest

REPO = Path(agent_tools.__file__).resolve().parent.parent
POLICY = REPO / "policies" / "default.yaml"

#: what the hostile text tries: markup, CSI (clear, cursor up, erase line, conceal), OSC 0 title, OSC 8 link,
#: a C1 CSI, BEL, backspace and carriage-return overwrites, bidi override, zero-width and invisible characters
HOSTILE = [
    "[bold]bold[/bold] [/] [link=http://evil.example]click[/link] [red on red]hidden[/] [blink]x",
    "\x1b[2J\x1b[H\x1b[1A\x1b[2K\x1b[8mconcealed\x1b[0m",
    "\x1b]0;pwned-title\x07 \x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\",
    "\u009b31mc1 \x07bell back\x08\x08\x08\x08space",
    "innocent\rrm -rf ~",
    "ls \u202ecod.exe \u2066iso\u2069 r\u200bm \u200d\ufeff \u3164 end",
]

#: real escape sequences Rich itself writes for styles: SGR only, with the parameters of bold/dim/colours/reverse
_RICH_SGR = re.compile(r"\x1b\[(?:[0-9]{1,3}(?:;[0-9]{1,3})*)?m")
_FORBIDDEN_SGR_PARAMS = {"5", "6", "8"}  # blink, rapid blink, conceal: never used by this CLI's styles


def spawn_env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "AGENT_TOOLS_STATE_DIR": str(tmp_path / "state"), "PYTHONPATH": str(REPO),
            "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40", "PAGER": "cat", "MANPAGER": "cat"}


def run_pty(tmp_path: Path, *args: str, answer: str | None = None, env: dict[str, str] | None = None,
            timeout_s: float = 60) -> str:
    """Run ``agent-tools ARGS`` on a pseudo-terminal (stdin, stdout and stderr a tty); answer the y/N prompt
    with ``answer``; returns everything written to the terminal."""
    child = pexpect.spawn(sys.executable, ["-m", "agent_tools.cli", *args], env=env or spawn_env(tmp_path),
                          encoding="utf-8", codec_errors="replace", dimensions=(40, 120), timeout=timeout_s,
                          cwd=str(tmp_path))
    seen = ""
    if answer is not None:
        child.expect(r"\[y/N\]: ")
        seen += (child.before or "") + (child.after or "")  # type: ignore[operator]
        child.sendline(answer)
    child.expect(pexpect.EOF)
    seen += child.before or ""
    child.close()
    return seen


def control_sequences_left(screen: str) -> list[str]:
    """Every control character or sequence on ``screen`` that is not one of Rich's own style codes (the pty turns
    each ``\\n`` into ``\\r\\n``, so a lone ``\\r`` is an overwrite)."""
    bad: list[str] = []
    for m in _RICH_SGR.finditer(screen):
        params = set(m.group()[2:-1].split(";"))
        if params & _FORBIDDEN_SGR_PARAMS and not m.group().startswith("\x1b[38;") and \
                not m.group().startswith("\x1b[48;"):
            bad.append(repr(m.group()))
    rest = _RICH_SGR.sub("", screen).replace("\r\n", "\n")
    bad += [repr(ch) for ch in rest if ch not in "\n\t" and (ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F)]
    bad += [repr(ch) for ch in rest if ch in "\u202e\u2066\u2069\u200b\u200d\ufeff\u3164"]
    return bad


def visible(screen: str) -> str:
    """The screen as a person reads it: style codes removed, line ends normalised."""
    return _RICH_SGR.sub("", screen).replace("\r\n", "\n")


def test_approval_prompt_shows_the_whole_hostile_command_and_binds_the_yes_to_its_digest(tmp_path: Path) -> None:
    marker = tmp_path / "approved-ran"
    lines = [f"echo '{h}' >/dev/null" for h in HOSTILE]
    command = "\n".join([f"touch {marker}", *lines, "systemctl restart nginx [a; cat /etc/shadow ; b]"])
    digest = call_digest("local", command)
    screen = run_pty(tmp_path, "run", "local", "--policy", str(POLICY), "--", command, answer="n")
    assert control_sequences_left(screen) == []
    shown = visible(screen)
    for line in command.split("\n"):  # every line of the command, each control character as an escape
        assert safe_text(line) in shown, (safe_text(line), shown)
    assert "[bold]bold[/bold]" in shown and "[link=http://evil.example]" in shown  # markup shown, not applied
    assert "\\x1b[2J" in shown and "\\u202e" in shown and "innocent\\rrm -rf ~" in shown
    assert f"digest   {digest}" in shown and "host     local" in shown and "rule     " in shown
    assert f"Approve running this command (digest {digest}) on local?" in shown
    assert not marker.exists()  # "n": nothing ran
    screen = run_pty(tmp_path, "run", "local", "--policy", str(POLICY), "--", command, answer="y")
    assert marker.exists() and "finished" in visible(screen)
    assert control_sequences_left(screen) == []


def test_the_prompt_shows_code_that_looks_like_a_secret_and_says_what_it_hides(tmp_path: Path) -> None:
    """Redaction must not hide code from the person approving: header-like words (`cookie: ssh.service`, `-name
    token: -delete`) are shown; a value of certain secret shape is hidden, counted, and the digest binds it."""
    marker, victim = tmp_path / "approved-ran", tmp_path / "victim"
    victim.mkdir()
    password = "pw-QA13" + "k" * 10
    command = (f"touch {marker} cookie: ssh.service systemd-networkd.service; find {victim} -name token: -delete; "
               f"mysql --password={password} -e 'select 1' || true")
    screen = " ".join(visible(run_pty(tmp_path, "run", "local", "--cwd", str(tmp_path), "--policy", str(POLICY), "--",
                                      command, answer="n")).split())  # lines wrapped at the terminal's width
    screen = screen.split("Approve running")[0]  # the prompt (the outcome printed after it is redacted fully)
    assert "cookie: ssh.service systemd-networkd.service" in screen and "-name token: -delete" in screen
    assert "cookie: [REDACTED]" not in screen  # neither in the command nor in the policy's reason
    assert "--password=[REDACTED]" in screen and password not in screen
    assert "1 span(s) shown as [REDACTED]" in screen and "the digest binds the real text" in screen
    assert f"cwd {tmp_path}" in screen and "env (none given)" in screen
    assert f"digest {call_digest('local', command, cwd=str(tmp_path))}" in screen
    assert not marker.exists()


def test_a_very_long_command_is_paged_in_full_before_the_prompt(tmp_path: Path) -> None:
    marker = tmp_path / "long-ran"
    command = "\n".join([f"touch {marker}", *(f"echo line-{i:03d} [red]x[/red]" for i in range(300))])
    paged = tmp_path / "paged.txt"
    env = {**spawn_env(tmp_path), "PAGER": f"cat > {paged}", "MANPAGER": f"cat > {paged}"}
    screen = run_pty(tmp_path, "run", "local", "--policy", str(POLICY), "--", command, answer="n", env=env)
    text = paged.read_text()
    for i in range(300):
        assert f"echo line-{i:03d} [red]x[/red]\n" in text  # every line reached the pager, markup as text
    assert "shown in the pager" in visible(screen) and "301 line(s)" in visible(screen)
    assert f"digest {call_digest('local', command)}" in text
    assert not marker.exists()


def hostile_output_script() -> str:
    """A command printing the corpus plus NUL, invalid UTF-8 and a 5000-character line."""
    parts = " ".join(f"'{h}'" for h in (x.replace("'", "") for x in HOSTILE))
    return (f"printf '%s\\n' {parts}; printf 'nul\\000byte \\377\\376 invalid\\n'; "
            "head -c 5000 /dev/zero | tr '\\0' 'L'; echo; echo '[bold]end[/]'")


def test_run_status_output_and_jobs_show_hostile_output_as_text(tmp_path: Path) -> None:
    script = hostile_output_script()
    screen = run_pty(tmp_path, "run", "local", "--", script)
    assert control_sequences_left(screen) == [], control_sequences_left(screen)
    shown = visible(screen)
    assert "[bold]bold[/bold]" in shown and "[bold]end[/]" in shown and "nul\\0byte" in shown
    assert "L" * 5000 in shown.replace("\n", "")  # the long line, whole
    res = subprocess.run([sys.executable, "-m", "agent_tools.cli", "jobs", "--json"], capture_output=True,
                         text=True, env=spawn_env(tmp_path), check=True)
    job_id = json.loads(res.stdout)["jobs"][0]["job_id"]
    for args in (["status", job_id], ["output", job_id], ["jobs"], ["jobs", "local"]):
        screen = run_pty(tmp_path, *args)
        assert control_sequences_left(screen) == [], (args, control_sequences_left(screen))
        if args[0] == "output":
            assert "[bold]end[/]" in visible(screen) and "\\u202e" in visible(screen)


def test_policy_explain_and_check_show_hostile_text_as_text(tmp_path: Path) -> None:
    command = " ; ".join(f"echo '{h}'" for h in HOSTILE) + " ; systemctl restart nginx [a; b]"
    screen = run_pty(tmp_path, "policy", "explain", "web-1", "--policy", str(POLICY), "--", command)
    assert control_sequences_left(screen) == []
    shown = visible(screen)
    assert "systemctl restart nginx [a" in shown and "b]" in shown and "[link=http://evil.example]" in shown
    bad = tmp_path / "bad\x1b[2J[bold].yaml"
    bad.write_text("version: 1\nhosts: ['*']\nrules:\n  - id: \"r\\e[2J[bold]\"\n    match: [rm]\n"
                   "    decision: maybe\n")
    screen = run_pty(tmp_path, "policy", "check", str(bad))
    assert control_sequences_left(screen) == [] and "\\x1b[2J[bold].yaml" in visible(screen)


@pytest.mark.parametrize("text", HOSTILE)
def test_safe_text_leaves_nothing_a_terminal_would_act_on(text: str) -> None:
    out = safe_text(text)
    assert control_sequences_left(out) == []
    assert out.replace("\\x1b", "").replace("\\r", "") != "" and "\x1b" not in out
