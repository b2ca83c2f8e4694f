"""Which files a simple command reads besides the operands it names: a recursive read of a directory, a file named
in an option's value.

A rule that asks or denies on a file read (``secret-files``: ``/etc/shadow``, ``~/.ssh/id_*``) compares these with
its ``match_any_arg`` too (:meth:`~agent_tools.policy.matching.CompiledRule.match`), so the read is decided as the
read it is, however the file is reached:

* a program that reads a directory tree reads every file below it: ``grep -r x /etc`` reads ``/etc/shadow``,
  ``diff -r /tmp/empty /etc/ssh`` prints every host key. Each directory it reads is listed as the pattern
  ``DIR/*`` (``/etc/*``), which meets every rule pattern below it. Recursive readers: ``grep``/``egrep``/``fgrep``
  with ``-r``, ``-R``, ``--recursive``, ``--dereference-recursive`` or ``-d recurse`` (and ``rgrep``; with no
  file operand they read ``.``: grep(1)), ``rg`` (always recursive; ``--files`` only lists names), ``diff -r``,
  ``zcat``/``gzip``/``gunzip -r``, and ``cp``/``scp -r``/``-R``/``-a``, ``rsync -r``/``-a`` (their sources);
  a command ``find -exec`` runs on what it finds (``find /etc -name shadow -exec cat {} +`` reads ``/etc/*``:
  :func:`below`).
* a file named in an option's value: ``--from-file=/etc/shadow``, ``--files0-from=F`` (whose content is printed
  back as file names), ``-f/etc/shadow``: for a program that opens its operands, every ``--NAME=VALUE`` and
  attached ``-xVALUE`` whose value is a path (``/``, ``~``, ``./``, ``../``) counts as a file it may read.

A directory is resolved like any relative name (:mod:`agent_tools.policy.paths`): in every directory the command
may run in (``grep -r x .`` from the login directory reads ``~/*``, ``~/.ssh`` included), through ``~NAME`` and
``/proc/PID/cwd`` (any directory), and one computed at run time (``grep -r x "$D"``) is any directory.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .options import is_long_abbreviation
from .paths import ANY_DIR, climbed, indirect_names, join_dir, normalise_path

__all__ = ["below", "reads_of"]

#: ``$HOME`` / ``${HOME}`` at the start of a word, then ``/...`` or the end: the login directory
_LOGIN_DIR_RE = re.compile(r"^\$(?:HOME|\{HOME\})(/.*)?$")


def _names(word: str, static: bool, cwds: Sequence[str | None]) -> list[str]:
    """The names ``word`` may stand for: itself when absolute or ``~``, resolved in each of ``cwds`` when relative,
    every name a directory only the host resolves may give (``~sys``, ``/proc/1/cwd``), any name (``/*`` and
    ``~/*``) when it is computed at run time."""
    if not static:
        login = _LOGIN_DIR_RE.match(word)
        return [normalise_path("~" + (login.group(1) or ""))] if login is not None else [ANY_DIR, "~/*"]
    indirect = indirect_names(word, cwds)
    if indirect is not None:
        return indirect
    if word.startswith("/") or word == "~" or word.startswith("~/"):
        return [normalise_path(word)]
    if word.startswith("~"):
        return [ANY_DIR]
    out: list[str] = []
    for cwd in cwds:
        if cwd is None:
            out.append(ANY_DIR)
            continue
        out += [n for n in (join_dir(cwd, word), climbed(cwd, word)) if n is not None]
    return list(dict.fromkeys(out))


def below(word: str, static: bool, cwds: Sequence[str | None]) -> list[str]:
    """The patterns of the files below the directory ``word`` (``/etc`` -> ``/etc/*``, ``/`` -> ``/*``, ``.`` from
    the login directory -> ``~/*``).

    :param word: the directory as written (after quote removal), or the source text of an expansion.
    :param static: False when ``word`` holds an expansion (then it is any directory, the login one as ``$HOME``).
    :param cwds: the directories the command may run in (``~`` the login directory, None an unknown one).
    """
    return [("" if n == "/" else n.rstrip("/")) + "/*" for n in _names(word, static, cwds)]


class _Getopt:
    """The options of one program that take a value (``short`` letters, ``long`` names with ``--``)."""

    def __init__(self, short: str = "", long: Sequence[str] = ()) -> None:
        self.short = short
        self.long = tuple(long)

    def split(self, args: Sequence[str]) -> tuple[list[tuple[str, str | None]], list[int]]:
        """GNU getopt over ``args`` (options anywhere before ``--``): the options as ``(name, value)`` (a short
        one as ``-x``, a long one by its full name when it abbreviates one of :attr:`long`, else as written)
        and the indexes of the operands."""
        options: list[tuple[str, str | None]] = []
        operands: list[int] = []
        i = 0
        while i < len(args):
            a = args[i]
            if a == "--":
                operands += range(i + 1, len(args))
                break
            if not a.startswith("-") or a == "-":
                operands.append(i)
            elif a.startswith("--"):
                name, eq, value = a.partition("=")
                full = next((f for f in self.long if is_long_abbreviation(name, f)), name)
                if eq:
                    options.append((full, value))
                elif full in self.long and i + 1 < len(args):
                    options.append((full, args[i + 1]))
                    i += 1
                else:
                    options.append((full, None))
            else:
                for j, letter in enumerate(a[1:], start=1):
                    if letter in self.short:
                        rest = a[j + 1 :]
                        if rest:
                            options.append(("-" + letter, rest))
                        elif i + 1 < len(args):
                            options.append(("-" + letter, args[i + 1]))
                            i += 1
                        else:
                            options.append(("-" + letter, None))
                        break
                    options.append(("-" + letter, None))
            i += 1
        return options, operands


_GREP = _Getopt("efmABCdDX", ("--regexp", "--file", "--max-count", "--after-context", "--before-context",
                              "--context", "--directories", "--devices", "--include", "--exclude", "--exclude-from",
                              "--exclude-dir", "--label", "--binary-files", "--group-separator"))
_RG = _Getopt("ABCEMTdefgjmrt", ("--regexp", "--file", "--glob", "--iglob", "--type", "--type-not", "--type-add",
                                 "--type-clear", "--max-count", "--after-context", "--before-context", "--context",
                                 "--max-columns", "--threads", "--max-depth", "--encoding", "--pre", "--pre-glob",
                                 "--ignore-file", "--sort", "--sortr", "--path-separator", "--colors",
                                 "--context-separator", "--field-match-separator", "--field-context-separator",
                                 "--dfa-size-limit", "--regex-size-limit", "--max-filesize", "--replace", "--engine",
                                 "--generate", "--hostname-bin", "--hyperlink-format", "--max-columns-preview"))
_DIFF = _Getopt("CUDFILSWXx", ("--context", "--unified", "--ifdef", "--show-function-line",
                               "--ignore-matching-lines", "--label", "--starting-file", "--width", "--exclude",
                               "--exclude-from", "--from-file", "--to-file", "--tabsize", "--line-format",
                               "--old-line-format", "--new-line-format", "--unchanged-line-format",
                               "--old-group-format", "--new-group-format", "--unchanged-group-format",
                               "--changed-group-format", "--horizon-lines", "--palette"))
_GZIP = _Getopt("S", ("--suffix",))
_CP = _Getopt("St", ("--suffix", "--target-directory"))
_RSYNC = _Getopt("efBTM", ("--rsh", "--filter", "--exclude", "--include", "--exclude-from", "--include-from",
                           "--files-from", "--temp-dir", "--compare-dest", "--copy-dest", "--link-dest",
                           "--partial-dir", "--rsync-path", "--block-size", "--max-size", "--min-size", "--timeout",
                           "--log-file", "--password-file", "--chown", "--chmod", "--port", "--bwlimit", "--backup-dir",
                           "--suffix", "--out-format", "--modify-window", "--skip-compress", "--remote-option"))
_SCP = _Getopt("cDFiJloPS", ())
_GREPS = frozenset({"grep", "egrep", "fgrep", "rgrep"})
_GZIPS = frozenset({"zcat", "gzip", "gunzip"})


def _flag(options: Sequence[tuple[str, str | None]], letters: str, longs: Sequence[str]) -> bool:
    """Whether one of ``options`` is a short option of ``letters`` or one of ``longs`` (also abbreviated, as
    getopt_long(3) takes ``--recur``; an ambiguous abbreviation counts for each it may be)."""
    return any(name in {"-" + c for c in letters} or any(is_long_abbreviation(name, long) for long in longs)
               for name, _ in options)


def _recursive_roots(program: str, args: Sequence[str]) -> list[int] | None:
    """Indexes (into ``args``) of the directories ``program ARGS`` reads recursively, ``[-1]`` for the directory
    it runs in, or None when it reads no tree."""
    if program in _GREPS:
        options, operands = _GREP.split(args)
        recursive = program == "rgrep" or _flag(options, "rR", ("--recursive", "--dereference-recursive")) or any(
            name in ("-d", "--directories") and value is not None and value.startswith("rec")
            for name, value in options)
        if not recursive:
            return None
        given = _flag(options, "ef", ("--regexp", "--file"))
        roots = operands if given else operands[1:]
        return roots or [-1]
    if program == "rg":
        options, operands = _RG.split(args)
        if _flag(options, "", ("--files", "--type-list", "--help", "--version")):
            return None
        given = _flag(options, "ef", ("--regexp", "--file"))
        return (operands if given else operands[1:]) or [-1]
    if program == "diff":
        options, operands = _DIFF.split(args)
        return operands if _flag(options, "r", ("--recursive",)) else None
    if program in _GZIPS:
        options, operands = _GZIP.split(args)
        return operands if _flag(options, "r", ("--recursive",)) else None
    if program in ("cp", "scp", "rsync"):
        spec = {"cp": _CP, "scp": _SCP, "rsync": _RSYNC}[program]
        options, operands = spec.split(args)
        letters = {"cp": "rRa", "scp": "r", "rsync": "ra"}[program]
        if not _flag(options, letters, ("--recursive", "--archive")):
            return None
        to_dir = _flag(options, "t" if program == "cp" else "", ("--target-directory",))
        return operands if to_dir else operands[:-1]
    return None


_PATH_VALUE_RE = re.compile(r"^(?:/|~|\.\.?/)")
_PATH_START_RE = re.compile(r"/|~|\.\.?/")


def _option_files(args: Sequence[str]) -> list[str]:
    """Paths given as an option's value in the same word: ``--from-file=/etc/shadow``, ``-f/etc/shadow``."""
    out: list[str] = []
    for a in args:
        if a == "--":
            break
        if a.startswith("--"):
            value = a.partition("=")[2]
            if _PATH_VALUE_RE.match(value):
                out.append(value)
        elif a.startswith("-") and len(a) > 2 and (m := _PATH_START_RE.search(a, 2)) is not None:
            out.append(a[m.start() :])
    return out


def reads_of(program: str, args: Sequence[str], static: Sequence[bool], cwds: Sequence[str | None], *,
             opens_operands: bool) -> list[str]:
    """The files (and ``DIR/*`` patterns) ``program ARGS`` reads besides its plain operands, resolved.

    :param program: the normalised program name.
    :param args: its arguments after quote removal (the source text for an expansion).
    :param static: per argument, False when it holds an expansion.
    :param cwds: the directories it may run in.
    :param opens_operands: whether the program opens the files its operands name (then an option's path value is
        a file it may read too).
    """
    out: list[str] = []
    roots = _recursive_roots(program, args)
    for i in roots or []:
        out += below(".", True, cwds) if i < 0 else below(args[i], static[i], cwds)
    if opens_operands:
        out += [n for value in _option_files(args) for n in _names(value, True, cwds)]
    return list(dict.fromkeys(out))
