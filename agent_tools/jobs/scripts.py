"""POSIX ``sh`` scripts run on the host: the job launcher/monitor, batched status, and group kill.

Layout of a job directory ``$STATE/jobs/<job_id>/`` (created 0700 under umask 077)::

    command   the command line, as given
    stdout    everything the command wrote to stdout (raw bytes, never truncated)
    stderr    everything it wrote to stderr
    pid       "<cmd_pid> <cmd_start> <boot_id> <monitor_pid> <monitor_start>" (start = /proc/PID/stat
              field 22, in clock ticks since boot; proc(5)) — with the pid it identifies the process
              across PID reuse
    exit      the exit status as the shell reports it (128+N for signal N), written by tmp + rename
              after the command ended; absent while running
    cancel    why the job was cancelled (written before any signal is sent)

Process layout: the launcher (one SSH session, or one local ``sh``) starts a *monitor* in its own session
(``setsid``) with stdin/stdout on /dev/null; the monitor starts the command in a further session of its
own, so the command's process group id equals its pid and the monitor survives a kill of that group. The
command and every descendant carry ``AGENT_TOOLS_JOB=<job_id>`` in their environment, so descendants that
left the process group (``setsid``, double-forked daemons) are still found by a scan of
``/proc/*/environ``. Nothing of the job holds the SSH channel's pipes, so a background grandchild
holding stdout can never hang the call, and closing the channel (SSH drop, detach) leaves the job running.

The launcher waits for the monitor and, when it ends, prints the exit status and a bounded view of the
output in one round trip. When the client sends EOF on stdin (it detached), the launcher exits at once
and only the monitor and the command remain.

Wire format (stdout of the scripts): header lines ``@@AT <word> <fields...>\\n``; a ``view`` header is
followed by exactly ``head_len + tail_len`` raw bytes.
"""

from __future__ import annotations

import shlex

__all__ = ["cancel_script", "launch_script", "status_script"]

# Shared shell functions. Builtins only where the script runs per command (fork/exec costs ~1 ms each).
_LIB = r"""
at_alive() { # PID START -> 0 if that very process (not a reused pid) is alive and not a zombie
  [ -n "$1" ] && [ "$1" != - ] || return 1
  s=; read -r s < "/proc/$1/stat" 2>/dev/null || return 1
  s=${s##*) }; set -- "$2" $s
  [ "$2" != Z ] || return 1
  [ "$1" = - ] && return 0
  eval "[ \"\${21}\" = \"\$1\" ]"
}
at_view() { # NAME FILE OFFSET HEAD TAIL SIZE [JOB] -> "@@AT view NAME SIZE HL TL [JOB]" + bytes
  n=$(( $6 - $3 )); [ "$n" -lt 0 ] && n=0
  if [ "$n" -le $(( $4 + $5 )) ]; then hl=$n; tl=0; else hl=$4; tl=$5; fi
  printf '@@AT view %s %s %s %s %s\n' "$1" "$6" "$hl" "$tl" "${7:-}"
  if [ "$hl" -gt 0 ]; then
    if [ "$3" -eq 0 ]; then head -c "$hl" "$2"; else tail -c +$(( $3 + 1 )) "$2" | head -c "$hl"; fi
  fi
  [ "$tl" -gt 0 ] && tail -c "$tl" "$2" | head -c "$tl"
  return 0
}
at_sizes() { # DIR -> sets os es (bytes of stdout and stderr); no wc when both are empty (the common case)
  os=0; es=0
  [ -s "$1/stdout" ] || [ -s "$1/stderr" ] || return 0
  set -- $(cd "$1" 2>/dev/null && wc -c stdout stderr 2>/dev/null)
  [ "$2" = stdout ] && os=$1 && [ "$4" = stderr ] && es=$3
  return 0
}
"""

_MONITOR = r"""
d=$1; sh_=$2; id=$3
AGENT_TOOLS_JOB=$id setsid "$sh_" -c "$4" </dev/null >"$d/stdout" 2>"$d/stderr" &
pid=$!
cs=-; s=; if read -r s < "/proc/$pid/stat" 2>/dev/null; then s=${s##*) }; set -- $s; cs=${20}; fi
ms=-; s=; if read -r s < "/proc/$$/stat" 2>/dev/null; then s=${s##*) }; set -- $s; ms=${20}; fi
boot=-; read -r boot < /proc/sys/kernel/random/boot_id 2>/dev/null
printf '%s %s %s %s %s\n' "$pid" "$cs" "$boot" "$$" "$ms" > "$d/pid"
wait "$pid"
rc=$?
printf '%s\n' "$rc" > "$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit"
"""

_LAUNCH = r"""
umask 077
base=$1; id=$2; cwd=$3; mode=$4; hb=$5; tb=$6; cmd=$7
d=$base/$id
if ! { { [ -d "$base" ] || mkdir -p "$base" 2>/dev/null; } && mkdir "$d"; }; then
  printf '@@AT error cannot create the job directory %s\n' "$d"; exit 97
fi
printf '%s' "$cmd" > "$d/command"
case $cwd in "~") cwd=$HOME;; "~/"*) cwd=$HOME/${cwd#"~/"};; esac
if [ -n "$cwd" ] && ! cd "$cwd" 2>/dev/null; then
  printf '@@AT error working directory %s does not exist or is not accessible\n' "$cwd"
  printf '%s\n' 2 > "$d/exit"; exit 96
fi
sh_=/bin/sh; command -v bash >/dev/null 2>&1 && sh_=bash
export PAGER=cat SYSTEMD_PAGER= GIT_PAGER=cat GIT_EDITOR=true TERM=dumb DEBIAN_FRONTEND=noninteractive
export SYSTEMD_COLORS=0 NO_COLOR=1 GIT_TERMINAL_PROMPT=0 PIP_NO_INPUT=1 LESS=FRX
exec 3<&0
setsid /bin/sh -c "$MONITOR" at-monitor "$d" "$sh_" "$id" "$cmd" </dev/null >/dev/null 2>"$d/monitor.err" 3<&- &
mpid=$!
printf '@@AT started %s %s\n' "$id" "$mpid"
[ "$mode" = bg ] && exit 0
trap 'exit 0' TERM
( read -r _ <&3; kill -TERM $$ 2>/dev/null ) >/dev/null 2>&1 &
rpid=$!
exec 3<&-
wait "$mpid"
kill "$rpid" 2>/dev/null
rc=-; read -r rc < "$d/exit" 2>/dev/null
at_sizes "$d"
printf '@@AT exit %s\n' "$rc"
at_view stdout "$d/stdout" 0 "$hb" "$tb" "$os"
at_view stderr "$d/stderr" 0 "$hb" "$tb" "$es"
printf '@@AT end\n'
"""

_STATUS = r"""
base=$1; shift
nb=-; read -r nb < /proc/sys/kernel/random/boot_id 2>/dev/null
printf '@@AT boot %s\n' "$nb"
if ! cd "$base" 2>/dev/null; then
  for spec; do printf '@@AT job %s missing\n' "${spec%%:*}"; done; printf '@@AT end\n'; exit 0
fi
ids=; files=
for spec; do
  id=${spec%%:*}; ids="$ids $id"
  [ -s "$id/stdout" ] && files="$files $id/stdout"
  [ -s "$id/stderr" ] && files="$files $id/stderr"
done
# One awk reads every job's pid/exit/cancel files and /proc/PID/stat (buffered; dash's `read` builtin reads
# one byte per system call), one wc sizes every non-empty output file.
{ [ -n "$files" ] && wc -c $files 2>/dev/null; printf '@@SIZES-END\n'; } | awk -v ids="$ids" '
function alive(pid, start,   f, line, F) {
  if (pid == "" || pid == "-") return 0
  f = "/proc/" pid "/stat"; line = ""
  if ((getline line < f) <= 0) { close(f); return 0 }
  close(f)
  sub(/.*\) /, "", line); split(line, F, " ")
  if (F[1] == "Z") return 0
  return (start == "-" || F[20] == start) ? 1 : 0
}
function first(f,   line, r) {
  line = ""; r = (getline line < f); close(f)
  return r < 0 ? "\001" : line
}
$0 == "@@SIZES-END" { done = 1; next }
!done && $2 != "total" { size[$2] = $1 }
END {
  n = split(ids, J, " ")
  for (i = 1; i <= n; i++) {
    id = J[i]
    if (first(id "/command") == "\001") { printf "@@AT job %s missing\n", id; continue }
    rc = first(id "/exit"); if (rc == "\001" || rc == "") rc = "-"
    p = first(id "/pid"); cp = cs = bt = mp = ms = "-"
    if (p != "\001" && p != "") { split(p, P, " "); cp = P[1]; cs = P[2]; bt = P[3]; mp = P[4]; ms = P[5] }
    reason = first(id "/cancel"); ca = (reason == "\001") ? 0 : 1
    os = ((id "/stdout") in size) ? size[id "/stdout"] : 0
    es = ((id "/stderr") in size) ? size[id "/stderr"] : 0
    printf "@@AT job %s present %s %s %s %d %d %d %s %s %s\n", id, rc, cp, bt, alive(cp, cs), alive(mp, ms), ca, os, es, mp
    if (ca) printf "@@AT cancel %s %s\n", id, reason
  }
}'
for spec; do
  oldifs=$IFS; IFS=:; set -- $spec; IFS=$oldifs
  id=$1; oo=${2:-0}; eo=${3:-0}; hb=${4:-0}; tb=${5:-0}
  if [ -d "$id" ] && { [ "$hb" -gt 0 ] || [ "$tb" -gt 0 ]; }; then
    at_sizes "$id"
    at_view stdout "$id/stdout" "$oo" "$hb" "$tb" "$os" "$id"
    at_view stderr "$id/stderr" "$eo" "$hb" "$tb" "$es" "$id"
  fi
done
printf '@@AT end\n'
"""

_CANCEL = r"""
d=$1; id=$2; grace=$3; reason=$4
[ -d "$d" ] || { printf '@@AT missing\n'; exit 0; }
printf '%s\n' "$reason" > "$d/cancel"
pl=; read -r pl < "$d/pid" 2>/dev/null
set -- $pl
cp=${1:--}; cs=${2:--}
grp=; at_alive "$cp" "$cs" && grp=$cp
targets() { # live pids of the job: its process group, plus anything carrying the job's marker
  t=
  if [ -n "$grp" ]; then
    for f in /proc/[0-9]*/stat; do
      s=; read -r s < "$f" 2>/dev/null || continue
      p=${s%% *}; s=${s##*) }; set -- $s
      [ "$3" = "$grp" ] && [ "$1" != Z ] && t="$t $p"
    done
  fi
  for f in $(grep -lzxF "AGENT_TOOLS_JOB=$id" /proc/[0-9]*/environ 2>/dev/null); do
    p=${f#/proc/}; p=${p%/environ}
    at_alive "$p" - && case " $t " in *" $p "*) ;; *) t="$t $p";; esac
  done
  printf '%s' "$t"
}
first=$(targets)
printf '@@AT targets%s\n' "$first"
[ -n "$first" ] || { printf '@@AT survivors\n'; exit 0; }
[ -n "$grp" ] && kill -TERM -- "-$grp" 2>/dev/null
for p in $first; do kill -TERM "$p" 2>/dev/null; done
i=0; n=$grace
while [ "$i" -lt "$n" ]; do
  left=$(targets); [ -z "$left" ] && break
  sleep 0.1 2>/dev/null || sleep 1; i=$(( i + 1 ))
done
left=$(targets)
if [ -n "$left" ]; then
  printf '@@AT escalated%s\n' "$left"
  [ -n "$grp" ] && kill -KILL -- "-$grp" 2>/dev/null
  for p in $left; do kill -KILL "$p" 2>/dev/null; done
  i=0; while [ "$i" -lt 20 ]; do left=$(targets); [ -z "$left" ] && break; sleep 0.1 2>/dev/null; i=$(( i + 1 )); done
fi
printf '@@AT survivors%s\n' "$(targets)"
"""


def _q(s: str) -> str:
    return shlex.quote(s)


def launch_script(base: str, job_id: str, command: str, *, cwd: str | None, mode: str,
                  head_bytes: int, tail_bytes: int, env: dict[str, str] | None = None) -> str:
    """The shell command line that launches ``command`` as job ``job_id`` under directory ``base``.

    :param base: the jobs directory on the host (``$HOME``-relative paths allowed via ``~``-free absolute
        paths or a leading ``$HOME``; the value is passed through the login shell's parameter expansion).
    :param mode: ``fg`` (report the exit and output when the command ends) or ``bg`` (return at once).
    :param head_bytes: bytes of each stream's head to send back when the command ends.
    :param tail_bytes: bytes of each stream's tail to send back.
    :param env: extra environment variables for the command (exported before it starts).
    """
    if env:
        exports = "".join(f"export {k}={_q(v)}; " for k, v in env.items())
        command = exports + command
    script = "MONITOR=" + _q(_LIB + _MONITOR) + "; " + _LIB + _LAUNCH
    return (f"exec /bin/sh -c {_q(script)} at-launch \"{base}\" {_q(job_id)} {_q(cwd or '')} {_q(mode)} "
            f"{int(head_bytes)} {int(tail_bytes)} {_q(command)}")


def status_script(base: str, specs: list[tuple[str, int, int, int, int]]) -> str:
    """The shell command line reporting on many jobs in one round trip.

    :param specs: ``(job_id, stdout_offset, stderr_offset, head_bytes, tail_bytes)`` per job; 0/0 bytes
        asks for no output view.
    """
    args = " ".join(_q(f"{j}:{o}:{e}:{h}:{t}") for j, o, e, h, t in specs)
    return f"exec /bin/sh -c {_q(_LIB + _STATUS)} at-status \"{base}\" {args}"


def cancel_script(base: str, job_id: str, *, grace_s: float, reason: str) -> str:
    """The shell command line that kills job ``job_id``'s whole tree: TERM, up to ``grace_s`` seconds,
    KILL, then verifies nothing of it is left (prints the survivors, normally none)."""
    grace = max(0, round(grace_s * 10))  # the script counts tenths of a second
    reason = reason.replace("\n", " ")
    return (f"exec /bin/sh -c {_q(_LIB + _CANCEL)} at-cancel \"{base}/{job_id}\" {_q(job_id)} {grace} "
            f"{_q(reason)}")
