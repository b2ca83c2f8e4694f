"""``ErrorKind`` lists every ``kind`` an ``error`` outcome can carry, and nothing else.

Kinds come from two places: the ``kind`` of each class of the error tree (errors.py), and outcomes the code builds
itself (``ErrorOutcome(kind="launch", ...)``, a CLI's ``{"outcome": "error", "kind": ...}``). Both are collected
here from the code (the classes by walking the tree, the literals by reading every module's syntax tree), so a new
kind that is not listed fails this test, and so does a listed kind nothing produces.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import agent_tools
from agent_tools import errors
from agent_tools.errors import AgentToolsError, ErrorKind
from agent_tools.outcomes import ErrorOutcome

PACKAGE = Path(agent_tools.__file__).resolve().parent


def _classes(base: type[AgentToolsError]) -> list[type[AgentToolsError]]:
    out = [base]
    for sub in base.__subclasses__():
        out += _classes(sub)
    return out


def _literal_kinds() -> dict[str, list[str]]:
    """``kind`` string literals of ``ErrorOutcome(...)`` calls and of dicts with ``"outcome": "error"``, with where."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            kinds: list[ast.expr] = []
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == \
                    "ErrorOutcome":
                kinds = [k.value for k in node.keywords if k.arg == "kind"]
            elif isinstance(node, ast.Dict):
                pairs = {k.value: v for k, v in zip(node.keys, node.values, strict=True)
                         if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                outcome = pairs.get("outcome")
                if isinstance(outcome, ast.Constant) and outcome.value == "error" and "kind" in pairs:
                    kinds = [pairs["kind"]]
            for k in kinds:
                if isinstance(k, ast.Constant) and isinstance(k.value, str):
                    found.setdefault(k.value, []).append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_every_kind_produced_in_code_is_listed() -> None:
    listed = set(get_args(ErrorKind))
    for cls in _classes(AgentToolsError):
        assert cls.kind in listed, f"{cls.__name__}.kind {cls.kind!r} is not in errors.ErrorKind"
    literals = _literal_kinds()
    assert {"launch", "start_unconfirmed", "approval", "bad_arguments"} <= set(literals)  # the scan finds them
    missing = {k: where for k, where in literals.items() if k not in listed}
    assert not missing, f"kinds produced in code but not in errors.ErrorKind: {missing}"


def test_every_listed_kind_is_produced_somewhere() -> None:
    produced = {cls.kind for cls in _classes(AgentToolsError)} | set(_literal_kinds())
    assert set(get_args(ErrorKind)) - produced == set()


def test_the_outcome_schema_lists_the_kinds() -> None:
    schema = ErrorOutcome.model_json_schema()["properties"]["kind"]
    assert schema["enum"] == list(get_args(ErrorKind))
    assert errors.ErrorKind is ErrorKind
