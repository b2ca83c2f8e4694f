"""Where bash runs text as code outside the command words: arithmetic, subscripts, indirection, prompt expansion.

Bash evaluates some text long after the parser saw it as data. In an arithmetic context (``$((x))``, ``$[x]``,
``((x))``, ``let``, the ``-eq``-style operands of ``[[ ]]``, array subscripts, ``${s:off:len}``, a variable with
the integer attribute) a variable's *value* is itself evaluated as an expression, and a subscript in that value
(``a[$(id)]``) is expanded, so ``$(...)`` in it runs: bash(1), "ARITHMETIC EVALUATION" and "Arrays". ``${!x}``
uses x's value as a variable name (a subscript in it is expanded the same way) and ``${x@P}`` expands x's value
as a prompt string (``$(...)`` runs). Builtins that take a variable name (``test -v``, ``printf -v``, ``read``,
``declare``, ``unset``...) expand a subscript in that name.

So text that is harmless where it is written (``x='a[$(id)]'``, ``: '$(id)'``, input read by ``read``) becomes
code where one of these *sinks* reads it. :func:`find_sinks` tracks, over one parsed script, which variables may
hold text the policy cannot see (*tainted*: assigned from an expansion, a command's output, input (``read``,
``mapfile``, ``getopts``...), a loop over such words, or quoted text holding ``$(...)``; plus ``$_``, the
positional parameters and the other special parameters), and reports every sink that reads a tainted variable,
a command's output or quoted code. A variable never assigned in the command line comes from the host's
environment and is not tainted (the ``env`` of a call is checked where it is given).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import tree_sitter

__all__ = ["CODE_IN_TEXT_RE", "Sink", "find_sinks", "is_plain_name"]

#: text that bash runs as code when it is evaluated in a sink (command substitution, old-style or new)
CODE_IN_TEXT_RE = re.compile(r"\$\(|`")
_IDENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLAIN_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[(?:[0-9]+|@|\*)\])?$")
#: parameters whose value the policy never knows: positional ones and those set from what ran before
_SPECIAL_NAMES = frozenset({"_", "@", "*", "BASH_REMATCH", "REPLY", "MAPFILE", "OPTARG", "BASH_ARGV", "BASH_ARGV0",
                            "COPROC", "READLINE_LINE", "COMP_WORDS", "FUNCNAME"})
_ARITH_TEST_OPS = frozenset({"-eq", "-ne", "-lt", "-le", "-gt", "-ge"})
#: builtins that assign the variables named by their plain-word arguments from input
_READERS = frozenset({"read", "mapfile", "readarray", "getopts"})
_DECLARERS = frozenset({"declare", "typeset", "local", "export", "readonly"})

WordOf = Callable[[tree_sitter.Node], tuple[str, bool]]
"""``node -> (text after quote removal, static)``: the walker's reading of a word."""


@dataclass(frozen=True)
class Sink:
    """One place where bash would evaluate text the policy cannot see as code: ``reason`` and the source ``text``."""

    reason: str
    text: str


def is_plain_name(text: str) -> bool:
    """Whether ``text`` is a variable name bash reads without evaluating anything: ``x``, ``x[3]``, ``x[@]``."""
    return bool(_PLAIN_NAME_RE.match(text))


def _walk(node: tree_sitter.Node) -> Iterator[tree_sitter.Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _is_special(name: str) -> bool:
    return name in _SPECIAL_NAMES or name.isdigit()


class _Script:
    """One script's text, taint and sinks."""

    def __init__(self, source: bytes, root: tree_sitter.Node, word_of: WordOf, inherited: frozenset[str]) -> None:
        self.source = source
        self.root = root
        self.word_of = word_of
        self.tainted: set[str] = set(inherited)
        self.static_values: dict[str, list[str]] = {}
        self.integer_names: set[str] = set()

    def text(self, node: tree_sitter.Node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    # -- taint ------------------------------------------------------------------------------------------------

    def assign(self, name: str, value: tree_sitter.Node | None) -> None:
        if value is None:
            self.static_values.setdefault(name, []).append("")
            return
        nodes = [c for c in value.children if c.is_named] if value.type == "array" else [value]
        for item in nodes:
            text, static = self.word_of(item)
            if not static or CODE_IN_TEXT_RE.search(text):
                self.tainted.add(name)
            else:
                self.static_values.setdefault(name, []).append(text)

    def collect(self) -> None:
        for node in _walk(self.root):
            kind = node.type
            if kind == "variable_assignment":
                name_node = node.child_by_field_name("name")
                if name_node is None:
                    continue
                if name_node.type == "subscript":
                    base = name_node.child_by_field_name("name")
                    name_node = base if base is not None else name_node
                self.assign(self.text(name_node), node.child_by_field_name("value"))
            elif kind == "for_statement":
                var = node.child_by_field_name("variable")
                items = [node.children[i] for i in range(node.child_count) if node.field_name_for_child(i) == "value"]
                if var is None:
                    continue
                name = self.text(var)
                if not items or any(not s or CODE_IN_TEXT_RE.search(t) for t, s in map(self.word_of, items)):
                    self.tainted.add(name)  # `for x; do` loops over "$@"; `select` reads input
                elif self.text(node.children[0]) == "select":
                    self.tainted.add(name)
                else:
                    self.static_values.setdefault(name, []).extend(self.word_of(v)[0] for v in items)
            elif kind == "command":
                self.command_taint(node)
            elif kind == "declaration_command":
                letters = "".join(self.text(c)[1:] for c in node.children[1:]
                                  if c.type == "word" and self.text(c)[:1] == "-")
                if "i" in letters:
                    for c in node.children[1:]:
                        target = c.child_by_field_name("name") if c.type == "variable_assignment" else c
                        if target is not None and target.type in ("variable_name", "word"):
                            self.integer_names.add(self.text(target))
        changed = True
        while changed:  # a static value naming a tainted variable is evaluated through it (x=y; $((x)))
            changed = False
            for name, values in self.static_values.items():
                if name in self.tainted:
                    continue
                if any(self.reads_tainted(_IDENT_RE.findall(v)) for v in values):
                    self.tainted.add(name)
                    changed = True

    def command_taint(self, node: tree_sitter.Node) -> None:
        words = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) in ("name", "argument")]
        texts = [self.word_of(w.children[0] if w.type == "command_name" and w.children else w) for w in words]
        while texts and texts[0][1] and texts[0][0] in ("command", "builtin"):
            texts = texts[1:]
        if not texts or not texts[0][1]:
            return
        name, args = texts[0][0], texts[1:]
        if name in _READERS:
            self.tainted.update(t for t, s in args if s and _IDENT_RE.fullmatch(t))
        elif name == "printf" or name == "wait":
            flag = "-v" if name == "printf" else "-p"
            for i, (t, s) in enumerate(args):
                if t == flag and i + 1 < len(args):
                    self.tainted.add(args[i + 1][0])
                elif s and t.startswith(flag) and len(t) > 2:
                    self.tainted.add(t[2:])

    def reads_tainted(self, names: list[str]) -> str | None:
        return next((n for n in names if n in self.tainted or _is_special(n)), None)

    # -- sinks ------------------------------------------------------------------------------------------------

    def unsafe_in(self, region: tree_sitter.Node, *, bare_words: bool = True) -> str | None:
        """Why evaluating ``region`` as arithmetic could run code it does not show, or None."""
        for node in _walk(region):
            kind = node.type
            if kind in ("command_substitution", "process_substitution"):
                return f"the output of {self.text(node)[:40]!r} is evaluated as a number"
            if kind in ("variable_name", "special_variable_name"):
                name = self.text(node)
                if name in self.tainted or _is_special(name):
                    return f"${name} may hold text the policy cannot see, and it is evaluated as a number"
            elif kind in ("word", "raw_string", "string_content", "ansi_c_string", "number"):
                text, _ = self.word_of(node)
                if CODE_IN_TEXT_RE.search(text):
                    return f"the text {text[:40]!r} is evaluated as a number, which runs the $(...) in it"
                if bare_words and kind == "word":
                    hit = self.reads_tainted(_IDENT_RE.findall(text))
                    if hit is not None:
                        return f"{hit} may hold text the policy cannot see, and it is evaluated as a number"
        return None

    def sinks(self) -> list[Sink]:
        found: list[Sink] = []

        def hit(reason: str | None, node: tree_sitter.Node, what: str) -> None:
            if reason is not None:
                found.append(Sink(f"{what}: {reason} (bash runs any $(...) such text holds)", self.text(node)[:200]))

        for node in _walk(self.root):
            kind = node.type
            if kind == "arithmetic_expansion":
                hit(self.unsafe_in(node), node, "arithmetic expansion")
            elif kind == "compound_statement" and node.children and node.children[0].type == "((":
                hit(self.unsafe_in(node), node, "arithmetic command")
            elif kind == "c_style_for_statement":
                for i in range(node.child_count):
                    if node.field_name_for_child(i) in ("initializer", "condition", "update"):
                        hit(self.unsafe_in(node.children[i]), node, "arithmetic for loop")
            elif kind == "subscript":
                index = node.child_by_field_name("index")
                if index is not None and self.text(index) not in ("@", "*"):
                    hit(self.unsafe_in(index), node, "array subscript")
            elif kind == "expansion":
                self.expansion(node, hit)
            elif kind == "test_command":
                self.test_command(node, hit)
            elif kind == "command":
                self.let_command(node, hit)
            elif kind in ("declaration_command", "unset_command"):
                self.name_operands(node, hit)
        if self.integer_names & self.tainted:
            name = sorted(self.integer_names & self.tainted)[0]
            found.append(Sink(f"{name} has the integer attribute and is assigned text the policy cannot see, which "
                              "bash evaluates as a number (bash runs any $(...) such text holds)",
                              f"declare -i {name}"))
        return found

    def expansion(self, node: tree_sitter.Node, hit: Callable[[str | None, tree_sitter.Node, str], None]) -> None:
        kids = node.children
        types = [c.type for c in kids]
        if len(kids) >= 4 and types[1] == "!":  # not `${!}` (the last background pid)
            rest = types[2:]
            listing = (rest[-2:-1] in (["*"], ["@"])) or (
                len(kids) > 2 and kids[2].type == "subscript" and self.text(kids[2]).endswith(("[@]", "[*]")))
            if not listing:
                hit("the value of a variable is used as a variable name, whose subscript bash evaluates", node,
                    "indirect expansion")
        for i in range(len(kids) - 1):
            if types[i] == "@" and self.text(kids[i + 1]) == "P":
                hit("a variable's value is expanded as a prompt string", node, "prompt expansion")
        seen_colon = False
        for i, c in enumerate(kids):
            if c.type == ":" and node.field_name_for_child(i) == "operator":
                seen_colon = True
            elif seen_colon and c.is_named and c.type != "}":
                hit(self.unsafe_in(c), node, "substring offset")

    def test_command(self, node: tree_sitter.Node, hit: Callable[[str | None, tree_sitter.Node, str], None]) -> None:
        for n in _walk(node):
            if n.type == "binary_expression":
                op = n.child_by_field_name("operator")
                if op is not None and self.text(op) in _ARITH_TEST_OPS:
                    for side in ("left", "right"):
                        operand = n.child_by_field_name(side)
                        if operand is not None:
                            hit(self.unsafe_in(operand), n, f"[[ {self.text(op)} ]]")
            elif n.type == "unary_expression":
                op = n.children[0] if n.children else None
                if op is not None and self.text(op) == "-v" and len(n.children) > 1:
                    text, static = self.word_of(n.children[1])
                    if not static or not is_plain_name(text):
                        hit(f"{text[:40]!r} is read as a variable name, whose subscript bash evaluates", n, "[[ -v ]]")

    def let_command(self, node: tree_sitter.Node, hit: Callable[[str | None, tree_sitter.Node, str], None]) -> None:
        name = node.child_by_field_name("name")
        if name is None or self.text(name) != "let":
            return
        for i in range(node.child_count):
            if node.field_name_for_child(i) == "argument":
                hit(self.unsafe_in(node.children[i]), node, "let")

    def name_operands(self, node: tree_sitter.Node, hit: Callable[[str | None, tree_sitter.Node, str], None]) -> None:
        keyword = self.text(node.children[0]) if node.children else ""
        for c in node.children[1:]:
            if c.type in ("variable_assignment", "variable_name"):
                continue  # a plain name, or an assignment whose name is one (a subscript is checked as such)
            text, static = self.word_of(c)
            if static and text.startswith(("-", "+")):
                continue
            name = text.split("=", 1)[0] if static else text
            if not static or not is_plain_name(name):
                hit(f"{text[:40]!r} is read as a variable name, whose subscript bash evaluates", node, keyword)


def find_sinks(source: bytes, root: tree_sitter.Node, word_of: WordOf,
               inherited_taint: frozenset[str] = frozenset()) -> tuple[list[Sink], frozenset[str]]:
    """The sinks of one parsed script that may run code the policy cannot see, and the variables tainted there.

    :param source: the script's bytes (``root`` was parsed from them).
    :param word_of: the walker's reading of a word node (text after quote removal, and whether it is static).
    :param inherited_taint: variables already tainted by an enclosing script (``bash -c`` inside a line).
    :returns: ``(sinks, tainted names)``; a sink's ``reason`` says what is evaluated and why it is unsafe.
    """
    script = _Script(source, root, word_of, inherited_taint)
    script.collect()
    return script.sinks(), frozenset(script.tainted)
