"""Read a policy file into a :class:`~agent_tools.policy.model.Policy`, keeping line numbers for errors.

The YAML is composed into nodes (``yaml.compose`` with the safe loader) and converted by hand so that every
key and list item keeps its line; pydantic error locations are then mapped back to those lines. Duplicate keys
are an error (PyYAML would keep the last one silently). Scalars that are list items are read as the strings
written (so ``[init, 0]``, ``[kill, -9, -1]`` and ``[~]`` are words, not numbers or null).
"""

from __future__ import annotations

import difflib
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml
from pydantic import BaseModel, ValidationError

from agent_tools.policy.errors import PolicyFileError
from agent_tools.policy.model import Policy

__all__ = ["PolicyDocument", "load_policy_file", "load_policy_text"]

log = structlog.get_logger(__name__)

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class PolicyDocument:
    """A validated policy with where it came from and the line of every key/item (1-based)."""

    policy: Policy
    path: str
    lines: dict[Loc, int]

    def line_of(self, loc: Loc) -> int | None:
        """Line of the deepest known prefix of ``loc``."""
        return _line_of(self.lines, loc)


def _line_of(lines: dict[Loc, int], loc: Loc) -> int | None:
    for end in range(len(loc), -1, -1):
        line = lines.get(tuple(loc[:end]))
        if line is not None:
            return line
    return None


def _convert(node: yaml.Node, loc: Loc, lines: dict[Loc, int], loader: yaml.SafeLoader, path: str) -> Any:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        loader.flatten_mapping(node)  # resolves `<<:` merge keys
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise PolicyFileError(path, key_node.start_mark.line + 1, _dotted(loc), "mapping keys must be text")
            if key in result:
                raise PolicyFileError(
                    path, key_node.start_mark.line + 1, _dotted((*loc, str(key))), f"duplicate key {key!r}"
                )
            child_loc = (*loc, str(key))
            lines[child_loc] = key_node.start_mark.line + 1
            result[key] = _convert(value_node, child_loc, lines, loader, path)
        return result
    if isinstance(node, yaml.SequenceNode):
        items: list[Any] = []
        for index, item in enumerate(node.value):
            child_loc = (*loc, index)
            lines[child_loc] = item.start_mark.line + 1
            if isinstance(item, yaml.ScalarNode):
                items.append(str(item.value))
            else:
                items.append(_convert(item, child_loc, lines, loader, path))
        return items
    return loader.construct_object(node, deep=True)


def _dotted(loc: Loc) -> str:
    return ".".join(str(part) for part in loc)


def load_policy_text(text: str, path: str = "<string>") -> PolicyDocument:
    """Parse and validate policy YAML ``text`` (examples are checked by the engine, not here).

    :param text: the YAML document.
    :param path: name used in error messages.
    :raises PolicyFileError: YAML syntax error, duplicate key, schema violation; with file, line and key.
    """
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            raise PolicyFileError(path, None, None, "the file is empty")
        lines: dict[Loc, int] = {}
        data = _convert(root, (), lines, loader, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyFileError(path, line, None, f"invalid YAML: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise PolicyFileError(path, None, None, f"invalid YAML: {exc}") from exc
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise PolicyFileError(path, lines.get(()), None, "the top level must be a mapping")
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise _from_validation(exc, path, lines) from exc
    problems = _semantic_problems(policy)
    if problems:
        loc, message = problems[0]
        raise PolicyFileError(path, _line_of(lines, loc), _dotted(loc), message)
    log.debug("policy.file_loaded", path=path, rules=len(policy.rules))
    return PolicyDocument(policy, path, lines)


def load_policy_file(path: str | Path) -> PolicyDocument:
    """Read and validate the policy file at ``path``.

    :raises PolicyFileError: unreadable file, or any error of :func:`load_policy_text`.
    """
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(name, None, None, f"cannot read the file: {exc}") from exc
    return load_policy_text(text, name)


def _keys_at(loc: Loc) -> list[str]:
    """The keys the policy schema allows in the mapping at ``loc`` (its model's field names; [] when unknown)."""
    model: Any = Policy
    for part in loc:
        if isinstance(part, int):
            continue  # an item of a list: the list's model stays
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        annotation = field.annotation
        model = next((a for a in (annotation, *typing.get_args(annotation),
                                  *(b for a in typing.get_args(annotation) for b in typing.get_args(a)))
                      if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return []
    return list(getattr(model, "model_fields", {}))


def _from_validation(exc: ValidationError, path: str, lines: dict[Loc, int]) -> PolicyFileError:
    """Every problem, worded for the file, the first one leading (its line and key are the error's): a misspelt
    key (``decison:``) is reported as that unknown key with the key it most likely meant (a missing required key
    first, else any key allowed there), not as the missing required key alone (pydantic reports the missing key
    first, and the one the author typed would never be named); each further problem follows with its key and
    line."""
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    ordered = unknown + [e for e in errors if e["type"] != "extra_forbidden"]
    said: list[tuple[Loc, str]] = []
    covered: set[Loc] = set()  # missing keys named as what a misspelt key meant
    for e in ordered:
        loc: Loc = tuple(e["loc"])
        if loc in covered:
            continue
        message = e["msg"]
        if e["type"] == "extra_forbidden":
            message = f"unknown key {loc[-1]!r}"
            missing = [str(m["loc"][-1]) for m in errors if m["type"] == "missing"
                       and tuple(m["loc"][:-1]) == loc[:-1] and tuple(m["loc"]) not in covered]
            close = difflib.get_close_matches(str(loc[-1]), missing, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean {close[0]!r} (a required key that is missing)?"
                covered.add((*loc[:-1], close[0]))
            else:
                close = difflib.get_close_matches(str(loc[-1]), _keys_at(loc[:-1]), n=1, cutoff=0.6)
                if close:
                    message += f"; did you mean {close[0]!r}?"
        elif e["type"] == "missing":
            message = f"missing required key {loc[-1]!r}"
        said.append((loc, message))
    loc, message = said[0]
    if len(said) > 1:
        message += "; also: " + "; ".join(
            f"{_dotted(other) or '(top)'}" + (f" (line {line})" if (line := _line_of(lines, other)) else "")
            + f": {text}" for other, text in said[1:])
    return PolicyFileError(path, _line_of(lines, loc), _dotted(loc) or None, message)


def _semantic_problems(policy: Policy) -> list[tuple[Loc, str]]:
    """Checks that need the whole file: unique rule ids."""
    problems: list[tuple[Loc, str]] = []
    seen: dict[str, int] = {}
    for index, rule in enumerate(policy.rules):
        if rule.id in seen:
            problems.append((("rules", index, "id"), f"rule id {rule.id!r} already used by rules.{seen[rule.id]}"))
        seen.setdefault(rule.id, index)
    return problems
