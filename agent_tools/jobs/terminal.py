"""Commands that need a terminal: how their refusal looks, and what to run instead.

Jobs run without a terminal (stdin ``/dev/null``, no pty, ``TERM=dumb``). Full-screen and interactive programs
notice and stop: vim warns ``Output is not to a terminal`` and quits when stdin ends, after drawing its screen
(kilobytes of escape sequences and ``~`` lines); procps ``top`` says ``failed tty get``; ncurses programs say
``Error opening terminal``; ``docker run -it`` says ``the input device is not a TTY``. :func:`terminal_need`
recognises these and names a non-interactive way to get the same thing.
"""

from __future__ import annotations

import re
import shlex

__all__ = ["instead_of", "terminal_need"]

_NEEDS_TTY_RE = re.compile(
    r"(Output is not to a terminal|Input is not from a terminal|failed tty get|Error opening terminal[^\n]*"
    r"|must be run (?:from|in) a terminal|(?:stdin|input|standard input) is not a (?:tty|terminal)"
    r"|the input device is not a TTY|not a terminal|cannot open /dev/tty[^\n]*|/dev/tty: No such device[^\n]*"
    r"|Inappropriate ioctl for device)",
    re.IGNORECASE,
)

_WRAPPERS = {"sudo", "env", "nohup", "nice", "ionice", "timeout", "stdbuf", "exec", "command", "time"}

_INSTEAD = {
    "top": "top -b -n 1 (one snapshot in batch mode), or ps aux --sort=-%cpu | head",
    "htop": "top -b -n 1, or ps aux --sort=-%cpu | head",
    "btop": "top -b -n 1, or ps aux --sort=-%cpu | head",
    "atop": "atop -w FILE / top -b -n 1",
    "nvtop": "nvidia-smi (one snapshot), or nvidia-smi --query-gpu=... --format=csv",
    "vim": "read_file to read the file, edit_file (one exact replacement) or write_file to change it",
    "vi": "read_file to read the file, edit_file (one exact replacement) or write_file to change it",
    "nvim": "read_file to read the file, edit_file (one exact replacement) or write_file to change it",
    "nano": "read_file to read the file, edit_file (one exact replacement) or write_file to change it",
    "emacs": "read_file to read the file, edit_file (one exact replacement) or write_file to change it",
    "less": "cat, head or tail (or read_file for a file)",
    "more": "cat, head or tail (or read_file for a file)",
    "man": "man -P cat PAGE",
    "watch": "the command itself, once (or as a job followed with job_status)",
    "docker": "the same command without -t / -it",
    "kubectl": "the same command without -t / -it",
    "ssh": "ssh without -t, with the remote command as an argument",
}


def _program(command: str) -> str:
    """The program a command line starts (first word, wrappers such as ``sudo``/``env`` and assignments skipped)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    for word in words:
        if "=" in word.split("/")[0] and not word.startswith("-"):
            continue  # VAR=value
        if word.startswith("-"):
            continue  # an option of a wrapper
        name = word.rsplit("/", 1)[-1]
        if name in _WRAPPERS:
            continue
        return name
    return ""


def instead_of(command: str) -> str:
    """What to run instead of ``command``'s interactive program (a generic sentence for programs not known)."""
    return _INSTEAD.get(_program(command), "a batch or non-interactive mode of the program (see its --help)")


def terminal_need(command: str, *texts: str) -> str | None:
    """The line of ``texts`` (stderr first, then stdout) by which ``command`` refused to run without a terminal,
    or None."""
    for text in texts:
        tail = text[-8000:]
        m = _NEEDS_TTY_RE.search(tail)
        if m:
            start = tail.rfind("\n", 0, m.start()) + 1
            end = tail.find("\n", m.end())
            return tail[start:end if end >= 0 else None].strip()[:200] or m.group(0)
    return None
