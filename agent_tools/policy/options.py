"""Which option words of a program take the next word as their value, and long-option abbreviations.

A rule such as ``[systemctl, "-**", "status"]`` skips option words before the verb; ``systemctl -p status restart
x`` restarts ``x`` (``status`` is the value of ``-p``), so the skip must know which options take a value. Programs
listed here are skipped exactly; for any other program an option without ``=`` may take the next word, so an
``allow`` rule does not look past it (:meth:`agent_tools.policy.matching.CompiledRule.match`).

Sources: getopt_long(3) ("Long option names may be abbreviated if the abbreviation is unique or is an exact match
for some defined option"), systemctl(1) and systemd's ``src/systemctl/systemctl.c`` option table, ip(8)
(iproute2's ``matches()`` accepts any prefix of an option word: ``-n`` is ``-netns``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OptionSpec", "clusters_short", "is_long_abbreviation", "takes_value"]


@dataclass(frozen=True)
class OptionSpec:
    """The options of one program that take a value.

    ``short``: getopt letters that take a value (``-p VALUE`` or ``-pVALUE``); ``long``: long option names without
    dashes that take a value (``--property VALUE``, ``--property=VALUE``, or an abbreviation such as ``--prop``);
    ``words``: iproute2 style single-dash words that take a value, each also as any prefix (``-n`` for ``-netns``).
    """

    short: str = ""
    long: frozenset[str] = frozenset()
    words: tuple[str, ...] = ()


_SYSTEMD_COMMON = frozenset({"host", "machine", "root", "image", "image-policy", "output", "lines", "json"})

#: programs whose rules skip options with ``-**`` in the shipped policies
SPECS: dict[str, OptionSpec] = {
    "systemctl": OptionSpec(
        short="tpPsHMno",
        long=_SYSTEMD_COMMON | frozenset({
            "type", "property", "state", "job-mode", "signal", "kill-whom", "kill-who", "kill-value", "preset-mode",
            "timestamp", "message", "what", "reboot-argument", "drop-in", "when", "boot-loader-entry",
            "boot-loader-menu", "legend", "check-inhibitors", "marked-value",
        }),
    ),
    "ip": OptionSpec(words=("-loops", "-family", "-batch", "-rcvbuf", "-netns")),
}  # fmt: skip


#: programs whose single-dash words are whole options, not clusters of letters (iproute2's ``-br``, find's
#: ``-name``, tc(8), bridge(8), java's ``-jar``)
SINGLE_DASH_WORDS = frozenset({"ip", "tc", "bridge", "devlink", "rdma", "dcb", "find", "java", "xrandr", "openssl"})


def clusters_short(program: str) -> bool:
    """Whether ``program`` reads ``-abc`` as the short options ``-a -b -c`` (getopt(3)); False for the programs of
    :data:`SINGLE_DASH_WORDS` and those with iproute2 style ``words`` in :data:`SPECS`."""
    spec = SPECS.get(program)
    return program not in SINGLE_DASH_WORDS and not (spec is not None and spec.words)


def is_long_abbreviation(word: str, option: str) -> bool:
    """Whether ``word`` (``--name`` or ``--name=value``) is ``option`` (``--long-name``) or a getopt_long(3)
    abbreviation of it (a prefix of at least one letter after ``--``)."""
    name = word.split("=", 1)[0]
    return name.startswith("--") and len(name) > 2 and option.startswith("--") and option.startswith(name)


def takes_value(program: str, word: str) -> bool | None:
    """Whether option ``word`` of ``program`` takes the next word as its value.

    :returns: True or False for a program in :data:`SPECS` (a value attached with ``=`` or inside a short cluster
        is never the next word); None when the program's options are not known and ``word`` has no ``=``.
    """
    spec = SPECS.get(program)
    if spec is None:
        return False if "=" in word or not word.startswith("-") or word == "--" else None
    if not word.startswith("-") or word == "--" or "=" in word:
        return False
    if spec.words:
        opt = word[1:] if word.startswith("--") else word
        return len(opt) > 1 and any(w.startswith(opt) for w in spec.words)
    if word.startswith("--"):
        return any(is_long_abbreviation(word, "--" + name) for name in spec.long)
    for j, letter in enumerate(word[1:], start=1):
        if letter in spec.short:
            return j == len(word) - 1
    return False
