"""Decide a command line on a host: :class:`PolicySet`.

How a decision is made
======================
1. The files whose ``hosts`` globs match the host alias apply, most specific first: a glob without wildcards
   beats any glob with one; then more literal characters win (``gpu-node-*`` before ``gpu-*`` before ``*``);
   ties keep the order the files were given to :meth:`PolicySet.load`.
2. The command line is split into simple commands (:func:`~agent_tools.policy.shell.parse_command`).
3. Each simple command is decided on its own. Within one file the first matching rule decides (file order).
   Across files no file weakens another: a ``deny`` from any applying file stands; otherwise the strictest of
   the files' matching rules decides (the most specific file's rule at that level), and the explicit
   ``defaults.decision`` of the most specific file that has no matching rule, if it comes before every file
   that has one, counts as well (so ``gpu-node.yaml``'s ``decision: ask`` is not turned into ``allow`` by a rule
   of ``default.yaml``, while its own rules refine ``default.yaml``'s default). With no matching rule at all it
   is the most specific explicit default, else ``ask``. An opaque command is never ``allow``: an allow is
   lowered to ``ask`` (``rule_id: <opaque>``); so is the allow of a command that writes a file its rule's
   ``redirect_to`` does not name (``free -m > /etc/passwd``: ``rule_id: <writes>``); a ``deny`` rule still
   applies to both. A command run through ``ssh HOST`` is also decided with HOST's files and the stricter of
   the two decisions is kept (``ask`` when no file covers HOST). A command that is one reading among several of
   a word the shell expands (:attr:`~agent_tools.policy.shell.SimpleCommand.alternative`: a brace expansion's
   alternative alone, a wrapper a glob command name may name) counts only when it is denied.
4. The command line takes the strictest decision of its simple commands (deny > ask > allow); budget,
   timeouts, deadline and detach come from the deciding command's rule (see
   :class:`~agent_tools.policy.model.Decision`), falling back to the file defaults and then to
   ``budget_s=30``, ``on_timeout=detach``. A command line with no simple command at all is ``ask``.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import structlog

from agent_tools.policy.errors import PolicyFileError
from agent_tools.policy.loader import PolicyDocument, load_policy_file, load_policy_text
from agent_tools.policy.matching import CompiledRule, compile_rule
from agent_tools.policy.model import (
    SEVERITY,
    CommandDecision,
    Connection,
    Decision,
    DecisionKind,
    OnTimeout,
    Policy,
)
from agent_tools.policy.shell import SimpleCommand, parse_command
from agent_tools.redact import add_patterns, redact

__all__ = ["BUILTIN_BUDGET_S", "LoadedPolicy", "PolicySet", "ResolvedDefaults"]

log = structlog.get_logger(__name__)

BUILTIN_BUDGET_S = 30.0
"""Foreground budget (seconds) when neither a rule nor any file's defaults set one."""

_UNIT_SUFFIXES = (
    ".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path", ".timer", ".slice",
    ".scope",
)  # fmt: skip
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WILDCARDS = frozenset("*?[")


def _glob_specificity(glob: str) -> tuple[int, int]:
    literal = sum(1 for c in glob if c not in _WILDCARDS)
    return (0 if any(c in _WILDCARDS for c in glob) else 1, literal)


@dataclass(frozen=True)
class LoadedPolicy:
    """A validated policy file with compiled rules; ``order`` is its position in the load list."""

    document: PolicyDocument
    order: int
    rules: tuple[CompiledRule, ...]

    @classmethod
    def from_document(cls, document: PolicyDocument, order: int) -> LoadedPolicy:
        rules = tuple(compile_rule(rule, i) for i, rule in enumerate(document.policy.rules))
        return cls(document, order, rules)

    @property
    def policy(self) -> Policy:
        return self.document.policy

    @property
    def path(self) -> str:
        return self.document.path

    def specificity(self, host: str) -> tuple[int, int] | None:
        """How specifically this file names ``host`` (None: it does not apply)."""
        matching = [_glob_specificity(g) for g in self.policy.hosts if fnmatch.fnmatchcase(host, g)]
        return max(matching) if matching else None

    def first_match(self, command: SimpleCommand) -> tuple[CompiledRule, dict[str, str]] | None:
        for rule in self.rules:
            captures = rule.match(command)
            if captures is not None:
                return rule, captures
        return None


@dataclass(frozen=True)
class ResolvedDefaults:
    """Defaults for a host after falling back across files and to built-ins."""

    budget_s: float
    on_timeout: OnTimeout
    hard_deadline_s: float | None
    decision: DecisionKind
    hard_deadline_from: str = ""


@dataclass(frozen=True)
class _Decided:
    """Internal: one simple command's decision with its rule and captures."""

    command: SimpleCommand
    decision: DecisionKind
    rule_id: str
    reason: str
    rule: CompiledRule | None
    captures: dict[str, str]
    path: str | None
    matched_rule_id: str | None = None

    def public(self) -> CommandDecision:
        return CommandDecision.from_command(
            self.command, decision=self.decision, rule_id=self.rule_id, reason=self.reason,
            matched_rule_id=self.matched_rule_id, policy_file=self.path,
        )  # fmt: skip


def _resolve_defaults(files: Sequence[LoadedPolicy]) -> ResolvedDefaults:
    def pick(name: str) -> Any:
        return next((v for f in files if (v := getattr(f.policy.defaults, name)) is not None), None)

    budget = pick("budget_s")
    on_timeout = pick("on_timeout")
    decision = pick("decision")
    hard_file = next((f for f in files if f.policy.defaults.hard_deadline_s is not None), None)
    return ResolvedDefaults(
        budget_s=float(budget) if budget is not None else BUILTIN_BUDGET_S,
        on_timeout=on_timeout if on_timeout is not None else "detach",
        hard_deadline_s=hard_file.policy.defaults.hard_deadline_s if hard_file is not None else None,
        decision=decision if decision is not None else "ask",
        hard_deadline_from=f"defaults of {os.path.basename(hard_file.path)}" if hard_file is not None else "",
    )


def _label(command: SimpleCommand) -> str:
    text = " ".join(command.argv) if command.argv else command.text
    text = text if len(text) <= 80 else text[:77] + "..."
    return text or "(empty)"


def _decide_in(command: SimpleCommand, files: Sequence[LoadedPolicy], host: str) -> _Decided:
    if not files:
        return _Decided(command, "ask", "<no-policy>", f"no policy file covers host {host!r}", None, {}, None)
    matches = [(f, m) for f in files if (m := f.first_match(command)) is not None]
    chosen = next(((f, m) for f, m in matches if m[0].rule.decision == "deny"), None)
    default_vote: tuple[LoadedPolicy, DecisionKind] | None = None
    if chosen is None:
        # the most specific file with an opinion: its rule (then no default counts), or its own explicit default,
        # which no rule of a more general file may weaken
        for f in files:
            if any(f is g for g, _ in matches):
                break
            if f.policy.defaults.decision is not None:
                default_vote = (f, f.policy.defaults.decision)
                break
        if not matches and default_vote is None:
            default_vote = (files[0], "ask")
        level = max(SEVERITY[m[0].rule.decision] for _, m in matches) if matches else -1
        if default_vote is not None and SEVERITY[default_vote[1]] > level:
            chosen = None
        else:
            chosen = next((f, m) for f, m in matches if SEVERITY[m[0].rule.decision] == level)
            default_vote = None
    if chosen is not None:
        loaded, (rule, captures) = chosen
        decided = _Decided(
            command, rule.rule.decision, rule.rule.id, rule.rule.reason or f"rule {rule.rule.id}", rule, captures,
            loaded.path,
        )  # fmt: skip
    else:
        assert default_vote is not None
        vote_file, default = default_vote
        reason = f"no rule matches {command.program or 'this command'!r}; the default is {default}"
        if matches:
            reason = (f"no rule of {vote_file.path} matches {command.program or 'this command'!r} and its default is "
                      f"{default}, which a rule of a more general file may not weaken")
        elsewhere = next((r for f in files for r in f.rules if r.rule.cwd is not None
                          and r.match(command, check_cwd=False) is not None), None)
        if elsewhere is not None:
            where = command.cwd if command.cwd is not None else "a directory the policy cannot know for sure"
            reason += (f" (rule {elsewhere.rule.id} covers it only where the working directory matches "
                       f"{elsewhere.rule.cwd!r}; it runs in {where})")
        decided = _Decided(command, default, "<default>", reason, None, {}, vote_file.path)
    if command.opaque:
        opaque_reason = command.opaque_reason or "the policy cannot see what this command runs"
        if decided.decision == "allow":
            return _Decided(
                command, "ask", "<opaque>", opaque_reason, decided.rule, decided.captures, decided.path,
                matched_rule_id=decided.rule_id,
            )  # fmt: skip
        if decided.decision == "ask" and decided.rule is None:
            return _Decided(command, "ask", decided.rule_id, opaque_reason, None, {}, decided.path)
    if decided.decision == "allow" and (decided.rule is None or not decided.rule.covers_writes(command)):
        if command.writes:
            files_written = ", ".join(command.writes[:3]) + (" ..." if len(command.writes) > 3 else "")
            return _Decided(
                command, "ask", "<writes>",
                f"writes {files_written}: an allow rule covers a write only when its redirect_to names the file",
                decided.rule, decided.captures, decided.path, matched_rule_id=decided.rule_id,
            )  # fmt: skip
    return decided


def _stricter(a: _Decided, b: _Decided) -> _Decided:
    return b if SEVERITY[b.decision] > SEVERITY[a.decision] else a


def _render(value: Any, captures: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _PLACEHOLDER_RE.sub(lambda m: captures.get(m.group(1), m.group(0)), value)
    if isinstance(value, dict):
        return {k: _render(v, captures) for k, v in value.items()}
    if isinstance(value, list):
        return [_render(v, captures) for v in value]
    return value


def _normalise_captures(captures: dict[str, str]) -> dict[str, str]:
    unit = captures.get("unit")
    if unit is not None and not unit.endswith(_UNIT_SUFFIXES):
        return {**captures, "unit": unit + ".service"}
    return captures


class PolicySet:
    """The loaded policy files; decides command lines per host.

    Build with :meth:`load` (paths) or :meth:`from_text`; the object is immutable and holds no connections.
    """

    def __init__(self, policies: Sequence[LoadedPolicy]) -> None:
        self._policies = tuple(policies)
        # a file's secret shapes are hidden on every path of this process (journal, approvals, logs, results, the
        # CLI), not only in what its hosts' results show
        add_patterns(p for policy in self._policies for p in policy.policy.redact)

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> PolicySet:
        """Load, validate and self-test the policy files at ``paths`` (their order breaks specificity ties).

        :raises PolicyFileError: a file is unreadable, invalid, or one of its ``examples`` is decided
            differently from what it expects (the whole file is refused).
        """
        loaded = []
        for order, path in enumerate(paths):
            policy = LoadedPolicy.from_document(load_policy_file(path), order)
            check_examples(policy)
            loaded.append(policy)
        log.info("policy.loaded", files=[p.path for p in loaded])
        return cls(loaded)

    @classmethod
    def from_text(cls, *texts: str) -> PolicySet:
        """Like :meth:`load` for YAML texts (named ``<string:N>`` in errors)."""
        loaded = []
        for order, text in enumerate(texts):
            policy = LoadedPolicy.from_document(load_policy_text(text, f"<string:{order}>"), order)
            check_examples(policy)
            loaded.append(policy)
        return cls(loaded)

    @property
    def policies(self) -> tuple[LoadedPolicy, ...]:
        return self._policies

    def policies_for(self, host: str) -> list[LoadedPolicy]:
        """The files that apply to ``host``, most specific first."""
        ranked = [(spec, p) for p in self._policies if (spec := p.specificity(host)) is not None]
        ranked.sort(key=lambda item: (-item[0][0], -item[0][1], item[1].order))
        return [p for _, p in ranked]

    def defaults(self, host: str) -> ResolvedDefaults:
        return _resolve_defaults(self.policies_for(host))

    def connection(self, host: str) -> Connection:
        """Connection settings for ``host``, merged field by field (most specific file first)."""
        merged: dict[str, Any] = {}
        for policy in reversed(self.policies_for(host)):
            if policy.policy.connection is not None:
                merged.update(policy.policy.connection.model_dump(exclude_none=True))
        return Connection(**merged)

    def redact_patterns(self, host: str) -> list[str]:
        """Extra redaction regexes of every file that applies to ``host`` (all of them are also in force for
        every :func:`agent_tools.redact.redact` of this process once the set is built)."""
        return [p for policy in self.policies_for(host) for p in policy.policy.redact]

    def decide(self, host: str, command: str, *, cwd: str | None = None,
               env: Mapping[str, str] | None = None) -> Decision:
        """Decide ``command`` (a bash command line) on the host alias ``host``. Never raises for any input.

        :param cwd: the directory it starts in (relative file names, rules on ``cwd``); None: the login directory.
        :param env: variables exported before it runs (a call's ``env``), decided like ``export NAME=VALUE``.
        """
        decision = _decide(host, command, self.policies_for, cwd=cwd, env=env)
        log.debug(
            "policy.decided", host=host, command=redact(command), decision=decision.decision,
            rule_id=decision.rule_id,
        )  # fmt: skip
        return decision


def _decide(host: str, command: str, files_for: Callable[[str], list[LoadedPolicy]], *, cwd: str | None = None,
            env: Mapping[str, str] | None = None) -> Decision:
    files = files_for(host)
    defaults = _resolve_defaults(files)
    decided: list[_Decided] = []
    for simple in parse_command(command, cwd=cwd, env=env):
        result = _decide_in(simple, files, host)
        if simple.target_host is not None:
            result = _stricter(result, _decide_in(simple, files_for(simple.target_host), simple.target_host))
        if simple.alternative and result.decision != "deny":
            continue  # one reading of an expanded word (a brace alternative alone): it only adds a deny
        decided.append(result)
    paths = [f.path for f in files]
    if not decided:
        return Decision(
            host=host, command=command, cwd=cwd, env=dict(env) if env else None, decision="ask", rule_id="<empty>",
            reason="no command found in the command line", budget_s=defaults.budget_s,
            on_timeout=defaults.on_timeout, hard_deadline_s=defaults.hard_deadline_s,
            hard_deadline_from=defaults.hard_deadline_from, policy_files=paths,
        )  # fmt: skip
    level = max(SEVERITY[d.decision] for d in decided)
    at_level = [d for d in decided if SEVERITY[d.decision] == level]
    deciding = next(
        (d for d in at_level if d.rule is not None and not d.rule_id.startswith("<")),
        next((d for d in at_level if d.rule is not None), at_level[0]),
    )
    rule = deciding.rule.rule if deciding.rule is not None else None
    probes: list[dict[str, Any]] = []
    for d in at_level:
        if d.rule is None:
            continue
        captures = _normalise_captures(d.captures)
        for probe in d.rule.rule.probes:
            rendered = _render(probe, captures)
            if rendered not in probes:
                probes.append(rendered)
    reasons = dict.fromkeys(f"{_label(d.command)}: {d.reason}" for d in at_level)
    hard = _hard_deadline(decided, defaults)
    return Decision(
        host=host,
        command=command,
        cwd=cwd,
        env=dict(env) if env else None,
        decision=deciding.decision,
        rule_id=deciding.rule_id,
        reason="; ".join(reasons),
        budget_s=rule.budget_s if rule is not None and rule.budget_s is not None else defaults.budget_s,
        on_timeout=rule.on_timeout if rule is not None and rule.on_timeout is not None else defaults.on_timeout,
        deadline_s=rule.deadline_s if rule is not None else None,
        deadline_from=rule.deadline_from if rule is not None else None,
        hard_deadline_s=hard[0],
        hard_deadline_from=hard[1],
        detach_immediately=rule is not None and rule.detach == "immediately",
        probes=probes,
        commands=[d.public() for d in decided],
        policy_files=paths,
    )


def _hard_deadline(decided: Sequence[_Decided], defaults: ResolvedDefaults) -> tuple[float | None, str]:
    """The kill deadline of a command line and where it comes from: each simple command has its rule's
    ``hard_deadline_s``, else the defaults'; the smallest of them holds (a rule may set a longer one than the
    defaults for its own command only)."""
    best: tuple[float | None, str] = (defaults.hard_deadline_s, defaults.hard_deadline_from)
    found = False
    for d in decided:
        own = d.rule.rule.hard_deadline_s if d.rule is not None else None
        value, source = ((own, f"rule {d.rule_id} of {os.path.basename(d.path or '')}") if own is not None
                         else (defaults.hard_deadline_s, defaults.hard_deadline_from))
        if value is not None and (not found or best[0] is None or value < best[0]):
            best, found = (value, source), True
        elif value is None and not found:
            best = (None, "")
    return best


_EXAMPLE_KINDS: tuple[tuple[str, DecisionKind], ...] = tuple((f"must_{kind}", kind) for kind in get_args(DecisionKind))


def check_examples(policy: LoadedPolicy) -> None:
    """Decide every example of ``policy`` with that file alone (also for ``ssh`` targets).

    :raises PolicyFileError: naming the first failing example, its expected and actual decision and the rule.
    """
    failures: list[PolicyFileError] = []
    for key, expected in _EXAMPLE_KINDS:
        for index, example in enumerate(getattr(policy.policy.examples, key)):
            decision = _decide("<example>", example, lambda _host: [policy])
            if decision.decision != expected:
                loc = ("examples", key, index)
                failures.append(PolicyFileError(
                    policy.path, policy.document.line_of(loc), ".".join(map(str, loc)),
                    f"example {example!r} must be {expected} but is {decision.decision} "
                    f"(rule {decision.rule_id!r}: {decision.reason})",
                ))  # fmt: skip
    if failures:
        first = failures[0]
        if len(failures) > 1:
            first = PolicyFileError(
                first.path, first.line, first.key, f"{first.message} (and {len(failures) - 1} more failing examples)"
            )
        raise first
