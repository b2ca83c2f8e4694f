"""POSIX ``sh`` scripts run on the host: the job launcher/monitor, batched status, and group kill.

Layout of a job directory ``$STATE/jobs/<job_id>/`` (created 0700 under umask 077)::

    command   the command line, as given (after a first line ``export NAME=... # agent-tools: env`` when the call
              gave env); created exclusively (``set -C``), so a job id is used once
    stdout    everything the command wrote to stdout (raw bytes, never truncated)
    stderr    everything it wrote to stderr
    pid       "<cmd_pid> <cmd_start> <boot_id> <monitor_pid> <monitor_start>" (start = /proc/PID/stat
              field 22, in clock ticks since boot; proc(5)) — with the pid it identifies the process
              across PID reuse
    exit      the exit status as the shell reports it (128+N for signal N), then a second line with the
              host's uptime (``/proc/uptime``, seconds) when the command started and when it ended (``-``
              where unknown), then how it ended: ``exit`` (it exited, with that status even above 128),
              ``signal`` (a signal killed it) or ``-`` (not known: told by dash's ``jobs -l``, which still
              lists a job ``wait`` reported, "Done(137)" or "Killed"; bash as ``/bin/sh`` does not); written
              with one write(2) after the command ended; absent (or, for an instant, empty) while running.
              The run time is taken from the host's own clock.
    jobs      the monitor's ``jobs -l`` (only when the status was above 128)
    cancel    why the job was cancelled (written before any signal is sent)
    cgroup    how the job's processes are found: the path of its cgroup (``/sys/fs/cgroup/...scope``), or
              ``- REASON`` when it has none (no systemd, no systemd-run, a user manager that stops at logout,
              systemd-run refused: then ``scope.err`` holds what systemd-run said)
    deadline  written by the monitor's deadline watcher when the job's deadline passed, before any signal: the
              deadline in seconds and the host's uptime then, then the kill's report (``@@AT targets`` ...
              ``@@AT survivors``, see :func:`cancel_script`) as it goes

Process layout: the launcher (one SSH session, or one local ``sh``) forks a *monitor* subshell with
stdin/stdout on /dev/null; the monitor starts the command in a session of its own (``setsid``), so the
command's process group id equals its pid and the monitor survives a kill of that group. Where the host runs
systemd, the command runs in a transient scope of its own, ``agent-tools-<job_id>.scope``: ``systemd-run
--scope`` as root, ``systemd-run --user --scope`` for a user whose manager lingers (without linger the user's
manager, and every scope in it, is stopped at the last logout: ``loginctl enable-linger``; logind.conf(5)).
``systemd-run --scope`` executes the command itself once the scope exists (systemd-run(1)), so the pid is the
job's; its cgroup (cgroups(7), v2) holds every descendant whatever they do to their environment or session, and
is what cancel lists (``cgroup.procs``) and kills (``cgroup.kill``, Linux 5.14+). Costs one D-Bus round trip
(~30-40 ms) per job. A scope that cannot be made is found out at launch: systemd-run then exits without
running the command (no ``cgroup`` path written), and the monitor starts it without one. Without a scope the
job is followed by its session and process group (both ids are the command's pid) and by the marker: the command
and every descendant carry ``AGENT_TOOLS_JOB=<job_id>`` in their environment, so descendants that left the
process group (``setsid``, double-forked daemons) are still found by a scan of ``/proc/*/environ``; one that
left both (``env -i setsid``) is out of sight, and every survivor check says so (``- REASON``). When the command
ends, the launcher lists what of the job still runs (``left`` lines) after waiting, up to 2 s, for those of them
that hold the job's output files open and are running (a ``tee`` fed by the command) to settle. Nothing
of the job holds the SSH channel's pipes, so a background grandchild holding stdout can never hang the call,
and closing the channel (SSH drop, detach) leaves the job running: without a pty neither sshd nor the kernel
signals the session's processes when the channel or the launcher goes away (sshd(8): a session without a
pty gets no SIGHUP).

A launch with a deadline (:func:`launch_script`'s ``deadline_s``) gets a *deadline watcher*: a subshell of the
monitor that sleeps that many seconds from the command's start and then, unless the command has ended, writes
``deadline`` and kills the job's whole tree exactly as a cancel does (``at_cancel``: by its cgroup when it has
one, so processes that left its session and environment die too; else by its session, group and marker; TERM, a
2 s grace, KILL, survivors checked), with the reason ``deadline: ...``. It runs on the host, so the deadline
holds when the controller is gone; the monitor stops it when the command ends first (once it fired it finishes
the kill, and the monitor writes ``exit`` after it). ``sleep`` must take fractions of a second (GNU coreutils,
busybox).

The launcher waits for the monitor and, when it ends, prints the exit status and a bounded view of the
output in one round trip. When the client sends EOF on stdin (it detached), the launcher exits at once
and only the monitor and the command remain.

Every script is a shell function (``at_launch``, ``at_status``, ``at_cancel``) run one of two ways:

* *exec*: ``exec /bin/sh -c 'LIB; at_x "$@"' at-x ARGS`` on a fresh session channel;
* *warm*: on a session started earlier (:func:`warm_script`) that defined every function, made the job
  directory of a reserved job id and waits on stdin; the client writes one request (:func:`warm_request`,
  the line count, then ``at_x ARGS``) and reads the same report. This takes the channel open, the exec
  request, the login shell and the ``mkdir`` off the call's path (see docs/performance.md). A warm session
  not used removes its empty directory when its stdin ends.

Input (``stdin="pipe"`` or ``"tty"``; other jobs keep ``/dev/null``)::

    stdin      a named pipe (mkfifo, 0600) the command reads. The monitor starts a *holder* (a shell waiting
               while the monitor lives) that keeps it open for reading and writing, so opening it never blocks and the command sees EOF
               only when the holder goes (``eof``); nothing of it depends on any SSH session
    stdin.pid  "<holder_pid> <holder_start>"
    stdin.eof  present once a write asked for EOF: later writes are refused
    input/     the write queue: ``SEQ.KEY`` (``.e``: EOF after it), numbered under a ``mkdir`` lock, written
               in order by one *pump* (``input/.pump``) and then emptied and renamed ``SEQ.KEY.done``, so a
               retried write (same key) is found and never written twice, and no typed text stays behind

``at_input`` reads the whole write from its channel before queueing it (a channel that drops mid-way queues
nothing) and then ignores HUP/PIPE: once it answered ``written``/``queued`` the write happens whatever
becomes of the connection. With ``tty`` the command runs under a pseudo-terminal the monitor's child owns
(util-linux ``script -qefc`` started by ``env --default-signal=INT,QUIT``: a background job inherits SIGINT
ignored, and Ctrl-C must reach the program; else :data:`PTY_PROGRAM` under ``python3``; neither: the launch is
refused ``unsupported``), 80x24, ``TERM=xterm``; what the program draws goes to ``stdout`` (stderr stays empty).
The launch's words: 8 is the deadline (``''`` for none), 9 the stdin mode (``pipe``/``tty``), 10 the pty
program; a launch without stdin stops at word 8 (or 7). ``at_spawn`` gives the command the pipe in both of its
paths (the ``systemd-run --scope`` one and the plain one); ``at_in_end`` runs once the deadline watcher is
stopped and the ``exit`` file is written.

Wire format (stdout of the scripts): header lines ``@@AT <word> <fields...>\\n``; a ``view`` header is
followed by exactly ``head_len + tail_len`` raw bytes.
The launch report adds ``left PID CMDLINE`` for each process the command left running (first 20, command lines
cut at 200 bytes); the cancel report ``was RC`` (the command had ended before), ``how cgroup PATH`` or ``how -
REASON``, then ``targets``, ``escalated`` and ``survivors`` pid lists. A job its deadline killed adds, to the
launch report and its status, ``deadline [ID] LIMIT DONE [SURVIVORS...]`` (DONE 1 once survivors were checked)
and ``deadline_how [ID] HOW`` (the cancel report's ``how``).
"""

from __future__ import annotations

import shlex

__all__ = ["ENV_LINE_MARK", "PTY_PROGRAM", "cancel_request", "cancel_script", "deadline_word", "input_script",
           "launch_request", "launch_script", "status_request", "status_script", "warm_request", "warm_script"]

ENV_LINE_MARK = "# agent-tools: env"
"""Ends the first line of a job's ``command`` file when the call gave ``env``: ``export NAME='value' ... # mark``."""

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
at_targets() { # DIR ID -> at_t: live pids of the job; at_how: "cgroup PATH" (its cgroup's members were listed) or
               # "- REASON" (no cgroup: its session, process group and marker were searched); at_grp: its group id
  at_t=; at_grp=; l=; read -r l < "$1/cgroup" 2>/dev/null
  case $l in /*)
    at_how="cgroup $l"
    for p in $(cat "$l/cgroup.procs" "$l"/*/cgroup.procs "$l"/*/*/cgroup.procs 2>/dev/null); do at_add "$p"; done
    return 0;;
  esac
  at_how="- ${l#- }"; [ -n "$l" ] || at_how="- the job directory has no record of a cgroup"
  pl=; read -r pl < "$1/pid" 2>/dev/null
  # One awk reads every /proc/PID/stat. The command leads its session and process group (setsid), so both ids are
  # its pid: they name the job's processes unless that pid now belongs to another process (the kernel does not
  # reuse a pid while a group or session has that id, so a live process with that pid and another start time
  # means the job's group is gone). Only processes started since the command can carry its marker: the awk reads
  # their environments itself when it can split a file at NUL bytes (checked on its own environment), else it
  # names them ("c" lines) for grep.
  cand=
  for p in $(AT_NUL=1 awk -v pl="$pl" -v want="AGENT_TOOLS_JOB=$2" 'function marked(pid,   e, env, n, E, k) {
      e = "/proc/" pid "/environ"; env = ""; RS = "\001"; getline env < e; close(e); RS = "\n"
      n = split(env, E, "\000"); for (k = 1; k <= n; k++) if (E[k] == want) return 1
      return 0 }
    BEGIN {
      nul = 0; RS = "\001"; env = ""; getline env < "/proc/self/environ"; close("/proc/self/environ"); RS = "\n"
      n = split(env, E, "\000"); for (k = 1; k <= n; k++) if (E[k] == "AT_NUL=1") nul = 1
      split(pl, P, " "); cp = P[1]; cs = P[2]; grp = (cp ~ /^[0-9]+$/)
      if (grp) {
        f = "/proc/" cp "/stat"; line = ""
        if ((getline line < f) > 0) { sub(/.*\) /, "", line); split(line, F, " "); if (cs != "-" && F[20] != cs) grp = 0 }
        close(f)
      }
      if (grp) print "g" cp
      for (i = 1; i < ARGC; i++) {
        line = ""; r = (getline line < ARGV[i]); close(ARGV[i])
        if (r <= 0) continue
        pid = line; sub(/ .*/, "", pid); sub(/.*\) /, "", line); split(line, F, " ")
        if (F[1] == "Z") continue
        if (grp && (F[3] == cp || F[4] == cp)) print pid
        else if (cs !~ /^[0-9]+$/ || F[20] + 0 >= cs + 0) { if (!nul) print "c" pid; else if (marked(pid)) print pid }
      }
      exit }' /proc/[0-9]*/stat 2>/dev/null); do
    case $p in g*) at_grp=${p#g};; c*) cand="$cand /proc/${p#c}/environ";; *) at_add "$p";; esac
  done
  [ -n "$cand" ] || return 0
  for f in $(grep -lzxF "AGENT_TOOLS_JOB=$2" $cand 2>/dev/null); do
    p=${f#/proc/}; at_add "${p%/environ}"
  done
  return 0
}
at_add() { # PID: add it to at_t when it is alive (not a zombie) and not there yet
  case " $at_t " in *" $1 "*) return 0;; esac
  at_alive "$1" - && at_t="$at_t $1"
  return 0
}
"""

_LAUNCH = r"""
at_launch() { # BASE ID CWD MODE HEAD TAIL COMMAND [DEADLINE_S [STDIN [PTY_PROGRAM]]] (DEADLINE_S may be '')
umask 077
base=$1; id=$2; cwd=$3; mode=$4; hb=$5; tb=$6; cmd=$7; dl=${8:-}; at_in=${9:-}; at_pyp=${10:-}
d=$base/$id
if [ "$id" = "${at_rid:-}" ]; then
  trap - EXIT PIPE HUP; at_rid=  # the warm session made this directory for this job (checked below)
fi
if ! { [ -d "$d" ] || { { [ -d "$base" ] || mkdir -p "$base" 2>/dev/null; } && mkdir "$d"; }; }; then
  printf '@@AT error cannot create the job directory %s\n' "$d"; exit 97
fi
set -C
if ! printf '%s' "$cmd" 2>/dev/null > "$d/command"; then
  printf '@@AT error job %s exists already on the host (its command file is there)\n' "$id"; exit 97
fi
set +C
[ -z "$at_in" ] || at_in_check "$d" || exit 96
case $cwd in "~") cwd=$HOME;; "~/"*) cwd=$HOME/${cwd#"~/"};; esac
if [ -n "$cwd" ] && ! cd "$cwd" 2>/dev/null; then
  printf '@@AT error working directory %s does not exist or is not accessible\n' "$cwd"
  printf '%s\n' 2 > "$d/exit"; exit 96
fi
sh_=/bin/sh; command -v bash >/dev/null 2>&1 && sh_=bash
export PAGER=cat SYSTEMD_PAGER= GIT_PAGER=cat GIT_EDITOR=true TERM=dumb DEBIAN_FRONTEND=noninteractive
export SYSTEMD_COLORS=0 NO_COLOR=1 GIT_TERMINAL_PROMPT=0 PIP_NO_INPUT=1 LESS=FRX
[ -z "$at_in" ] || at_in_prepare "$d"
# the monitor: starts the command in a session of its own, records its pid, waits, records the exit status
(
  t0=-; read -r t0 _ 2>/dev/null </proc/uptime
  [ -z "$at_in" ] || at_in_hold "$d"
  at_spawn "$d" "$id" "$sh_" "$cmd"
  wp=
  if [ -n "$dl" ]; then  # the deadline watcher (module docstring): past DL seconds, kill the job's whole tree
    (
      sp=; trap 'kill "$sp" 2>/dev/null; exit 0' TERM
      sleep "$dl" & sp=$!
      wait "$sp"
      trap '' TERM  # it fired: the monitor's stop no longer interrupts the kill
      [ -e "$d/exit" ] && exit 0
      tn=-; read -r tn _ 2>/dev/null </proc/uptime
      printf '%s %s\n' "$dl" "$tn" > "$d/deadline"
      at_cancel "$d" "$id" 20 "deadline: still running at its $dl s deadline, killed on the host" >> "$d/deadline"
    ) 2>/dev/null &
    wp=$!
  fi
  wait "$pid"
  rc=$?
  if at_unscoped "$d"; then at_spawn "$d" "$id" "$sh_" "$cmd" plain; wait "$pid"; rc=$?; fi
  at_ended "$d" "$pid" "$rc"
  t1=-; read -r t1 _ 2>/dev/null </proc/uptime
  [ -z "$wp" ] || { kill "$wp" 2>/dev/null; wait "$wp"; }  # (once it fired: after its kill is checked)
  printf '%s\n%s %s\n%s\n' "$rc" "$t0" "$t1" "$how" > "$d/exit"
  [ -z "$at_in" ] || at_in_end "$d"
) </dev/null >/dev/null 2>"$d/monitor.err" &
mpid=$!
printf '@@AT started %s %s\n' "$id" "$mpid"
[ "$mode" = bg ] && exit 0
# wait for the monitor; EOF on stdin (the client detached) ends this wait and this shell, the job goes on
trap 'exit 0' TERM
exec 3<&0  # a background list's stdin is /dev/null (POSIX, no job control): the watcher reads fd 3
( read -r _ <&3; kill -TERM $$ 2>/dev/null ) >/dev/null 2>&1 &
rpid=$!
exec 3<&-
wait "$mpid"
kill "$rpid" 2>/dev/null
at_report "$d" "$hb" "$tb" "$id"
}
at_deadline() { # DIR [ID] -> "@@AT deadline [ID] LIMIT DONE [SURVIVORS...]" (DONE: 1 once the kill was checked),
                # then "@@AT deadline_how [ID] HOW" once the kill said how it found the job (see at_targets)
  l=; sv=; dn=0; dh=
  { read -r l; while read -r w k rest; do
      case $k in survivors) dn=1; sv=$rest;; how) dh=$rest;; esac
    done; } < "$1/deadline" 2>/dev/null
  printf '@@AT deadline %s%s %s%s\n' "${2:+$2 }" "${l%% *}" "$dn" "${sv:+ $sv}"
  [ -z "$dh" ] || printf '@@AT deadline_how %s%s\n' "${2:+$2 }" "$dh"
}
# stdin=pipe / tty (see the module docstring, "Input"): small hooks of at_launch and its monitor
at_in_check() { # DIR: a terminal needs util-linux script or python3 on the host; else `unsupported`, never run
  at_pty=
  [ "$at_in" = tty ] || return 0
  # a background job starts with SIGINT/SIGQUIT ignored (POSIX, no job control) and sh -c cannot undo that: the
  # terminal's Ctrl-C must reach the program, so its owner starts it with them at their defaults
  if script -V 2>/dev/null | grep -q util-linux && env --default-signal=INT,QUIT true 2>/dev/null; then at_pty=script
  elif command -v python3 >/dev/null 2>&1; then at_pty=python3
  else
    printf '@@AT error unsupported: tty=true needs util-linux script or python3 on the host; neither is there\n'
    printf '%s\n' 2 > "$1/exit"; return 1
  fi
}
at_in_prepare() { # DIR: the named pipe the command reads; a terminal gets a terminal type
  mkfifo -m 600 "$1/stdin" || { printf '@@AT error cannot make the named pipe %s/stdin\n' "$1"; exit 96; }
  [ "$at_in" = tty ] && export TERM=xterm COLUMNS=80 LINES=24
  return 0
}
at_in_hold() { # DIR (in the monitor): hold the pipe open (a writer-and-reader: no EOF, no blocked open) by a
  # holder process, so input works from any later session; killing the holder is EOF (its sleep does not hold the
  # pipe). It also ends within a minute of the monitor's end (a job directory deleted under a running job).
  at_hd=$1; exec 4<>"$at_hd/stdin"
  s=; read -r s < /proc/self/stat; at_mp=${s%% *}
  ( while kill -0 "$at_mp" 2>/dev/null; do sleep 60 4<&-; done ) </dev/null >/dev/null 2>&1 &
  hp=$!; exec 4<&-; hs=-; s=; if read -r s < "/proc/$hp/stat" 2>/dev/null; then s=${s##*) }; set -- $s; hs=${20}; fi
  printf '%s %s\n' "$hp" "$hs" > "$at_hd/stdin.pid"
  at_src=$at_hd/stdin
}
at_in_eof() { # DIR: end of input: the holder goes, so the command reads EOF once the pipe is drained
  pl=; read -r pl < "$1/stdin.pid" 2>/dev/null; set -- $pl
  at_alive "${1:-}" "${2:--}" && kill "$1" 2>/dev/null
  return 0
}
at_in_end() { # DIR (in the monitor, the command ended): no holder; a pump stuck opening the pipe gets EPIPE
  at_in_eof "$1"
  exec 4<>"$1/stdin"; exec 4<&-
}
at_spawn() { # DIR ID SHELL COMMAND [plain]: start the command as the job, in a transient systemd scope (a cgroup of
             # its own) when the host has one for this user, else (or with "plain") as it is; write DIR/pid; set pid
  sd=$1 sc=
  if [ -n "${5:-}" ]; then :
  elif [ ! -d /run/systemd/system ]; then printf '%s\n' "- the host does not run systemd" > "$1/cgroup"
  elif ! command -v systemd-run >/dev/null 2>&1; then printf '%s\n' "- systemd-run is not installed" > "$1/cgroup"
  elif [ -w /run/systemd/system ]; then sc=--system
  else
    u=${USER:-${LOGNAME:-$(id -un)}}
    if [ ! -S "${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/systemd/private" ]; then
      printf '%s\n' "- $u has no systemd user manager" > "$1/cgroup"
    elif [ ! -e "/var/lib/systemd/linger/$u" ]; then
      printf '%s\n' "- $u's systemd user manager stops at logout (no linger: loginctl enable-linger $u)" > "$1/cgroup"
    else
      sc=--user; export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}"
    fi
  fi
  at_sc=$sc; at_j=$2
  set -- "$3" -c "$4"  # the job's argv; with a terminal (stdin=tty, see "Input"), its owner runs the command
  case ${at_pty:-} in
    script) set -- env --default-signal=INT,QUIT SHELL="$1" script -qefc "stty rows 24 cols 80 2>/dev/null; $3" \
              /dev/null;;
    python3) set -- python3 -c "$at_pyp" "$@";;
  esac
  if [ -n "$sc" ]; then
    # systemd-run --scope moves itself into a new scope and then executes the command (so the pid stays the
    # job's); the trampoline records the scope's cgroup, gives the job its stderr and becomes the command
    AGENT_TOOLS_JOB=$at_j systemd-run "$sc" --scope --quiet --collect --unit="agent-tools-$at_j" \
      --description="agent-tools job $at_j" /bin/sh -c '
      m=/sys/fs/cgroup; [ -e $m/cgroup.controllers ] || m=/sys/fs/cgroup/unified
      c=; while IFS= read -r l; do case $l in 0::/*) c=$m${l#0::}; break;; esac; done < /proc/self/cgroup
      [ -e "$c/cgroup.procs" ] || c="- no cgroup v2 hierarchy to follow the scope by"
      printf "%s\n" "$c" > "$1/cgroup" || exit 126; exec 2>"$1/stderr"; shift; exec setsid "$@"' at-job "$sd" "$@" \
      <"${at_src:-/dev/null}" >"$sd/stdout" 2>"$sd/scope.err" &
  else
    AGENT_TOOLS_JOB=$at_j setsid "$@" <"${at_src:-/dev/null}" >"$sd/stdout" 2>"$sd/stderr" &
  fi
  pid=$!
  cs=-; s=; if read -r s < "/proc/$pid/stat" 2>/dev/null; then s=${s##*) }; set -- $s; cs=${20}; fi
  mp=-; ms=-; s=; if read -r s < /proc/self/stat 2>/dev/null; then mp=${s%% *}; s=${s##*) }; set -- $s; ms=${20}; fi
  boot=-; read -r boot < /proc/sys/kernel/random/boot_id 2>/dev/null
  printf '%s %s %s %s %s\n' "$pid" "$cs" "$boot" "$mp" "$ms" > "$sd/pid"
}
at_unscoped() { # DIR: 0 when a scope was asked for and systemd-run ended without starting the command (it said why
                # in DIR/scope.err): then the command is to be started without one (unless cancelled meanwhile)
  [ -n "$at_sc" ] && [ ! -s "$1/cgroup" ] && [ ! -e "$1/cancel" ] || return 1
  e=; read -r e < "$1/scope.err" 2>/dev/null
  printf '%s\n' "- systemd-run could not make a scope: ${e:-no reason given}" > "$1/cgroup"
  return 0
}
at_ended() { # DIR PID RC -> how: "exit" (the command exited, with RC even above 128), "signal" (a signal killed it:
             # RC is 128 + its number), "-" (not known: this shell's `jobs` does not tell once `wait` returned)
  how=exit
  [ "$3" -gt 128 ] 2>/dev/null || return 0
  how=-
  # dash keeps a job that `wait` reported until `jobs` lists it: "[1] + PID Done(137)" after an exit, "[1] + PID
  # Killed" after a signal; bash lists nothing then
  jobs -l > "$1/jobs" 2>/dev/null || return 0
  while IFS= read -r l; do
    case $l in *" $2 Done"*) how=exit;; *" $2 "?*) how=signal;; esac
  done < "$1/jobs"
  return 0
}
at_report() { # DIR HEAD TAIL ID: the job's exit status, the processes it left running, its output views; exit
rc=-; how=-; { read -r rc; read -r _; read -r how; } < "$1/exit" 2>/dev/null
[ -e "$1/deadline" ] && at_deadline "$1"
at_targets "$1" "$4"
if [ -n "$at_t" ]; then
  # Processes of the job outlived the command. Those that hold its output files open and are running (R) or in
  # disk sleep (D) may be writing what the command sent them (a tee of `exec > >(tee log)`): wait, up to 2 s, for
  # them to settle, so that the views below hold it. A writer that sleeps (S) waits for input: not waited for.
  i=0
  while [ "$i" -lt 100 ]; do
    busy=
    for p in $at_t; do
      s=; read -r s < "/proc/$p/stat" 2>/dev/null || continue
      s=${s##*) }
      case $s in R*|D*) ls -l "/proc/$p/fd" 2>/dev/null | grep -qF -e " -> $1/stdout" -e " -> $1/stderr" && busy=1;; esac
      [ -n "$busy" ] && break
    done
    [ -n "$busy" ] || break
    sleep 0.02 2>/dev/null || sleep 1; i=$(( i + 1 ))
  done
  at_targets "$1" "$4"
  n=0
  for p in $at_t; do
    n=$(( n + 1 )); [ "$n" -gt 20 ] && break
    printf '@@AT left %s %s\n' "$p" "$(tr '\000\n' '  ' < "/proc/$p/cmdline" 2>/dev/null | head -c 200)"
  done
fi
at_sizes "$1"
if [ "$os" = 0 ] && [ "$es" = 0 ]; then  # no output: the whole report in one write
  printf '@@AT exit %s %s\n@@AT view stdout 0 0 0 \n@@AT view stderr 0 0 0 \n@@AT end\n' "$rc" "${how:--}"; exit 0
fi
printf '@@AT exit %s %s\n' "$rc" "${how:--}"
at_view stdout "$1/stdout" 0 "$2" "$3" "$os"
at_view stderr "$1/stderr" 0 "$2" "$3" "$es"
printf '@@AT end\n'
exit 0
}
"""

_STATUS = r"""
at_status() { # BASE SPEC... (SPEC = ID:STDOUT_OFFSET:STDERR_OFFSET:HEAD:TAIL)
base=$1; shift
nb=-; read -r nb < /proc/sys/kernel/random/boot_id 2>/dev/null
printf '@@AT boot %s\n' "$nb"
if ! cd "$base" 2>/dev/null; then
  for spec; do printf '@@AT job %s missing\n' "${spec%%:*}"; done; printf '@@AT end\n'; exit 0
fi
files=; views=
for spec; do
  case $spec in *:0:0) continue;; esac  # no output view asked for: no sizes either (the job line says 0)
  views=1; id=${spec%%:*}
  [ -s "$id/stdout" ] && files="$files $id/stdout"
  [ -s "$id/stderr" ] && files="$files $id/stderr"
done
# One awk reads every job's pid/exit/cancel files and /proc/PID/stat (buffered; dash's `read` builtin reads
# one byte per system call); one wc sizes the non-empty output files of the jobs whose output is asked for.
sz=; [ -n "$files" ] && sz=$(wc -c $files 2>/dev/null)
awk -v sizes="$sz" '
function alive(pid, start,   f, line, F) {
  if (pid == "" || pid == "-") return 0
  f = "/proc/" pid "/stat"; line = ""
  if ((getline line < f) <= 0) { close(f); return 0 }
  close(f)
  sub(/.*\) /, "", line); split(line, F, " ")
  if (F[1] == "Z") return 0
  return (start == "-" || F[20] == start) ? 1 : 0
}
function deadline(f,   line, W, dn, sv) {
  dhow = ""
  if ((getline line < f) <= 0) { close(f); return "" }
  split(line, W, " "); dn = 0; sv = ""
  while ((getline line < f) > 0) {
    if (line ~ /^@@AT survivors/) { dn = 1; sv = substr(line, 15) }
    else if (line ~ /^@@AT how /) dhow = substr(line, 10)
  }
  close(f); return W[1] " " dn sv
}
function first(f,   line, r) {
  line = ""; r = (getline line < f); close(f)
  return r < 0 ? "\001" : line
}
BEGIN {
  m = split(sizes, L, "\n")
  for (i = 1; i <= m; i++) if (split(L[i], W, " ") == 2 && W[2] != "total") size[W[2]] = W[1]
  for (i = 1; i < ARGC; i++) {
    id = ARGV[i]; sub(/:.*/, "", id)
    if (first(id "/command") == "\001") { printf "@@AT job %s missing\n", id; continue }
    rc = "\001"; tm = ""; hw = ""; f = id "/exit"
    if ((getline rc < f) < 0) rc = "\001"; else if ((getline tm < f) <= 0) tm = ""; else if ((getline hw < f) <= 0) hw = ""
    close(f); if (rc == "\001" || rc == "") rc = "-"; if (hw == "") hw = "-"
    dur = "-"; if (split(tm, T, " ") == 2 && T[1] ~ /^[0-9.]+$/ && T[2] ~ /^[0-9.]+$/) dur = sprintf("%.2f", T[2] - T[1])
    p = first(id "/pid"); cp = cs = bt = mp = ms = "-"
    if (p != "\001" && p != "") { split(p, P, " "); cp = P[1]; cs = P[2]; bt = P[3]; mp = P[4]; ms = P[5] }
    reason = first(id "/cancel"); ca = (reason == "\001") ? 0 : 1
    os = ((id "/stdout") in size) ? size[id "/stdout"] : 0
    es = ((id "/stderr") in size) ? size[id "/stderr"] : 0
    printf "@@AT job %s present %s %s %s %d %d %d %s %s %s %s %s\n", id, rc, cp, bt, alive(cp, cs), alive(mp, ms), ca, os, es, mp, dur, hw
    if (ca) printf "@@AT cancel %s %s\n", id, reason
    dl = deadline(id "/deadline"); if (dl != "") printf "@@AT deadline %s %s\n", id, dl
    if (dl != "" && dhow != "") printf "@@AT deadline_how %s %s\n", id, dhow
  }
  exit
}' "$@" </dev/null || printf '@@AT awk-failed %s\n' "$?"
[ -n "$views" ] || { printf '@@AT end\n'; exit 0; }
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
exit 0
}
"""

_CANCEL = r"""
at_cancel() { # JOB_DIR ID GRACE_TENTHS REASON
d=$1; id=$2; grace=$3; reason=$4
[ -d "$d" ] || { printf '@@AT missing\n'; exit 0; }
rc=; read -r rc < "$d/exit" 2>/dev/null
[ -n "$rc" ] && printf '@@AT was %s\n' "$rc"  # the command had ended: what is found now is what it left running
printf '%s\n' "$reason" > "$d/cancel"
at_targets "$d" "$id"
first=$at_t
printf '@@AT how %s\n' "$at_how"
printf '@@AT targets%s\n' "$first"
[ -n "$first" ] || { printf '@@AT survivors\n'; exit 0; }
grp=$at_grp
[ -n "$grp" ] && kill -TERM -- "-$grp" 2>/dev/null
for p in $first; do kill -TERM "$p" 2>/dev/null; done
i=0; n=$grace
while [ "$i" -lt "$n" ]; do
  at_targets "$d" "$id"; [ -z "$at_t" ] && break
  sleep 0.1 2>/dev/null || sleep 1; i=$(( i + 1 ))
done
at_targets "$d" "$id"
if [ -n "$at_t" ]; then
  left=$at_t
  printf '@@AT escalated%s\n' "$left"
  case $at_how in cgroup\ *) [ -e "${at_how#cgroup }/cgroup.kill" ] && echo 1 2>/dev/null > "${at_how#cgroup }/cgroup.kill";; esac
  [ -n "$grp" ] && kill -KILL -- "-$grp" 2>/dev/null
  for p in $left; do kill -KILL "$p" 2>/dev/null; done
  i=0; while [ "$i" -lt 20 ]; do at_targets "$d" "$id"; [ -z "$at_t" ] && break; sleep 0.1 2>/dev/null; i=$(( i + 1 )); done
fi
at_targets "$d" "$id"
printf '@@AT survivors%s\n' "$at_t"
exit 0
}
"""

# A warm session (see the module docstring): define every function, make the directory of the reserved job id,
# say `ready`, then run the one request that arrives on stdin: a line with the number of lines that follow,
# then those lines. EOF before a request (never used, client gone): exit, removing the still empty directory.
_WARM = r"""
umask 077
at_rid=$2; at_rd=$1/$2
if { [ -d "$1" ] || mkdir -p "$1" 2>/dev/null; } && mkdir "$at_rd" 2>/dev/null; then
  # a signal (SIGPIPE: the channel closed before `ready` was written) exits through the EXIT trap too; caught,
  # not ignored, so the job's command still starts with default dispositions
  trap 'rmdir "$at_rd" 2>/dev/null' EXIT
  trap 'exit 1' PIPE HUP
else
  at_rid=
fi
printf '@@AT ready\n'
n=; IFS= read -r n || exit 0
case $n in ''|*[!0-9]*) exit 98;; esac
r=; while [ "$n" -gt 0 ]; do IFS= read -r l || exit 0; r="$r$l
"; n=$(( n - 1 )); done
eval "$r"
"""

_INPUT = r"""
at_input() { # JOB_DIR KEY SIZE EOF(0|1) WAIT_TICKS (1/20 s); the SIZE bytes to write come on stdin
d=$1; k=$2; n=$3; e=$4; w=$5; q=$1/input
[ -d "$d" ] || { printf '@@AT input missing\n'; exit 0; }
[ -p "$d/stdin" ] || { printf '@@AT input nopipe\n'; exit 0; }
mkdir -p "$q" 2>/dev/null
at_in_seen "$q" "$k" && { printf '@@AT input duplicate\n'; exit 0; }
[ -s "$d/exit" ] && { printf '@@AT input ended\n'; exit 0; }
[ -e "$d/stdin.eof" ] && { printf '@@AT input closed\n'; exit 0; }
cat > "$q/.$k.part" 2>/dev/null
got=$(wc -c < "$q/.$k.part" 2>/dev/null); got=${got:-0}; got=$(( got + 0 ))
[ "$got" -eq "$n" ] || { rm -f "$q/.$k.part"; printf '@@AT input short %s\n' "$got"; exit 0; }
trap '' HUP PIPE INT TERM  # all of it arrived: from here on it is queued whatever becomes of the channel
i=0; until mkdir "$q/.lock" 2>/dev/null; do  # held for a few file operations only; one left by a dead writer
  i=$(( i + 1 )); [ "$i" -ge 100 ] && { rm -rf "$q/.lock"; i=0; }; sleep 0.05 2>/dev/null || sleep 1
done
if at_in_seen "$q" "$k"; then rmdir "$q/.lock"; rm -f "$q/.$k.part"; printf '@@AT input duplicate\n'; exit 0; fi
sq=0; read -r sq < "$q/.seq" 2>/dev/null; sq=$(( ${sq:-0} + 1 )); printf '%s\n' "$sq" > "$q/.seq"
f=$(printf '%s/%09d.%s' "$q" "$sq" "$k"); [ "$e" = 1 ] && { f=$f.e; : > "$d/stdin.eof"; }
mv "$q/.$k.part" "$f"
rmdir "$q/.lock"
at_sizes "$d"; b=$(( os + es )); last=$b; quiet=0  # the output before the write: what grows after is its answer
at_pump "$d"
i=0; while [ ! -e "$f.done" ] && [ "$i" -lt "$w" ]; do sleep 0.05 2>/dev/null || sleep 1; i=$(( i + 1 )); done
if [ -e "$f.done" ]; then printf '@@AT input written %s\n' "$sq"; else printf '@@AT input queued %s\n' "$sq"; fi
# what the job prints in answer: wait (up to WAIT_TICKS in all) until its output grew, then is quiet 0.2 s
while [ "$i" -lt "$w" ] && [ ! -s "$d/exit" ]; do
  sleep 0.1 2>/dev/null || sleep 1; i=$(( i + 2 )); at_sizes "$d"; t=$(( os + es ))
  if [ "$t" = "$last" ]; then [ "$t" != "$b" ] && quiet=$(( quiet + 1 )); else quiet=0; last=$t; fi
  [ "$quiet" -ge 2 ] && break
done
printf '@@AT end\n'
exit 0
}
at_in_seen() { # QUEUE_DIR KEY -> 0 when a write with this key was queued already (pending or done)
  for f in "$1"/*."$2" "$1"/*."$2".*; do [ -e "$f" ] && return 0; done
  return 1
}
at_pump() { # DIR: the one writer of a job's pipe: queued writes in ticket order, until none is left
  [ -d "$1/input/.pump" ] && return 0
  mkdir "$1/input/.pump" 2>/dev/null || return 0
  ( trap '' HUP INT TERM
    d=$1; q=$1/input
    while :; do
      f=; for x in "$q"/[0-9]*; do case $x in *.done) ;; *) [ -e "$x" ] && { f=$x; break; };; esac; done
      if [ -z "$f" ]; then
        rmdir "$q/.pump" 2>/dev/null
        # a writer that queued after the scan saw the pump still here: take its write too
        for x in "$q"/[0-9]*; do case $x in *.done) ;; *) [ -e "$x" ] && { f=$x; break; };; esac; done
        [ -n "$f" ] && mkdir "$q/.pump" 2>/dev/null && continue
        exit 0
      fi
      [ -s "$d/exit" ] && { rmdir "$q/.pump" 2>/dev/null; exit 0; }
      cat "$f" > "$d/stdin" 2>/dev/null
      case $f in *.e) at_in_eof "$d";; esac
      : > "$f"; mv "$f" "$f.done"  # nothing typed stays on the host past its write (secrets included)
    done ) </dev/null >/dev/null 2>&1 &
}
"""


#: the pseudo-terminal owner used when the host has python3 but no util-linux ``script`` (or no ``env
#: --default-signal``): argv[1:] runs on the terminal's slave side (80x24, pty(7), SIGINT/SIGQUIT at their
#: defaults, so Ctrl-C works), stdin is copied to the master and the master to stdout until the
#: terminal closes; the exit status is the program's (128+N for signal N)
PTY_PROGRAM = """import os, pty, select, signal, struct, sys, fcntl, termios
pid, fd = pty.fork()
if pid == 0:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    os.execvp(sys.argv[1], sys.argv[1:])
ins = [0, fd]
while True:
    r = select.select(ins, [], [])[0]
    if fd in r:
        try:
            b = os.read(fd, 65536)
        except OSError:
            b = b""
        if not b:
            break
        os.write(1, b)
    if 0 in r:
        b = os.read(0, 65536)
        if b:
            os.write(fd, b)
        else:
            ins = [fd]
st = os.waitpid(pid, 0)[1]
sys.exit(128 + os.WTERMSIG(st) if os.WIFSIGNALED(st) else os.WEXITSTATUS(st))
"""


def _q(s: str) -> str:
    return shlex.quote(s)


_FUNCTIONS = {"launch": _CANCEL + _LAUNCH, "status": _STATUS, "cancel": _CANCEL}  # the monitor kills with at_cancel


# The fixed part of each command line, quoted once (a launch is on every call's path).
_EXEC_PREFIX = {name: "exec /bin/sh -c " + _q(_LIB + body + "at_" + name + ' "$@"\n') + f" at-{name} "
                for name, body in _FUNCTIONS.items()}
# an input request also needs the launcher's at_in_eof (the pump ends a job's input with it)
_EXEC_PREFIX["input"] = "exec /bin/sh -c " + _q(_LIB + _LAUNCH + _INPUT + 'at_input "$@"\n') + " at-input "
_WARM_PREFIX = f"exec /bin/sh -c {_q(_LIB + _LAUNCH + _STATUS + _CANCEL + _WARM)} at-warm "


def _exec(name: str, args: str) -> str:
    """``exec /bin/sh -c 'LIB; at_NAME "$@"' at-NAME ARGS``: run one script on a fresh session."""
    return _EXEC_PREFIX[name] + args


def _launch_args(base: str, job_id: str, command: str, *, cwd: str | None, mode: str, head_bytes: int,
                 tail_bytes: int, env: dict[str, str] | None, deadline_s: float | None,
                 stdin: str = "none") -> str:
    if env:  # one first line, marked, so that a rediscovered job shows the command that was asked for
        command = "export " + " ".join(f"{k}={_q(v)}" for k, v in env.items()) + f" {ENV_LINE_MARK}\n" + command
    args = (f"\"{base}\" {_q(job_id)} {_q(cwd or '')} {_q(mode)} {int(head_bytes)} {int(tail_bytes)} "
            f"{_q(command)}")
    # the deadline (word 8) is optional and last unless stdin (word 9; for a tty the pty program, word 10)
    # follows it: a launch without them is the same request as before they existed
    if stdin == "none":
        return args if deadline_s is None else f"{args} {deadline_word(deadline_s)}"
    dl = "''" if deadline_s is None else deadline_word(deadline_s)
    if stdin == "pipe":
        return f"{args} {dl} pipe"
    if stdin == "tty":
        return f"{args} {dl} tty {_q(PTY_PROGRAM)}"
    raise ValueError(f"stdin must be none, pipe or tty, not {stdin!r}")


def deadline_word(deadline_s: float) -> str:
    """``deadline_s`` as the launch's deadline word: decimal seconds, at most 3 decimals, never an exponent
    (``sleep`` reads it), at least 0.001.

    :raises ValueError: ``deadline_s`` is not a finite number > 0.
    """
    if not 0 < deadline_s < float("inf"):
        raise ValueError(f"a deadline must be a finite number of seconds > 0, got {deadline_s!r}")
    return f"{max(deadline_s, 0.001):.3f}".rstrip("0").rstrip(".")


def _status_args(base: str, specs: list[tuple[str, int, int, int, int]]) -> str:
    return f"\"{base}\" " + " ".join(_q(f"{j}:{o}:{e}:{h}:{t}") for j, o, e, h, t in specs)


def _cancel_args(base: str, job_id: str, grace_s: float, reason: str) -> str:
    grace = max(0, round(grace_s * 10))  # the script counts tenths of a second
    return f"\"{base}/{job_id}\" {_q(job_id)} {grace} {_q(reason.replace(chr(10), ' '))}"


def launch_script(base: str, job_id: str, command: str, *, cwd: str | None, mode: str,
                  head_bytes: int, tail_bytes: int, env: dict[str, str] | None = None,
                  deadline_s: float | None = None, stdin: str = "none") -> str:
    """The shell command line that launches ``command`` as job ``job_id`` under directory ``base``.

    :param base: the jobs directory on the host (``$HOME``-relative paths allowed via ``~``-free absolute
        paths or a leading ``$HOME``; the value is passed through the login shell's parameter expansion).
    :param mode: ``fg`` (report the exit and output when the command ends) or ``bg`` (return at once).
    :param head_bytes: bytes of each stream's head to send back when the command ends.
    :param tail_bytes: bytes of each stream's tail to send back.
    :param env: extra environment variables for the command (exported before it starts).
    :param deadline_s: seconds from the command's start after which the job's monitor kills its whole tree on
        the host (see the module docstring's deadline watcher); None: no deadline.
    :param stdin: ``none`` (``/dev/null``), ``pipe`` (the job directory's named pipe, fed by
        :func:`input_script`) or ``tty`` (that pipe through a pseudo-terminal of 80x24; see "Input" above).
    """
    return _exec("launch", _launch_args(base, job_id, command, cwd=cwd, mode=mode, head_bytes=head_bytes,
                                        tail_bytes=tail_bytes, env=env, deadline_s=deadline_s, stdin=stdin))


def launch_request(base: str, job_id: str, command: str, *, cwd: str | None, mode: str,
                   head_bytes: int, tail_bytes: int, env: dict[str, str] | None = None,
                   deadline_s: float | None = None, stdin: str = "none") -> bytes:
    """:func:`launch_script`'s launch as a request for a warm session (see :func:`warm_script`)."""
    return warm_request("at_launch " + _launch_args(base, job_id, command, cwd=cwd, mode=mode,
                                                     head_bytes=head_bytes, tail_bytes=tail_bytes, env=env,
                                                     deadline_s=deadline_s,
                                                     stdin=stdin))


def input_script(base: str, job_id: str, key: str, size: int, *, eof: bool, wait_s: float) -> str:
    """The shell command line that queues ``size`` bytes, read from its stdin, for job ``job_id``'s pipe.

    Replies ``@@AT input WORD [SEQ]`` then ``@@AT end``: ``written`` (the job's pipe took it), ``queued`` (the
    pipe is full: the job is not reading; it is written when it does), ``duplicate`` (a write with this ``key``
    was queued before: nothing written twice), ``short N`` (only N bytes arrived: nothing queued, send again),
    ``nopipe`` (the job was started without ``stdin=pipe``), ``ended``, ``closed`` (after ``eof``),
    ``missing``. After the write it waits, up to ``wait_s`` seconds in all, for the job's output to grow and
    then be quiet for 0.2 s.

    :param key: the write's idempotency key (letters, digits, ``_``, ``-``).
    :param eof: end the job's input after this write.
    """
    ticks = max(0, round(wait_s * 20))
    return _exec("input", f"\"{base}/{job_id}\" {_q(key)} {int(size)} {1 if eof else 0} {ticks}")


def status_script(base: str, specs: list[tuple[str, int, int, int, int]]) -> str:
    """The shell command line reporting on many jobs in one round trip.

    :param specs: ``(job_id, stdout_offset, stderr_offset, head_bytes, tail_bytes)`` per job; 0/0 bytes
        asks for no output view.
    """
    return _exec("status", _status_args(base, specs))


def status_request(base: str, specs: list[tuple[str, int, int, int, int]]) -> bytes:
    """:func:`status_script` as a request for a warm session."""
    return warm_request("at_status " + _status_args(base, specs))


def cancel_script(base: str, job_id: str, *, grace_s: float, reason: str) -> str:
    """The shell command line that kills job ``job_id``'s whole tree: TERM, up to ``grace_s`` seconds,
    KILL, then verifies nothing of it is left (prints the survivors, normally none)."""
    return _exec("cancel", _cancel_args(base, job_id, grace_s, reason))


def cancel_request(base: str, job_id: str, *, grace_s: float, reason: str) -> bytes:
    """:func:`cancel_script` as a request for a warm session."""
    return warm_request("at_cancel " + _cancel_args(base, job_id, grace_s, reason))


def warm_script(base: str, reserved_id: str) -> str:
    """The command line of a warm session: a ``sh`` that defines every job script as a function, makes the
    directory of job ``reserved_id`` under ``base`` (so a launch with that id skips the ``mkdir``), prints
    ``@@AT ready`` (the line :meth:`SshHost.take_warm` waits for), then reads one request
    (:func:`warm_request`) from stdin and runs it. Without a request (EOF) it removes the empty directory and
    exits 0.

    :param base: the jobs directory (shell-expanded on the host, as for the other scripts).
    :param reserved_id: the job id whose directory is made ahead of time.
    """
    return f"{_WARM_PREFIX}\"{base}\" {_q(reserved_id)}"


def warm_request(call: str) -> bytes:
    """The bytes a warm session reads: the number of lines of ``call``, a newline, ``call``, a newline.

    :param call: shell text calling one of the functions (``at_status "BASE" 'SPEC'``); quoted words may span
        lines.
    """
    return f"{call.count(chr(10)) + 1}\n{call}\n".encode()
