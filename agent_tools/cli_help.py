"""Help screens that name what an option or argument takes, not its Python type, and read as prose.

typer >= 0.20 prints every parameter's type in its own column (``--json <bool>``, ``--verbose <int>``, ``host
<str>``, ``command... <list[str]>``), also for flags that take no value, and writes required arguments as
``{host}`` in the usage line; a docstring's single line breaks are kept inside its later paragraphs (a sentence
broken where the source line ended), and reST literals are shown with their backquotes. :class:`HelpGroup`
(``typer.Typer(cls=HelpGroup)``) fixes each command before its help is shown:

* options get a metavar: none for flags and counters (``--json``, ``-v``, ``--help``), the option's own when it
  declares one (``--budget SECONDS``), else its name in capitals (click's way);
* arguments are shown as click shows them: their name in capitals (``HOST``, ``COMMAND...``; optional ones in
  brackets) in the usage line and the arguments panel, with no type column;
* the command's help text: ````x```` becomes ``x``, and the lines of each paragraph are joined (a paragraph
  starting with ``\\b`` keeps its lines, as in click).
"""

from __future__ import annotations

import re
from typing import Any

from typer.core import TyperArgument, TyperGroup, TyperOption

__all__ = ["HelpGroup", "prose", "tidy_metavars"]

_LITERAL_RE = re.compile(r"``([^`\n]+)``")


class _ShownArgument(TyperArgument):
    """A :class:`typer.core.TyperArgument` shown as click shows one: its metavar, no type."""

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw
        return [name if self.required else f"[{name}]"]

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def prose(text: str | None) -> str | None:
    """``text`` (a command's help) with reST literals unquoted and each paragraph's lines joined."""
    if not text:
        return text
    paragraphs = re.split(r"\n\s*\n", _LITERAL_RE.sub(r"\1", text.strip()))
    return "\n\n".join(p if p.startswith("\b") else " ".join(line.strip() for line in p.splitlines())
                       for p in paragraphs)


def tidy_metavars(command: Any, ctx: Any) -> None:
    """Give ``command``'s parameters (its ``--help`` included) and help text the forms described in the module
    docstring.

    :param command: a typer (click) command or group; :param ctx: its context.
    """
    for param in command.get_params(ctx):
        if isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = "" if (param.is_flag or param.count) else (param.name or "value").upper()
        elif type(param) is TyperArgument:
            if param.metavar is None:
                param.metavar = (param.name or "arg").upper() + ("..." if param.nargs != 1 else "")
            param.__class__ = _ShownArgument
    command.help = prose(command.help)


class HelpGroup(TyperGroup):
    """A :class:`typer.core.TyperGroup` whose commands, subgroups and own options show help as described in the
    module docstring."""

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            tidy_metavars(command, ctx)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        tidy_metavars(self, ctx)
        super().format_help(ctx, formatter)
