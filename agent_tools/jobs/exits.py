"""What a command's exit status means when it is an answer rather than a failure, and commands that never end.

A shell command's exit status is its last simple command's (a pipeline's last part, a list's last one run), so
the program that answers is the last one of the command line. Programs that answer with their status (the man
pages say so): ``grep`` exits 1 when no line matched (2 on an error); ``diff`` and ``cmp`` exit 1 when the inputs
differ; ``test``/``[`` exit 1 when the condition is false; ``pgrep``/``pidof`` exit 1 when no process matched;
``systemctl is-active``/``is-enabled``/``is-failed`` print the state and exit non-zero unless it is the one asked
about, ``systemctl status`` exits 3 for a unit that is not active and 4 for one that does not exist (systemctl(1),
"Exit status"); ``which`` exits 1 when a name is not found; ``getent`` exits 2 when a key is not in the database;
``timeout`` exits 124 when it stopped the command. The shell itself exits 127 when a command is not found and
126 when it is not executable (bash(1), "EXIT STATUS").

:func:`exit_note` words such a status for a job's ``next`` (instead of "it failed: fix the cause"), and
:func:`never_ends` names the commands that run until stopped (``watch``, ``tail -f``, ``ping`` without a count),
which no amount of following brings to an end.
"""

from __future__ import annotations

import re

from .terminal import simple_commands

__all__ = ["exit_note", "never_ends"]

_GREPS = frozenset({"grep", "egrep", "fgrep", "zgrep", "rg", "ag", "pcregrep"})
_NOT_FOUND_RE = re.compile(r"(?:^|[\s:])([\w.+-]+): (?:command )?not found\s*$", re.MULTILINE)
_NO_RELOAD_RE = re.compile(r"Job type reload is not applicable for unit (\S+?)\.?$", re.MULTILINE)


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _subcommand(args: list[str]) -> str:
    return next((a for a in args if not a.startswith("-")), "")


def exit_note(command: str, code: int | None, stdout: str, stderr: str, host: str) -> str:
    """What exit status ``code`` of ``command`` means, when it is an answer or has a known cause (see the module
    docstring), as a job's ``next`` says it; ``""`` for a plain failure.

    :param stdout: the output as shown. :param stderr: the error output as shown.
    :param host: the host alias (named in the note).
    """
    if code in (None, 0):
        return ""
    if code == 127:
        m = _NOT_FOUND_RE.search(stderr[-2000:])
        if m:
            return (f"{m.group(1)} is not installed on {host} (or not on its PATH): use a tool the host has, or "
                    "install it")
    cmds = simple_commands(command)
    if not cmds:
        return ""
    prog, args = cmds[-1]
    quiet = not stderr.strip()
    if code == 126:
        return f"{prog} is not executable on {host} (exit 126): chmod +x it, or run it with its interpreter"
    if prog in _GREPS and code == 1 and quiet:
        return f"{prog} exited 1: no line matched (that is the answer, not an error)"
    if prog in ("diff", "cmp") and code == 1:
        return f"{prog} exited 1: the inputs differ (its output shows how; that is the answer, not an error)"
    if prog in ("test", "[", "[[") and code == 1 and quiet:
        return f"{prog} exited 1: the condition is false (that is the answer, not an error)"
    if prog in ("pgrep", "pidof") and code == 1 and quiet:
        return f"{prog} exited 1: no process matched (that is the answer, not an error)"
    if prog == "which" and code == 1:
        return "which exited 1: a name is not on the PATH (that is the answer)"
    if prog == "getent" and code == 2:
        return "getent exited 2: no such entry (that is the answer)"
    if prog == "timeout" and code == 124:
        return "timeout stopped the command at its limit (exit 124): give it longer, or run it as a job"
    if prog == "systemctl":
        sub = _subcommand(args)
        if sub.startswith("is-"):
            said = _first_line(stdout)
            return f"systemctl {sub} answers with its exit status" + (f": the unit is {said}" if said else "") + \
                " (not an error)"
        if sub == "status" and code in (3, 4):
            return ("systemctl status exited 3: the unit is not active (its output shows why)" if code == 3 else
                    "systemctl status exited 4: no such unit")
        m = _NO_RELOAD_RE.search(stderr)
        if m:
            unit = m.group(1)
            return (f"{unit} has no reload (no ExecReload=): restart_service(host={host!r}, unit={unit!r}) "
                    "restarts it")
    return ""


def _has(args: list[str], *options: str) -> bool:
    """Whether ``args`` hold one of ``options`` (``-f``; also inside a cluster of short flags, ``-fn``; a long
    one also as ``--opt=value``)."""
    for a in args:
        if a == "--":
            return False
        for o in options:
            if a == o or (o.startswith("--") and a.startswith(o + "=")):
                return True
            if len(o) == 2 and not o.startswith("--") and a.startswith("-") and not a.startswith("--") \
                    and o[1] in a[1:] and a[1:].isalpha():
                return True
    return False


def _watched(args: list[str]) -> str:
    """The command ``watch`` reruns (its options skipped: ``-n 1``, ``-n1``, ``--interval=1``, ``-d``...)."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in ("-n", "--interval", "-q", "--equexit"):
            i += 1
        i += 1
    return " ".join(args[i:])


def never_ends(command: str) -> tuple[str, bool] | None:
    """Whether ``command`` runs until it is stopped (``watch``, ``tail -f``, ``journalctl -f``, ``ping`` without
    a count, ``top -b`` without ``-n``, ``vmstat 1``, ``nvidia-smi -l``...): the note for a job's ``next`` (what
    to run instead) and whether following it still shows something useful (a log it follows), else None."""
    for prog, args in simple_commands(command):
        if prog == "watch":
            once = _watched(args)
            return (f"watch reruns its command until stopped: run {once!r} once instead" if once else
                    "watch reruns its command until stopped: run the command once instead"), False
        if prog == "tail" and _has(args, "-f", "-F", "--follow"):
            return "tail -f runs until stopped: tail -n 100 FILE reads once", True
        if prog == "journalctl" and _has(args, "-f", "--follow"):
            return "journalctl -f runs until stopped: journalctl -n 100 --no-pager (same filters) reads once", True
        if prog == "dmesg" and _has(args, "-w", "-W", "--follow", "--follow-new"):
            return "dmesg -w runs until stopped: dmesg | tail -n 100 reads once", True
        if prog in ("docker", "podman", "kubectl") and _subcommand(args) == "logs" and _has(args, "-f", "--follow"):
            return f"{prog} logs -f runs until stopped: {prog} logs --tail 100 (without -f) reads once", True
        if prog == "ping" and not _has(args, "-c", "-w", "--count", "--deadline") and \
                not any(re.fullmatch(r"-[cw]\d+", a) for a in args):
            return "ping without -c runs until stopped: ping -c 4 HOST", False
        if prog == "top" and not _has(args, "-n") and not any(re.fullmatch(r"-n\d+", a) for a in args):
            return "top runs until stopped: top -b -n 1 shows one snapshot", False
        if prog in ("vmstat", "iostat", "mpstat", "pidstat", "sar") and \
                sum(1 for a in args if a.isdigit()) == 1:
            return f"{prog} with an interval and no count runs until stopped: add a count ({prog} 1 5)", False
        if prog == "nvidia-smi" and (_has(args, "-l", "-lms", "--loop", "--loop-ms") or
                                     _subcommand(args) in ("dmon", "pmon")):
            return "nvidia-smi with a loop runs until stopped: nvidia-smi (no -l) shows one snapshot", False
    return None
