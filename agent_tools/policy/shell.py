"""Split a shell command line into the simple commands it would run.

The parser is tree-sitter-bash (grammar: https://github.com/tree-sitter/tree-sitter-bash). It sees through
lists (``;`` ``&&`` ``||`` newlines ``&``), pipelines (``|`` ``|&``), subshells, groups, ``if/for/while/case``
bodies, function bodies, command and process substitutions and here-documents (also the substitutions
tree-sitter-bash leaves as text: a backquote or ``<(...)`` inside ``${...}``, the script of nested backquotes, a
backquote in an unquoted here-document's body; each of those is decided and also opaque:
:mod:`agent_tools.policy.substitutions`); then it unwraps the programs
that only run another program (``sudo``, ``env``, ``nice``, ``nohup``, ``timeout``, ``stdbuf``, ``xargs``,
``command``, ``exec``, ``time``, ``ionice``, ``setsid``, ``chroot``, ``watch``, ``doas``, ``su -c``,
``busybox``/``toybox``, ``bash -c``, ``eval``, ``ssh HOST CMD``, ``find -exec``; and, for wrappers whose options
it does not model such as ``taskset``, ``nsenter``, ``systemd-run``, ``flock``, ``ip netns exec``, ``sshpass``,
``unbuffer``, ``eatmydata``, every suffix that may be the command they run). A command name that is a pattern
(``/usr/sbin/re[b]oot``, ``/usr/bin/[s]udo reboot``) is opaque, and it is also read as every wrapper it may name
(each suffix of its words as a command, and the script of a shell it may name), and a brace expansion's
alternatives each on its own (``cp /dev/zero /dev/{sda,null}`` names ``/dev/sda`` as cp's target): such readings
are marked ``alternative`` and count only where a rule denies them. ``$((...))`` of constants is the number it
computes (``kill -9 $((0+1))``). ``reads`` lists what a command reads besides its operands
(:mod:`agent_tools.policy.reads`: ``grep -r x /etc`` reads ``/etc/*``).

Anything the parser cannot see through is still returned, marked ``opaque`` with a reason: a parse error, a
command word that is not static text (``$CMD``, ``$(echo rm)``), ``eval``/``bash -c`` of a dynamic string,
``source``, a shell or interpreter reading its program from a pipe, a here-document or a file, inline
interpreter code (``python -c``), a variable that may change what runs (exported: any but the few known to be
inert, ``LANG``, ``LC_*``, ``TZ``, ``NO_COLOR``...; a shell variable: ``PATH``, ``IFS``, ``HOME`` and the others
bash or the login environment give a meaning; also set through a subscript ``PATH[0]=.``, ``unset PATH``, which makes
bash run ``./ls``, ``wait -p`` and every ``NAME=VALUE`` argument after ``set -k``), a program run from outside the
system directories, ``ssh`` options that run a local command or name a config file (``-o ProxyCommand=``, ``-F``), a
systemd tool's ``-H HOST`` (the operation runs on another host), a program that opens its operands given a file
name computed at run time (``cat $F``, ``xargs cat``, ``find /dev -exec cat {} +``: it may be a watchdog, which any
open arms), a wrapper
option this module does not know, or a place where bash evaluates text the policy cannot see as code
(arithmetic, subscripts, ``${!x}``, ``${x@P}``, a builtin's variable-name operand: :mod:`agent_tools.policy.sinks`).
A call's ``env`` is decided like ``export NAME=VALUE`` at the start of the line, and its ``cwd`` (and every
``cd`` in the line) gives the directories a relative file name is resolved in.

A name given a new meaning in the command line (a shell function, ``alias NAME=...``, ``enable [-n|-f]``,
``hash -p``, ``export -f``/``declare -fx``) makes every call of that name opaque, and its definition too
(``ls && :(){ :|:& };:`` is never ``allow``); the code such definitions hold (function bodies, alias values,
``trap`` actions, ``mapfile -C`` callbacks) is parsed as commands of its own. A variable assigned quoted text
holding ``$(...)`` or a backquote is opaque (bash runs it where the variable is read as a number), and so is
``declare -n``. ``writes`` also holds the files programs write through their operands or options
(:mod:`agent_tools.policy.writes`), so a rule on written paths (block devices) sees ``cp /dev/zero /dev/sda`` as
well as ``> /dev/sda``.

Word values are computed the way bash would after quote removal when they are static (``r''m`` -> ``rm``,
``\\rm`` -> ``rm``, ``$'\\x72m'`` -> ``rm``, ``{a,b}`` brace expansion); a word holding an expansion keeps its
source text (``$HOME``) and is flagged dynamic.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import tree_sitter
import tree_sitter_bash
from pydantic import BaseModel, ConfigDict, Field

from ..redact import is_secret_name
from .globs import globs_intersect
from .options import is_long_abbreviation
from .paths import ANY_DIR, climbed, indirect_names, join_dir, normalise_path
from .reads import below, reads_of
from .sinks import CODE_IN_TEXT_RE, find_sinks, is_plain_name
from .substitutions import OPENERS, Quoting, find_substitutions, unescape_backquoted
from .writes import OPENS_OPERANDS, STAT_ONLY, may_open_armed, writes_of

__all__ = ["Redirect", "SimpleCommand", "normalise_path", "parse_command"]

MAX_DEPTH = 8
"""Maximum nesting of scripts inside scripts (``bash -c "sh -c '...'"``) before giving up (opaque)."""

MAX_BRACE_WORDS = 64
"""A word whose brace expansion would give more words than this is left unexpanded."""

_DYNAMIC_NODES = frozenset(
    {"simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion"}
)
#: nodes whose text bash never expands (a raw_string may be: :meth:`_Walker.quoting_of`)
_NEVER_EXPANDED = frozenset({"comment", "heredoc_start", "heredoc_end"})
_SUBSTITUTION_NODES = frozenset({"command_substitution", "process_substitution"})
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "mksh", "ash", "yash", "fish", "csh", "tcsh", "rbash"})
_INTERPRETER_RE = re.compile(
    r"^(?:python[0-9.]*|pypy[0-9.]*|perl[0-9.]*|ruby[0-9.]*|node|nodejs|deno|bun|php[0-9.]*|lua[0-9.]*|"
    r"luajit|Rscript|tclsh[0-9.]*|wish|osascript|jshell|irb|pwsh|powershell)$"
)
# Option letters that make an interpreter run the next word (or the rest of the cluster) as code.
_INLINE_CODE_FLAGS: dict[str, tuple[str, ...]] = {
    "python": ("c",),
    "pypy": ("c",),
    "perl": ("e", "E"),
    "ruby": ("e",),
    "node": ("e", "p"),
    "nodejs": ("e", "p"),
    "deno": (),
    "bun": ("e",),
    "php": ("r",),
    "lua": ("e",),
    "luajit": ("e",),
    "Rscript": ("e",),
    "pwsh": ("c",),
    "powershell": ("c",),
}
_INLINE_CODE_LONG = frozenset({"--eval", "--print", "--command", "-Command", "-command"})
_PY_EXEC_HINT = re.compile(r"os\.system|subprocess|os\.exec|os\.spawn|os\.popen|pty\.spawn|shutil\.rmtree|__import__")

# Variables whose value changes which program runs or what a shell/interpreter executes at start-up (named in the
# reason), and the ones the login environment usually exports (so even an unexported assignment reaches children).
_DANGEROUS_VAR_RE = re.compile(
    r"^(?:PATH|IFS|ENV|BASH_ENV|BASH_CMDS|BASH_ALIASES|SHELLOPTS|BASHOPTS|PS4|PROMPT_COMMAND|CDPATH|OLDPWD|PWD|DIRSTACK|GLOBIGNORE|"
    r"BASH_LOADABLES_PATH|"
    r"BASH_XTRACEFD|EXECIGNORE|FUNCNEST|HOME|SHELL|USER|LOGNAME|TMPDIR|XDG_[A-Z_]+|"
    r"LD_[A-Z_]+|DYLD_[A-Z_]+|GCONV_PATH|HOSTALIASES|LOCPATH|NLSPATH|GLIBC_TUNABLES|MALLOC_[A-Z_]+|"
    r"PYTHON[A-Z_]*|PERL5[A-Z_]*|PERLLIB|RUBY[A-Z_]*|NODE_[A-Z_]+|JAVA_TOOL_OPTIONS|_JAVA_OPTIONS|CLASSPATH|"
    r"LUA_[A-Z_]+|OPENSSL_[A-Z_]+|SSL_CERT_[A-Z_]+|CURL_HOME|WGETRC|RIPGREP_CONFIG_PATH|GREP_OPTIONS|"
    r"GIT_[A-Z0-9_]+|SYSTEMD_[A-Z_]*(?:PAGER|EDITOR|LESS)|"
    r"[A-Z_]*PAGER|[A-Z_]*EDITOR|VISUAL|LESS[A-Z_]*|BROWSER|SUDO_[A-Z_]+|SSH_[A-Z_]+|AWS_[A-Z_]+)$"
)
#: exported variables a command line may set without approval: they change formatting, locale, colour, device
#: selection or thread counts, never which program runs or what it reads as configuration (GIT_* only the names
#: and dates of a commit). Secret-named variables (``HF_TOKEN``) are data too.
_INERT_VAR_RE = re.compile(
    r"^(?:LANG|LANGUAGE|LC_[A-Z]+|TZ|TERM|COLUMNS|LINES|NO_COLOR|FORCE_COLOR|CLICOLOR(?:_FORCE)?|COLORTERM|"
    r"LS_COLORS|GREP_COLORS?|TIME_STYLE|QUOTING_STYLE|BLOCK_SIZE|DF_BLOCK_SIZE|DU_BLOCK_SIZE|POSIXLY_CORRECT|"
    r"DEBIAN_FRONTEND|DEBCONF_NONINTERACTIVE_SEEN|NEEDRESTART_MODE|SYSTEMD_COLORS|SYSTEMD_URLIFY|"
    r"SYSTEMD_LOG_(?:LEVEL|COLOR|TIME|LOCATION)|CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER|NVIDIA_VISIBLE_DEVICES|"
    r"HIP_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|OMP_NUM_THREADS|MKL_NUM_THREADS|OPENBLAS_NUM_THREADS|"
    r"TOKENIZERS_PARALLELISM|HF_HUB_OFFLINE|TRANSFORMERS_OFFLINE|HF_HUB_DISABLE_TELEMETRY|DO_NOT_TRACK|"
    r"GIT_TERMINAL_PROMPT|GIT_(?:AUTHOR|COMMITTER)_(?:NAME|EMAIL|DATE))$"
)
# Builtins that assign a variable named by an argument (`read PATH`, `printf -v PATH ...`).
_ASSIGNING_BUILTINS = frozenset({"read", "printf", "mapfile", "readarray", "getopts", "wait", "unset"})
_TRUSTED_DIRS = frozenset(
    {"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin", "/usr/lib/systemd"}
)
_GLOB_CHARS = frozenset("*?[")
_OLDPWD_RE = re.compile(rb"\bOLDPWD\b")
_CDPATH_RE = re.compile(rb"\bCDPATH\b")
_ALLEXPORT_RE = re.compile(r"\bset\s+(?:-[A-Za-z]*a|-o\s+allexport)")
#: `set -k` / `set -o keyword`: every NAME=VALUE word of a command, not only those before its name, is an assignment
#: in its environment (bash(1), The Set Builtin: "-k All arguments in the form of assignment statements are placed
#: in the environment for a command, not just those that precede the command name")
_SET_KEYWORD_RE = re.compile(r"^-[A-Za-z]*k")
_KEYWORD_RE = re.compile(r"\bset\s+(?:-[A-Za-z]*k|-o\s+keyword)")
_ASSIGNMENT_WORD_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[[^]]*\])?\+?=")
#: bash builtins (``compgen -b``): bash itself reads their arguments, so quoted shell code given to one of them is
#: opaque; those below it that only print or ignore their arguments are left out
_BUILTINS = frozenset(
    {"alias", "bg", "bind", "break", "builtin", "caller", "cd", "command", "compgen", "complete", "compopt",
     "continue", "declare", "dirs", "disown", "echo", "enable", "eval", "exec", "exit", "export", "false", "fc",
     "fg", "getopts", "hash", "help", "history", "jobs", "kill", "let", "local", "logout", "mapfile", "popd",
     "printf", "pushd", "pwd", "read", "readarray", "readonly", "return", "set", "shift", "shopt", "source",
     "suspend", "test", "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias", "unset", "wait",
     "[", ":", "."}
)
_BUILTINS_PRINTING = frozenset({"echo", "printf", ":", "true", "false", "type", "command", "cd", "pushd", "popd",
                                "pwd", "exit", "return", "shift", "alias", "trap", "eval", "source", ".", "builtin",
                                "exec", "unalias"})


def _variable_reason(name: str, *, exported: bool) -> str | None:
    """Why setting variable ``name`` may change what a command line runs, or None for a variable known to be inert.

    :param exported: the value reaches programs started from here (``X=1 cmd``, ``env X=1``, ``export``, a call's
        ``env``): only variables known to be inert are allowed. Otherwise (``x=1;``, ``read x``) only shell
        variables with a meaning to bash and those the login environment exports are a concern.
    """
    name = re.sub(r"\[.*$", "", name).removesuffix("+")  # `PATH[0]=.` and `PATH+=:.` assign PATH too
    if _DANGEROUS_VAR_RE.match(name):
        return f"sets {name}, which changes what runs"
    if not exported or _INERT_VAR_RE.match(name) or is_secret_name(name) or name != name.upper():
        return None
    return (f"sets {name}: only variables known to be inert (LANG, LC_*, TZ, TERM, NO_COLOR, CUDA_VISIBLE_DEVICES, "
            "...) are allowed without approval, as others may change what a program runs or reads as configuration")


class Redirect(BaseModel):
    """One redirection of a simple command, e.g. ``2>> /var/log/x`` or ``< list``.

    ``op`` is the operator (``>``, ``>>``, ``>|``, ``&>``, ``&>>``, ``<``, ``<>``, ``>&``, ``<&``, ``<<``,
    ``<<-``, ``<<<``); ``fd`` the explicit descriptor number if one was written; ``target`` the destination
    word (a here-document's body for ``<<``), ``static`` whether the target is plain text.
    """

    model_config = ConfigDict(frozen=True)

    op: str
    target: str
    fd: int | None = None
    static: bool = True


class SimpleCommand(BaseModel):
    """One program invocation found in a command line, after unwrapping wrappers.

    ``argv[0]`` is the normalised program name (``/usr/bin/rm`` and ``\\rm`` become ``rm``;
    ``program_path`` keeps what was written). ``dynamic[i]`` says whether ``argv[i]`` holds an expansion and so
    is only its source text; ``globs[i]`` whether it holds an unquoted ``*``, ``?`` or ``[`` (a pattern bash expands
to file names). ``wrappers`` lists what was unwrapped, outermost first (``["sudo", "bash -c"]``).
    ``writes`` are the files this command writes through redirections, ``dd of=`` or ``tee`` (``/dev/null``,
    the standard streams and descriptor duplications are left out). ``target_host`` is set when the command
    runs on another host through ``ssh``. ``args_from_stdin`` is set for commands run by ``xargs``, whose
    remaining arguments are not known. ``defines`` names the commands this one gives a new meaning for the rest
    of the command line (a shell function, an ``alias``, ``enable``, ``hash -p``, ``export -f``): every call of
    such a name is opaque (new code), and so is the definition when the name is called. ``cwds`` are the
    directories the command may run in (``~``: the login directory, as when no ``cwd`` was given and no ``cd`` came
    before; None: one the policy cannot know), :attr:`cwd` the one it surely runs in; ``writes`` lists a relative
    file also resolved against each of them. ``reads`` are the files it reads besides its plain operands, resolved
    (``DIR/*`` for a directory it reads recursively, ``grep -r x /etc``; a file in an option's value:
    :mod:`agent_tools.policy.reads`). ``alternative`` marks one reading among several of words the shell expands (a
    brace expansion's alternative taken alone, a wrapper a glob command name may name): it counts only where a rule
    denies it. ``argv`` is empty for a pseudo-command standing for a parse error, a
    dangerous variable assignment, a function definition, a redirection without a command (``> /dev/sda``) or a
    place where bash would evaluate text as code (:mod:`agent_tools.policy.sinks`).
    """

    model_config = ConfigDict(frozen=True)

    argv: list[str]
    dynamic: list[bool] = Field(default_factory=list)
    globs: list[bool] = Field(default_factory=list)
    program_path: str = ""
    wrappers: list[str] = Field(default_factory=list)
    assignments: list[str] = Field(default_factory=list)
    redirects: list[Redirect] = Field(default_factory=list)
    writes: list[str] = Field(default_factory=list)
    opaque: bool = False
    opaque_reason: str | None = None
    target_host: str | None = None
    args_from_stdin: bool = False
    defines: list[str] = Field(default_factory=list)
    text: str = ""
    cwds: list[str | None] = Field(default_factory=lambda: list[str | None](["~"]))
    reads: list[str] = Field(default_factory=list)
    alternative: bool = False

    @property
    def program(self) -> str:
        """The normalised program name, or ``""`` for a pseudo-command."""
        return self.argv[0] if self.argv else ""

    @property
    def cwd(self) -> str | None:
        """The one directory the command runs in, or None when it may run in several (or an unknown one)."""
        return _certain(self.cwds)


# --------------------------------------------------------------------------------------------------------------
# Words


@dataclass(frozen=True)
class _Word:
    """A shell word after quote removal; ``quoted[i]`` marks characters protected from brace/glob expansion."""

    text: str
    quoted: tuple[bool, ...]
    static: bool

    @staticmethod
    def literal(text: str, *, quoted: bool = True) -> _Word:
        return _Word(text, (quoted,) * len(text), True)

    def __add__(self, other: _Word) -> _Word:
        return _Word(self.text + other.text, self.quoted + other.quoted, self.static and other.static)

    def has_unquoted(self, chars: frozenset[str]) -> bool:
        return any(c in chars and not q for c, q in zip(self.text, self.quoted, strict=True))


_EMPTY = _Word("", (), True)


def _unescape_unquoted(text: str) -> _Word:
    """Backslash handling outside quotes: ``\\<newline>`` disappears, ``\\c`` is a quoted ``c``."""
    chars: list[str] = []
    quoted: list[bool] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            i += 2
            if nxt == "\n":
                continue
            chars.append(nxt)
            quoted.append(True)
            continue
        chars.append(ch)
        quoted.append(False)
        i += 1
    return _Word("".join(chars), tuple(quoted), True)


def _unescape_double(text: str) -> str:
    """Backslash handling inside double quotes: only ``$ ` " \\`` and newline are escapable."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\" and i + 1 < len(text) and text[i + 1] in '$`"\\\n':
            if text[i + 1] != "\n":
                out.append(text[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


_ANSI_SIMPLE = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v",
    "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip


def _decode_ansi_c(body: str) -> str:
    """Decode the inside of ``$'...'`` (bash ANSI-C quoting)."""
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\" or i + 1 >= len(body):
            out.append(ch)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ANSI_SIMPLE:
            out.append(_ANSI_SIMPLE[nxt])
            i += 2
        elif nxt in "01234567":
            m = re.match(r"[0-7]{1,3}", body[i + 1 :])
            assert m is not None
            out.append(chr(int(m.group(0), 8) & 0xFF))
            i += 1 + len(m.group(0))
        elif nxt in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[nxt]
            m = re.match(r"[0-9a-fA-F]{1,%d}" % width, body[i + 2 :])
            if m is None:
                out.append("\\" + nxt)
                i += 2
            else:
                out.append(chr(min(int(m.group(0), 16), 0x10FFFF)))
                i += 2 + len(m.group(0))
        elif nxt == "c" and i + 2 < len(body):
            out.append(chr(ord(body[i + 2]) & 0x1F))
            i += 3
        else:
            out.append("\\" + nxt)
            i += 2
    return "".join(out)


# --------------------------------------------------------------------------------------------------------------
# Brace expansion and paths


def _find_brace(word: _Word, start: int) -> tuple[int, int, list[int]] | None:
    """Find the first unquoted ``{...}`` with a top-level comma at or after ``start``: (open, close, commas)."""
    text, quoted = word.text, word.quoted
    i = start
    while i < len(text):
        if text[i] == "{" and not quoted[i]:
            depth = 0
            commas: list[int] = []
            for j in range(i, len(text)):
                if quoted[j]:
                    continue
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        if commas:
                            return i, j, commas
                        break
                elif text[j] == "," and depth == 1:
                    commas.append(j)
        i += 1
    return None


def _brace_range(word: _Word) -> list[_Word] | None:
    m = re.search(r"\{(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])\}", word.text)
    if m is None or any(word.quoted[m.start() : m.end()]):
        return None
    a, b = m.group(1), m.group(2)
    if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
        lo, hi = int(a), int(b)
        step = 1 if hi >= lo else -1
        items = [str(v) for v in range(lo, hi + step, step)]
    elif len(a) == 1 and len(b) == 1 and not a.isdigit() and not b.isdigit():
        step = 1 if ord(b) >= ord(a) else -1
        items = [chr(v) for v in range(ord(a), ord(b) + step, step)]
    else:
        return None
    if len(items) > MAX_BRACE_WORDS:
        return None
    prefix = _Word(word.text[: m.start()], word.quoted[: m.start()], word.static)
    suffix = _Word(word.text[m.end() :], word.quoted[m.end() :], word.static)
    return [prefix + _Word.literal(item) + suffix for item in items]


def _brace_expand(word: _Word) -> list[_Word]:
    """Bash brace expansion of unquoted ``{a,b}`` and ``{1..3}``; gives up (returns the word) past the cap."""
    found = _find_brace(word, 0)
    if found is None:
        ranged = _brace_range(word)
        return [word] if ranged is None else ranged
    open_i, close_i, commas = found
    prefix = _Word(word.text[:open_i], word.quoted[:open_i], word.static)
    suffix = _Word(word.text[close_i + 1 :], word.quoted[close_i + 1 :], word.static)
    bounds = [open_i, *commas, close_i]
    results: list[_Word] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        alt = _Word(word.text[a + 1 : b], word.quoted[a + 1 : b], word.static)
        for expanded in _brace_expand(prefix + alt + suffix):
            results.append(expanded)
            if len(results) > MAX_BRACE_WORDS:
                return [word]
    return results


#: the text of ``$((EXPR))`` made only of integer constants, ``+ - * / %``, parentheses and blanks
_CONSTANT_ARITHMETIC_RE = re.compile(r"^\$\(\(([0-9A-Fa-fxX+\-*/%() \t]*)\)\)$")
_ARITHMETIC_OPS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    # C semantics (bash(1) ARITHMETIC EVALUATION: "evaluation is done in fixed-width integers"): truncation
    ast.Div: lambda a, b: abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1),
    ast.Mod: lambda a, b: abs(a) % abs(b) * (1 if a >= 0 else -1),
}


def constant_arithmetic(text: str) -> int | None:
    """The value of ``$((EXPR))`` when EXPR holds only integer constants (decimal, ``0x`` hex, ``0`` octal, as bash
    reads them), ``+ - * / %`` and parentheses (``$((0+1))`` is 1); None for anything else (a variable, another
    operator, a division by zero), which stays an expansion."""
    m = _CONSTANT_ARITHMETIC_RE.match(text)
    if m is None or "**" in m.group(1):
        return None

    def constant(tok: re.Match[str]) -> str:
        digits = tok.group(0)
        try:
            value = int(digits, 16) if digits[:2].lower() == "0x" else int(digits, 8) if digits[:1] == "0" else int(
                digits)
        except ValueError:
            raise _NotConstant from None
        return str(value)

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = value(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp) and type(node.op) in _ARITHMETIC_OPS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, (ast.Div, ast.Mod)) and right == 0:
                raise _NotConstant
            result = _ARITHMETIC_OPS[type(node.op)](left, right)
            if abs(result) >= 2**63:
                raise _NotConstant
            return result
        raise _NotConstant

    try:
        expression = re.sub(r"[0-9][0-9A-Za-z]*", constant, m.group(1))
        return value(ast.parse(expression.strip() or "x", mode="eval").body)
    except (_NotConstant, SyntaxError, ValueError, RecursionError):
        return None


class _NotConstant(Exception):
    """An arithmetic expression is not made of constants only."""


def _normalise_program(text: str) -> tuple[str, str | None]:
    """(program name, reason it cannot be trusted or None)."""
    if "/" not in text:
        return text, None
    directory, _, base = text.rpartition("/")
    directory = normalise_path(directory or "/")
    if directory in _TRUSTED_DIRS:
        return base, None
    return base, f"program {text!r} runs from outside the system directories"


# --------------------------------------------------------------------------------------------------------------
# Unwrapping state


StdinKind = Literal["inherit", "pipe", "heredoc", "herestring", "file"]


@dataclass(frozen=True)
class _Ctx:
    """What a simple command inherits from where it appears."""

    depth: int = 0
    wrappers: tuple[str, ...] = ()
    target_host: str | None = None
    redirects: tuple[Redirect, ...] = ()
    stdin: StdinKind = "inherit"
    stdin_text: str | None = None  # static here-document / here-string text
    assignments: tuple[str, ...] = ()
    args_from_stdin: bool = False
    notes: tuple[str, ...] = ()  # opaque reasons collected while unwrapping
    text: str = ""
    cwds: tuple[str | None, ...] = ("~",)  # the directories the command may run in (None: unknown)
    tainted: frozenset[str] = frozenset()  # variables that may hold text the policy cannot see (sinks.py)
    oldpwd_set: bool = False  # the command line (or one around it) names OLDPWD: `cd -` may go anywhere
    cdpath_set: bool = False  # ... names CDPATH: `cd NAME` may go anywhere
    reads: tuple[str, ...] = ()  # files a wrapper hands the command to open (find -exec's {}: any below its starts)
    alternative: bool = False  # one reading among several of an expanded word: counts only when denied
    budget: _Budget = field(default_factory=lambda: _Budget())


@dataclass
class _Budget:
    """Resolutions left for one command line (shared by every context of it): wrappers that may run any of their
    suffixes (:func:`_wrap_suffixes`) must not multiply without bound."""

    left: int = 4000


@dataclass(frozen=True)
class _Inner:
    """The wrapper runs ``words`` as a command (in directory ``cwd`` when it changes it)."""

    words: list[_Word]
    label: str
    target_host: str | None = None
    args_from_stdin: bool = False
    assignments: tuple[str, ...] = ()
    note: str | None = None
    cwd: _Word | None = None
    reads: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Script:
    """The wrapper runs ``text`` as a shell script (``None``: the script is not static)."""

    text: str | None
    label: str
    target_host: str | None = None
    note: str | None = None


@dataclass(frozen=True)
class _Self:
    """Emit the command itself (no inner command), opaque when ``reason`` is set; ``defines`` as
    :attr:`SimpleCommand.defines`."""

    reason: str | None = None
    defines: tuple[str, ...] = ()


_Result = _Inner | _Script | _Self


@dataclass
class _Opts:
    """Result of scanning leading options of a wrapper."""

    index: int  # index of the first non-option word
    values: dict[str, str] = field(default_factory=dict)
    flags: set[str] = field(default_factory=set)
    unknown: list[str] = field(default_factory=list)
    dynamic: bool = False


def _scan_options(
    args: Sequence[_Word],
    *,
    short_arg: str = "",
    short_flag: str = "",
    long_arg: frozenset[str] = frozenset(),
    long_flag: frozenset[str] = frozenset(),
    optional_arg: frozenset[str] = frozenset(),
    long_optional: frozenset[str] = frozenset(),
) -> _Opts:
    """Scan getopt-style options at the head of ``args`` (stops at ``--`` or the first non-option word).

    ``optional_arg`` lists short letters whose value is only taken when attached (``xargs -i{}``);
    ``long_optional`` lists long options whose value is only taken after ``=`` (getopt_long(3)
    ``optional_argument``: ``env --default-signal CMD`` runs CMD, ``--default-signal=INT`` names a signal).
    """
    opts = _Opts(index=len(args))
    i = 0
    while i < len(args):
        word = args[i]
        if not word.static:
            opts.dynamic = True
            opts.index = i
            return opts
        text = word.text
        if text == "--":
            opts.index = i + 1
            return opts
        if not text.startswith("-") or text == "-":
            opts.index = i
            return opts
        if text.startswith("--"):
            name, eq, value = text.partition("=")
            if name in long_arg:
                if eq:
                    opts.values[name] = value
                elif i + 1 < len(args):
                    opts.values[name] = args[i + 1].text
                    i += 1
            elif name in long_flag or name in long_optional:
                opts.flags.add(name)
                if eq:
                    opts.values[name] = value
            else:
                opts.unknown.append(text)
            i += 1
            continue
        j = 1
        while j < len(text):
            letter = text[j]
            if letter in short_arg:
                rest = text[j + 1 :]
                if rest:
                    opts.values["-" + letter] = rest
                elif i + 1 < len(args):
                    opts.values["-" + letter] = args[i + 1].text
                    i += 1
                break
            if letter in optional_arg:
                opts.values["-" + letter] = text[j + 1 :]
                break
            if letter in short_flag:
                opts.flags.add("-" + letter)
            else:
                opts.unknown.append("-" + letter)
            j += 1
        i += 1
    return opts


def _unknown_note(name: str, opts: _Opts) -> str | None:
    if opts.dynamic:
        return f"{name}: an option is not static text"
    if opts.unknown:
        return f"{name}: unknown option {opts.unknown[0]}"
    return None


def _join_static(words: Sequence[_Word]) -> str | None:
    if any(not w.static for w in words):
        return None
    return " ".join(w.text for w in words)


# --------------------------------------------------------------------------------------------------------------
# Wrapper handlers: (name, args, ctx) -> list of results


def _wrap_sudo(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(
        args,
        short_arg="ugpCDrtUTR",
        optional_arg=frozenset("h"),  # sudo(8): `-h` alone is help, `-hHOST` names a host
        short_flag="AbEeHiKklnPSsVv",
        long_arg=frozenset(
            {"--user", "--group", "--prompt", "--close-from", "--chdir", "--host", "--role", "--type",
             "--other-user", "--command-timeout", "--chroot"}
        ),
        long_flag=frozenset(
            {"--askpass", "--background", "--preserve-env", "--edit", "--set-home", "--login", "--remove-timestamp",
             "--reset-timestamp", "--list", "--non-interactive", "--preserve-groups", "--stdin", "--shell",
             "--validate", "--version", "--help"}
        ),
    )  # fmt: skip
    rest = args[opts.index :]
    note = _unknown_note(name, opts)
    if {"-e", "--edit"} & opts.flags:
        return [_Inner([_Word.literal("sudoedit"), *rest], name, note=note)]
    if not rest:
        if {"-i", "-s", "--login", "--shell"} & opts.flags:
            return [_Self("sudo opens an interactive shell")]
        return [_Self(note)]
    return [_Inner(rest, name, note=note, cwd=_option_word(args, opts, "-D", "--chdir"))]


def _option_word(args: Sequence[_Word], opts: _Opts, short: str, long: str) -> _Word | None:
    """The word given to option ``short``/``long`` among the leading options (``-D DIR``, ``-DDIR``,
    ``--chdir=DIR``, ``--chdir DIR``), or None."""
    for i, word in enumerate(args[: opts.index]):
        text = word.text
        if text in (short, long) and i + 1 < len(args):
            return args[i + 1]
        if text.startswith(long + "="):
            return _Word(text[len(long) + 1 :], (True,) * (len(text) - len(long) - 1), word.static)
        if text.startswith(short) and len(text) > 2 and not text.startswith("--"):
            return _Word(text[2:], (True,) * (len(text) - 2), word.static)
    return None


def _wrap_doas(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, short_arg="uC", short_flag="nsL")
    rest = args[opts.index :]
    if not rest:
        return [_Self("doas opens an interactive shell" if "-s" in opts.flags else _unknown_note(name, opts))]
    return [_Inner(rest, name, note=_unknown_note(name, opts))]


def _wrap_env(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """GNU coreutils env(1): ``-u/--unset NAME``, ``-C/--chdir DIR`` and ``-S/--split-string S`` take a value
    (attached or the next word); ``--default-signal[=SIG]``, ``--ignore-signal[=SIG]`` and ``--block-signal[=SIG]``
    take one only after ``=``, so the word after them is the program; ``-P`` is BSD env's PATH for the lookup."""
    opts = _scan_options(
        args,
        short_arg="uCSP",
        short_flag="i0v",
        long_arg=frozenset({"--unset", "--chdir", "--split-string"}),
        long_flag=frozenset({"--ignore-environment", "--null", "--debug", "--list-signal-handling", "--help",
                             "--version"}),
        long_optional=frozenset({"--default-signal", "--ignore-signal", "--block-signal"}),
    )  # fmt: skip
    i = opts.index
    if i < len(args) and args[i].static and args[i].text == "-":  # `env -` means `env -i`
        i += 1
    assignments: list[str] = []
    while i < len(args) and args[i].static and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", args[i].text):
        assignments.append(args[i].text)
        i += 1
    rest = list(args[i:])
    note = _unknown_note(name, opts)
    split = opts.values.get("-S", opts.values.get("--split-string"))
    if split is not None:
        split_words = _split_words(split)
        if split_words is None:
            return [_Self(f"{name} -S: cannot split {split!r}")]
        rest = split_words + rest
    if not rest:
        return [_Self(note)]
    return [_Inner(rest, name, assignments=tuple(assignments), note=note,
                   cwd=_option_word(args, opts, "-C", "--chdir"))]


def _wrap_nice(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    if args and args[0].static and re.match(r"^-\d+$", args[0].text):
        args = args[1:]
    opts = _scan_options(args, short_arg="n", long_arg=frozenset({"--adjustment"}))
    rest = args[opts.index :]
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self(_unknown_note(name, opts))]


def _wrap_plain(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """Wrappers without options of interest: nohup, builtin, coproc (``--`` skipped)."""
    if args and args[0].static and args[0].text == "--":
        args = args[1:]
    return [_Inner(args, name)] if args else [_Self()]


def _wrap_time(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(
        args, short_arg="fo", short_flag="apqv", long_arg=frozenset({"--format", "--output"}),
        long_flag=frozenset({"--append", "--portability", "--verbose", "--quiet"}),
    )  # fmt: skip
    rest = args[opts.index :]
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self()]


def _wrap_timeout(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(
        args, short_arg="sk", short_flag="v", long_arg=frozenset({"--signal", "--kill-after"}),
        long_flag=frozenset({"--preserve-status", "--foreground", "--verbose"}),
    )  # fmt: skip
    rest = args[opts.index + 1 :]  # skip DURATION
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self(_unknown_note(name, opts))]


def _wrap_stdbuf(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, short_arg="ioe", long_arg=frozenset({"--input", "--output", "--error"}))
    rest = args[opts.index :]
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self(_unknown_note(name, opts))]


def _wrap_ionice(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(
        args, short_arg="cnpPu", short_flag="t",
        long_arg=frozenset({"--class", "--classdata", "--pid", "--pgid", "--uid"}), long_flag=frozenset({"--ignore"}),
    )  # fmt: skip
    rest = args[opts.index :]
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self(_unknown_note(name, opts))]


def _wrap_setsid(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, short_flag="cfw", long_flag=frozenset({"--ctty", "--fork", "--wait"}))
    rest = args[opts.index :]
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self(_unknown_note(name, opts))]


def _wrap_command(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, short_flag="pvV")
    rest = args[opts.index :]
    if {"-v", "-V"} & opts.flags or not rest:
        return [_Self(_unknown_note(name, opts))]  # `command -v x` only looks x up
    return [_Inner(rest, name, note=_unknown_note(name, opts))]


def _wrap_exec(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, short_arg="a", short_flag="cl")
    rest = args[opts.index :]
    return [_Inner(rest, name, note=_unknown_note(name, opts))] if rest else [_Self(_unknown_note(name, opts))]


def _wrap_chroot(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, long_arg=frozenset({"--userspec", "--groups"}), long_flag=frozenset({"--skip-chdir"}))
    rest = args[opts.index :]
    if not rest:
        return [_Self(_unknown_note(name, opts))]
    root = rest[0].text
    if len(rest) == 1:
        return [_Self(f"chroot {root} opens an interactive shell")]
    return [_Inner(rest[1:], f"chroot {root}", note=_unknown_note(name, opts))]


def _wrap_watch(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(
        args, short_arg="nq", short_flag="bcdegprtwx", optional_arg=frozenset(),
        long_arg=frozenset({"--interval", "--equexit", "--differences"}),
        long_flag=frozenset({"--beep", "--color", "--no-color", "--errexit", "--chgexit", "--precise",
                             "--no-title", "--no-wrap", "--exec", "--no-linewrap", "--no-rerun"}),
    )  # fmt: skip
    rest = args[opts.index :]
    note = _unknown_note(name, opts)
    if not rest:
        return [_Self(note)]
    if {"-x", "--exec"} & opts.flags:
        return [_Inner(rest, name, note=note)]
    return [_Script(_join_static(rest), name, note=note)]


def _wrap_xargs(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(
        args, short_arg="adEILnPs", short_flag="0oprtx", optional_arg=frozenset("eil"),
        long_arg=frozenset({"--arg-file", "--delimiter", "--max-args", "--max-procs",
                            "--max-chars", "--process-slot-var"}),
        long_flag=frozenset({"--null", "--no-run-if-empty", "--verbose", "--interactive", "--exit",
                             "--open-tty", "--show-limits"}),
        long_optional=frozenset({"--replace", "--eof", "--max-lines"}),  # GNU xargs(1): `[=R]`, `[=E]`, `[=N]`
    )  # fmt: skip
    rest = args[opts.index :] or [_Word.literal("echo")]
    replace_str = opts.values.get("-I") or opts.values.get("-i") or opts.values.get("--replace")
    if replace_str is None and ("-i" in opts.values or "--replace" in opts.flags):
        replace_str = "{}"
    if replace_str:
        rest = _mark_substituted(rest, replace_str)
    return [_Inner(rest, name, args_from_stdin=True, note=_unknown_note(name, opts))]


def _mark_substituted(words: list[_Word], placeholder: str) -> list[_Word]:
    """Words holding ``placeholder`` are replaced at run time (xargs -I, find -exec {}): not static."""
    return [_Word(w.text, w.quoted, False) if placeholder in w.text else w for w in words]


def _wrap_busybox(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """Multi-call binaries: ``busybox rm ...``, ``toybox rm ...``, ``coreutils --coreutils-prog=rm ...``."""
    if name == "coreutils":
        if args and args[0].static and args[0].text.startswith("--coreutils-prog="):
            return [_Inner([_Word.literal(args[0].text.split("=", 1)[1]), *args[1:]], name)]
        return [_Self("coreutils without --coreutils-prog runs a program the policy cannot name") if args else _Self()]
    return [_Inner(args, name)] if args and not args[0].text.startswith("-") else [_Self()]


#: programs that run a command given after their own options and operands, whose option syntax this module does
#: not model: every suffix that starts with a possible program name is decided as a command it may run
_SUFFIX_WRAPPERS = frozenset({"taskset", "numactl", "chrt", "prlimit", "unshare", "nsenter", "flock", "strace",
                              "ltrace", "valgrind", "systemd-run", "setpriv", "pkexec", "script", "faketime", "chpst",
                              "firejail", "bwrap", "cgexec", "catchsegv", "sg", "dbus-run-session", "xvfb-run",
                              "daemonize", "start-stop-daemon", "softlimit", "setuidgid", "capsh", "run-one",
                              "systemd-inhibit", "schroot", "proot", "fakeroot", "ip", "perf", "caffeinate", "screen",
                              "entr", "tmux", "parallel", "systemd-nspawn", "runuser",
                              # they run the command after their own options: sshpass -p PW CMD, unbuffer CMD...
                              "sshpass", "unbuffer", "rlwrap", "torsocks", "torify", "proxychains", "proxychains4",
                              "tsocks", "trickle", "eatmydata", "nocache", "fakechroot", "setarch", "linux32",
                              "linux64", "cpulimit", "chronic", "ifne", "gosu", "su-exec", "ssh-agent", "dbus-launch",
                              "lckdo", "with-lock-ex", "timelimit", "hwloc-bind", "schedtool", "srun", "mpirun",
                              "mpiexec", "retry", "systemd-cat", "tsp", "nq", "sem", "vglrun", "optirun",
                              "primusrun"})
#: wrappers whose words may each be a shell command line (``tmux new -d 'CMD'``, ``parallel ::: 'CMD'``)
_SCRIPT_WORDS = frozenset({"tmux", "parallel"})
#: a word that may be a program's name: a plain name or path, or a pattern that may expand to one (`/usr/sbin/re*`)
_PROGRAM_WORD_RE = re.compile(r"^[A-Za-z_./*?\[][A-Za-z0-9_.+/*?\[\]!-]*$")
#: options of those wrappers whose value is a shell command line
_SCRIPT_OPTIONS: dict[str, frozenset[str]] = {n: frozenset({"-c", "--command"})
                                              for n in ("flock", "script", "sg", "capsh", "runuser")}


def _wrap_suffixes(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``taskset -c 1 CMD``, ``systemd-run --unit x CMD``, ``ip netns exec NS CMD``: the wrapper itself (a command
    of its own, decided by the rules), a ``-c SCRIPT`` as a script, and every suffix of its words that starts with
    a possible program name as a command (over-approximating what it runs, so a deny rule on the inner command
    stands)."""
    results: list[_Result] = [_Self()]
    if name == "ip":  # only `ip netns exec NS CMD` and `ip vrf exec NAME CMD` run a command
        texts = [w.text for w in args]
        if "exec" not in texts:
            return results
        args = args[texts.index("exec") + 2 :]
    script_options = _SCRIPT_OPTIONS.get(name, frozenset())
    for i, word in enumerate(args):
        text = word.text
        if not word.static or not script_options:
            continue
        if (text in script_options or re.match(r"^-[A-Za-z]*c$", text)) and i + 1 < len(args):  # `script -qc CMD`
            script = args[i + 1]
            results.append(_Script(script.text if script.static else None, f"{name} {text}"))
        elif text.startswith("--command="):
            results.append(_Script(text.split("=", 1)[1], f"{name} --command"))
    if name in _SCRIPT_WORDS:
        results.extend(_Script(w.text, name) for w in args if w.static and " " in w.text)
    for i, word in enumerate(args):
        if _may_name_program(word):
            results.append(_Inner(args[i:], name))
    return results


def _may_name_program(word: _Word) -> bool:
    """Whether ``word`` may be the name of a program a wrapper runs (not an option, a number or a count)."""
    return (word.static and bool(_PROGRAM_WORD_RE.match(word.text)) and not word.text.startswith("-")
            and word.text.rsplit("/", 1)[-1] not in ("", ".", "..")
            and not re.match(r"^[0-9.,:x-]+$|^0x", word.text))


#: wrappers whose command is not one of their suffixes (a script, a joined string, a remote command, find's
#: -delete): a glob command name that may name one is also read as it
_SCRIPT_WRAPPERS = frozenset({*_SHELLS, "eval", "su", "runuser", "watch", "ssh", "env", "trap", "alias", "mapfile",
                              "readarray", "find", "flock", "script", "sg", "capsh", "tmux", "parallel", "sudo",
                              "doas", "chroot", "busybox", "toybox", "coreutils", "ip", "timeout", "nice", "xargs"})


def _glob_head(words: list[_Word], ctx: _Ctx) -> list[SimpleCommand]:
    """A command name that is a pattern (``/usr/sbin/re[b]oot``, ``/usr/bin/[s]udo reboot``) may name any program:
    the command is opaque, and every reading of it as a wrapper is decided as an alternative that counts where a
    rule denies it: each suffix of its words that may name a program (what most wrappers run), and each wrapper
    of :data:`_SCRIPT_WRAPPERS` it may name (``[b]ash -c 'reboot'``). Inside such an alternative a pattern's
    suffixes are not read again (the outer one listed them)."""
    base = words[0].text.rsplit("/", 1)[-1]
    out = [_emit(words, ctx, f"the command name {words[0].text!r} is a glob pattern")]
    alternative = replace(ctx, alternative=True)
    if not ctx.alternative:
        for i in range(1, len(words)):
            if _may_name_program(words[i]) and ctx.budget.left > 0:
                out.extend(_resolve(words[i:], alternative))
    for wrapper in sorted(_SCRIPT_WRAPPERS):
        if ctx.budget.left > 0 and globs_intersect(base, wrapper):
            out.extend(_resolve([_Word.literal(wrapper), *words[1:]], alternative))
    return out


def _wrap_eval(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    if not args:
        return [_Self()]
    script = _join_static(args)
    if script is None:
        return [_Self("eval runs a string built at run time")]
    return [_Script(script, name)]


def _wrap_source(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    target = args[0].text if args else "?"
    return [_Self(f"{name} runs the commands in {target}, which the policy cannot see")]


def _wrap_alias(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``alias NAME=VALUE``: NAME is redefined, and VALUE is shell code (run where NAME is used)."""
    defines: list[str] = []
    scripts: list[_Result] = []
    for word in args:
        if not word.static:
            return [_Self("alias: a definition built at run time")]
        if word.text.startswith("-") or "=" not in word.text:
            continue  # `alias -p`, `alias NAME`: print
        alias_name, _, value = word.text.partition("=")
        defines.append(alias_name)
        scripts.append(_Script(value, f"alias {alias_name}"))
    return [_Self(defines=tuple(defines)), *scripts]


def _wrap_enable(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``enable [-n] NAME`` turns a builtin on or off (so NAME runs something else); ``enable -f FILE NAME``
    loads a builtin from a shared object."""
    opts = _scan_options(args, short_arg="fd", short_flag="anps")
    names = tuple(w.text for w in args[opts.index :])
    if opts.dynamic or any(not w.static for w in args[opts.index :]):
        return [_Self("enable: a name built at run time")]
    if "-f" in opts.values:
        return [_Self(f"enable -f loads builtin code from {opts.values['-f']}, which the policy cannot see",
                      defines=names)]
    return [_Self(_unknown_note(name, opts), defines=names)]


def _wrap_hash(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``hash -p PATH NAME`` makes NAME run PATH."""
    opts = _scan_options(args, short_arg="p", short_flag="rdlt")
    if "-p" in opts.values:
        names = tuple(w.text for w in args[opts.index :])
        return [_Self(f"hash -p makes {' '.join(names) or 'a name'} run {opts.values['-p']}", defines=names)]
    return [_Self(_unknown_note(name, opts))]


def _wrap_trap(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``trap ACTION SIGNAL...``: ACTION is shell code, run when the signal (or EXIT, ERR, DEBUG) comes."""
    if args and args[0].static and args[0].text == "--":
        args = args[1:]
    if not args or (args[0].static and args[0].text in ("-p", "-l", "-P")):
        return [_Self()]
    action = args[0]
    if not action.static:
        return [_Self("trap runs a command built at run time")]
    if action.text in ("", "-") or len(args) == 1:
        return [_Self()]
    return [_Self(), _Script(action.text, "trap")]


def _wrap_mapfile(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``mapfile -C CALLBACK``: CALLBACK is shell code, run every ``-c`` lines."""
    opts = _scan_options(args, short_arg="dnOsuCc", short_flag="t")
    if "-C" not in opts.values:
        return [_Self()]
    callback = next((w for w in args if w.text == opts.values["-C"] or w.text == "-C" + opts.values["-C"]), None)
    if callback is not None and not callback.static:
        return [_Self(f"{name} -C runs a callback built at run time")]
    return [_Self(), _Script(opts.values["-C"], f"{name} -C")]


def _wrap_su(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    script: _Word | None = None
    for i, word in enumerate(args):
        if word.static and word.text in ("-c", "--command") and i + 1 < len(args):
            script = args[i + 1]
            break
        if word.static and word.text.startswith("--command="):
            script = _Word.literal(word.text.split("=", 1)[1])
            break
    found: list[_Result] = [] if script is None else [_Script(script.text if script.static else None, f"{name} -c")]
    if name == "runuser" and any(w.static and w.text == "-u" for w in args):
        # `runuser -u USER -- CMD` runs CMD (a `-c` after it is CMD's own: `runuser -u u -- vim -c 'w! F'`)
        return [*_wrap_suffixes(name, args, ctx), *found]
    return found or [_Self(f"{name} without -c opens an interactive shell")]


def _wrap_shell(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``bash [opts] -c SCRIPT [argv0 args...]``, ``bash FILE``, ``bash`` reading stdin; an interactive shell (``-i``,
    ``--rcfile``/``--init-file``) also runs a start-up file and expands history, which the policy cannot see (bash(1),
    INVOCATION and HISTORY EXPANSION). A login shell's files (/etc/profile, ~/.profile) are the host's own."""
    found = _shell_script(name, args, ctx)
    startup: str | None = None
    i = 0
    while i < len(args) and args[i].static and args[i].text[:1] in ("-", "+") and args[i].text not in ("--", "-"):
        text = args[i].text
        if text in ("--rcfile", "--init-file") or (text[:1] == "-" and text[1:2] != "-" and "i" in text[1:]):
            startup = text
            break
        i += 2 if text in ("-o", "+o", "-O", "+O") else 1
    if startup is None:
        return found
    return [_Self(f"{name} {startup}: an interactive shell runs ~/.bashrc or the --rcfile and expands history (`!:1-3` "
                  "makes a command of earlier words), which the policy cannot see"),
            *(r for r in found if not isinstance(r, _Self))]


def _shell_script(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    has_c = reads_stdin = False
    i = 0
    while i < len(args):
        word = args[i]
        if not word.static:
            if has_c:
                break  # the script itself
            return [_Self(f"{name}: an option is not static text")]
        text = word.text
        if text in ("--", "-"):
            i += 1
            break
        if text in ("--rcfile", "--init-file"):
            i += 2
            continue
        if text.startswith("--"):
            i += 1
            continue
        if text[:1] in ("-", "+") and len(text) > 1:
            letters = text[1:]
            i += 1
            if "c" in letters:
                has_c = True
            if "s" in letters:
                reads_stdin = True
            if letters[-1] in "oO" and i < len(args):
                i += 1  # `-o pipefail`
            continue
        break
    rest = args[i:]
    if has_c:
        if not rest:
            return [_Self(f"{name} -c without a script")]
        script = rest[0]
        return [_Script(script.text if script.static else None, f"{name} -c")]
    if rest and not reads_stdin:
        return [_Self(f"{name} runs the script file {rest[0].text}, which the policy cannot see")]
    return _stdin_program(name, ctx, f"{name} reads its commands from stdin")


def _stdin_program(name: str, ctx: _Ctx, what: str) -> list[_Result]:
    if ctx.stdin in ("heredoc", "herestring") and ctx.stdin_text is not None and name in _SHELLS:
        return [_Script(ctx.stdin_text, f"{name} <<")]
    source = {"pipe": "a pipe", "heredoc": "a here-document", "herestring": "a here-string",
              "file": "a file", "inherit": "the terminal"}[ctx.stdin]  # fmt: skip
    return [_Self(f"{what} ({source}), which the policy cannot see")]


_SSH_SHORT_ARG = "BbcDEeFIiJLlmOopQRSWw"
_SSH_SHORT_FLAG = "46AaCfGgKkMNnqsTtVvXxYy"


def _ssh_host(text: str) -> str:
    text = re.sub(r"^ssh://", "", text)
    text = text.rsplit("@", 1)[-1]
    if text.startswith("["):
        return text[1:].split("]", 1)[0]
    return text.split(":", 1)[0] if text.count(":") == 1 else text


#: ssh_config(5) keywords that run a local command, load code or a config file, or name a file ssh writes
_SSH_LOCAL_EFFECT_KEYS = frozenset({
    "proxycommand", "localcommand", "permitlocalcommand", "knownhostscommand", "match", "include",
    "pkcs11provider", "securitykeyprovider", "remotecommand", "userknownhostsfile", "controlpath", "controlmaster",
    "identityagent", "xauthlocation", "sessiontype",
})  # fmt: skip
#: ssh(1) options with the same effect: -F a config file, -I a PKCS#11 library, -E a log file it appends to,
#: -S a control socket it creates
_SSH_LOCAL_EFFECT_OPTS = frozenset({"-F", "-I", "-E", "-S"})


def _ssh_local_effect(args: Sequence[_Word]) -> str | None:
    """Why ``ssh ARGS`` does something on this host besides connecting (``-o ProxyCommand=...`` runs a local
    command), or None."""
    i = 0
    while i < len(args):
        text = args[i].text
        if not text.startswith("-") or text == "--":
            return None
        j = 1
        while j < len(text):
            letter = text[j]
            if letter in _SSH_SHORT_ARG:
                value = text[j + 1 :] or (args[i + 1].text if i + 1 < len(args) else "")
                if not text[j + 1 :]:
                    i += 1
                if "-" + letter in _SSH_LOCAL_EFFECT_OPTS:
                    return f"ssh -{letter} {value[:40]!r} reads or writes a local file or loads code"
                key = re.match(r"\s*([A-Za-z0-9]*)", value)
                if letter == "o" and key is not None and key.group(1).lower() in _SSH_LOCAL_EFFECT_KEYS:
                    return f"ssh -o {key.group(1)} runs a local command, loads code or names a file ssh writes"
                break
            j += 1
        i += 1
    return None


def _wrap_ssh(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    opts = _scan_options(args, short_arg=_SSH_SHORT_ARG, short_flag=_SSH_SHORT_FLAG)
    rest = args[opts.index :]
    local = _ssh_local_effect(args[: opts.index])
    found = _ssh_remote(name, opts, rest)
    return found if local is None else [_Self(local), *(r for r in found if not isinstance(r, _Self))]


def _ssh_remote(name: str, opts: _Opts, rest: list[_Word]) -> list[_Result]:
    note = _unknown_note(name, opts)
    if not rest:
        return [_Self(note)]
    if not rest[0].static:
        return [_Self("ssh: the host is not static text")]
    host = _ssh_host(rest[0].text)
    if len(rest) == 1:
        if "-N" in opts.flags or "-O" in opts.values or "-W" in opts.values:
            return [_Self(note)]
        return [_Self(f"ssh {host} opens an interactive session")]
    return [_Script(_join_static(rest[1:]), f"ssh {host}", target_host=host, note=note)]


_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})


def _wrap_find(name: str, args: list[_Word], ctx: _Ctx) -> list[_Result]:
    """``find`` is emitted itself, plus each ``-exec CMD ;|+`` as a command and ``-delete`` as ``rm -r -f``."""
    results: list[_Result] = [_Self()]
    starts: list[_Word] = []
    i = 0
    while i < len(args) and not (args[i].static and (args[i].text[:1] in ("-", "(", "!") and args[i].text != "-")):
        if args[i].static and args[i].text in ("-H", "-L", "-P"):
            i += 1
            continue
        starts.append(args[i])
        i += 1
    while i < len(args):
        word = args[i]
        if word.static and word.text in _FIND_EXEC:
            j = i + 1
            while j < len(args) and not (args[j].static and args[j].text in (";", "+")):
                j += 1
            inner = args[i + 1 : j]
            if j >= len(args) or not inner:
                results.append(_Self(f"find {word.text} without a terminating ';' or '+'"))
            else:
                program = _normalise_program(inner[0].text)[0] if inner[0].static else ""
                # the command reads what find hands it: any file below the start directories
                found = tuple(p for start in starts or [_Word.literal(".")]
                              for p in below(start.text, start.static, ctx.cwds)) if (
                    program not in STAT_ONLY and any("{}" in w.text for w in inner)) else ()
                results.append(_Inner(_mark_substituted(inner, "{}"), f"find {word.text}", reads=found))
                reach = _find_reaches_devices(starts, ctx) if program not in STAT_ONLY else None
                if reach is not None:
                    results.append(_Self(f"find {reach} {word.text} {program} opens what it finds there, which may "
                                         "be a device that acts when opened (a watchdog: the host reboots)"))
            i = j + 1
            continue
        if word.static and word.text == "-delete":
            targets = starts or [_Word.literal(".")]
            results.append(_Inner([_Word.literal("rm"), _Word.literal("-r"), _Word.literal("-f"), *targets],
                                  "find -delete"))  # fmt: skip
        i += 1
    return results


def _find_reaches_devices(starts: list[_Word], ctx: _Ctx) -> str | None:
    """The first start directory of ``find`` under which a watchdog device may be found (``/``, ``/dev``, a
    ``/proc/PID/root``, one computed at run time or relative to an unknown directory), or None."""
    for start in starts or [_Word.literal(".")]:
        if not start.static:
            return start.text
        indirect = indirect_names(start.text, ctx.cwds)  # `find ~sys`, `find /proc/1/cwd/dev`: any directory
        for cwd in ctx.cwds:
            joined, above = join_dir(cwd, start.text), climbed(cwd, start.text)
            places: list[str | None] = [w for w in (joined, above) if w is not None] if indirect is None else [
                *indirect]
            for where in places or [None]:
                if where is None or where in ("/", "/dev", ANY_DIR) or where.startswith(("/dev/", "/proc", "/*/")) or (
                        may_open_armed(where + "/watchdog", ["/"])):
                    return start.text
    return None


_WrapFn = Callable[[str, list[_Word], _Ctx], list[_Result]]
_WRAPPERS: dict[str, _WrapFn] = {
    "sudo": _wrap_sudo,
    "doas": _wrap_doas,
    "env": _wrap_env,
    "nice": _wrap_nice,
    "nohup": _wrap_plain,
    "builtin": _wrap_plain,
    "coproc": _wrap_plain,
    "time": _wrap_time,
    "timeout": _wrap_timeout,
    "stdbuf": _wrap_stdbuf,
    "ionice": _wrap_ionice,
    "setsid": _wrap_setsid,
    "command": _wrap_command,
    "exec": _wrap_exec,
    "chroot": _wrap_chroot,
    "watch": _wrap_watch,
    "xargs": _wrap_xargs,
    "busybox": _wrap_busybox,
    "toybox": _wrap_busybox,
    "coreutils": _wrap_busybox,
    **{wrapper: _wrap_suffixes for wrapper in _SUFFIX_WRAPPERS},
    "eval": _wrap_eval,
    "source": _wrap_source,
    ".": _wrap_source,
    "su": _wrap_su,
    "runuser": _wrap_su,
    "ssh": _wrap_ssh,
    "find": _wrap_find,
    "alias": _wrap_alias,
    "enable": _wrap_enable,
    "hash": _wrap_hash,
    "trap": _wrap_trap,
    "mapfile": _wrap_mapfile,
    "readarray": _wrap_mapfile,
    **{shell: _wrap_shell for shell in _SHELLS},
}


def _interpreter_reason(name: str, args: list[_Word], ctx: _Ctx) -> str | None:
    """Why an interpreter invocation is opaque (inline code or program from stdin), or None."""
    if not _INTERPRETER_RE.match(name):
        return None
    family = re.sub(r"[0-9.]+$", "", name)
    letters = _INLINE_CODE_FLAGS.get(family, ())
    for i, word in enumerate(args):
        text = word.text
        if text == "--":
            break
        if text in _INLINE_CODE_LONG or (text.startswith("-") and not text.startswith("--")
                                          and any(c in text[1:] for c in letters)):  # fmt: skip
            code = args[i + 1].text if i + 1 < len(args) else ""
            hint = " (calls os.system/subprocess)" if _PY_EXEC_HINT.search(code) else ""
            return f"{name} {text} runs inline code{hint}, which the policy cannot see"
        if text == "-":
            return _self_reason(_stdin_program(name, ctx, f"{name} reads its program from stdin"))
        if text in ("-m",) or not text.startswith("-"):
            return None  # `python -m mod` / `python script.py`: judged by the rules
    return _self_reason(_stdin_program(name, ctx, f"{name} reads its program from stdin"))


def _self_reason(results: list[_Result]) -> str | None:
    first = results[0]
    return first.reason if isinstance(first, _Self) else None


# --------------------------------------------------------------------------------------------------------------
# The tree walk


@functools.cache
def _language() -> tree_sitter.Language:
    return tree_sitter.Language(tree_sitter_bash.language())


#: characters the parser (tree-sitter-bash) reads as blanks but bash reads as part of a word: bash's blanks are
#: only space and tab (bash(1), DEFINITIONS: "blank: A space or tab"), so `cat\r/tmp/x.sh` runs ./cat\r/tmp/x.sh
_PARSER_ONLY_BLANK_RE = re.compile(rb"[\r\f\v]")
_PARSER_ONLY_BLANK_REASON = ("the command line holds {char}, which bash reads as part of a word where the parser "
                             "reads a space (`cat\\r/tmp/x.sh` runs a program ./cat\\r/tmp/x.sh, not cat)")


def _split_words(text: str) -> list[_Word] | None:
    """Split ``text`` into words as the shell would (used for ``env -S``); None if not a plain command."""
    if _PARSER_ONLY_BLANK_RE.search(text.encode("utf-8", "surrogateescape")):
        return None
    walker = _Walker(text.encode(), _Ctx())
    node = walker.root
    commands = [c for c in node.children if c.type == "command"]
    if node.has_error or len(commands) != 1:
        return None
    words = walker.command_words(commands[0])
    return words if all(w.static for w in words) else None


class _Walker:
    """Walks one parsed script and produces its simple commands."""

    def __init__(self, source: bytes, ctx: _Ctx) -> None:
        self.source = source
        self.ctx = ctx
        self.root = tree_sitter.Parser(_language()).parse(source).root_node
        self.out: list[SimpleCommand] = []
        #: the directories the next command may run in, in source order (see :meth:`track_cd`)
        self.cwds: list[str | None] = list(dict.fromkeys(ctx.cwds))
        #: `set -a` / `set -o allexport` anywhere: every assignment is exported
        self.allexport = bool(_ALLEXPORT_RE.search(source.decode("utf-8", "surrogateescape")))
        self.keyword = bool(_KEYWORD_RE.search(source.decode("utf-8", "surrogateescape")))
        #: OLDPWD or CDPATH named anywhere (assigned, read into, declared): `cd -` and `cd NAME` may go anywhere
        self.oldpwd_set = ctx.oldpwd_set or bool(_OLDPWD_RE.search(source))
        self.cdpath_set = ctx.cdpath_set or bool(_CDPATH_RE.search(source))
        self.tainted: frozenset[str] = ctx.tainted
        #: byte ranges of the substitutions :meth:`hidden_substitutions` found (their text is decided as a whole)
        self.covered: list[tuple[int, int]] = []

    def text(self, node: tree_sitter.Node) -> str:
        # bytes that are not UTF-8 come back as the lone surrogates they were given as (shown as \udcff)
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    def gap(self, start: int, end: int) -> str:
        return self.source[start:end].decode("utf-8", "surrogateescape")

    # -- words --------------------------------------------------------------------------------------------

    def word(self, node: tree_sitter.Node) -> _Word:
        kind = node.type
        if kind == "word":
            return _unescape_unquoted(self.text(node))
        if kind == "number" or kind == "brace_expression":
            return _Word.literal(self.text(node), quoted=False)
        if kind == "raw_string":
            return _Word.literal(self.text(node)[1:-1])
        if kind == "ansi_c_string":
            return _Word.literal(_decode_ansi_c(self.text(node)[2:-1]))
        if kind == "string":
            return self.string(node)
        if kind == "translated_string":
            inner = [c for c in node.children if c.type == "string"]
            return self.string(inner[0]) if inner else _Word.literal("")
        if kind == "concatenation":
            result = _EMPTY
            pos = node.start_byte
            for child in node.children:
                if child.start_byte > pos:
                    result = result + _unescape_unquoted(self.gap(pos, child.start_byte))
                result = result + self.word(child)
                pos = child.end_byte
            return result
        if kind == "$":
            return _Word.literal("$", quoted=False)
        raw = self.text(node)
        if kind == "arithmetic_expansion" and (value := constant_arithmetic(raw)) is not None:
            return _Word.literal(str(value))  # `$((0+1))` is the word 1
        # Expansions and anything this module does not know: keep the source text, flagged dynamic.
        return _Word(raw, (True,) * len(raw), False)

    def string(self, node: tree_sitter.Node) -> _Word:
        result = _EMPTY
        pos = node.start_byte + 1
        end = node.end_byte - 1
        for child in node.children:
            if child.type == '"':
                continue
            if child.start_byte > pos:
                result = result + _Word.literal(_unescape_double(self.gap(pos, child.start_byte)))
            if child.type == "string_content":
                result = result + _Word.literal(_unescape_double(self.text(child)))
            else:
                raw = self.text(child)
                value = constant_arithmetic(raw) if child.type == "arithmetic_expansion" else None
                result = result + (_Word(raw, (True,) * len(raw), False) if value is None
                                   else _Word.literal(str(value)))
            pos = child.end_byte
        if end > pos:
            result = result + _Word.literal(_unescape_double(self.gap(pos, end)))
        return result

    def command_words(self, node: tree_sitter.Node) -> list[_Word]:
        """Name and arguments of a ``command`` node (joining words split by a ``\\<newline>`` continuation)."""
        words: list[_Word] = []
        prev_end: int | None = None
        for i, child in enumerate(node.children):
            fieldname = node.field_name_for_child(i)
            if fieldname == "name":
                target = child.children[0] if child.children else child
            elif fieldname == "argument":
                target = child
            else:
                continue
            word = self.word(target)
            if prev_end is not None and words and self.gap(prev_end, child.start_byte) == "\\\n":
                words[-1] = words[-1] + word
            else:
                words.append(word)
            prev_end = child.end_byte
        return words

    # -- redirects and stdin ------------------------------------------------------------------------------

    def redirect(self, node: tree_sitter.Node) -> tuple[Redirect | None, list[_Word], str | None]:
        """(redirect, extra words that are really arguments, static here-doc text)."""
        fd: int | None = None
        op = ""
        targets: list[_Word] = []
        heredoc_text: str | None = None
        if node.type == "heredoc_redirect":
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            body = next((c for c in node.children if c.type == "heredoc_body"), None)
            op = next((c.type for c in node.children if c.type in ("<<", "<<-")), "<<")
            quoted_delim = start is not None and any(q in self.text(start) for q in "'\"\\")
            body_text = self.text(body) if body is not None else ""
            # a backquote in the body is run too, though tree-sitter leaves it in the text (substitutions.py)
            dynamic = body is not None and not quoted_delim and (
                any(c.type in _DYNAMIC_NODES for c in body.children) or bool(find_substitutions(body_text, "heredoc")))
            if op == "<<-":
                body_text = re.sub(r"(?m)^\t+", "", body_text)
            heredoc_text = None if dynamic else body_text
            return Redirect(op=op, target=body_text, static=not dynamic), [], heredoc_text
        for i, child in enumerate(node.children):
            fieldname = node.field_name_for_child(i)
            if fieldname == "descriptor" or child.type == "file_descriptor":
                try:
                    fd = int(self.text(child))
                except ValueError:
                    fd = None
            elif fieldname == "destination" or (child.is_named and not child.is_error
                                                 and node.type == "herestring_redirect"):
                targets.append(self.word(child))
            elif not targets and (not child.is_named or child.is_error):
                op += self.text(child)  # `1<>/dev/sda` reaches tree-sitter as `<` plus an ERROR holding `>`
        op = op.replace(" ", "")
        if not targets:
            return None, [], None
        first = targets[0]
        if node.type == "herestring_redirect":
            heredoc_text = first.text if first.static else None
            return Redirect(op="<<<", target=first.text, static=first.static), [], heredoc_text
        return Redirect(op=op, target=first.text, fd=fd, static=first.static), targets[1:], None

    def context_for(self, node: tree_sitter.Node) -> tuple[list[Redirect], list[_Word], StdinKind, str | None]:
        """Redirects that apply to ``node`` (its own and enclosing ones), extra argument words, stdin kind."""
        redirects: list[Redirect] = []
        extra: list[_Word] = []
        stdin: StdinKind = "inherit"
        stdin_text: str | None = None
        # bash applies a command's redirections left to right (the last one of fd 0 is its input), and those of
        # the command itself before those of an enclosing group: the innermost level that has one decides
        level, stdin_level = 0, -1

        def take(redir_node: tree_sitter.Node, own: bool) -> None:
            nonlocal stdin, stdin_text, stdin_level
            redir, more, text = self.redirect(redir_node)
            if own:
                extra.extend(more)
            if redir is None:
                return
            redirects.append(redir)
            if stdin_level in (-1, level) and redir.fd in (None, 0) and redir.op in ("<<", "<<-", "<<<", "<", "<&",
                                                                                       "<>"):
                stdin_level = level
                kinds: dict[str, tuple[StdinKind, str | None]] = {
                    "<<": ("heredoc", text), "<<-": ("heredoc", text), "<<<": ("herestring", text)}
                stdin, stdin_text = kinds.get(redir.op, ("file", None))
            if redir_node.type == "heredoc_redirect":  # `cat <<EOF > /dev/sda`: tree-sitter nests what follows
                for nested in redir_node.children:
                    if nested.type.endswith("_redirect"):
                        take(nested, own)

        for child in node.children:
            if child.type.endswith("_redirect"):
                take(child, True)
        cur = node
        parent = cur.parent
        while parent is not None and parent.type not in ("command_substitution", "process_substitution",
                                                         "command", "program"):  # fmt: skip
            level += 1
            if parent.type == "function_definition":  # `f() { ...; } > /dev/sda`: every call writes there
                for child in parent.children:
                    if child.type.endswith("_redirect"):
                        take(child, False)
            if parent.type == "redirected_statement":
                body = parent.child_by_field_name("body")
                own = body is not None and body == cur and cur.type == "command"
                if own:
                    level -= 1  # the command's own redirections, written after it
                for child in parent.children:
                    if child.type.endswith("_redirect"):
                        take(child, own)
                if own:
                    level += 1
            if parent.type == "pipeline" and stdin == "inherit":
                idx = next(k for k, c in enumerate(parent.children) if c == cur)
                if any(c.type in ("|", "|&") for c in parent.children[:idx]):
                    stdin, stdin_level = "pipe", level
            if parent.type == "heredoc_redirect" and stdin == "inherit":
                stdin, stdin_level = "pipe", level  # `cat <<EOF | sh`: the pipeline hangs off the here-doc redirect
            cur, parent = parent, parent.parent
        return redirects, extra, stdin, stdin_text

    # -- walking ------------------------------------------------------------------------------------------

    def run(self) -> list[SimpleCommand]:
        if self.root.has_error:
            self.out.append(self.pseudo(self.error_reason(), self.text(self.root)))
        blank = _PARSER_ONLY_BLANK_RE.search(self.source)
        if blank is not None:
            self.out.append(self.pseudo(_PARSER_ONLY_BLANK_REASON.format(char=repr(blank.group().decode())),
                                        self.source.decode("utf-8", "surrogateescape")))
        sinks, self.tainted = find_sinks(self.source, self.root, self.word_static, self.ctx.tainted)
        self.out.extend(self.pseudo(sink.reason, sink.text) for sink in sinks)
        self.visit(self.root)
        return self.out

    def word_static(self, node: tree_sitter.Node) -> tuple[str, bool]:
        word = self.word(node)
        return word.text, word.static

    def track_cd(self, command: SimpleCommand) -> None:
        """After ``cd``/``pushd``, the next commands may run in the new directory or (had it failed, or in a
        subshell) the old one: both are kept. A directory computed at run time is unknown (None)."""
        if command.program not in ("cd", "pushd") or any(w not in ("builtin", "command") for w in command.wrappers):
            return  # `builtin cd DIR` and `command cd DIR` change this shell's directory too
        args = [(a, d) for a, d in zip(command.argv[1:], command.dynamic[1:], strict=False)
                if not (a.startswith("-") and len(a) > 1 and not d) and not a.startswith("+")]
        target = args[0][0] if args else "~"
        if args and args[0][1]:
            new: list[str | None] = [None]
        elif target == "-":
            if not self.oldpwd_set:
                return  # back to a directory already counted
            new = list(indirect_names("~-", self.cwds) or [])  # `OLDPWD=/dev; cd -`: wherever OLDPWD says
        elif (indirect := indirect_names(target, self.cwds)) is not None:
            new = list(indirect)  # `cd ~sys` (on Debian /dev), `cd /proc/1/cwd`, `cd ~+/x`
        else:
            new = [j for c in self.cwds for j in (join_dir(c, target), climbed(c, target))
                   if j is not None or join_dir(c, target) is None]
            if self.cdpath_set and not target.startswith(("/", "~", "./", "../")) and target not in (".", ".."):
                # `CDPATH=/ cd dev`: cd looks the name up in CDPATH's directories first (bash(1), cd)
                new += [j for j in (indirect_names(f"~-/{target}", self.cwds) or []) if j not in new]
        self.cwds = list(dict.fromkeys([*self.cwds, *new]))
        if len(self.cwds) > 16:
            self.cwds = [*self.cwds[:15], None]

    def error_reason(self) -> str:
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node.is_error or node.is_missing:
                row, col = node.start_point.row + 1, node.start_point.column + 1
                what = f"missing {node.type!r}" if node.is_missing else f"unexpected {self.text(node)[:40]!r}"
                return f"the shell parser cannot read this command ({what} at line {row}, column {col})"
            stack.extend(reversed(node.children))
        return "the shell parser cannot read this command"

    def pseudo(self, reason: str | None, text: str, redirects: Sequence[Redirect] = ()) -> SimpleCommand:
        reasons = [*self.ctx.notes, reason] if reason is not None else []
        return SimpleCommand(
            argv=[], wrappers=list(self.ctx.wrappers), redirects=[*self.ctx.redirects, *redirects],
            writes=writes_of([], [*self.ctx.redirects, *redirects], self.cwds), opaque=reason is not None,
            opaque_reason="; ".join(dict.fromkeys(reasons)) or None, target_host=self.ctx.target_host, text=text,
            cwds=list(self.cwds),
        )  # fmt: skip

    def visit(self, root: tree_sitter.Node) -> None:
        stack = [root]  # iterative pre-order walk: deeply nested input must not hit the recursion limit
        while stack:
            node = stack.pop()
            kind = node.type
            if node.is_named and kind not in _NEVER_EXPANDED:
                self.hidden_substitutions(node)
            if kind == "command_substitution" and node.children and node.children[0].type == "`":
                self.backquoted(node)
            if kind == "command":
                self.command(node)
            elif kind == "redirected_statement" and not _has_command(node.child_by_field_name("body")):
                # `> /dev/sda`, and a body that is no command of its own (`[ 1 ] > /dev/sda`, `((x)) < /dev/watchdog`,
                # `declare x > f`): bash opens the files all the same
                redirects, _, _, _ = self.context_for(node)
                self.out.append(self.pseudo(None, self.text(node), redirects))
            elif kind == "command_substitution" and not _has_command(node) and any(
                    c.type.endswith("_redirect") for c in node.children):
                # `$(<FILE)`: bash(1) Command Substitution reads FILE itself, with no command (an open all the same)
                redirects = [r for c in node.children if c.type.endswith("_redirect")
                             for r in [self.redirect(c)[0]] if r is not None]
                self.out.append(self.pseudo(None, self.text(node), redirects))
            elif kind == "variable_assignment" and (node.parent is None or node.parent.type not in (
                    "command", "declaration_command")):
                self.assignment(node)
            elif kind == "function_definition":
                self.function(node)
            elif kind in _LOOPS:
                self.loop(node)
            elif kind == "declaration_command":
                self.declaration(node)
            elif kind == "unset_command":
                self.unset(node)
            stack.extend(reversed(node.children))

    def quoting_of(self, node: tree_sitter.Node) -> Quoting | None:
        """How bash reads the text of ``node`` (:data:`~.substitutions.Quoting`), or None where it expands nothing
        (single quotes outside double quotes, the body of a here-document whose delimiter is quoted). A substitution
        starts a quoting context of its own."""
        cur: tree_sitter.Node | None = node
        while cur is not None and cur.type != "program" and (
                cur == node or cur.type not in _SUBSTITUTION_NODES):
            if cur.type == "heredoc_body":
                siblings = cur.parent.children if cur.parent is not None else []
                start = next((c for c in siblings if c.type == "heredoc_start"), None)
                quoted = start is not None and any(q in self.text(start) for q in "'\"\\")
                return None if quoted else "heredoc"
            if cur.type in ("string", "translated_string"):
                return "double"  # `"${x:-'`cmd`'}"`: the single quotes are ordinary characters there
            cur = cur.parent
        return None if node.type in ("raw_string", "ansi_c_string") else "unquoted"

    def hidden_substitutions(self, node: tree_sitter.Node) -> None:
        """Substitutions bash runs in the text of ``node`` outside its child nodes, which tree-sitter-bash leaves as
        plain text (a backquote in ``${x:-...}`` or in a here-document, ``${x:-<(cmd)}``): each is opaque (at least
        ``ask``) and its script is decided as commands (:mod:`agent_tools.policy.substitutions`)."""
        own: list[tuple[int, int]] = []
        pos = node.start_byte
        for child in node.children:
            if child.start_byte > pos:
                own.append((pos, child.start_byte))
            pos = max(pos, child.end_byte)
        if node.end_byte > pos:
            own.append((pos, node.end_byte))
        if not any(o.encode() in self.source[a:b] for a, b in own for o in OPENERS):
            return
        quoting = self.quoting_of(node)
        if quoting is None:
            return
        text = self.text(node)
        for sub in find_substitutions(text, quoting):
            start = node.start_byte + len(text[: sub.start].encode("utf-8", "surrogateescape"))
            if not any(a <= start < b for a, b in own) or any(a <= start < b for a, b in self.covered):
                continue  # a child node's own substitution (decided where the walk reaches it), or part of one found
            self.covered.append((start, start + len(sub.text.encode("utf-8", "surrogateescape"))))
            what = "process substitution" if sub.opener in ("<(", ">(") else "command substitution"
            where = {"heredoc": "a here-document", "double": "double quotes", "unquoted": "a word"}[quoting]
            self.out.append(self.pseudo(
                f"bash runs the {what} {sub.text[:60]!r} in {where}, which the shell parser reads as plain text",
                sub.text))
            if sub.script is not None:
                self.nested(sub.script, sub.text)

    def backquoted(self, node: tree_sitter.Node) -> None:
        """```...```: bash removes the backslash of ``\\$``, ``\\``` and ``\\\\`` before it runs the text (```echo
        \\`cmd\\```` runs ``cmd``), which tree-sitter does not: that script is decided too."""
        first, last = node.children[0], node.children[-1]
        if last.type != "`" or last == first:
            return
        raw = self.gap(first.end_byte, last.start_byte)
        script = unescape_backquoted(raw, in_double=self.quoting_of(node) == "double")
        if script != raw:
            self.nested(script, self.text(node))

    def nested(self, script: str, text: str) -> None:
        """Decide ``script``, run by a substitution in this one, as commands of their own."""
        if self.ctx.depth >= MAX_DEPTH:
            self.out.append(self.pseudo(f"substitutions nested deeper than {MAX_DEPTH} levels", text))
            return
        inner = replace(self.ctx, depth=self.ctx.depth + 1, assignments=(), text="", cwds=tuple(self.cwds),
                        tainted=self.tainted, oldpwd_set=self.oldpwd_set, cdpath_set=self.cdpath_set)
        self.out.extend(_Walker(script.encode("utf-8", "surrogateescape"), inner).run())

    def unset(self, node: tree_sitter.Node) -> None:
        """``unset [-v] NAME...``: unsetting PATH makes bash look commands up in the current directory (``unset PATH;
        ls`` runs ``./ls``), so a name :func:`_variable_reason` names is decided like assigning it."""
        words = [_Word.literal(self.text(c)) if c.type == "variable_name" else self.word(c)
                 for c in node.children[1:] if c.type != "comment"]
        functions = any(w.static and w.text.startswith("-") and "f" in w.text for w in words)
        for word in words:
            if word.static and word.text.startswith("-"):
                continue
            if not word.static:
                self.out.append(self.pseudo("unset of a name computed at run time", self.text(node)))
                return
            reason = None if functions else _variable_reason(word.text, exported=False)
            if reason is not None:
                self.out.append(self.pseudo(f"unset {word.text}: {reason.removeprefix(f'sets {word.text}, ')}",
                                            self.text(node)))
                return

    def assignment(self, node: tree_sitter.Node, *, exported: bool = False) -> None:
        """A variable assignment that is not a prefix of a command (``x=1;``, ``export X=1``)."""
        name_node = node.child_by_field_name("name")
        name = self.text(name_node) if name_node is not None else ""
        reason = _variable_reason(name, exported=exported or self.allexport)
        if reason is not None:
            self.out.append(self.pseudo(reason, self.text(node)))
        elif (code := self.code_in_value(node)) is not None:
            self.out.append(self.pseudo(code, self.text(node)))

    def code_in_value(self, node: tree_sitter.Node) -> str | None:
        """Why an assignment whose value is quoted text holding ``$(...)`` or a backquote is opaque: bash runs that
        text when the variable is read in arithmetic (``$((x))``, ``[[ x -eq 1 ]]``, an array subscript)."""
        value = node.child_by_field_name("value")
        if value is None:
            return None
        word = self.word(value)
        if word.static and CODE_IN_TEXT_RE.search(word.text):
            name_node = node.child_by_field_name("name")
            name = self.text(name_node) if name_node is not None else "a variable"
            return f"{name} holds shell code ({word.text[:40]!r}), which bash runs where {name} is read as a number"
        return None

    def declaration(self, node: tree_sitter.Node) -> None:
        """``declare``/``typeset``/``export``/``local``/``readonly``: ``-f`` with export (``export -f``,
        ``declare -fx``) hands shell functions to child bash processes; ``-n`` makes a name refer to another
        variable (``declare -n x=PATH; x=/tmp``); exporting a name (``export X``, ``declare -x X=1``) hands it to
        every program started after (see :func:`_variable_reason`)."""
        keyword = self.text(node.children[0]) if node.children else ""
        letters = "".join(self.text(c)[1:] for c in node.children[1:]
                          if c.type == "word" and self.text(c)[:1] in ("-", "+"))
        names = [self.text(c) for c in node.children[1:] if c.type in ("variable_name", "word")
                 and self.text(c)[:1] not in ("-", "+")]
        exported = keyword == "export" or "x" in letters
        if "f" in letters and exported:
            reason = (f"exports shell function(s) {' '.join(names) or '(all)'} to child processes: a bash they "
                      "start runs the function in place of the command")
            self.out.append(self.pseudo(reason, self.text(node)).model_copy(update={"defines": names}))
        if "n" in letters:
            self.out.append(self.pseudo(f"{keyword} -n makes a name refer to another variable, which the policy "
                                        "cannot follow", self.text(node)))
        if "f" not in letters:
            for child in node.children[1:]:
                if child.type == "variable_assignment":
                    self.assignment(child, exported=exported)
                elif exported and child.type in ("variable_name", "word") and self.text(child)[:1] not in "-+":
                    why = _variable_reason(self.text(child).split("=", 1)[0], exported=True)
                    if why is not None:
                        self.out.append(self.pseudo(why, self.text(node)))

    def function(self, node: tree_sitter.Node) -> None:
        """A function definition: its body is walked as commands like any other; the name is recorded so that
        its calls are decided as new code (:func:`_apply_definitions`)."""
        name_node = node.child_by_field_name("name")
        if name_node is None:
            return
        name = self.word(name_node)
        header = self.text(node).split("\n", 1)[0][:80]
        if not name.static:
            self.out.append(self.pseudo("defines a function whose name is computed at run time", header))
            return
        self.out.append(self.pseudo(None, header).model_copy(update={"defines": [name.text]}))

    def command(self, node: tree_sitter.Node) -> None:
        assignments = tuple(self.text(c) for c in node.children if c.type == "variable_assignment")
        code_notes = tuple(r for c in node.children if c.type == "variable_assignment"
                           and (r := self.code_in_value(c)) is not None)
        words = self.command_words(node)
        if self.keyword:  # `set -k; ls LD_PRELOAD=/tmp/x.so`: the word is kept as an argument too (conservative)
            assignments += tuple(w.text for w in words[1:] if _ASSIGNMENT_WORD_RE.match(w.text))
        redirects, extra, stdin, stdin_text = self.context_for(node)
        ctx = replace(
            self.ctx,
            notes=(*self.ctx.notes, *code_notes),
            redirects=(*self.ctx.redirects, *redirects),
            stdin=stdin if stdin != "inherit" else self.ctx.stdin,
            stdin_text=stdin_text if stdin != "inherit" else self.ctx.stdin_text,
            assignments=assignments,
            text=self.text(node),
            cwds=tuple(self.cwds),
            tainted=self.tainted,
            oldpwd_set=self.oldpwd_set,
            cdpath_set=self.cdpath_set,
        )
        groups = [_brace_expand(word) for word in [*words, *extra]]
        expanded = [w for group in groups for w in group]
        for command in _resolve(expanded, ctx):
            self.out.append(command)
            self.track_cd(command)
            endless = _endless_input(command)
            if endless is not None and not self.stopped_later(node):
                self.out.append(self.pseudo(
                    f"{command.program} reads {endless}, which never ends, and nothing after it in the pipeline stops "
                    "reading (head, dd count=, read): what it keeps or writes grows until memory or the disk is full",
                    command.text))
        # a brace expansion's alternatives count each on its own where a rule denies: `cp /dev/zero /dev/{sda,null}`
        # names /dev/sda as cp's target as `cp /dev/zero /dev/sda` does (the words only shift which one it is)
        variants = [[w for k, g in enumerate(groups) for w in ([alt] if k == i else g)]
                    for i, group in enumerate(groups) if len(group) > 1 for alt in group]
        for variant in variants[:MAX_BRACE_WORDS]:
            self.out.extend(_resolve(variant, replace(ctx, alternative=True)))

    def stopped_later(self, node: tree_sitter.Node) -> bool:
        """Whether a later stage of the pipeline ``node`` is in reads a bounded amount and then stops (``head``,
        ``dd count=``, ``read``, ``od -N``...): the stages before it get SIGPIPE once it is done."""
        cur = node
        while cur.parent is not None and cur.parent.type == "redirected_statement":
            cur = cur.parent
        pipeline = cur.parent
        if pipeline is None or pipeline.type != "pipeline":
            return False
        stages = [c for c in pipeline.children if c.is_named]
        later = stages[next(i for i, c in enumerate(stages) if c == cur) + 1 :]
        for stage in later:
            first = stage if stage.type == "command" else next(
                (c for c in _descendants(stage) if c.type == "command"), None)
            if first is not None:
                words = self.command_words(first)
                if words and words[0].static and _bounded_reader(_normalise_program(words[0].text)[0],
                                                                  [w.text for w in words[1:]]):
                    return True
        return False

    def loop(self, node: tree_sitter.Node) -> None:
        """A loop that starts a background process (``&``) on every pass starts processes without bound (``while :;
        do sleep 9 & done`` is a fork bomb made of allowed commands): opaque, unless it is a ``for`` over at most
        :data:`MAX_BRACE_WORDS` static words."""
        body = next((c for c in node.children if c.type in ("do_group", "compound_statement")), None)
        if body is None or not any(c.type == "&" for c in _descendants(body)):
            return
        if node.type == "for_statement":
            values = [self.word(c) for i, c in enumerate(node.children) if node.field_name_for_child(i) == "value"]
            count = 0
            for word in values:
                expanded = len(_brace_expand(word))
                if not word.static or word.has_unquoted(_GLOB_CHARS) or (
                        word.has_unquoted(frozenset("{")) and expanded == 1):  # {1..1000000}: past the cap
                    count = MAX_BRACE_WORDS + 1
                    break
                count += expanded
            if count <= MAX_BRACE_WORDS:
                return
        header = self.text(node).split("\n", 1)[0][:80]
        self.out.append(self.pseudo("starts a background process (&) on every pass of a loop that may not end: the "
                                    "number of processes has no bound (a fork bomb)", header))


# --------------------------------------------------------------------------------------------------------------
# Resolution of one command's words


def _emit(words: list[_Word], ctx: _Ctx, reason: str | None, defines: tuple[str, ...] = ()) -> SimpleCommand:
    argv = [w.text for w in words]
    program_path = argv[0] if argv else ""
    reasons = [*ctx.notes]
    if reason:
        reasons.append(reason)
    if words and words[0].static:
        argv[0], path_reason = _normalise_program(argv[0])
        if path_reason:
            reasons.append(path_reason)
    for assignment in ctx.assignments:
        var_reason = _variable_reason(assignment.split("=", 1)[0], exported=bool(words))
        if var_reason:
            reasons.append(var_reason)
    if argv and argv[0] in _ASSIGNING_BUILTINS:
        for word in words[1:]:
            var = word.text[2:] if word.text.startswith("-v") else word.text
            if word.static and (var_reason := _variable_reason(var, exported=False)):
                reasons.append(f"{argv[0]} assigns {var}: {var_reason.removeprefix(f'sets {var}, ')}")
    if argv and words[0].static:
        reasons.extend(_builtin_reasons(argv[0], words[1:]))
        reasons.extend(_program_reasons(argv[0], words[1:]))
        if argv[0] in OPENS_OPERANDS:
            in_find = bool(ctx.wrappers) and ctx.wrappers[-1].startswith("find")
            named = next((w.text for w in words[1:] if not w.static and _names_any_file(w.text, in_find)), None)
            if named is None and ctx.args_from_stdin:
                named = "arguments read by xargs"
            if named is not None:
                reasons.append(f"{argv[0]} opens a file named at run time ({named[:40]!r}), which may be a device "
                               "that acts when opened (a watchdog: the host reboots)")
    # what find -exec hands a command counts as read by a program that opens its operands (`cat {}`, not `rm {}`)
    reads = list(ctx.reads) if argv and argv[0] in OPENS_OPERANDS else []
    if argv and words[0].static:
        reads += reads_of(argv[0], argv[1:], [w.static for w in words[1:]], ctx.cwds,
                          opens_operands=argv[0] in OPENS_OPERANDS)
    return SimpleCommand(
        argv=argv,
        dynamic=[not w.static for w in words],
        globs=[w.has_unquoted(_GLOB_CHARS) for w in words],
        program_path=program_path,
        wrappers=list(ctx.wrappers),
        assignments=list(ctx.assignments),
        redirects=list(ctx.redirects),
        writes=writes_of(argv, ctx.redirects, ctx.cwds),
        opaque=bool(reasons),
        opaque_reason="; ".join(dict.fromkeys(reasons)) or None,
        target_host=ctx.target_host,
        args_from_stdin=ctx.args_from_stdin,
        defines=list(defines),
        text=ctx.text,
        cwds=list(dict.fromkeys(ctx.cwds)),
        reads=list(dict.fromkeys(reads)),
        alternative=ctx.alternative,
    )


_LOOPS = frozenset({"while_statement", "for_statement", "c_style_for_statement", "select_statement"})
#: devices that never run out when read
_ENDLESS_DEVICES = frozenset({"/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"})


def _descendants(node: tree_sitter.Node) -> list[tree_sitter.Node]:
    out: list[tree_sitter.Node] = []
    stack = list(node.children)
    while stack:
        cur = stack.pop()
        out.append(cur)
        stack.extend(cur.children)
    return out


def _bounded_reader(program: str, args: Sequence[str]) -> bool:
    """Whether ``program ARGS`` reads a bounded amount of its input and then stops: ``head``, ``dd count=``, ``od
    -N``, ``xxd -l``, ``hexdump -n``, ``cmp -n``, ``read``."""
    if program in ("head", "read"):
        return True
    if program in ("dd", "dcfldd", "dc3dd"):
        return any(a.startswith("count=") for a in args)
    flags = {"od": ("-N", "--read-bytes"), "xxd": ("-l", "-len"), "hexdump": ("-n", "--length"),
             "cmp": ("-n", "--bytes")}.get(program, ())
    return any(a.startswith(f) for a in args for f in flags)


def _endless_input(command: SimpleCommand) -> str | None:
    """What endless input ``command`` reads (``/dev/zero``, ``/dev/urandom``...) or is (``yes``, ``seq inf``) when it
    does not stop reading by itself, else None."""
    program, args = command.program, command.argv[1:]
    if command.writes:
        return None  # a command that writes a file asks anyway (`dd if=/dev/zero of=F` fills the disk)
    if program == "yes":
        return "yes' endless output"
    if program == "seq" and any(a.lower().lstrip("+") in ("inf", "infinity") for a in args):
        return "seq's endless output"
    if not program or _bounded_reader(program, args):
        return None
    for redirect in command.redirects:
        if redirect.op in ("<", "<>") and redirect.fd in (None, 0) and normalise_path(redirect.target) in (
                _ENDLESS_DEVICES):
            return normalise_path(redirect.target)
    if program in STAT_ONLY:
        return None
    return next((normalise_path(w) for a in args if not a.startswith("-")
                 and normalise_path(w := a.split("=", 1)[-1]) in _ENDLESS_DEVICES), None)


def _has_command(node: tree_sitter.Node | None) -> bool:
    """Whether ``node`` holds a simple command (which then carries the redirections around it)."""
    stack = [node] if node is not None else []
    while stack:
        cur = stack.pop()
        if cur.type == "command":
            return True
        stack.extend(cur.children)
    return False


def _certain(cwds: Sequence[str | None]) -> str | None:
    """The one directory of ``cwds``, or None when there are several (or it is unknown)."""
    unique = set(cwds)
    return next(iter(unique)) if len(unique) == 1 else None


def _name_operands(name: str, args: list[_Word]) -> list[_Word]:
    """The arguments builtin ``name`` reads as variable names (their subscripts are evaluated as arithmetic)."""
    if name == "read":
        opts = _scan_options(args, short_arg="adinNptu", short_flag="ers")
        named = list(args[opts.index :])
        for i, w in enumerate(args[: opts.index]):
            if w.text == "-a" and i + 1 < len(args):
                named.append(args[i + 1])
            elif w.static and w.text.startswith("-") and "a" in w.text[1:] and not w.text.endswith("a"):
                named.append(_Word.literal(w.text[w.text.index("a", 1) + 1 :]))
        return named
    if name in ("mapfile", "readarray"):
        return list(args[_scan_options(args, short_arg="dnOsuCc", short_flag="t").index :])
    if name == "getopts":
        return args[1:2]
    if name in ("printf", "wait"):
        flag = "-v" if name == "printf" else "-p"
        for i, w in enumerate(args):
            if w.text == flag and i + 1 < len(args):
                return [args[i + 1]]
            if w.static and w.text.startswith(flag) and len(w.text) > 2:
                return [_Word.literal(w.text[2:])]
        return []
    if name in ("test", "["):
        return [args[i + 1] for i, w in enumerate(args[:-1]) if w.static and w.text == "-v"]
    if name == "unset":
        return [w for w in args if not (w.static and w.text.startswith("-"))]
    return []


#: systemd tools whose -H/--host runs the operation on another host over ssh, and -M/--machine in a local container
#: (systemctl(1): "-M, --machine=: Execute operation on a local container"; "-H, --host=: Execute the
#: operation remotely. Specify a hostname, or a username and hostname separated by "@", to connect to.")
_SYSTEMD_REMOTE = frozenset({"systemctl", "hostnamectl", "timedatectl", "localectl", "loginctl", "machinectl",
                             "busctl", "systemd-analyze", "systemd-run", "networkctl", "homectl", "portablectl",
                             "resolvectl", "bootctl", "systemd-cgls", "systemd-cgtop"})


#: variables of the login environment a command line cannot have changed without being asked (assigning them is
#: opaque: :data:`_DANGEROUS_VAR_RE`)
_LOGIN_VARS_RE = re.compile(r"\$\{?(?:HOME|USER|LOGNAME)\}?")


def _names_any_file(text: str, in_find: bool) -> bool:
    """Whether the source text of a dynamic word may expand to any file name: an expansion other than the login
    directory and user name (``$F``, ``$(cmd)``, ``${x:-/dev/watchdog}``), or xargs' ``{}`` (find's ``{}`` is
    decided with find's start directories: :func:`_wrap_find`)."""
    rest = _LOGIN_VARS_RE.sub("", text)
    if in_find:
        rest = rest.replace("{}", "")
    return "$" in rest or "`" in rest or "{}" in rest or "<(" in rest


def _program_reasons(name: str, args: list[_Word]) -> list[str]:
    """Why a program call does something its words do not show to a rule: a systemd tool run on another host."""
    if name not in _SYSTEMD_REMOTE:
        return []
    for word in args:
        text = word.text
        if text == "--":
            break
        if is_long_abbreviation(text, "--host") or (text.startswith("-") and not text.startswith("--")
                                                    and "H" in text[1:]):
            return [f"{name} {text.split('=', 1)[0]} runs the operation on another host (over ssh), which this "
                    "host's rules do not decide"]
        if is_long_abbreviation(text, "--machine") or (text.startswith("-") and not text.startswith("--")
                                                       and "M" in text[1:]):
            return [f"{name} {text.split('=', 1)[0]} runs the operation in another machine (a local container), "
                    "which this host's rules do not decide"]
    return []


def _builtin_reasons(name: str, args: list[_Word]) -> list[str]:
    """Why a builtin call may run code it does not show: it is given quoted shell code (``test -v 'a[$(id)]'``),
    or a variable name that is not plain (bash evaluates the subscript)."""
    if name not in _BUILTINS:
        return []
    reasons: list[str] = []
    if name == "set" and any(w.static and (_SET_KEYWORD_RE.match(w.text) or w.text == "keyword") for w in args):
        reasons.append("set -k (set -o keyword) makes every later NAME=VALUE word of a command an assignment to "
                       "its environment (bash(1), the set builtin)")
    if name not in _BUILTINS_PRINTING:
        code = next((w.text for w in args if w.static and CODE_IN_TEXT_RE.search(w.text)), None)
        if code is not None:
            reasons.append(f"{name} is given shell code as text ({code[:40]!r}), which bash evaluates where the "
                           "builtin reads it as a name or a number")
    for word in _name_operands(name, args):
        if not word.static or not is_plain_name(word.text):
            reasons.append(f"{name} reads {word.text[:40]!r} as a variable name, whose subscript bash evaluates as "
                           "arithmetic (running any $(...) in it)")
            break
    return reasons


def _resolve(words: list[_Word], ctx: _Ctx) -> list[SimpleCommand]:
    """Unwrap wrappers around ``words`` and return the simple commands they run."""
    if not words:
        return ([_emit([], ctx, None)] if any(_variable_reason(a.split("=", 1)[0], exported=False)
                                              for a in ctx.assignments) else [])
    head = words[0]
    if not head.static:
        return [_emit(words, ctx, f"the command name {head.text!r} is computed at run time")]
    if head.has_unquoted(_GLOB_CHARS):
        return _glob_head(words, ctx)
    if head.text == "":
        return [_emit(words, ctx, "the command name is empty")]
    name, _ = _normalise_program(head.text)
    reason = _interpreter_reason(name, words[1:], ctx)
    handler = _WRAPPERS.get(name)
    if handler is None:
        return [_emit(words, ctx, reason)]
    if ctx.depth >= MAX_DEPTH:
        return [_emit(words, ctx, f"wrappers nested deeper than {MAX_DEPTH} levels")]
    ctx.budget.left -= 1
    if ctx.budget.left < 0:
        return [_emit(words, ctx, "too many wrapper combinations to decide")]
    out: list[SimpleCommand] = []
    if any(_variable_reason(a.split("=", 1)[0], exported=True) for a in ctx.assignments):
        # `BASH_ENV=/dev/stdin bash -c true`: the variable changes what the wrapper itself does at start-up
        out.append(_emit(words, ctx, None))
    for result in handler(name, list(words[1:]), ctx):
        if isinstance(result, _Self):
            out.append(_emit(words, ctx, result.reason, result.defines))
            continue
        notes = (*ctx.notes, result.note) if result.note else ctx.notes
        inner_ctx = replace(
            ctx,
            depth=ctx.depth + 1,
            wrappers=(*ctx.wrappers, result.label),
            target_host=result.target_host or ctx.target_host,
            notes=notes,
        )
        if isinstance(result, _Inner):
            inner_ctx = replace(
                inner_ctx,
                assignments=(*ctx.assignments, *result.assignments),
                args_from_stdin=ctx.args_from_stdin or result.args_from_stdin,
                reads=tuple(dict.fromkeys((*ctx.reads, *result.reads))),
            )
            if result.cwd is not None:  # `env -C DIR`, `sudo -D DIR`
                inner_ctx = replace(inner_ctx, cwds=tuple(
                    join_dir(c, result.cwd.text) if result.cwd.static else None for c in ctx.cwds))
            out.extend(_resolve(result.words, inner_ctx))
            continue
        if result.text is None:
            out.append(_emit(words, ctx, f"{result.label} runs a script built at run time"))
            continue
        if result.target_host and result.target_host != ctx.target_host:
            inner_ctx = replace(inner_ctx, assignments=(), cwds=("~",), tainted=frozenset())
        out.extend(_parse_script(result.text, inner_ctx))
    return out


def _parse_script(script: str, ctx: _Ctx) -> list[SimpleCommand]:
    # Commands inside a script inherit the outer redirects and stdin, but their own assignments only.
    inner = replace(ctx, assignments=(), text="")
    commands = _Walker(script.encode("utf-8", "surrogateescape"), inner).run()
    if ctx.assignments:
        commands = [c.model_copy(update={"assignments": [*ctx.assignments, *c.assignments]}) for c in commands]
    return commands


#: function names the shell calls by itself (for every command that is not found)
_HOOK_FUNCTIONS = frozenset({"command_not_found_handle"})


def _apply_definitions(commands: list[SimpleCommand]) -> list[SimpleCommand]:
    """Names given a new meaning in the command line (:attr:`SimpleCommand.defines`) make each call of them
    opaque, and their definition too when they are called (or always for a hook such as
    ``command_not_found_handle``); a function definition nobody calls runs nothing and is dropped (its body's
    commands were decided on their own). Conservative: a call before the definition, or through ``command``,
    counts as well."""
    defined = {name for c in commands for name in c.defines}
    if not defined:
        return commands
    called = {c.program for c in commands if c.program in defined and not c.defines}
    out: list[SimpleCommand] = []
    for c in commands:
        if c.defines:
            used = [n for n in c.defines if n in called or n in _HOOK_FUNCTIONS]
            if used and not c.opaque:
                what = "the function" if not c.argv else f"{c.program}"
                c = c.model_copy(update={"opaque": True, "opaque_reason": (
                    f"{what} redefines {', '.join(used)}, which this command line then runs: new code")})
            if c.opaque or c.argv:
                out.append(c)
            continue
        if c.program in defined:
            note = (f"{c.program!r} is redefined in this command line (a shell function, alias, enable, hash -p or "
                    "export -f): it runs new code, not the command of that name")
            c = c.model_copy(update={"opaque": True,
                                     "opaque_reason": "; ".join(r for r in (c.opaque_reason, note) if r)})
        out.append(c)
    return out


def parse_command(command: str, *, cwd: str | None = None,
                  env: Mapping[str, str] | None = None) -> list[SimpleCommand]:
    """Parse a shell command line into the simple commands it would run, wrappers unwrapped.

    :param command: the command line as given to ``bash -c`` (text that is not UTF-8, lone surrogates from
        undecodable bytes included, is read as the bytes it stands for).
    :param cwd: the directory the command line starts in (``~``-relative, absolute, or relative to the login
        directory; None: the login directory), for relative file names and rules on ``cwd``.
    :param env: variables exported before the command line runs (a call's ``env``): decided like ``export
        NAME=VALUE`` at its start, so a variable not known to be inert, or a value holding ``$(...)``, is an opaque
        pseudo-command (``env NAME=...``).
    :returns: the simple commands in source order (a ``find -exec`` yields ``find`` and then the inner
        command), and after a command whose words the shell expands, its other readings marked
        :attr:`SimpleCommand.alternative` (a brace alternative alone, a wrapper a glob command name may name).
        A command line that does not parse yields an opaque pseudo-command (empty ``argv``) first, followed by
        whatever commands could still be recognised. A name redefined in the command line (shell function,
        alias, ``enable``, ``hash -p``) makes its calls opaque. Never raises for any input string.
    """
    start = "~" if cwd in (None, "") else join_dir("~", cwd)
    ctx = _Ctx(cwds=(start,))
    found: list[SimpleCommand] = []
    for name, value in (env or {}).items():
        reason = _variable_reason(name, exported=True)
        if reason is None and CODE_IN_TEXT_RE.search(value):
            reason = (f"the env value of {name} holds shell code ({value[:40]!r}), which bash runs where {name} is "
                      "read as a number or a prompt")
        if reason is not None:
            found.append(SimpleCommand(argv=[], opaque=True, opaque_reason=f"env: {reason}", text=f"env {name}=…",
                                       cwds=[start]))
    found += _Walker(command.encode("utf-8", "surrogateescape"), ctx).run()
    return _apply_definitions(found)
