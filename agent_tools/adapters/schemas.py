"""Tool schemas for every agent runtime, and tool results the model can afford to read — from one source.

Schemas: each :class:`~agent_tools.tools.toolkit.ToolSpec` (name, description, pydantic args model) becomes
the runtime's tool declaration. Nothing is kept by hand per vendor: the args model's JSON Schema is cleaned
once (:func:`clean_schema`: local ``$ref`` inlined, ``$defs`` and ``title`` dropped) and wrapped:

=====================  ===========================================================================
``mcp``                ``{"name", "description", "inputSchema", "outputSchema"}`` (MCP ``Tool``;
                       ``outputSchema`` from the tool's result models, see :func:`output_schema`)
``openai``             ``{"type": "function", "function": {"name", "description", "parameters"}}``
                       (Chat Completions ``ChatCompletionFunctionToolParam``)
``openai-responses``   ``{"type": "function", "name", "description", "parameters", "strict": false}``
                       (Responses ``FunctionToolParam``; ``strict`` is a required key there)
``anthropic``          ``{"name", "description", "input_schema"}`` (Messages ``ToolParam``)
=====================  ===========================================================================

Why OpenAI ``strict`` stays off: strict mode (Structured Outputs) accepts a schema only when every property
is listed in ``required`` (optional ones as ``["T", "null"]``) and every object has ``additionalProperties:
false``, and it supports a subset of keywords. Our arguments have real defaults (``wait_s=0``, ``budget_s``
from the host policy), so strict mode would force the model to spell out every default on every call, and
the schema would have to be rewritten per vendor. Validation happens anyway in
:meth:`Toolkit.dispatch <agent_tools.tools.toolkit.Toolkit.dispatch>`, whose ``bad_arguments`` error tells
the model what to fix. (Sources: OpenAI function-calling guide, "strict mode"; ``FunctionDefinition.strict``
and ``FunctionToolParam.strict`` in the openai SDK.)

Results: :func:`encode_result` turns a tool's JSON-ready dict into compact JSON of at most
:data:`DEFAULT_MAX_RESULT_TOKENS` tokens (600, by :func:`estimate_tokens`, which errs a little high) and
:data:`DEFAULT_MAX_RESULT_CHARS` characters. When a result is larger, probe evidence that ``why`` says again is
replaced by "(see probes)", output views are shortened head + tail, then other long strings (never ``next`` or
a name: host, unit, job_id, path, ...; the lines explaining a failure are kept), then long lists (never a failing
probe); the result says so in its ``shortened`` field, each marker says exactly how many characters it stands for
and, in output, the offset ``job_output`` reads on from; the full output stays on the host.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import re
import types
import typing
from collections.abc import Callable, Sequence
from typing import Any, Literal, get_args

import anyio
import structlog
from pydantic import BaseModel, TypeAdapter

from ..outcomes import ErrorOutcome, drop_repeated_evidence
from ..tools.toolkit import Toolkit, ToolSpec

__all__ = [
    "DEFAULT_MAX_RESULT_CHARS",
    "DEFAULT_MAX_RESULT_TOKENS",
    "ERROR_OUTCOMES",
    "ToolFormat",
    "anthropic_tools",
    "attr_or_key",
    "bound_result",
    "clean_schema",
    "dispatch_all",
    "encode_result",
    "estimate_tokens",
    "is_error_result",
    "mcp_tools",
    "openai_responses_tools",
    "openai_tools",
    "output_schema",
    "tool_schema",
    "tool_schemas",
]

log = structlog.get_logger(__name__)

ToolFormat = Literal["mcp", "openai", "openai-responses", "anthropic"]
"""The runtimes :func:`tool_schemas` can declare tools for."""

DEFAULT_MAX_RESULT_CHARS = 8000
"""Bound on one tool result as the model reads it (characters of compact JSON), besides the token bound."""

DEFAULT_MAX_RESULT_TOKENS = 600
"""Bound on one tool result as the model reads it (tokens as :func:`estimate_tokens` counts them)."""

_PIECE_RE = re.compile(r" ?[a-z]_[a-z2-7]{16}(?![A-Za-z0-9])|\\\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[a-z0-9])"
                       r"|\\(?:[nrtbf\"\\/]|u[0-9a-fA-F]{4})| ?[A-Za-z]+|[0-9]+|[ \t]+|\n+"
                       r"|[!-/:-@\[-`{-~]+|[^\x00-\x7f]|.", re.S)
_CASE_FLIP_RE = re.compile(r"[a-z][A-Z]|[A-Z]{2}[a-z]")


def estimate_tokens(text: str) -> int:
    """Tokens ``text`` takes for a model, estimated without a tokenizer and on the high side.

    Calibrated against tiktoken's ``cl100k_base`` (a byte-level BPE) on a corpus of real tool results and
    command outputs (the recorded walkthroughs, the session transcripts of ``tests/transcripts``, results of
    every tool on this machine): the weights below are the least that never count below the real number there,
    fitted as a linear program (each piece kind is one term). A word of letters (a blank before it included)
    is 0.88 of a token plus 0.26 a letter past five and 0.12 at a change of case; digits go three to a token; a
    JSON ``\\n`` is one token, another escape about half of one, a visible escape of the output views as JSON
    (``\\\\x1b``, ``\\\\u202e``: four tokens; ``\\\\r``: two; a tty job's screen is full of them); a run of blanks
    1.6; a run of punctuation 0.85 plus 0.25 a character after its first (``":"`` and ``","`` are one token
    each); a character beyond ASCII 1 to 3 tokens by its UTF-8 length; one of this project's ids (``j_``, ``b_``,
    ``k_``... + 16 random base32 letters and digits, which cl100k splits into 8 to 16 tokens, 11.6 on average) 12.
    On that corpus the estimate is 1.0 to 1.27 times the real count (3 % are added for what the corpus lacks), so a
    result well under the bound is never cut for it.

    :returns: a count (int >= 0).
    """
    n = 0.0
    for piece in _PIECE_RE.findall(text):
        c = piece[0]
        if piece[-17:-16] == "_" and piece[-18:-17].isalpha():  # an id of this project (j_ + 16 base32)
            n += 12.0
        elif piece.startswith("\\\\") and len(piece) > 2:  # a visible escape as JSON (\\x1b, \\u202e, \\r)
            n += 2.0 if len(piece) == 3 else 4.0
        elif c == "\\" and len(piece) > 1:  # a JSON escape (\n, \", \u001b)
            n += 1.0 if piece == "\\n" else 0.56 if len(piece) == 2 else 3.5
        elif piece[-1].isascii() and piece[-1].isalpha():  # a word, with the blank before it
            n += 0.88 + 0.26 * max(0, len(piece.lstrip(" ")) - 5) + 0.12 * len(_CASE_FLIP_RE.findall(piece))
        elif c.isdigit():
            n += 1.07 * -(-len(piece) // 3)
        elif c in " \t\n":
            n += 1.63 if len(piece) == 1 else 2.21
        elif c.isascii():
            n += 0.85 + 0.25 * (len(piece) - 1)
        else:
            n += (1, 1, 2, 3)[len(c.encode("utf-8", "surrogatepass")) - 1]
    return math.ceil(n * 1.03)


ERROR_OUTCOMES = frozenset({"error", "denied"})
"""Outcomes that adapters flag as failed calls (MCP ``isError``, Anthropic ``is_error``)."""

# JSON Schema keywords whose value is one subschema / a list of subschemas / a map of name -> subschema.
_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
              "unevaluatedItems", "unevaluatedProperties")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
_NUMBER_KEYS = ("default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


# ---------------------------------------------------------------------------------------------- schemas
def clean_schema(schema: dict[str, Any], *, nulls: bool = False) -> dict[str, Any]:
    """A self-contained copy of a pydantic JSON Schema that every runtime accepts.

    Local references (``{"$ref": "#/$defs/Name"}``) are replaced by the definition they name (sibling
    keywords such as ``description`` kept), ``$defs``/``definitions`` are dropped, and so is every
    ``title`` keyword (pydantic's generated titles repeat the property names and cost tokens; a property
    *named* ``title`` is kept). An optional field (``anyOf: [T, null]`` with ``default: null``) becomes ``T``
    (it is simply not required); the OpenAPI ``discriminator`` keyword (its mapping names the dropped
    ``$defs``) is dropped and ``oneOf`` becomes ``anyOf`` (the variants differ in a ``const`` anyway); a
    ``type`` next to a ``const`` is dropped (the constant says it), and so is ``minimum: 0`` ("not negative"
    goes without saying for sizes and seconds; the arguments model still enforces it, and a negative value gets
    a ``bad_arguments`` error). The root is an object schema (``"type": "object"`` and ``"properties"``).

    :param schema: the schema as :meth:`pydantic.BaseModel.model_json_schema` returns it (not modified).
    :param nulls: keep ``anyOf: [T, null]`` of optional fields as they are (an output schema: a result may hold
        an explicit ``null``; an argument is simply left out).
    :returns: a new dict.
    :raises ValueError: a ``$ref`` that is not local or names a missing definition, or a recursive model
        (it cannot be inlined; give the tool flat arguments).
    """
    defs: dict[str, Any] = {**schema.get("definitions", {}), **schema.get("$defs", {})}

    def walk(node: Any, stack: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(n, stack) for n in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:
            ref = node["$ref"]
            prefix = next((p for p in ("#/$defs/", "#/definitions/") if isinstance(ref, str)
                           and ref.startswith(p)), None)
            if prefix is None or ref[len(prefix):] not in defs:
                raise ValueError(f"cannot inline $ref {ref!r}: only local #/$defs references are supported")
            name = ref[len(prefix):]
            if name in stack:
                raise ValueError(f"recursive schema ({' -> '.join((*stack, name))}) cannot be inlined")
            target = walk(defs[name], (*stack, name))
            siblings = walk({k: v for k, v in node.items() if k != "$ref"}, stack)
            return {**target, **siblings}
        out: dict[str, Any] = {}
        if not nulls and node.get("default", 0) is None and _nullable(node.get("anyOf")):
            # `x: T | None = None`: the model may leave it out; "T or null, default null" says the same in more
            # tokens (dispatch still accepts an explicit null)
            rest = [alt for alt in node["anyOf"] if alt != {"type": "null"}]
            return walk({**rest[0], **{k: v for k, v in node.items() if k not in ("anyOf", "default")}}, stack)
        for key, value in node.items():
            if key in ("title", "$defs", "definitions", "discriminator") or (key == "type" and "const" in node):
                continue
            if key == "minimum" and value == 0 and node.get("type") in ("integer", "number"):
                continue  # "not negative" goes without saying for sizes and seconds; validation still refuses it
            if key == "oneOf":  # variants told apart by a const `kind`: anyOf says the same, and every runtime
                key = "anyOf"   # takes it (OpenAI strict mode has no oneOf)
            if key in _SUBSCHEMA_MAPS and isinstance(value, dict):
                out[key] = {name: walk(sub, stack) for name, sub in value.items()}
            elif key in _SUBSCHEMA or key in _SUBSCHEMA_LISTS:
                out[key] = walk(value, stack)
            elif isinstance(value, float) and value.is_integer() and key in _NUMBER_KEYS:
                out[key] = int(value)  # "default": 0 rather than 0.0 (same JSON number, fewer tokens)
            else:
                out[key] = copy.deepcopy(value)
        return out

    cleaned: dict[str, Any] = walk(schema, ())
    cleaned.setdefault("type", "object")
    cleaned.setdefault("properties", {})
    if cleaned["type"] != "object":
        raise ValueError(f"tool arguments must be an object schema, got type {cleaned['type']!r}")
    return cleaned


def _nullable(alternatives: Any) -> bool:
    """``[T, {"type": "null"}]`` (one schema besides null)."""
    return (isinstance(alternatives, list) and len(alternatives) == 2 and {"type": "null"} in alternatives
            and all(isinstance(a, dict) for a in alternatives))


def _members(result_type: Any) -> list[type[BaseModel]]:
    """The model classes of a result annotation (a model, a union of models, ``Annotated[...]`` of one)."""
    origin = typing.get_origin(result_type)
    if origin is typing.Annotated:
        return _members(get_args(result_type)[0])
    if origin in (typing.Union, types.UnionType):
        return [m for arg in get_args(result_type) for m in _members(arg)]
    if isinstance(result_type, type) and issubclass(result_type, BaseModel):
        return [result_type]
    raise ValueError(f"a tool result must be a pydantic model or a union of them, got {result_type!r}")


ADAPTER_NOTE_SCHEMA: dict[str, Any] = {
    "type": "string", "description": "set when the result was shortened to fit: what was cut, and where to "
                                    "read on"}


def output_schema(result_type: Any) -> dict[str, Any]:
    """The JSON Schema of a tool's results (MCP ``outputSchema``), generated from its result models.

    The schema is pydantic's for ``result_type | ErrorOutcome`` (every tool may return an ``error`` outcome) in
    serialization mode — what ``model_dump(mode="json")`` produces, defaults included — cleaned like the input
    schemas (:func:`clean_schema`), with an ``object`` root (MCP requires one) and each result shape also
    allowing the ``shortened`` that :func:`bound_result` adds. It follows the models: a field added to a
    result model is in the schema.

    :param result_type: a model class or a union of them (:meth:`Toolkit.result_type`).
    :returns: a new dict (generated once per result type).
    :raises ValueError: ``result_type`` holds something that is not a pydantic model.
    """
    return copy.deepcopy(_output_schema(result_type))


@functools.lru_cache(maxsize=256)
def _output_schema(result_type: Any) -> dict[str, Any]:
    members = list(dict.fromkeys([*_members(result_type), ErrorOutcome]))
    union: Any = members[0] if len(members) == 1 else typing.Union[tuple(members)]  # noqa: UP007
    schema = clean_schema(TypeAdapter(union).json_schema(mode="serialization"), nulls=True)
    for variant in schema.get("anyOf") or schema.get("oneOf") or [schema]:
        variant.setdefault("properties", {})["shortened"] = dict(ADAPTER_NOTE_SCHEMA)
    return schema


def tool_schema(spec: ToolSpec, format: ToolFormat, *, result_type: Any = None) -> dict[str, Any]:
    """One tool's declaration for runtime ``format`` (see the module docstring for the shapes).

    :param result_type: the tool's result models (:meth:`Toolkit.result_type`); with ``mcp`` they become the
        ``outputSchema`` (:func:`output_schema`). None: no output schema is declared.
    :raises ValueError: unknown ``format``, or an args model that cannot be inlined (:func:`clean_schema`).
    """
    params = clean_schema(spec.args_model.model_json_schema())
    if format == "mcp":
        tool = {"name": spec.name, "description": spec.description, "inputSchema": params}
        if result_type is not None:
            tool["outputSchema"] = output_schema(result_type)
        return tool
    if format == "openai":
        return {"type": "function",
                "function": {"name": spec.name, "description": spec.description, "parameters": params}}
    if format == "openai-responses":
        return {"type": "function", "name": spec.name, "description": spec.description, "parameters": params,
                "strict": False}
    if format == "anthropic":
        return {"name": spec.name, "description": spec.description, "input_schema": params}
    raise ValueError(f"unknown tool format {format!r}; one of {', '.join(get_args(ToolFormat))}")


def tool_schemas(toolkit: Toolkit, format: ToolFormat) -> list[dict[str, Any]]:
    """Declarations of every tool registered on ``toolkit`` (registration order) for runtime ``format``.

    :param toolkit: any :class:`Toolkit`; tools added later with ``register()`` are included.
    :param format: ``"mcp"`` (with each tool's ``outputSchema`` when its handler declares its result models),
        ``"openai"`` (Chat Completions), ``"openai-responses"`` or ``"anthropic"``.
    :returns: JSON-ready dicts, ready to pass as ``tools=`` to the runtime's SDK.
    :raises ValueError: unknown ``format``, or an args model that cannot be inlined.
    """
    return [tool_schema(spec, format, result_type=toolkit.result_type(spec.name) if format == "mcp" else None)
            for spec in toolkit.specs]


def mcp_tools(toolkit: Toolkit) -> list[dict[str, Any]]:
    """``tool_schemas(toolkit, "mcp")``."""
    return tool_schemas(toolkit, "mcp")


def openai_tools(toolkit: Toolkit) -> list[dict[str, Any]]:
    """``tool_schemas(toolkit, "openai")``: the ``tools=`` of ``client.chat.completions.create``."""
    return tool_schemas(toolkit, "openai")


def openai_responses_tools(toolkit: Toolkit) -> list[dict[str, Any]]:
    """``tool_schemas(toolkit, "openai-responses")``: the ``tools=`` of ``client.responses.create``."""
    return tool_schemas(toolkit, "openai-responses")


def anthropic_tools(toolkit: Toolkit) -> list[dict[str, Any]]:
    """``tool_schemas(toolkit, "anthropic")``: the ``tools=`` of ``client.messages.create``."""
    return tool_schemas(toolkit, "anthropic")


# ---------------------------------------------------------------------------------------------- results
def is_error_result(result: dict[str, Any]) -> bool:
    """True for ``error`` and ``denied`` outcomes (what adapters flag as a failed tool call)."""
    return result.get("outcome") in ERROR_OUTCOMES


def _dumps(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


_MIN_TEXT_CHARS = 160
#: what stands where a result's text was cut to fit the result size (the words a model reads)
_MARKER = "\n… [{n} chars cut to fit the result size] …\n"
_VIEW_MARKER_RE = re.compile(r"bytes omitted; job_output\((?:job_id='[\w-]+', )?offset=(\d+)")


_EXPLAIN_RE = re.compile(r"(?i)\w*(?:error|exception)\b|\berrno\b|\bfatal\b|denied|refused|no such|not found"
                         r"|address already in use")
"""A line that says why something failed (an exception line, an errno, a refusal): kept when the middle of a long
free text is cut."""


def _shorten_middle(text: str, keep: int, resume: Callable[[str], str] | None = None) -> tuple[str, str]:
    """Keep a quarter of ``keep`` from the head and the rest from the tail; returns (new text, removed).

    Lines of the cut middle that explain a failure (:data:`_EXPLAIN_RE`: the exception line of a traceback)
    are kept between two markers (the last two of them, when they fit in half of ``keep``); each marker gives
    the exact count of characters cut at it.

    :param resume: given the kept head, the words that say where to read on (put in the marker); with it
        nothing is kept from the middle (the marker's offset must be the first byte left out)."""
    keep = max(keep, _MIN_TEXT_CHARS)
    if len(text) <= keep:
        return text, ""
    explaining: list[tuple[int, int]] = []  # (start, end) of kept middle lines
    if resume is None:
        room = keep // 2
        for m in reversed(list(re.finditer(r"[^\n]*\n?", text))):
            line = m.group()
            if line and _EXPLAIN_RE.search(line) and len(line) <= room and len(explaining) < 2:
                explaining.insert(0, (m.start(), m.end()))
                room -= len(line)
        keep -= sum(e - b for b, e in explaining)
    head = keep // 4
    start = len(text) - (keep - head)
    # cut at line ends where that loses little, so the model reads no half line
    nl = text.rfind("\n", 0, head)
    if nl >= head // 2:
        head = nl + 1
    nl = text.find("\n", start)
    if 0 <= nl < start + (len(text) - start) // 2:
        start = nl + 1
    if start <= head:
        return text, ""
    explaining = [(b, e) for b, e in explaining if b >= head and e <= start]
    cuts = [(head, b) for b, _ in explaining[:1]] + [(e1, b2) for (_, e1), (b2, _) in itertools.pairwise(explaining)]
    cuts.append((explaining[-1][1] if explaining else head, start))
    cuts = [(b, e) for b, e in cuts if e > b]
    out, at = [], 0
    for b, e in cuts:
        marker = _MARKER.format(n=e - b)
        if resume is not None:
            marker = marker.replace("] …", f"; {resume(text[:b])}] …")
        kept = text[at:b]
        sep = "" if kept.endswith("\n") or not b else "\n"
        out.append(kept + sep + marker.lstrip("\n"))
        at = e
    out.append(text[at:])
    removed = "".join(text[b:e] for b, e in cuts)
    return "".join(out), removed


def _water_level(lengths: list[int], budget: int) -> int:
    """The largest cap C with ``sum(min(n, C) for n in lengths) <= budget`` (0 when the budget is negative)."""
    remaining = max(budget, 0)
    ordered = sorted(lengths)
    for i, n in enumerate(ordered):
        left = len(ordered) - i
        if n * left > remaining:
            return remaining // left
        remaining -= n
    return ordered[-1] if ordered else 0


#: a visible escape agent_tools.display.safe_text writes for one control or format character
_ESCAPE_RE = re.compile(r"\\(?:x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8}|[0abtnvfre])")


def _raw_bytes_at_most(text: str) -> int:
    """Bytes of host output that ``text`` (cleaned by agent_tools.output) stands for, never overestimated:
    U+FFFD stands for >= 1 raw byte, a visible escape (``\\0``, ``\\x1b``, ``\\u202e``) for >= 1 byte; removed
    colours and CRs only make it larger."""
    escapes = sum(len(m.group()) - 1 for m in _ESCAPE_RE.finditer(text)) if "\\" in text else 0
    return max(0, len(text.encode()) - 2 * text.count("\ufffd") - escapes)


def _text_slots(node: Any, path: tuple[str | int, ...] = ()) -> list[tuple[dict[str, Any], tuple[str | int, ...]]]:
    """Every dict holding a ``text`` string (output views and output pages), depth first."""
    found: list[tuple[dict[str, Any], tuple[str | int, ...]]] = []
    if isinstance(node, dict):
        if isinstance(node.get("text"), str):
            found.append((node, path))
        for k, v in node.items():
            found.extend(_text_slots(v, (*path, k)))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found.extend(_text_slots(v, (*path, i)))
    return found


def _shrink_text_slot(item: tuple[dict[str, Any], tuple[str | int, ...]], keep: int,
                      originals: dict[int, tuple[str, Any]], job_id: Any = None) -> bool:
    """Cut the slot's text to about ``keep`` characters, always from its text as the tool gave it (kept in
    ``originals`` by the slot's id), so the marker and ``omitted_bytes`` count every character cut (``job_id``:
    the result's job, named in the marker's call)."""
    slot, path = item
    stream = ", stream='stderr'" if path and "stderr" in str(path[-1]) else ""
    if len(slot["text"]) <= max(keep, _MIN_TEXT_CHARS):
        return False
    text, omitted = originals.setdefault(id(slot), (slot["text"], slot.get("omitted_bytes")))
    if "next_offset" in slot and "offset" in slot:
        # a page of job_output: keep its head so paging continues from the shown end (never skips a byte)
        kept = text[:max(keep, _MIN_TEXT_CHARS)]
        slot["text"] = kept
        if isinstance(slot["offset"], int):
            slot["next_offset"] = min(int(slot["next_offset"]), slot["offset"] + _raw_bytes_at_most(kept))
            if "eof" in slot:
                slot["eof"] = slot["next_offset"] >= int(slot.get("total_bytes") or 0)
        return True
    def resume(kept_head: str) -> str:
        # where the first byte cut out lies in the stream: after the kept head, unless the kept head already
        # holds the view's own marker (then the cut lies in the tail part: read on from that marker's offset)
        found = _VIEW_MARKER_RE.search(kept_head)
        if found:
            at = int(found.group(1))
        else:
            start = slot.get("offset")
            at = (start if isinstance(start, int) else 0) + _raw_bytes_at_most(kept_head)
            found = _VIEW_MARKER_RE.search(text)
            if found:  # never point past the view's own gap
                at = min(at, int(found.group(1)))
        job = f"job_id={job_id!r}, " if isinstance(job_id, str) else ""
        return f"job_output({job}offset={at}{stream}) reads on from there"

    view = "omitted_bytes" in slot or "total_bytes" not in slot  # an output view (a file's text has total_bytes)
    new, removed = _shorten_middle(text, keep, resume if view and "path" not in slot else None)
    if len(new) >= len(slot["text"]):
        return False
    # the view's own marker cut out with the middle: it is no output; the one marker left says the whole gap
    own = re.search(r"… \[\d+ bytes omitted; job_output\([^)]*\) reads on from there\] …\n?", removed)
    cut_bytes = _raw_bytes_at_most(removed.replace(own.group(), "", 1) if own else removed)
    if isinstance(omitted, int):
        total = slot.get("total_bytes")
        slot["omitted_bytes"] = min(omitted + cut_bytes, total) if isinstance(total, int) else omitted + cut_bytes
        if own:
            new = re.sub(r"\[\d+ chars cut to fit the result size;",
                         f"[{omitted + cut_bytes} bytes omitted ({cut_bytes} of them to fit the result size);", new,
                         count=1)
    slot["text"] = new
    return True


_WHOLE_KEYS = frozenset({"next", "host", "unit", "job_id", "path", "url", "target", "backup_id", "kind", "state",
                         "outcome", "stream", "unit_file", "readiness"})
"""Fields never cut inside: a ``next`` is a call to copy, the others are names the model passes back."""


def _long_strings(node: Any, out: list[tuple[Any, str | int]]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k in _WHOLE_KEYS:
                continue
            if isinstance(v, str) and len(v) > _MIN_TEXT_CHARS:
                out.append((node, k))
            else:
                _long_strings(v, out)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            if isinstance(v, str) and len(v) > _MIN_TEXT_CHARS:
                out.append((node, i))
            else:
                _long_strings(v, out)


def _lists(node: Any, path: str, out: list[tuple[list[Any], str]]) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            _lists(v, f"{path}.{k}" if path else str(k), out)
    elif isinstance(node, list):
        out.append((node, path or "result"))
        for v in node:
            _lists(v, path, out)


def bound_result(result: dict[str, Any], *, max_chars: int = DEFAULT_MAX_RESULT_CHARS,
                 max_tokens: int = DEFAULT_MAX_RESULT_TOKENS) -> dict[str, Any]:
    """``result`` made to fit ``max_chars`` characters and ``max_tokens`` tokens (:func:`estimate_tokens`) of
    compact JSON (a new dict when it had to change).

    A page (``job_output``, ``read_file``: a top-level ``text`` with ``offset`` and ``total_bytes``) keeps the
    longest head that fits with the note, and ``next_offset`` is moved back to the end of what is shown (paging
    never skips a byte); a page is cut whenever its text is longer than that head, so a larger ``limit`` never shows
    less than a smaller one. A ``tail_lines`` page (``cut_before`` set) keeps the longest end instead, ``offset``
    moved forward to its start and ``cut_before`` grown by what was left out. Any other result, each step only
    while the JSON is still too long: (1) shorten output texts (``stdout``/``stderr`` views: head + tail with a
    marker that gives the offset job_output reads on from, ``omitted_bytes`` raised by what was cut); (2) shorten
    any other long string the same way; (3) drop the tail of the longest lists (a page of a list,
    ``list_jobs``'s ``jobs`` with ``total``, gets ``next_offset`` after the last item shown). Every change is named in
    ``shortened``. A result that still does not fit is replaced by its top-level scalars and the note.

    :param result: a JSON-ready dict (as :meth:`Toolkit.dispatch` returns).
    :param max_chars: the bound in characters (> 500).
    :param max_tokens: the bound in estimated tokens (> 150).
    """
    def fits(data: dict[str, Any]) -> bool:
        text = _dumps(data)
        return len(text) <= max_chars and estimate_tokens(text) <= max_tokens

    if _is_page(result):
        return _fit_page(result, fits, _PAGE_NOTE.format(tokens=max_tokens, chars=max_chars),
                         _TAIL_NOTE.format(tokens=max_tokens, chars=max_chars))
    if fits(result):
        return result
    # the largest character bound whose shortened result fits (binary search: each try is one _bound_chars)
    lo, hi = 500, min(max_chars, len(_dumps(result)) - 1)
    best: dict[str, Any] | None = None
    while lo <= hi:
        mid = (lo + hi) // 2
        attempt = _bound_chars(result, mid)
        if fits(attempt):
            # (the longest that fits: a larger bound can shorten differently, so the last try is not always it)
            if best is None or len(_dumps(attempt)) >= len(_dumps(best)):
                best = attempt
            lo = mid + 1
        else:
            hi = mid - 1
    bounded = best if best is not None else _bound_chars(result, 500)
    log.debug("adapter.result_bounded", before=len(_dumps(result)), after=len(_dumps(bounded)))
    return bounded


_PAGE_NOTE = ("text cut to fit the result size ({tokens} tokens, {chars} characters: it bounds a page besides limit); "
              "the same call with offset=next_offset reads on")


def _is_page(result: dict[str, Any]) -> bool:
    """A page of bytes (job_output, read_file): a top-level ``text`` with its ``offset`` and ``total_bytes``."""
    return (isinstance(result.get("text"), str) and isinstance(result.get("offset"), int)
            and isinstance(result.get("total_bytes"), int))


def _fit_page(result: dict[str, Any], fits: Callable[[dict[str, Any]], bool], note: str,
              tail_note: str = "") -> dict[str, Any]:
    """The page with the longest head of its text that fits together with ``note`` (binary search; a byte page is
    cut at the last line end before the bound, or where the bound falls when there is none: a larger ``limit``
    never shows less, but for the part of a line such a cut leaves to the next page; ``next_offset`` reads on from
    the first byte left out). A ``grep`` page
    (lines ``OFFSET:line``) keeps whole lines only, and its ``next_offset`` is the offset of the first line left
    out, where the search goes on. A ``tail_lines`` page (``cut_before`` set) keeps
    the longest *end* instead, with ``tail_note`` (:func:`_fit_tail_page`): it was asked for the output's end."""
    text: str = result["text"]
    grep = isinstance(result.get("grep"), str)
    if isinstance(result.get("cut_before"), int) and not grep:
        return _fit_tail_page(result, fits, tail_note)

    def head(n: int) -> str:
        kept = text[:n]
        if n < len(text) and (grep or "\n" in kept):
            kept = kept[:kept.rfind("\n") + 1]  # whole lines (a byte page without a line end is cut where it falls)
        return kept

    def cut(n: int) -> dict[str, Any]:
        kept = head(n)
        page = {**result, "text": kept}
        if grep:
            first_left = text[len(kept):].split(":", 1)[0]
            end = int(first_left) if first_left.isdigit() else int(result["next_offset"])
        else:
            end = int(result["offset"]) + _raw_bytes_at_most(kept)
        page["next_offset"] = min(int(result["next_offset"]), end) if isinstance(result.get("next_offset"), int) \
            else end
        if "eof" in page:
            page["eof"] = page["next_offset"] >= int(result.get("total_bytes") or 0) and (not grep or kept == text)
        page["shortened"] = note
        return page

    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(cut(mid)):
            lo = mid
        else:
            hi = mid - 1
    if lo >= len(text) and fits(result):
        return result
    return cut(lo)


_TAIL_NOTE = ("text cut at its start to fit the result size ({tokens} tokens, {chars} characters): it ends at the "
              "output's end; cut_before bytes before offset are not shown")


def _fit_tail_page(result: dict[str, Any], fits: Callable[[dict[str, Any]], bool], note: str) -> dict[str, Any]:
    """A ``tail_lines`` page (``cut_before`` set): the longest *end* of its text that fits with the note; ``offset``
    moves forward to where the kept text starts (never past it: bytes are counted low, so reading up to ``offset``
    skips nothing) and ``cut_before`` grows by what was left out."""
    text: str = result["text"]
    end = int(result.get("next_offset", int(result["offset"]) + _raw_bytes_at_most(text)))

    def cut(n: int) -> dict[str, Any]:
        kept = text[len(text) - n:] if n else ""
        offset = max(int(result["offset"]), end - _raw_bytes_at_most(kept))
        return {**result, "text": kept, "offset": offset,
                "cut_before": int(result["cut_before"]) + offset - int(result["offset"]),
                "shortened": note}

    if fits(result):
        return result
    lo, hi = 0, len(text)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(cut(mid)):
            lo = mid
        else:
            hi = mid - 1
    return cut(lo)



def _pages(data: dict[str, Any], key: str) -> bool:
    """Whether ``data[key]`` is a page of a longer list (``list_jobs``: a top-level list with ``total``, and
    ``next_offset`` set while more follow), so ``next_offset`` is its offset plus its length."""
    return "." not in key and isinstance(data.get(key), list) and isinstance(data.get("total"), int) \
        and isinstance(data.get("next_offset", 0), int | None)


def _page_end(data: dict[str, Any]) -> int:
    """Where the page of :func:`_pages` ends: ``next_offset``, or ``total`` on the last page."""
    end = data.get("next_offset")
    return end if isinstance(end, int) else int(data["total"])


def _failing(item: Any) -> bool:
    """A probe report that did not pass (kept whenever a list is shortened: it is the cause)."""
    return isinstance(item, dict) and "kind" in item and item.get("state") in ("failed", "error")


def _bound_chars(result: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """``result`` shortened to ``max_chars`` characters of compact JSON (the steps of :func:`bound_result`)."""
    if len(_dumps(result)) <= max_chars:
        return result
    data: dict[str, Any] = copy.deepcopy(result)
    notes: list[str] = []
    reserve = 250  # room for shortened (its notes are up to about 250 characters)
    originals: dict[int, tuple[str, Any]] = {}
    texts: dict[tuple[int, str | int], str] = {}

    def size() -> int:
        return len(_dumps(data)) + reserve

    def shrink(items: list[Any], text_of: Callable[[Any], str], cut: Callable[[Any, int], bool]) -> bool:
        """Cut the longest texts down to one common length (water-filling), so every stream keeps a share."""
        changed = False
        for _ in range(6):
            over = size() - max_chars
            if over <= 0 or not items:
                break
            lengths = [len(text_of(it)) for it in items]
            cap = max(_MIN_TEXT_CHARS, _water_level(lengths, sum(lengths) - over - 80 * len(items)))
            progressed = False
            for it in items:
                if len(text_of(it)) > cap:
                    progressed = cut(it, cap) or progressed
            if not progressed:
                break
            changed = True
        return changed

    if drop_repeated_evidence(data):
        notes.append("probe evidence said again in why replaced by (see probes)")
    slots = _text_slots(data)
    if size() > max_chars and shrink(slots, lambda item: str(item[0]["text"]),
                                     lambda item, keep: _shrink_text_slot(item, keep, originals, data.get("job_id"))):
        notes.append("output text shortened to fit the result size; the markers say where job_output reads on "
                     "(all output stays on the host)")
    if size() > max_chars:
        strings: list[tuple[Any, str | int]] = []
        _long_strings(data, strings)

        def cut_string(item: tuple[Any, str | int], keep: int) -> bool:
            container, key = item
            # always from the text as the tool gave it, so each marker counts every character cut there
            text = texts.setdefault((id(container), key), container[key])
            new, removed = _shorten_middle(text, keep)
            if not removed or len(new) >= len(container[key]):
                return False
            container[key] = new
            return True

        if shrink(strings, lambda it: str(it[0][it[1]]), cut_string):
            notes.append("long strings shortened in the middle")
    if size() > max_chars:
        lists: list[tuple[list[Any], str]] = []
        _lists(data, "", lists)
        lists.sort(key=lambda item: len(_dumps(item[0])), reverse=True)
        for lst, where in lists:
            total = len(lst)
            kept_failing = False
            # a page of a longer list ends after the items shown: paging on skips none (set with each item
            # dropped, so the size counts it)
            end = _page_end(data) if _pages(data, where) else None
            i = len(lst) - 1
            while i >= 1 and size() > max_chars:  # the first item stays, and every failing probe
                if _failing(lst[i]):
                    kept_failing = True
                else:
                    lst.pop(i)
                    if end is not None:
                        data["next_offset"] = end - (total - len(lst))
                i -= 1
            if len(lst) < total:
                notes.append(f"{where}: showing {len(lst)} of {total} items (the first and every failing one)"
                             if kept_failing else f"{where}: showing the first {len(lst)} of {total} items")
            if size() <= max_chars:
                break
    if size() > max_chars:
        paged = [k for k, v in data.items() if isinstance(v, list) and _pages(data, k)]
        if paged:  # no item is shown: the next page begins with the first of this one
            data["next_offset"] = _page_end(data) - len(data[paged[0]])
        scalars = {k: v for k, v in data.items() if not isinstance(v, dict | list)}
        data = {k: (v if not isinstance(v, str) or k in _WHOLE_KEYS else _shorten_middle(v, 400)[0])
                for k, v in scalars.items()}
        notes.append("the result was too large to show; only its top-level fields are kept")
    data["shortened"] = "; ".join(notes) if notes else f"shortened to {max_chars} chars"
    return data


def attr_or_key(obj: Any, name: str) -> Any:
    """``obj[name]`` for a mapping, else ``getattr(obj, name, None)`` (SDK objects and plain dicts alike)."""
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


async def dispatch_all(toolkit: Toolkit, calls: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Dispatch ``(name, arguments)`` pairs concurrently; results in the same order (never raises for bad
    input: see :meth:`Toolkit.dispatch`)."""
    results: list[dict[str, Any]] = [{} for _ in calls]

    async def one(i: int, name: str, arguments: Any) -> None:
        log.debug("adapter.tool_call", tool=name)
        results[i] = await toolkit.dispatch(name, arguments)

    async with anyio.create_task_group() as tg:
        for i, (name, arguments) in enumerate(calls):
            tg.start_soon(one, i, name, arguments)
    return results


def encode_result(result: dict[str, Any], *, max_chars: int = DEFAULT_MAX_RESULT_CHARS,
                  max_tokens: int = DEFAULT_MAX_RESULT_TOKENS) -> str:
    """Compact JSON text of ``result`` (``separators=(",", ":")``, UTF-8 kept), bounded by
    :func:`bound_result` to ``max_chars`` characters and ``max_tokens`` estimated tokens. This is what the
    model reads."""
    return _dumps(bound_result(result, max_chars=max_chars, max_tokens=max_tokens))
