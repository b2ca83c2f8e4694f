"""Pydantic models of a policy file (``policies/*.yaml``) and of a decision.

A policy file::

    version: 1
    hosts: ["gpu-*"]                  # fnmatch globs on the host alias ("local" is the local host)
    connection: {user: root, known_hosts: strict, keepalive_interval_s: 15}
    defaults: {budget_s: 15, on_timeout: detach, hard_deadline_s: 3600, decision: ask}
    rules:                            # ordered: the first matching rule decides a simple command
      - id: restart-unit
        match: [systemctl, "**", "restart|start|stop", "{unit}"]
        decision: ask
        detach: immediately
        deadline_from: unit_timeout
        probes: [{kind: systemd_unit, unit: "{unit}"}]
    examples: {must_allow: [...], must_ask: [...], must_deny: [...]}
    redact: ['(?i)my-internal-token-[a-z0-9]+']

Match tokens (``match``, ``args_contain``, ``match_any_arg``, ``only_args``, ``redirect_to``, ``redirect_not_to``,
``cwd``): a literal word;
``*`` any one word; ``**`` any number of words and ``-**`` any number of option words (both only in ``match``;
an option's value goes with it: ``systemctl -p status restart x`` is not ``status``, and for a program whose
options :mod:`agent_tools.policy.options` does not know, an ``allow`` rule does not look past an option without
``=``, which may take the next word); ``a|b|c`` alternatives; an fnmatch glob
(``*.service``; write ``[*]`` for a literal star, e.g. ``/[*]`` is the word ``/*``); ``{name}`` (only in
``match``) captures one word that does not start with ``-`` for use in ``probes``; ``{name:GLOB|GLOB}`` also
requires the word to match. ``match`` is a prefix
pattern: words after the pattern are allowed unless ``exact: true``. Arguments are compared both as written and
lexically normalised (``//`` and ``/.`` are ``/``), and a relative one also as resolved in a directory the
command line moved to (a call's ``cwd``, a ``cd``; for an ``ask`` or ``deny`` rule every directory it may run in, so
``cd / && rm -rf *`` is ``rm -rf /*`` and ``cd /etc && cat shadow`` names ``/etc/shadow``);
a word holding an expansion is compared by its source text (``$HOME``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from agent_tools.errors import BadArguments
from agent_tools.policy.shell import SimpleCommand
from agent_tools.probes.specs import probe_from_dict

__all__ = [
    "CommandDecision",
    "Connection",
    "Decision",
    "DecisionKind",
    "Defaults",
    "Examples",
    "Policy",
    "Rule",
]

DecisionKind = Literal["allow", "ask", "deny"]
OnTimeout = Literal["detach", "kill"]

SEVERITY: dict[str, int] = {"allow": 0, "ask": 1, "deny": 2}
"""Order of strictness: deny > ask > allow."""

_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_CAPTURE_TOKEN_RE = re.compile(r"^\{([A-Za-z_][A-Za-z0-9_]*)(?::(.+))?\}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Connection(_Strict):
    """SSH connection settings for the hosts of a policy file. ``None`` fields fall back to the next file."""

    user: str | None = Field(None, description="Login user; None: the SSH config / current user.")
    port: int | None = Field(None, ge=1, le=65535, description="TCP port; None: the SSH config / 22.")
    known_hosts: Literal["strict", "accept-new"] | None = Field(
        None, description="strict: the host key must be known; accept-new: trust on first use."
    )
    keepalive_interval_s: float | None = Field(None, gt=0, description="Seconds between SSH keepalives.")
    keepalive_count_max: int | None = Field(None, ge=1, description="Unanswered keepalives before giving up.")
    connect_timeout_s: float | None = Field(None, gt=0, description="Deadline for connect + auth, seconds.")
    max_sessions: int | None = Field(
        None, ge=1, le=64, description="Concurrent channels per connection (OpenSSH MaxSessions default: 10)."
    )


class Defaults(_Strict):
    """Values used when a rule does not set them; ``None`` falls back to the next file, then built-ins."""

    budget_s: float | None = Field(
        None, gt=0, description="Seconds a command may run in the foreground before on_timeout applies."
    )
    on_timeout: OnTimeout | None = Field(None, description="detach: keep it running as a job; kill: stop it.")
    hard_deadline_s: float | None = Field(
        None, gt=0, description="Seconds from its start after which a job is killed, on the host (by its monitor)."
    )
    decision: DecisionKind | None = Field(None, description="Decision for commands no rule matches (ask).")


class Rule(_Strict):
    """One ordered rule; the first rule of a file whose conditions all hold decides a simple command."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$", description="Unique id within the file.")
    match: list[str] = Field(min_length=1, description="argv prefix pattern (see module docs).")
    exact: bool = Field(False, description="Require the pattern to cover every word (no trailing words).")
    args_contain: list[str] = Field(
        default_factory=list, description="Each token must match some argument (AND; `a|b` within a token)."
    )
    match_any_arg: list[str] = Field(
        default_factory=list, description="At least one argument must match one of these tokens (OR). For a rule "
        "that asks or denies, a file read through an input redirection (< FILE) counts as an argument, and so do "
        "a glob that may name a matching word (/etc/sha*), every file below a directory the command reads "
        "recursively (grep -r x /etc reads /etc/shadow; find -exec cat {} +) and a file in an option's value."
    )
    only_args: list[str] | None = Field(
        None, description="Every word after the matched prefix must match one of these tokens."
    )
    redirect_to: str | None = Field(
        None,
        description="Token a written file must match: output redirections, dd of=, tee files, programs' output "
        "operands and options (/dev/null and the standard streams are not writes). An allow rule covers a "
        "command that writes files only when every written file matches its redirect_to.",
    )
    redirect_not_to: str | None = Field(
        None, description="Written files matching this token do not count for redirect_to (e.g. /dev/shm/*)."
    )
    cwd: str | None = Field(
        None,
        description="Token the directory the command runs in must match (`~` is the login directory, `~/*` below "
        "it); a directory the policy cannot know for sure (after `cd $X`, or several possible) never matches.",
    )
    decision: DecisionKind
    reason: str = Field("", description="Shown to the agent and the approver.")
    budget_s: float | None = Field(None, gt=0, description="Foreground budget in seconds.")
    on_timeout: OnTimeout | None = None
    deadline_s: float | None = Field(
        None, gt=0, description="Seconds until probes must pass; the fallback when deadline_from fails."
    )
    deadline_from: Literal["unit_timeout"] | None = Field(
        None, description="unit_timeout: the unit's TimeoutStartUSec (systemctl show) + 30 s is the deadline for "
        "probes and a kill deadline."
    )
    hard_deadline_s: float | None = Field(
        None, gt=0, description="Seconds from its start after which the job is killed on the host (default: the "
        "files' defaults)."
    )
    detach: Literal["immediately", "on_budget"] = Field(
        "on_budget", description="immediately: start as a detached job at once; on_budget: when budget_s ends."
    )
    probes: list[dict[str, Any]] = Field(
        default_factory=list, description="Readiness probes; `{name}` is replaced by the captured word."
    )

    @field_validator("match", "args_contain", "match_any_arg", "only_args")
    @classmethod
    def _no_empty_tokens(cls, value: list[str] | None) -> list[str] | None:
        for token in value or []:
            if token == "" or any(alt == "" for alt in token.split("|")):
                raise ValueError(f"empty token or alternative in {token!r}")
        return value

    @field_validator("match")
    @classmethod
    def _capture_names_unique(cls, value: list[str]) -> list[str]:
        names = [m.group(1) for tok in value if (m := _CAPTURE_TOKEN_RE.match(tok))]
        if len(names) != len(set(names)):
            raise ValueError("a capture name appears twice")
        return value

    @model_validator(mode="after")
    def _placeholders_are_captured(self) -> Rule:
        captured = {m.group(1) for tok in self.match if (m := _CAPTURE_TOKEN_RE.match(tok))}
        used = {name for probe in self.probes for name in _placeholders(probe)}
        missing = sorted(used - captured)
        if missing:
            raise ValueError(f"probes use {{{missing[0]}}}, which match does not capture")
        for i, probe in enumerate(self.probes):  # checked at load (a captured word stands in as "1"), not at a run
            try:
                probe_from_dict(_filled(probe, "1"))
            except BadArguments as exc:
                raise ValueError(f"probes[{i}]: {exc.message}") from None
        return self

    def captures(self) -> list[str]:
        """Names captured by ``{name}`` tokens of ``match``, in order."""
        return [m.group(1) for tok in self.match if (m := _CAPTURE_TOKEN_RE.match(tok))]


def _filled(value: Any, word: str) -> Any:
    """``value`` (a probe spec) with every ``{name}`` placeholder replaced by ``word``."""
    if isinstance(value, str):
        return _PLACEHOLDER_RE.sub(word, value)
    if isinstance(value, dict):
        return {k: _filled(v, word) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, word) for v in value]
    return value


def _placeholders(value: Any) -> set[str]:
    if isinstance(value, str):
        return set(_PLACEHOLDER_RE.findall(value))
    if isinstance(value, dict):
        return {n for v in value.values() for n in _placeholders(v)}
    if isinstance(value, list):
        return {n for v in value for n in _placeholders(v)}
    return set()


class Examples(_Strict):
    """Commands checked when the file loads (with this file alone): a mismatch refuses the file."""

    must_allow: list[str] = Field(default_factory=list)
    must_ask: list[str] = Field(default_factory=list)
    must_deny: list[str] = Field(default_factory=list)


class Policy(_Strict):
    """One policy file."""

    version: Literal[1] = Field(description="Format version; only 1 exists.")
    hosts: list[str] = Field(min_length=1, description="fnmatch globs on host aliases, e.g. gpu-*, local, *.")
    connection: Connection | None = None
    defaults: Defaults = Field(default_factory=Defaults)
    rules: list[Rule] = Field(default_factory=list)
    examples: Examples = Field(default_factory=Examples)
    redact: list[str] = Field(
        default_factory=list, description="Extra regexes to redact on every path of a process that loads the file "
        "(journal, approvals, logs, results, the CLI); a group named `secret` limits the span."
    )

    @field_validator("redact")
    @classmethod
    def _regexes_compile(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"invalid regex {pattern!r}: {exc}") from exc
        return value

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        """JSON Schema (draft 2020-12) of a policy file, for editors and ``agent-tools policy schema``."""
        schema = cls.model_json_schema(mode="validation")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["title"] = "agent_tools policy file"
        return schema


class CommandDecision(BaseModel):
    """How one simple command of a command line was decided."""

    model_config = ConfigDict(frozen=True)

    argv: list[str]
    text: str = Field("", description="The source text of the command.")
    wrappers: list[str] = Field(default_factory=list, description="Unwrapped wrappers, outermost first.")
    opaque: bool = False
    opaque_reason: str | None = None
    target_host: str | None = Field(None, description="Host the command runs on through ssh, if any.")
    args_from_stdin: bool = False
    writes: list[str] = Field(default_factory=list)
    cwd: str | None = Field("~", description="The directory it surely runs in (`~`: the login directory), or None.")
    decision: DecisionKind
    rule_id: str = Field(
        description="Deciding rule; `<default>` (no rule matched), `<opaque>` (allow lowered to ask because "
        "the command is opaque), `<writes>` (allow lowered to ask because the command writes a file its rule does "
        "not name) or `<no-policy>` (no file covers the host)."
    )
    matched_rule_id: str | None = Field(None, description="The rule that matched, when rule_id is <opaque> or "
                                                          "<writes>.")
    reason: str = ""
    policy_file: str | None = None

    @classmethod
    def from_command(cls, command: SimpleCommand, **decided: Any) -> CommandDecision:
        return cls(
            argv=command.argv, text=command.text, wrappers=command.wrappers, opaque=command.opaque,
            opaque_reason=command.opaque_reason, target_host=command.target_host,
            args_from_stdin=command.args_from_stdin, writes=command.writes, cwd=command.cwd, **decided,
        )  # fmt: skip


class Decision(BaseModel):
    """The decision for a whole command line on one host.

    ``decision`` is the strictest decision of its simple commands (deny > ask > allow). The *deciding* command
    is the first one at that level whose decision came from a rule (else the first one at that level);
    ``rule_id``, ``budget_s``, ``on_timeout``, ``deadline_*`` and ``detach_immediately`` come from its rule,
    falling back to the file defaults. ``probes`` gathers the probes of every rule-decided command at that
    level, placeholders filled. ``reason`` joins the reasons of the commands at that level.
    """

    model_config = ConfigDict(frozen=True)

    host: str
    command: str
    cwd: str | None = Field(None, description="The directory the command line starts in (None: the login one).")
    env: dict[str, str] | None = Field(None, description="Variables exported before it runs (a call's env).")
    decision: DecisionKind
    rule_id: str
    reason: str
    budget_s: float = Field(description="Foreground budget, seconds.")
    on_timeout: OnTimeout
    deadline_s: float | None = Field(None, description="Seconds for probes to pass (fallback of deadline_from).")
    deadline_from: Literal["unit_timeout"] | None = None
    hard_deadline_s: float | None = Field(
        None, description="Seconds from its start after which the job is killed on the host (by its monitor)."
    )
    hard_deadline_from: str = Field("", description="Where hard_deadline_s comes from: 'rule ID of FILE' or "
                                                    "'defaults of FILE'.")
    detach_immediately: bool = False
    probes: list[dict[str, Any]] = Field(default_factory=list)
    commands: list[CommandDecision] = Field(default_factory=list)
    policy_files: list[str] = Field(default_factory=list, description="Files that apply to the host.")
