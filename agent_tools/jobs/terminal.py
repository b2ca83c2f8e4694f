"""Commands that wanted a person or a terminal: how their refusal looks, and what to run instead.

Jobs run without a terminal unless started with ``stdin="tty"`` (stdin ``/dev/null``, or a pipe with
``stdin="pipe"``; no pty, ``TERM=dumb``, ``GIT_EDITOR=true``). Programs that need one notice and stop, and say so
on stderr: vim warns ``Output is not to a terminal`` and quits when stdin ends, after drawing its screen on stdout
(kilobytes of cursor-addressing escapes and ``~`` lines); procps ``top`` says ``failed tty get``; ncurses programs
say ``Error opening terminal``; ``docker run -it`` says ``the input device is not a TTY``; ``systemctl edit`` says
``Cannot edit units if not on a tty``. Programs that ask print a prompt and fail when stdin ends (``passwd``: ``New
password: Password change has been aborted.``; Python's ``input()`` prompts on stdout; ``ssh-keygen`` leaves
``Enter file in which to save the key (...): `` as stdout's last, unfinished line). Some give up without asking
because they cannot: ssh ``Host key verification failed.``, ``git commit`` without ``-m`` ``Aborting commit due to
empty commit message.``
:func:`interactive_need` recognises these and names a non-interactive way to get the same thing.

What counts (a failed command's output is not searched for a phrase wherever it is):

* a refusal is taken from stderr (where programs write them), from stdout only when the command sends its
  stderr there (``2>&1``, ``|&``, ``&>``); a prompt from the last line of stdout too (the program stopped
  there, waiting), and a stream's last line that has no newline and ends in ``:`` or ``?`` is a prompt;
* a refusal line that names its program (``top: failed tty get``, ``Vim: Warning: ...``) counts only when
  that program is one the command runs: ``mesg: ttyname failed: Inappropriate ioctl for device``, which login
  profiles print, or a file's text that a ``cat`` shows, is not the command's own need.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

__all__ = ["InteractiveNeed", "drew_screen", "instead_of", "interactive_need", "programs", "simple_commands",
           "terminal_need"]

_NEEDS_TTY_RE = re.compile(
    r"(Output is not to a terminal|Input is not from a terminal|failed tty get|Error opening terminal[^\n]*"
    r"|must be run (?:from|in) a terminal|(?:stdin|input|standard input) is not a (?:tty|terminal)"
    r"|the input device is not a TTY|not a terminal|not on a tty|cannot open /dev/tty[^\n]*"
    r"|/dev/tty: No such device[^\n]*|Inappropriate ioctl for device)",
    re.IGNORECASE,
)

# Prompts and refusals that mean "this wanted a person at a terminal" (stdin is /dev/null here).
_PROMPT_RE = re.compile(
    r"(sudo: (?:a password is required|a terminal is required[^\n]*|no tty present[^\n]*)"
    r"|\[sudo\] password for [^\n]*"
    r"|^[^\n]{0,80}(?:[Pp]assword|[Pp]assphrase)[^\n]{0,40}:\s*$"
    # a prompt the program wrote before stdin ended, its next words on the same line (passwd: "New password:
    # Password change has been aborted."); only at the start of a line, so "(using password: YES)" is not one
    r"|^(?:\([a-z]+\) )?(?:[A-Za-z]+ ){0,3}(?:[Pp]assword|[Pp]assphrase)(?: for [^\n:]{1,80})?:(?=[ \t]+\S)"
    r"|terminal prompts disabled[^\n]*"
    r"|Are you sure you want to continue connecting[^\n]*"
    r"|[^\n]{0,120}\[[yY]/[nN]\]\s*$|[^\n]{0,120}\(yes/no(?:/\[fingerprint\])?\)\??\s*$"
    r"|Do you want to continue\? \[Y/n\][^\n]*)",
    re.MULTILINE,
)

#: failures of programs that would have asked a person, and could not (no terminal, no editor): the line, the
#: program that says it, what it wanted, and what to run instead
_GAVE_UP: tuple[tuple[re.Pattern[str], str, str, str], ...] = (
    (re.compile(r"Host key verification failed\.?"), "ssh",
     "ssh could not ask to confirm an unknown host key",
     "run the command on that host directly with its alias as host (list_hosts lists them), or add its key "
     "first: ssh-keyscan -H HOST >> ~/.ssh/known_hosts (check the fingerprint), or ssh -o "
     "StrictHostKeyChecking=accept-new"),
    (re.compile(r"Aborting commit due to empty commit message\.?|Please supply the message using either -m or "
                r"-F option\.?"), "git",
     "git wanted an editor for the commit message",
     "git commit -m 'MESSAGE' (there is no editor here: GIT_EDITOR=true)"),
)

_WRAPPERS = {"sudo", "env", "nohup", "nice", "ionice", "timeout", "stdbuf", "exec", "command", "time", "builtin",
             "xargs", "setsid", "doas"}

_EDITOR = "read_file to read the file, edit_file (one exact replacement) or write_file to change it"
_INSTEAD = {
    "top": "top -b -n 1 (one snapshot in batch mode), or ps aux --sort=-%cpu | head",
    "htop": "top -b -n 1, or ps aux --sort=-%cpu | head",
    "btop": "top -b -n 1, or ps aux --sort=-%cpu | head",
    "atop": "atop -w FILE / top -b -n 1",
    "nvtop": "nvidia-smi (one snapshot), or nvidia-smi --query-gpu=... --format=csv",
    "vim": _EDITOR,
    "vi": _EDITOR,
    "nvim": _EDITOR,
    "nano": _EDITOR,
    "emacs": _EDITOR,
    "visudo": _EDITOR + " (then visudo -c checks it)",
    "crontab": "crontab FILE (install a file written with write_file), crontab -l to read",
    "less": "cat, head or tail (or read_file for a file)",
    "more": "cat, head or tail (or read_file for a file)",
    "man": "man -P cat PAGE",
    "watch": "the command itself, once (or as a job followed with job_status)",
    "docker": "the same command without -t / -it",
    "kubectl": "the same command without -t / -it",
    "ssh": "ssh without -t, with the remote command as an argument",
    "systemctl": "write_file of a drop-in, /etc/systemd/system/UNIT.d/override.conf (systemctl edit's file), then "
                 "restart_service(host, unit, daemon_reload=true); systemctl cat UNIT shows the unit",
}
#: programs that prompt for input, and how to give it without a prompt
#: (worded so that the redaction of results leaves them whole: ``echo 'USER:PW' | chpasswd`` would be hidden)
_ASKS_INSTEAD = {"passwd": "chpasswd, which reads USER:PASSWORD lines on stdin",
                 "ssh-keygen": "ssh-keygen -t ed25519 -f FILE -N '' asks nothing"}
#: a prompt left on a stream's last, unfinished line (no newline: the program stopped there, waiting), as
#: ``ssh-keygen``'s ``Enter file in which to save the key (/root/.ssh/id_ed25519): ``
_UNFINISHED_PROMPT_RE = re.compile(r"[^\n]{1,200}[:?][ \t]*\Z")
#: a password prompt up to its colon
_PROMPT_END_RE = re.compile(r"[^\n]*?(?:[Pp]assword|[Pp]assphrase)[^\n:]{0,40}:")
#: words a prompt line starts with that are no program's name (``Password: ``)
_PROMPT_WORDS = frozenset({"password", "passphrase"})

#: a line that names the program saying it: ``top: failed tty get``, ``Vim: Warning: ...``, ``/usr/bin/x: ...``
_PREFIX_RE = re.compile(r"^\s*([A-Za-z0-9_./+-]*[A-Za-z][A-Za-z0-9_.+-]*):\s")
#: where one simple command ends and the next begins (lists, pipelines, subshells, substitutions)
_SEPARATORS_RE = re.compile(r"\|\||&&|[;|&\n()`]|\$\(")
#: a command that sends its stderr to stdout
_MERGED_RE = re.compile(r"2>&1|\|&|&>")
#: what a full-screen program draws (shown by cleaning as escapes): cursor addressing, screen and line clears
_SCREEN_RE = re.compile(r"\\x1b\[[0-9;?]*[HJfK]")


@dataclass(frozen=True)
class InteractiveNeed:
    """What a command that failed wanted from a person or a terminal.

    :param prompt: the prompt or refusal, for the ``needs_input`` outcome's ``prompt`` ("needs a terminal:
        top: failed tty get").
    :param next: what to run instead (the outcome's ``next``).
    :param terminal: it refused to run without a terminal (what it drew on stdout is a screen nobody sees).
    """

    prompt: str
    next: str
    terminal: bool = False


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment, comments=True)
    except ValueError:
        return segment.split()


def _program_of(words: list[str]) -> str:
    """The program a simple command's words start (assignments, wrappers such as ``sudo``/``env`` and their options
    skipped)."""
    for word in words:
        if "=" in word.split("/")[0] and not word.startswith("-"):
            continue  # VAR=value
        if word.startswith("-") or word.isdigit():
            continue  # an option of a wrapper, or its number (timeout 5)
        name = word.rsplit("/", 1)[-1]
        if name in _WRAPPERS:
            continue
        return name
    return ""


def simple_commands(command: str) -> list[tuple[str, list[str]]]:
    """``(program, words)`` of each simple command of ``command``'s lists, pipelines, subshells and substitutions,
    in order (the words after the program's own name; wrappers such as ``sudo``/``env`` skipped)."""
    found = []
    for segment in _SEPARATORS_RE.split(command):
        words = _words(segment)
        name = _program_of(words)
        if name:
            at = next(i for i, w in enumerate(words) if w.rsplit("/", 1)[-1] == name)
            found.append((name, words[at + 1:]))
    return found


def programs(command: str) -> list[str]:
    """The programs ``command`` runs, in order: the first word of each simple command of its lists, pipelines,
    subshells and substitutions (wrappers such as ``sudo``/``env`` skipped)."""
    found = []
    for segment in _SEPARATORS_RE.split(command):
        name = _program_of(_words(segment))
        if name and name not in found:
            found.append(name)
    return found


def _speaker(line: str) -> str | None:
    """The program a line names as its speaker (``top: ...`` → ``top``; ``Vim: ...`` → ``vim``), or None."""
    m = _PREFIX_RE.match(line)
    return m.group(1).rsplit("/", 1)[-1].lower() if m else None


def instead_of(command: str, line: str = "") -> str:
    """What to run instead of ``command``'s interactive program: the program ``line`` (its refusal) names, else
    the first of the command's programs with known advice, else a generic sentence."""
    progs = programs(command)
    speaker = _speaker(line) if line else None
    for name in ([speaker] if speaker in progs else []) + progs:
        if name in _INSTEAD:
            return _INSTEAD[name]
    return "a batch or non-interactive mode of the program (see its --help)"


def _own(line: str, progs: list[str]) -> bool:
    """A line is the command's own when it names no program, or one the command runs."""
    speaker = _speaker(line)
    return speaker is None or speaker in progs


def _line_at(text: str, start: int, end: int) -> str:
    a = text.rfind("\n", 0, start) + 1
    b = text.find("\n", end)
    return text[a:b if b >= 0 else None].strip()


def terminal_need(command: str, stderr: str, stdout: str = "") -> str | None:
    """The line by which ``command`` refused to run without a terminal, or None (see the module docstring for
    where it is looked for and which lines count).

    :param stderr: the command's stderr as shown (cleaned). :param stdout: its stdout, searched only when the
        command sends its stderr there.
    """
    progs = [p.lower() for p in programs(command)]
    for text in (stderr, stdout if _MERGED_RE.search(command) else ""):
        tail = text[-8000:]
        for m in _NEEDS_TTY_RE.finditer(tail):
            line = _line_at(tail, m.start(), m.end())
            if _own(line, progs):
                return line[:200] or m.group(0)
    return None


def _prompt(command: str, stderr: str, stdout: str) -> str | None:
    """A password/confirmation prompt or refusal: in stderr's tail, or on the last line of stdout."""
    progs = [p.lower() for p in programs(command)]
    found = [str(m).strip() for m in _PROMPT_RE.findall(stderr[-4000:])]
    found = [f for f in found if _own(f, progs) or f.startswith("sudo:") or _speaker(f) in _PROMPT_WORDS]
    if found:  # the prompt, not what followed it on its line ("Password: Traceback (most recent call last):")
        m = _PROMPT_END_RE.match(found[-1])
        return m.group(0) if m else found[-1]
    last = stdout.rstrip("\n").rsplit("\n", 1)[-1]
    m = _PROMPT_RE.search(last[-400:])
    if m:
        return str(m.group(0)).strip()
    for text in (stdout, stderr):
        if text and not text.endswith("\n"):
            m = _UNFINISHED_PROMPT_RE.search(text[-400:])
            if m:
                return m.group(0).strip()
    return None


def interactive_need(command: str, stderr: str, stdout: str = "", *, stdin: str = "none") -> InteractiveNeed | None:
    """What ``command`` (which failed) wanted from a person or a terminal, or None: a password or confirmation
    prompt, a refusal to run without a terminal, or a program that gave up because it could not ask (see the
    module docstring).

    :param stderr: its stderr as shown (cleaned text). :param stdout: its stdout as shown.
    :param stdin: the job's input: ``none`` (``/dev/null``), ``pipe`` or ``tty`` (it could have been answered with
        ``job_input``, and was not in time); the ``next`` names the other way to run it.
    """
    prompt = _prompt(command, stderr, stdout)
    if prompt is not None:
        name = next((p for p in programs(command) if p in _ASKS_INSTEAD), "")
        how = _ASKS_INSTEAD.get(name, "sudo -n with NOPASSWD, --yes/-y, key-based auth")
        if stdin != "none":
            return InteractiveNeed(prompt, "the command asked for input and ended: run it again with stdin='pipe' "
                                           "(or tty) and answer with job_input (a password: the operator types it "
                                           f"with agent-tools input JOB --secret), or non-interactively ({how})")
        return InteractiveNeed(prompt, "the command asked for input and stdin is /dev/null: run it non-interactively "
                                       f"({how}), or with stdin='pipe' and answer with job_input, or ask the operator")
    tty = terminal_need(command, stderr, stdout)
    if tty is not None:
        return InteractiveNeed(f"needs a terminal: {tty}", f"it needs an interactive terminal: use "
                                                         f"{instead_of(command, tty)}, or run it with stdin='tty' and "
                                                         "type its keys with job_input", terminal=True)
    progs = [p.lower() for p in programs(command)]
    for pattern, program, wanted, instead in _GAVE_UP:
        m = pattern.search(stderr[-4000:])
        if m and (program in progs or _own(_line_at(stderr[-4000:], m.start(), m.end()), progs)):
            return InteractiveNeed(f"{wanted}: {m.group(0)}", f"it needed a person, and there is none here: {instead}")
    return None


def drew_screen(stdout: str) -> bool:
    """Whether ``stdout`` (cleaned: escapes shown as ``\\x1b[...``) holds what a full-screen program draws (cursor
    addressing, screen clears) rather than plain output."""
    return bool(_SCREEN_RE.search(stdout))
