"""Rediscovering jobs from a host's job directories, for when the local journal lost them (deleted, damaged,
another machine): one round trip lists every job directory with its command (first bytes) and created time,
followed by the batched status report of those jobs (:func:`agent_tools.jobs.scripts.status_script`).

Wire format: ``@@AT found <job_id> <unix_time> <n>`` followed by exactly ``n`` bytes of the command, per job;
then ``@@AT listed``; then the status script's own report (``boot``, ``job``..., ``end``).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .scripts import ENV_LINE_MARK, status_script
from .wire import HostJobState, WireError, WireReader, parse_status

__all__ = ["COMMAND_HEAD_BYTES", "FoundJob", "discover_script", "parse_discovery", "split_env_line", "split_env_values"]

#: bytes of each job's command line sent back by the discovery
COMMAND_HEAD_BYTES = 512

# ``created``: mtime of the ``command`` file (written once by the launcher).
# LC_ALL=C so that ${#c} counts bytes in every shell.
_DISCOVER = r"""
LC_ALL=C; export LC_ALL
base=$1; skip=" $2 "; specs=
for d in "$base"/j_*; do
  [ -e "$d/command" ] || continue  # not a job (yet): a warm session's reserved directory, or a failed launch
  id=${d##*/}
  case ${id#j_} in ''|*[!a-z0-9]*) continue;; esac
  case $skip in *" $id "*) continue;; esac
  t=$(stat -c %Y "$d/command" 2>/dev/null)
  c=$(head -c __HEAD__ "$d/command" 2>/dev/null)
  printf '@@AT found %s %s %s\n%s' "$id" "${t:-0}" "${#c}" "$c"
  specs="$specs $id:0:0:0:0"
done
printf '@@AT listed\n'
"""


@dataclass(frozen=True)
class FoundJob:
    """A job directory found on a host: its id, created time (unix seconds) and the command's first bytes."""

    job_id: str
    created_at: float
    command: str


def split_env_line(command: str) -> tuple[str, list[str]]:
    """A job's ``command`` file split into the command that was asked for and the names of the variables its call
    gave in ``env`` (the first line the launcher wrote for them, :data:`~agent_tools.jobs.scripts.ENV_LINE_MARK`)."""
    first, sep, rest = command.partition("\n")
    if not (sep and first.startswith("export ") and first.endswith(" " + ENV_LINE_MARK)):
        return command, []
    try:
        words = shlex.split(first[len("export ") : -len(ENV_LINE_MARK)])
    except ValueError:
        return command, []
    return rest, [w.split("=", 1)[0] for w in words if "=" in w]


def split_env_values(command: str) -> tuple[str, dict[str, str]]:
    """As :func:`split_env_line`, with the values the call gave (read back to know which of them are secrets)."""
    first, sep, rest = command.partition("\n")
    if not (sep and first.startswith("export ") and first.endswith(" " + ENV_LINE_MARK)):
        return command, {}
    try:
        words = shlex.split(first[len("export ") : -len(ENV_LINE_MARK)])
    except ValueError:
        return command, {}
    return rest, dict(w.split("=", 1) for w in words if "=" in w)


def discover_script(base: str, skip: list[str]) -> str:
    """The shell command line listing every job directory under ``base`` except the ids in ``skip`` (jobs
    already known to be final), with their states, in one round trip.

    :param base: the jobs directory (shell-expanded on the host, as for the other scripts).
    :param skip: job ids to leave out (keep the whole command line well below Linux's 128 KiB per argument).
    """
    body = _DISCOVER.replace("__HEAD__", str(COMMAND_HEAD_BYTES))
    script = body + "(" + status_script("$base", []) + " $specs)\n"
    return f"exec /bin/sh -c {shlex.quote(script)} at-discover \"{base}\" {shlex.quote(' '.join(skip))}"


async def parse_discovery(reader: WireReader) -> tuple[list[FoundJob], dict[str, HostJobState]]:
    """Parse :func:`discover_script`'s output into the jobs found and their host-side states."""
    found: list[FoundJob] = []
    while True:
        words = await reader.header()
        if words is None:
            raise WireError("discovery report ended early")
        if words[0] == "listed":
            break
        if words[0] == "found" and len(words) >= 4:
            n = int(words[3])
            command = (await reader.readexactly(n)).decode("utf-8", "replace")
            if n >= COMMAND_HEAD_BYTES:
                command += "…"
            created = float(words[2]) if words[2].isdigit() else 0.0
            found.append(FoundJob(words[1], created, command))
    return found, await parse_status(reader)
