"""Compiled rule matching against one :class:`~agent_tools.policy.shell.SimpleCommand`.

Token syntax is described in :mod:`agent_tools.policy.model`. Globs use :func:`fnmatch.fnmatchcase` (case
sensitive; ``*`` also matches ``/``). Every argument is tried both as written and lexically normalised
(:func:`~agent_tools.policy.shell.normalise_path`), so a rule written for ``/`` also sees ``//`` and ``/.``; a
relative one also as resolved in the directory the command surely runs in, and for a ``deny`` rule in every
directory it may run in (``cd / && rm -rf *`` holds ``/*``), when that is not the login directory.

Where a match makes a rule stricter, words count for more than they spell: for a rule that asks or denies,
``match_any_arg`` also sees the files a command reads besides its operands (input redirections, and
:attr:`~agent_tools.policy.shell.SimpleCommand.reads`: ``/etc/*`` for ``grep -r x /etc``, which meets
``/etc/shadow``); for a ``deny`` rule a pattern the shell expands counts for every word it may expand to, in the
command name and the verb too (``/usr/sbin/re[b]oot``, ``systemctl rebo?t``: :mod:`agent_tools.policy.globs`),
and an integer alternative matches the same number however it is written (``kill -9 0001``, ``" 1"``, ``+1``).
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass
from typing import Literal

from agent_tools.policy.globs import globs_intersect
from agent_tools.policy.model import Rule
from agent_tools.policy.options import clusters_short, is_long_abbreviation, takes_value
from agent_tools.policy.paths import climbed, indirect_names, join_dir
from agent_tools.policy.shell import SimpleCommand, normalise_path

__all__ = ["CompiledRule", "Token", "compile_rule"]

_CAPTURE_RE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)(?::(.+))?\}$")
_GLOB_CHARS = frozenset("*?[")
_LONG_OPTION_RE = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9-]*")
#: ``$HOME`` / ``${HOME}`` at the start of a word, then ``/...`` or the end: the login directory
_LOGIN_DIR_RE = re.compile(r"^\$(?:HOME|\{HOME\})(/.*)?$")


#: a word of clustered short options (``-Cm``, ``-Cm/tmp/x``): the run of letters after the dash
_SHORT_CLUSTER_RE = re.compile(r"^-([A-Za-z0-9]{2,})")
_SHORT_OPTION_RE = re.compile(r"^-[A-Za-z0-9]$")


@dataclass(frozen=True)
class Token:
    """One compiled pattern token."""

    kind: Literal["any", "rest", "options", "capture", "alts"]
    alts: tuple[str, ...] = ()
    name: str = ""

    @staticmethod
    def parse(text: str) -> Token:
        if text == "**":
            return Token("rest")
        if text == "-**":
            return Token("options")
        if text == "*":
            return Token("any")
        m = _CAPTURE_RE.match(text)
        if m:
            return Token("capture", alts=tuple(m.group(2).split("|")) if m.group(2) else (), name=m.group(1))
        return Token("alts", alts=tuple(text.split("|")))

    @functools.cached_property
    def _compiled(self) -> tuple[tuple[str, bool, int | None], ...]:
        """Each alternative with whether it is a glob and the integer it is (None: not one)."""
        return tuple((alt, any(c in _GLOB_CHARS for c in alt), int(alt) if _INTEGER_RE.match(alt) else None)
                     for alt in self.alts)

    def may_match_glob(self, word: str) -> bool:
        """Whether ``word``, a pathname pattern the shell expands (``/d?v/sda``), may name a word this token
        matches (normalised like a path)."""
        if not any(c in _GLOB_CHARS for c in word) or self.kind != "alts":
            return False
        return any(globs_intersect(normalise_path(word), alt) for alt in self.alts)

    def matches_text(
        self, word: str, also: tuple[str, ...] = (), *, abbreviations: bool = False, clusters: bool = False,
        globs: bool = False, pattern: bool = False, numbers: bool = False, operand: bool = False,
    ) -> bool:
        """Whether ``word`` (or its normalised path form, or one of ``also``) matches this token's alternatives.

        :param abbreviations: a long option also matches the alternatives it abbreviates (getopt_long(3):
            ``--outp=F`` is ``--output=F``, ``--comp`` is ``--compile``); used where a match makes a rule stricter.
        :param clusters: a cluster of short options matches each single-letter alternative it holds (getopt(3):
            ``-Cm F`` is ``-C -m F``, ``-Cm/tmp/x`` too; a letter inside an earlier option's attached value counts
            as well, over-approximating); for programs with getopt options (:func:`~.options.clusters_short`), where
            a match makes a rule stricter.
        :param globs: a path pattern among the forms (``/[a-z]*``, ``/*/sda`` for ``~sys/sda``) matches the
            alternatives it may expand to (``/etc``, ``/dev/*``); used where a match makes a rule stricter.
        :param pattern: ``word`` is a pattern the shell expands (an unquoted ``*``, ``?`` or ``[``) wherever it
            stands, so it matches every alternative it may expand to (``rebo?t`` is ``reboot``); where a match
            makes a rule stricter.
        :param numbers: an integer alternative (``1``, ``-1``) also matches every word that is the same number as
            bash and kill(1) read one (``0001``, ``" 1"``, ``+1``); where a match makes a rule stricter.
        :param operand: ``word`` comes after ``--``: what a pattern expands to there is no long option (``rm -rf --
            *`` never passes ``--no-preserve-root``).
        """
        if self.kind in ("any", "rest"):
            return True
        if self.kind == "options":
            return word.startswith("-")
        if self.kind == "capture" and (word.startswith("-") or not self.alts):
            return not word.startswith("-")
        forms = {word, normalise_path(word), *also}
        if abbreviations and word.startswith("--"):
            name = word.split("=", 1)[0]
            for alt in self.alts:
                full = _LONG_OPTION_RE.match(alt)
                if full is not None and is_long_abbreviation(name, full.group(0)):
                    forms.add(full.group(0) + word[len(name) :])
        cluster = _SHORT_CLUSTER_RE.match(word) if clusters else None
        patterns = [f for f in forms if (f[:1] in ("/", "~") or (pattern and f == word)) and _is_pattern(f)] if (
            globs or pattern) else []
        number = _integer(word) if numbers else None
        for alt, alt_glob, alt_number in self._compiled:
            # a relative pattern expands to relative names (its forms resolved in a directory are in `also`), and
            # never to the source text of an expansion (`$HOME`)
            if patterns and not (operand and alt.startswith("--")) and any(
                    globs_intersect(form, alt) for form in patterns
                    if form[:1] in ("/", "~") or alt[:1] not in ("/", "~", "$")):
                return True
            if number is not None and alt_number == number:
                return True
            if alt_glob:
                if any(fnmatch.fnmatchcase(form, alt) for form in forms):
                    return True
            elif alt in forms:
                return True
            elif cluster is not None and _SHORT_OPTION_RE.match(alt) and alt[1] in cluster.group(1):
                return True
        return False


@dataclass(frozen=True)
class _Words:
    """A command's words as a rule's pattern walks them: per word, whether it holds an expansion, whether it is
    a pattern the shell expands, and its other forms (:func:`_resolved_forms`)."""

    argv: list[str]
    dynamic: list[bool]
    globs: list[bool]
    resolved: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class CompiledRule:
    """A :class:`Rule` with its tokens parsed; ``index`` is its position in the file."""

    rule: Rule
    index: int
    pattern: tuple[Token, ...]
    args_contain: tuple[Token, ...]
    match_any_arg: tuple[Token, ...]
    only_args: tuple[Token, ...] | None
    redirect_to: Token | None
    redirect_not_to: Token | None = None
    cwd: Token | None = None

    def written(self, command: SimpleCommand) -> list[str]:
        """The files ``command`` writes that count for ``redirect_to`` (those matching ``redirect_not_to`` left out)."""
        skip = self.redirect_not_to
        # matched on the lexically normalised name only: `/dev/shm/../sda` is no file under /dev/shm
        return [t for t in command.writes if skip is None or not skip.matches_text(normalise_path(t))]

    def covers_writes(self, command: SimpleCommand) -> bool:
        """Whether this rule names every file ``command`` writes (so an ``allow`` of it may stand)."""
        if not command.writes:
            return True
        if self.redirect_to is None:
            return False
        token = self.redirect_to
        counted = self.written(command)
        return len(counted) == len(command.writes) and all(token.matches_text(t) for t in counted)

    def _resolved(self, command: SimpleCommand) -> tuple[tuple[str, ...], ...]:
        """Per word of ``argv``: the forms it has resolved against the directories that count for this rule."""
        return _resolved_forms(tuple(command.argv), tuple(command.cwds), self.rule.decision)

    def _read(self, command: SimpleCommand) -> list[tuple[str, tuple[str, ...], bool]]:
        """For a rule that asks or denies: the files ``command`` reads through input redirections (``< FILE``,
        ``<> FILE``, bash's ``$(< FILE)``), with a relative one also resolved in the directory it runs in, and the
        files it reads besides its operands (:attr:`SimpleCommand.reads`: ``DIR/*`` below a directory it reads
        recursively, a file in an option's value), each with whether it is a pattern; they count as arguments
        for ``match_any_arg`` (``grep x < /etc/shadow`` and ``grep -r x /etc`` read /etc/shadow as ``grep x
        /etc/shadow`` does). An ``allow`` rule sees none of them (its match would only widen)."""
        if self.rule.decision == "allow":
            return []
        out: list[tuple[str, tuple[str, ...], bool]] = []
        for r in command.redirects:
            if r.op in ("<", "<>") and r.static:
                forms = () if r.target.startswith(("/", "~")) or command.cwd in (None, "~") else tuple(
                    f for f in [join_dir(str(command.cwd), r.target)] if f is not None)
                out.append((r.target, forms, False))
        out += [(name, (), _is_pattern(name)) for name in command.reads]
        return out

    def match(self, command: SimpleCommand, *, check_cwd: bool = True) -> dict[str, str] | None:
        """Captured words if every condition of the rule holds for ``command`` (its ``cwd`` condition left out
        with ``check_cwd=False``), else None."""
        argv = command.argv
        dynamic = command.dynamic if len(command.dynamic) == len(argv) else [False] * len(argv)
        globs = command.globs if len(command.globs) == len(argv) else [False] * len(argv)
        if check_cwd and self.cwd is not None and (command.cwd is None or not self.cwd.matches_text(command.cwd)):
            return None
        resolved = self._resolved(command)
        args = list(zip(argv[1:], resolved[1:], strict=True))
        strict = self.rule.decision != "allow"  # an abbreviated option counts where it makes the decision stricter
        # a word read as every pattern or number it may be counts for a deny rule (for an ask rule it could take a
        # command from a deny rule after it): `systemctl rebo?t` may be `systemctl reboot`, `kill -9 0001` is PID 1
        deny = self.rule.decision == "deny"
        clusters = strict and bool(argv) and clusters_short(argv[0])
        # words after `--` are operands: a pattern there expands to no long option
        ends = next((i for i, (w, d) in enumerate(zip(argv[1:], dynamic[1:], strict=True)) if w == "--" and not d),
                    len(args))
        for token in self.args_contain:
            if not any(token.matches_text(arg, also, abbreviations=strict, clusters=clusters, globs=strict,
                                          pattern=deny and glob, numbers=deny, operand=i > ends)
                       for i, ((arg, also), glob) in enumerate(zip(args, globs[1:], strict=True))):
                return None
        if self.match_any_arg:
            candidates = [(arg, also, glob, i > ends) for i, ((arg, also), glob) in
                          enumerate(zip(args, globs[1:], strict=True))]
            candidates += [(arg, also, glob, True) for arg, also, glob in self._read(command)]
            if not any(t.matches_text(arg, also, abbreviations=strict, clusters=clusters, globs=strict,
                                      pattern=strict and glob, numbers=deny, operand=operand)
                       for t in self.match_any_arg for arg, also, glob, operand in candidates):
                return None
        if self.redirect_to is not None:
            redirect_to = self.redirect_to
            if not any(redirect_to.matches_text(target) or (strict and redirect_to.may_match_glob(target))
                       for target in self.written(command)):
                return None
        return self._match_from(0, 0, _Words(argv, dynamic, globs, resolved), command.args_from_stdin, {})

    def _match_from(self, ti: int, ai: int, words: _Words, stdin_args: bool,
                    caps: dict[str, str]) -> dict[str, str] | None:
        argv, dynamic, resolved = words.argv, words.dynamic, words.resolved
        if ti == len(self.pattern):
            return caps if self._tail_ok(argv[ai:], resolved[ai:], stdin_args) else None
        token = self.pattern[ti]
        if token.kind == "rest":
            for k in range(ai, len(argv) + 1):
                found = self._match_from(ti + 1, k, words, stdin_args, caps)
                if found is not None:
                    return found
            return None
        if token.kind == "options":
            k = ai
            while True:  # shortest run of option words first
                found = self._match_from(ti + 1, k, words, stdin_args, caps)
                if found is not None or k >= len(argv) or dynamic[k] or not argv[k].startswith("-"):
                    return found
                takes = takes_value(argv[0], argv[k])
                if takes is None:  # the next word may be this option's value, or the word the pattern wants next
                    if self.rule.decision == "allow":
                        return None
                    if k + 2 <= len(argv):
                        found = self._match_from(ti, k + 2, words, stdin_args, caps)
                        if found is not None:
                            return found
                elif takes:
                    k += 1  # `systemctl -p status restart x`: `status` is the value of -p, not the verb
                    if k >= len(argv):
                        return None
                k += 1
        if ai >= len(argv):
            return None
        word = argv[ai]
        if token.kind == "capture":
            if dynamic[ai] or not token.matches_text(word):
                return None
            return self._match_from(ti + 1, ai + 1, words, stdin_args, {**caps, token.name: word})
        strict, deny = self.rule.decision != "allow", self.rule.decision == "deny"
        # a pattern the shell expands counts, for a deny rule, for every word it may expand to: `/usr/sbin/re[b]oot`
        # may run reboot, `systemctl rebo?t` may be `systemctl reboot` (and `kill -9 0001` is PID 1)
        pattern = deny and words.globs[ai]
        if ai == 0 and token.kind == "alts":
            ok = any((fnmatch.fnmatchcase(word, alt) if any(c in _GLOB_CHARS for c in alt) else word == alt)
                     or (pattern and globs_intersect(word, alt)) for alt in token.alts)
        else:
            ok = token.matches_text(word, resolved[ai], globs=strict, pattern=pattern, numbers=deny)
        return self._match_from(ti + 1, ai + 1, words, stdin_args, caps) if ok else None

    def _tail_ok(self, tail: list[str], resolved: tuple[tuple[str, ...], ...], stdin_args: bool) -> bool:
        if self.rule.exact and (tail or stdin_args):
            return False
        if self.only_args is not None:
            if stdin_args:
                return False  # arguments from stdin cannot be checked against an allow-list
            only = self.only_args
            return all(any(t.matches_text(word, also) for t in only) for word, also in zip(tail, resolved, strict=True))
        return True


@functools.lru_cache(maxsize=512)
def _resolved_forms(argv: tuple[str, ...], cwds: tuple[str | None, ...],
                    decision: str) -> tuple[tuple[str, ...], ...]:
    """Per word of ``argv``, the other forms a rule of kind ``decision`` also matches it as (the same for every rule
    of that kind: cached, as each command is matched against every rule)."""
    # the login directory is where a command line starts anyway: only a directory it moved to (a cwd, a cd) adds,
    # and for a deny rule a pattern the shell expands there (`rm -rf *` in ~ is `rm -rf ~/*`)
    deny = decision == "deny"
    certain = _certain_dir(cwds)
    # a rule that asks or denies sees every directory the command may run in (its match only makes the decision
    # stricter: `cd /etc && cat shadow` names /etc/shadow), an allow rule only the one it surely runs in
    dirs = [d for d in cwds if d is not None] if decision != "allow" else ([certain] if certain is not None else [])
    # a deny rule also sees where `..` lead once they climb above the login (or an unknown) directory:
    # `rm -rf ../../../..` from ~ is `rm -rf /`
    above = list(dict.fromkeys(cwds)) if deny else []
    strict = decision != "allow"
    out: list[tuple[str, ...]] = []
    for i, word in enumerate(argv):
        if i == 0 or word.startswith("-") or "://" in word or "=" in word:
            out.append(())
            continue
        indirect = indirect_names(word, cwds) if strict else None
        login = _LOGIN_DIR_RE.match(word) if strict else None
        if indirect is not None:  # `rm -rf ~sys` (on Debian /dev), `/proc/1/cwd/etc`: any directory
            forms = indirect
        elif login is not None:  # `rm -rf $HOME/`, `"${HOME}/"`: the login directory (HOME= asks)
            forms = [normalise_path("~" + (login.group(1) or ""))]
        elif word.startswith("/"):
            forms = []
        else:
            # (a pattern in the login directory counts for a deny rule: `rm -rf *` in ~; an ask rule only sees the
            # directories a command moved to, as a word it names there is not a file elsewhere)
            where = dirs if _is_pattern(word) and decision != "ask" else [d for d in dirs if d != "~"]
            forms = [] if word.startswith("~") else [r for d in where if (r := join_dir(d, word)) is not None]
            forms += [r for d in above if (r := climbed(d, word)) is not None]
        out.append(tuple(dict.fromkeys(forms)))
    return tuple(out)


#: an integer as bash's kill builtin reads a PID or a signal number (legal_number: blanks around it, a sign,
#: decimal digits; leading zeros do not make it octal) and kill(1) too
_INTEGER_RE = re.compile(r"^\s*[+-]?[0-9]+\s*$")


def _integer(word: str) -> int | None:
    """``word`` as the integer bash's kill reads it (``0001`` and ``" 1"`` are 1), or None."""
    return int(word) if _INTEGER_RE.match(word) and len(word) < 64 else None


def _is_pattern(word: str) -> bool:
    """Whether ``word`` is a pathname pattern (``*``, ``?``, ``[``) and not an expansion's text (``$((i*2))``)."""
    return not _GLOB_CHARS.isdisjoint(word) and "$" not in word and "`" not in word


def _certain_dir(cwds: tuple[str | None, ...]) -> str | None:
    unique = set(cwds)
    return next(iter(unique)) if len(unique) == 1 else None


def compile_rule(rule: Rule, index: int) -> CompiledRule:
    """Parse the tokens of ``rule``."""
    return CompiledRule(
        rule=rule,
        index=index,
        pattern=tuple(Token.parse(t) for t in rule.match),
        args_contain=tuple(Token.parse(t) for t in rule.args_contain),
        match_any_arg=tuple(Token.parse(t) for t in rule.match_any_arg),
        only_args=None if rule.only_args is None else tuple(Token.parse(t) for t in rule.only_args),
        redirect_to=None if rule.redirect_to is None else Token.parse(rule.redirect_to),
        redirect_not_to=None if rule.redirect_not_to is None else Token.parse(rule.redirect_not_to),
        cwd=None if rule.cwd is None else Token.parse(rule.cwd),
    )
