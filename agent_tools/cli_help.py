"""Help screens that name what an option takes, not its Python type.

typer >= 0.20 prints every option's type in its own column (``--json <bool>``, ``--verbose <int>``,
``--help <bool>``), also for flags that take no value. :class:`HelpGroup` (``typer.Typer(cls=HelpGroup)``) gives
each command's options a metavar before their help is shown: none for flags and counters (``--json``,
``-v``, ``--help``), the option's own metavar when it declares one (``--budget SECONDS``), else its name in
capitals (click's way).
"""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup, TyperOption

__all__ = ["HelpGroup", "tidy_metavars"]


def tidy_metavars(command: Any, ctx: Any) -> None:
    """Give ``command``'s options (its ``--help`` included) the metavars described in the module docstring.

    :param command: a typer (click) command or group; :param ctx: its context.
    """
    for param in command.get_params(ctx):
        if isinstance(param, TyperOption) and param.metavar is None:
            param.metavar = "" if (param.is_flag or param.count) else (param.name or "value").upper()


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
