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
    cgroup    the path of the job's cgroup (``/sys/fs/cgroup/...scope``), or ``- REASON`` when it has none (no
              systemd, no systemd-run, a user manager that stops at logout, systemd-run refused: then ``scope.err``
              holds what systemd-run said)
    tag       the job's own audit session id (proc(5) ``/proc/PID/sessionid``), or ``- REASON`` when it could not
              start one
    lineage   ``PID START`` of every process of the job a look found (the watcher's, a cancel's): a process seen
              once stays the job's, wherever it goes
    left      ``PID START COMMAND-LINE`` of each process the ended command left running (first 20, command lines
              cut at 200 bytes), written by the monitor when the command ended and kept current by the watcher
              (empty: none); absent while the command runs and for an instant after its end
    logout    why the job dies when the login that started it ends (logind ``KillUserProcesses=yes``, no linger)
    deadline  written by the watcher when the job's deadline passed, before any signal: the deadline in seconds,
              the host's uptime then and the watcher's own pid and start time, then the kill's report (``@@AT
              was``/``how``/``tag``/``targets`` ... ``@@AT survivors``, see :func:`cancel_script`) as it goes

Process layout: the launcher (one SSH session, or one local ``sh``) forks a *monitor* subshell with
stdin/stdout on /dev/null; the monitor starts the command in a session of its own (``setsid``), so the
command's process group id equals its pid and the monitor survives a kill of that group. Where the host runs
systemd, the command runs in a transient scope of its own, ``agent-tools-<job_id>.scope``: ``systemd-run
--scope`` as root, ``systemd-run --user --scope`` for a user whose manager lingers (without linger the user's
manager, and every scope in it, is stopped at the last logout: ``loginctl enable-linger``; logind.conf(5); when
logind also kills the user's processes at logout, ``KillUserProcesses=yes``, the launch says the job dies with the
SSH connection: ``logout``). ``systemd-run --scope`` executes the command itself once the scope exists
(systemd-run(1)), so the pid is the job's. Costs one D-Bus round trip (~30-40 ms) per job. A scope that cannot
be made is found out at launch: systemd-run then exits without running the command (no ``cgroup`` path written),
and the monitor starts it without one.

The job's first process (before it becomes the command: the ``at_job`` trampoline in a scope, else the monitor's
subshell, ``at_tagself``) starts an audit session of its own: it writes its loginuid back to
``/proc/self/loginuid``, and the kernel gives it a new session id that it and every process it starts keep,
whatever they do to their cgroup, session or environment (a process may set its loginuid while it is unset; once
it is set, only one with CAP_AUDIT_CONTROL, i.e. root, may: a user whose login set it gets none, ``tag`` says
why). Each such write is a LOGIN record in the audit log, if one is kept.

A *look* for the job's processes (``at_targets``: a cancel, a deadline, the look for leftovers) counts a process
as the job's when it is in the job's cgroup; in its process group or session (both ids are the command's pid);
the command itself; in the lineage; in the job's audit session; carrying the marker ``AGENT_TOOLS_JOB=<job_id>``
in its environment (the command and every descendant get it, unless they drop their environment); or a child of
any of those. So ``systemd-run --scope`` and ``su``/``su -`` (pam_systemd moves them to another scope or a login
session) do not hide a process, nor ``setsid`` or ``env -i``. Only without an audit session can a process be out
of sight: one that left the job's cgroup (or the job has none), its session and group, and its environment
before any look saw it, and whose parent is gone; every check then says so (the ``how`` and ``tag`` lines give
what the look could go by).

An audit session does not bind root: a process of a root job may write ``/proc/self/loginuid`` itself and get a
new session (the trampoline does just that), and with ``systemd-run --scope``, ``setsid`` and ``env -i`` leave every
grouping above. A job may also hand work to a daemon that starts it for it: ``systemd-run --unit=X`` (PID 1 forks
it, in a service of its own), ``ssh root@localhost cmd`` (sshd forks it, in a login session of its own). Neither
leaves a trace on the process that ties it to the job. So a kill (a cancel, a deadline: ``at_cancel``) also makes
the *look for what the job handed on* (``at_elsewhere``), which goes by when things began: a process that started
since the job's command (``/proc/PID/stat`` field 22) and is not the job's is listed when it runs in a cgroup every
process of which started since then (a unit, scope or login session that began while the job ran: the kernel makes
a cgroup for each, ``/proc/PID/cgroup``) or in an audit session newer than the job's own (session ids only grow:
a new loginuid, or a login since), leaving out the look's own cgroup and session, agent-tools' own processes (shells
run as ``at-*`` and their children), other jobs' (their scopes, their markers), ``sshd`` itself, systemd managers
(``init.scope``: the user manager a login starts) and containers' (a PID namespace below the look's). One that holds a file of the job directory open (its stdout, stderr) is the job's,
whatever else it did: the look adds it to the lineage, so the kill kills it. The others are reported (``elsewhere``
lines: pid, start, cgroup, command line, first 10) as what still runs that nothing on the host ties to the job or
to anyone else, with their units, never as "no survivors". What this look cannot see, it says (``elsewhere_how``:
no cgroup hierarchy). Work a long-running daemon does in its own, older cgroup (``at``, cron, a container engine)
is that daemon's and is not looked for.

A *watcher* runs beside the monitor while the command runs when the job has a deadline, or when its first
process is not expected to get an audit session of its own (the launcher's loginuid is set and it is not root):
a subshell of the monitor that looks for the job's processes at growing intervals (50 ms, doubling to 10 s),
recording them in ``lineage`` (unless the job got an audit session after all: nothing to record), and is stopped
by the monitor when the command ends. The monitor then writes ``exit`` and looks for what the command left
running (``left``); when something is left, a watcher of its own follows it, as a shell of its own (``/bin/sh
-c "$at_lib ..." at-watch DIR ID DEADLINE T0 left``: the launcher got the functions it needs, ``_WLIB``, as its
first argument, so this long-lived process's command line holds no user command), looking every 0.5 s doubling
to 10 s and keeping ``left`` current, until none is left. A launch with a deadline (:func:`launch_script`'s
``deadline_s``): at that many seconds from the command's start the watcher writes ``deadline`` and kills
everything of the job exactly as a cancel does (``at_cancel``: TERM, a 2 s grace, KILL, survivors checked), with
the reason ``deadline: ...`` — the command and what it left running, or, once the command has ended, what it
left running (the kill's report then starts with ``was RC``). It runs on the host, so the deadline holds when the
controller is gone; when it fired while the command ran the monitor writes ``exit`` only after the kill was
checked. ``sleep`` must take fractions of a second (GNU coreutils, busybox).

When the command ends within the launch's budget, the launcher reports what still runs (``left`` lines) after
waiting, up to 2 s, for those of them that hold the job's output files open and are running (a ``tee`` fed by
the command) to settle, and names those that still hold them open then (``writing``: more output may come). Nothing
of the job holds the SSH channel's pipes, so a background grandchild holding stdout can never hang the call,
and closing the channel (SSH drop, detach) leaves the job running: without a pty neither sshd nor the kernel
signals the session's processes when the channel or the launcher goes away (sshd(8): a session without a
pty gets no SIGHUP).

The launcher waits for the monitor and, when it ends, prints the exit status and a bounded view of the
output in one round trip. When the client sends EOF on stdin (it detached), the launcher exits at once
and only the monitor and the command remain.

Every script is a shell function (``at_launch``, ``at_status``, ``at_cancel``) run one of two ways:

* *exec*: ``exec /bin/sh -c 'LIB; at_x "$@"' at-x ARGS`` on a fresh session channel (a launch: ``exec /bin/sh
  -c 'at_lib=$1; shift; eval "$at_lib"; ...; at_launch "$@"' at-launch WLIB ARGS``, see the watcher);
* *warm*: on a session started earlier (:func:`warm_script`) that defined every function, made the job
  directory of a reserved job id and waits on stdin; the client writes one request (:func:`warm_request`,
  the line count, then ``at_x ARGS``) and reads the same report. This takes the channel open, the exec
  request, the login shell and the ``mkdir`` off the call's path (see docs/performance.md). A warm session
  not used removes its empty directory and exits when its stdin ends, or after ``WARM_IDLE_S`` (300 s) without a
  request (a client gone in a partition: the host's sshd keeps such a session until TCP gives up).

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
The launch report adds ``logout REASON`` (before ``started``), ``left PID CMDLINE`` for each process the command
left running (first 20, command lines cut at 200 bytes), ``writing PIDS`` and ``how``/``tag`` (what the look for
them could go by: ``how cgroup PATH`` or ``how - REASON``, ``tag ses N`` or ``tag - REASON``); the cancel report
``was RC`` (the command had ended before), ``how``, ``tag``, then ``targets``, ``escalated``, ``elsewhere_how
- REASON`` and ``elsewhere PID START CGROUP CMDLINE`` (what the job may have handed on), and the ``survivors`` pid
list (always last). A job its deadline killed adds, to the launch report and its status, ``deadline [ID] LIMIT DONE
[SURVIVORS...]`` (DONE 1 once survivors were checked, 2 when the watcher is gone before that: the kill was
interrupted), ``deadline_how``/``deadline_tag [ID] ...``, ``deadline_was [ID] RC`` and
``deadline_elsewhere[_how] [ID] ...`` (the kill's ``how``, ``tag``, ``was`` and ``elsewhere`` lines, those of the
latter whose process still runs). The status report adds, for an ended command, ``left ID PID CMDLINE`` (those of ``left`` still
alive) or ``left_pending ID`` (the monitor is still looking), and ``how ID ...``/``tag ID ...``; and ``logout ID
REASON``.
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
at_cover() { # DIR -> at_how: "cgroup PATH" or "- REASON" (no cgroup, and why); at_tag: "ses N" (the job's own audit
             # session) or "- REASON": what a look for the job's processes can go by (module docstring)
  l=; read -r l < "$1/cgroup" 2>/dev/null
  case $l in /*) at_how="cgroup $l";; '') at_how="- the job directory has no record of a cgroup";; *) at_how="- ${l#- }";; esac
  l=; read -r l < "$1/tag" 2>/dev/null
  case $l in [0-9]*) at_tag="ses $l";; '') at_tag="- the job directory has no record of an audit session";;
    *) at_tag="- ${l#- }";; esac
}
at_targets() { # DIR ID -> at_t: live pids of the job; at_grp: its process group id (while that group can be its);
               # at_how, at_tag (at_cover). Processes found that DIR/lineage did not hold are added to it.
  at_t=; at_grp=; at_cover "$1"
  cgf=; case $at_how in cgroup\ *)
    l=${at_how#cgroup }
    for f in "$l/cgroup.procs" "$l"/*/cgroup.procs "$l"/*/*/cgroup.procs; do [ -e "$f" ] && cgf="$cgf
$f"; done;;
  esac
  tg=; case $at_tag in ses\ *) tg=${at_tag#ses };; esac
  pl=; read -r pl < "$1/pid" 2>/dev/null
  # One awk reads the cgroup's member lists and every /proc/PID/stat. A process is the job's when it is in the
  # job's cgroup; in its process group or session (the command leads both: their ids are its pid, unless that
  # pid now belongs to another process: the kernel does not reuse a pid while a group or session has that id, so
  # a live process with that pid and another start time means the job's group is gone); the command itself; in
  # the lineage (pid and start time seen by an earlier look); in the job's audit session; carrying the job's
  # marker in its environment (read by the awk itself when it can split a file at NUL bytes, checked on its own
  # environment, else named on "c" lines for grep); or a child of any of those. Only processes started since the
  # command are looked at for the last three.
  cand=; new=; d_=$1; id_=$2
  oifs=$IFS; IFS='
'; set -f; set -- $cgf; set +f; IFS=$oifs
  for p in $(AT_NUL=1 awk -v pl="$pl" -v want="AGENT_TOOLS_JOB=$id_" -v tag="$tg" -v lin="$d_/lineage" '
    function marked(pid,   e, env, n, E, k) {
      e = "/proc/" pid "/environ"; env = ""; RS = "\001"; getline env < e; close(e); RS = "\n"
      n = split(env, E, "\000"); for (k = 1; k <= n; k++) if (E[k] == want) return 1
      return 0 }
    function ses(pid,   f, s) { f = "/proc/" pid "/sessionid"; s = ""; getline s < f; close(f); return s }
    BEGIN {
      nul = 0; RS = "\001"; env = ""; getline env < "/proc/self/environ"; close("/proc/self/environ"); RS = "\n"
      n = split(env, E, "\000"); for (k = 1; k <= n; k++) if (E[k] == "AT_NUL=1") nul = 1
      split(pl, P, " "); cp = P[1]; cs = P[2]; grp = (cp ~ /^[0-9]+$/); since = (cs ~ /^[0-9]+$/)
      if (grp) {
        f = "/proc/" cp "/stat"; line = ""
        if ((getline line < f) > 0) { sub(/.*\) /, "", line); split(line, F, " "); if (cs != "-" && F[20] != cs) grp = 0 }
        close(f)
      }
      if (grp) print "g" cp
      while ((getline line < lin) > 0) { split(line, W, " "); seen[W[1]] = W[2] }
      close(lin)
      for (i = 1; i < ARGC; i++) {
        if (ARGV[i] !~ /^\/proc\//) {  # a cgroup.procs file
          while ((getline line < ARGV[i]) > 0) if (line ~ /^[0-9]+$/) cg[line] = 1
          close(ARGV[i]); continue
        }
        line = ""; r = (getline line < ARGV[i]); close(ARGV[i])
        if (r <= 0) continue
        pid = line; sub(/ .*/, "", pid); sub(/.*\) /, "", line); split(line, F, " ")
        if (F[1] == "Z") continue
        st[pid] = F[20]; pp[pid] = F[2]
        if ((pid in cg) || (grp && (F[3] == cp || F[4] == cp)) || (pid == cp && (cs == "-" || F[20] == cs)) ||
            ((pid in seen) && seen[pid] == F[20])) S[pid] = 1
        else if (!since || F[20] + 0 >= cs + 0) {
          if (tag != "" && ses(pid) == tag) S[pid] = 1
          else if (!nul) C[pid] = 1
          else if (marked(pid)) S[pid] = 1
        }
      }
      do { more = 0
        for (pid in pp) if (!(pid in S) && (pp[pid] in S) && (!since || st[pid] + 0 >= cs + 0)) { S[pid] = 1; more = 1 }
      } while (more)
      for (pid in S) { print pid; if (!((pid in seen) && seen[pid] == st[pid])) print "n" pid ":" st[pid] }
      for (pid in C) if (!(pid in S)) print "c" pid
      exit }' "$@" /proc/[0-9]*/stat 2>/dev/null); do
    case $p in g*) at_grp=${p#g};; c*) cand="$cand /proc/${p#c}/environ";; n*) new="$new ${p#n}";; *) at_t="$at_t $p";; esac
  done
  if [ -n "$cand" ]; then
    for f in $(grep -lzxF "AGENT_TOOLS_JOB=$id_" $cand 2>/dev/null); do
      p=${f#/proc/}; at_add "${p%/environ}"
    done
  fi
  [ -z "$new" ] || for p in $new; do printf '%s %s\n' "${p%%:*}" "${p#*:}"; done >> "$d_/lineage" 2>/dev/null
  return 0
}
at_add() { # PID: add it to at_t when it is alive (not a zombie) and not there yet (status 1 when not added)
  case " $at_t " in *" $1 "*) return 1;; esac
  at_alive "$1" - && at_t="$at_t $1"
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
at_scope "$d"
[ -z "$at_in" ] || at_in_prepare "$d"
# the monitor: starts the command in a session of its own, records its pid, waits, records the exit status
(
  t0=-; read -r t0 _ 2>/dev/null </proc/uptime
  [ -z "$at_in" ] || at_in_hold "$d"
  at_spawn "$d" "$id" "$sh_" "$cmd"
  wp=  # the watcher while the command runs (module docstring): for a deadline, or to keep the lineage
  if [ -n "$dl" ] || [ -z "$at_tagok" ]; then at_watch "$d" "$id" "$dl" "$t0" run 2>/dev/null & wp=$!; fi
  wait "$pid"
  rc=$?
  if at_unscoped "$d"; then at_spawn "$d" "$id" "$sh_" "$cmd" plain; wait "$pid"; rc=$?; fi
  at_ended "$d" "$pid" "$rc"
  t1=-; read -r t1 _ 2>/dev/null </proc/uptime
  [ -z "$wp" ] || { kill "$wp" 2>/dev/null; wait "$wp"; }  # (once it fired: after its kill is checked)
  printf '%s\n%s %s\n%s\n' "$rc" "$t0" "$t1" "$how" > "$d/exit"
  [ -z "$at_in" ] || at_in_end "$d"  # no holder: the command's input ends with it
  at_left "$d" "$id"  # what the command left running (until DIR/left is written, a status says it is being looked at)
  if [ -n "$at_t" ]; then  # followed by a watcher of its own, whose command line holds no user command
    [ ! -e "$d/deadline" ] || dl=
    /bin/sh -c "$at_lib
at_watch \"\$@\"" at-watch "$d" "$id" "$dl" "$t0" left 2>/dev/null &
  fi
) </dev/null >/dev/null 2>"$d/monitor.err" &
mpid=$!
[ -z "$at_lo" ] || printf '@@AT logout %s\n' "$at_lo"
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
at_deadline() { # DIR [ID] -> "@@AT deadline [ID] LIMIT DONE [SURVIVORS...]" (DONE: 0 while the kill is under way, 1
                # once it was checked, 2 when its watcher is gone before that), then, once the kill said so, "@@AT
                # deadline_how [ID] HOW" and "@@AT deadline_tag [ID] TAG" (how it found the job: at_targets), and
                # "@@AT deadline_was [ID] RC" when the command had ended before (the kill was of what it left running)
  for at_i in 1 2; do
    l=; sv=; dn=0; dh=; dt=; dw=; de=; deh=
    { read -r l; while read -r w k rest; do
        case $k in survivors) dn=1; sv=$rest;; how) dh=$rest;; tag) dt=$rest;; was) dw=$rest;;
          elsewhere) de="$de$rest
";; elsewhere_how) deh=$rest;; esac
      done; } < "$1/deadline" 2>/dev/null
    [ "$dn" = 0 ] || break
    set -- "$1" "${2:-}" $l
    [ -z "${5:-}" ] || at_alive "$5" "${6:--}" || { dn=2; continue; }  # gone: its last words may be in now
    break
  done
  printf '@@AT deadline %s%s %s%s\n' "${2:+$2 }" "${l%% *}" "$dn" "${sv:+ $sv}"
  [ -z "$dh" ] || printf '@@AT deadline_how %s%s\n' "${2:+$2 }" "$dh"
  [ -z "$dt" ] || printf '@@AT deadline_tag %s%s\n' "${2:+$2 }" "$dt"
  [ -z "$dw" ] || printf '@@AT deadline_was %s%s\n' "${2:+$2 }" "$dw"
  [ -z "$deh" ] || printf '@@AT deadline_elsewhere_how %s%s\n' "${2:+$2 }" "$deh"
  printf '%s' "$de" | while read -r p s rest; do  # (those still running)
    ! at_alive "$p" "$s" || printf '@@AT deadline_elsewhere %s%s %s %s\n' "${2:+$2 }" "$p" "$s" "$rest"
  done
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
at_scope() { # DIR -> at_sc: --system or --user when the command is to run in a transient scope of its own, else ""
              # (DIR/cgroup then says why); at_lo: why the job dies when this login ends, else ""
  at_sc=; at_lo=; at_tagok=
  # the job's trampoline can start an audit session of its own while the loginuid is unset, or as root
  u=; { read -r u < /proc/self/loginuid; } 2>/dev/null
  if [ "$u" = 4294967295 ]; then at_tagok=1
  elif [ -n "$u" ]; then
    while read -r k u _; do [ "$k" = Uid: ] && break; done < /proc/self/status; [ "$u" != 0 ] || at_tagok=1
  fi
  if [ ! -d /run/systemd/system ]; then printf '%s\n' "- the host does not run systemd" > "$1/cgroup"
  elif ! command -v systemd-run >/dev/null 2>&1; then printf '%s\n' "- systemd-run is not installed" > "$1/cgroup"
  elif [ -w /run/systemd/system ]; then at_sc=--system
  else
    u=${USER:-${LOGNAME:-$(id -un)}}
    if [ ! -S "${XDG_RUNTIME_DIR:-/run/user/$(id -u)}/systemd/private" ]; then
      printf '%s\n' "- $u has no systemd user manager" > "$1/cgroup"
    elif [ ! -e "/var/lib/systemd/linger/$u" ]; then
      printf '%s\n' "- $u's systemd user manager stops at logout (no linger: loginctl enable-linger $u)" > "$1/cgroup"
    else
      at_sc=--user; export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}"
    fi
    [ -n "$at_sc" ] || at_logout "$1" "$u"
  fi
}
at_logout() { # DIR USER -> at_lo (and DIR/logout): the reason when logind kills USER's processes at the end of
              # their login session (logind.conf(5) KillUserProcesses=yes, KillOnlyUsers=, KillExcludeUsers=)
  command -v loginctl >/dev/null 2>&1 || return 0
  k=; o=; x=
  for l in $(loginctl show-session -p KillUserProcesses -p KillOnlyUsers -p KillExcludeUsers 2>/dev/null); do
    case $l in KillUserProcesses=*) k=${l#*=};; KillOnlyUsers=*) o=${l#*=};; KillExcludeUsers=*) x=${l#*=};; esac
  done
  [ "$k" = yes ] || return 0
  [ -z "$o" ] || case " $o " in *" $2 "*) ;; *) return 0;; esac
  case " $x " in *" $2 "*) return 0;; esac
  at_lo="logind kills $2's processes when this login ends (KillUserProcesses=yes) and $2 has no lingering user manager (loginctl enable-linger $2)"
  printf '%s\n' "$at_lo" > "$1/logout"
}
at_spawn() { # DIR ID SHELL COMMAND [plain]: start the command as the job, in the transient systemd scope at_scope
             # chose (a cgroup of its own), else (or with "plain") as it is; stdin is the job's pipe (at_src) or
             # /dev/null; write DIR/pid; set pid
  sd=$1; at_j=$2
  [ -z "${5:-}" ] || at_sc=
  set -- "$3" -c "$4"  # the job's argv; with a terminal (stdin=tty, see "Input"), its owner runs the command
  case ${at_pty:-} in
    script) set -- env --default-signal=INT,QUIT SHELL="$1" script -qefc "stty rows 24 cols 80 2>/dev/null; $3" \
              /dev/null;;
    python3) set -- python3 -c "$at_pyp" "$@";;
  esac
  if [ -n "$at_sc" ]; then
    # systemd-run --scope moves itself into a new scope and then executes the command (so the pid stays the
    # job's): the trampoline records the scope's cgroup and the job's audit session, gives the job its stderr and
    # becomes the command
    AGENT_TOOLS_JOB=$at_j systemd-run "$at_sc" --scope --quiet --collect --unit="agent-tools-$at_j" \
      --description="agent-tools job $at_j" /bin/sh -c "$at_job" at-job "$sd" "$@" \
      <"${at_src:-/dev/null}" >"$sd/stdout" 2>"$sd/scope.err" &
  else
    ( at_tagself "$sd"; AGENT_TOOLS_JOB=$at_j exec setsid "$@" ) <"${at_src:-/dev/null}" >"$sd/stdout" 2>"$sd/stderr" &
  fi
  pid=$!
  cs=-; s=; if read -r s < "/proc/$pid/stat" 2>/dev/null; then s=${s##*) }; set -- $s; cs=${20}; fi
  mp=-; ms=-; s=; if read -r s < /proc/self/stat 2>/dev/null; then mp=${s%% *}; s=${s##*) }; set -- $s; ms=${20}; fi
  boot=-; read -r boot < /proc/sys/kernel/random/boot_id 2>/dev/null
  printf '%s %s %s %s %s\n' "$pid" "$cs" "$boot" "$mp" "$ms" > "$sd/pid"
}
# the job's first process in its scope (DIR ARGV...): record the scope's cgroup and take the job's stderr; start an
# audit session of its own and record its id in DIR/tag (or why not); become the command (ARGV, in a session of its own)
at_job='d=$1; shift
m=/sys/fs/cgroup; [ -e $m/cgroup.controllers ] || m=/sys/fs/cgroup/unified
c=; while IFS= read -r l; do case $l in 0::/*) c=$m${l#0::}; break;; esac; done < /proc/self/cgroup
[ -e "$c/cgroup.procs" ] || c="- no cgroup v2 hierarchy to follow the scope by"
printf "%s\n" "$c" > "$d/cgroup" || exit 126; exec 2>"$d/stderr"
t="- the kernel keeps no audit sessions"; s0=; u0=; s=
{ read -r s0 < /proc/self/sessionid; read -r u0 < /proc/self/loginuid; } 2>/dev/null
if [ -n "$s0" ]; then
  u=$u0; [ "$u" != 4294967295 ] || while read -r k u _; do [ "$k" = Uid: ] && break; done < /proc/self/status
  { printf %s "$u" > /proc/self/loginuid && read -r s < /proc/self/sessionid; } 2>/dev/null
  if [ -n "$s" ] && [ "$s" != "$s0" ] && [ "$s" != 4294967295 ]; then t=$s
  elif [ "$u0" = 4294967295 ]; then t="- the kernel did not let it start an audit session of its own"
  else t="- its login set its audit loginuid, which only root may change"; fi
fi
printf "%s\n" "$t" > "$d/tag"
exec setsid "$@"'
at_tagself() { # DIR: the at_job trampoline's audit session, for a job started without a scope (this subshell then
               # becomes the command)
  d=$1
  t="- the kernel keeps no audit sessions"; s0=; u0=; s=
  { read -r s0 < /proc/self/sessionid; read -r u0 < /proc/self/loginuid; } 2>/dev/null
  if [ -n "$s0" ]; then
    u=$u0; [ "$u" != 4294967295 ] || while read -r k u _; do [ "$k" = Uid: ] && break; done < /proc/self/status
    { printf %s "$u" > /proc/self/loginuid && read -r s < /proc/self/sessionid; } 2>/dev/null
    if [ -n "$s" ] && [ "$s" != "$s0" ] && [ "$s" != 4294967295 ]; then t=$s
    elif [ "$u0" = 4294967295 ]; then t="- the kernel did not let it start an audit session of its own"
    else t="- its login set its audit loginuid, which only root may change"; fi
  fi
  printf "%s\n" "$t" > "$d/tag"
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
at_t=; while read -r p _; do [ -z "$p" ] || at_t="$at_t $p"; done < "$1/left" 2>/dev/null  # the monitor's look
if [ -n "$at_t" ]; then
  # Processes of the job outlived the command. Those that hold its output files open and are running (R) or in
  # disk sleep (D) may be writing what the command sent them (a tee of `exec > >(tee log)`): wait, up to 2 s, for
  # them to settle, so that the views below hold it. A writer that sleeps (S) waits for input: not waited for,
  # but named ("writing": more output may come from it).
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
  at_left "$1" "$4"
  w=
  for p in $at_t; do
    ls -l "/proc/$p/fd" 2>/dev/null | grep -qF -e " -> $1/stdout" -e " -> $1/stderr" && w="$w $p"
  done
  while read -r p _ c; do [ -z "$p" ] || printf '@@AT left %s %s\n' "$p" "$c"; done < "$1/left" 2>/dev/null
  [ -z "$w" ] || printf '@@AT writing%s\n' "$w"
fi
at_cover "$1"
printf '@@AT how %s\n@@AT tag %s\n' "$at_how" "$at_tag"
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

# What the watcher needs besides _LIB and _CANCEL (it runs on its own: see _WLIB)
_WATCH = r"""
at_msof() { # SECONDS (decimal: 3, 1.5, 0.001, 123.45) -> at_ms: milliseconds (integer)
  case $1 in *.*) i=${1%%.*}; f=${1#*.}000;; *) i=$1; f=000;; esac
  f=${f%"${f#???}"}; i=${i:-0}
  while :; do case $f in 0?*) f=${f#0};; *) break;; esac; done
  while :; do case $i in 0?*) i=${i#0};; *) break;; esac; done
  at_ms=$(( i * 1000 + f ))
}
at_now() { # -> at_ms: the host's uptime in milliseconds (/proc/uptime)
  u=0; read -r u _ 2>/dev/null </proc/uptime; at_msof "$u"
}
at_left() { # DIR ID: the job's processes still running -> DIR/left, one "PID START COMMAND-LINE" line each (first
            # 20, command lines cut at 200 bytes; empty: none); at_t as at_targets
  at_targets "$1" "$2"
  lb=; ln=0
  for p in $at_t; do
    ln=$(( ln + 1 )); [ "$ln" -gt 20 ] && break
    at_alive_st "$p" || continue
    lb="$lb$p $at_st $(tr '\000\n' '  ' < "/proc/$p/cmdline" 2>/dev/null | head -c 200)
"
  done
  if [ -z "$lb" ]; then : > "$1/left"  # (else written whole: a reader never sees it half written)
  else printf '%s' "$lb" > "$1/left.new" && mv -f "$1/left.new" "$1/left"; fi
}
at_alive_st() { # PID -> at_st: its start time (status 1 when it is gone)
  at_st=; s=; read -r s < "/proc/$1/stat" 2>/dev/null || return 1
  s=${s##*) }; set -- $s; at_st=${20}; [ "$1" != Z ]
}
at_watch() { # DIR ID DEADLINE_S T0 MODE: the watcher (module docstring). MODE "run": while the command runs, look for
             # the job's processes (recording them in DIR/lineage) unless the job has an audit session of its own;
             # stopped (TERM) when the command ends. MODE "left": follow what the ended command left running
             # (DIR/left) until nothing is left. Either kills all of the job at the deadline.
  w_d=$1; w_id=$2; w_dl=$3; w_mode=$5; w_sp=; w_iv=50; w_end=
  [ "$w_mode" = run ] || w_iv=500
  if [ -n "$w_dl" ]; then
    if [ "$4" != - ]; then at_msof "$4"; else at_now; fi
    w_end=$at_ms; at_msof "$w_dl"; w_end=$(( w_end + at_ms ))
  fi
  trap '[ -z "$w_sp" ] || kill "$w_sp" 2>/dev/null; exit 0' TERM
  while :; do
    w_rem=
    if [ -n "$w_end" ]; then
      at_now; w_rem=$(( w_end - at_ms ))
      if [ "$w_rem" -le 0 ]; then
        trap '' TERM  # it fired: the monitor's stop no longer interrupts the kill
        tn=-; read -r tn _ 2>/dev/null </proc/uptime
        s=; read -r s < /proc/self/stat; w_pid=${s%% *}; at_alive_st "$w_pid"
        printf '%s %s %s %s\n' "$w_dl" "$tn" "$w_pid" "${at_st:--}" > "$w_d/deadline"
        at_cancel "$w_d" "$w_id" 20 "deadline: still running at its $w_dl s deadline, killed on the host" \
          >> "$w_d/deadline"
      fi
    fi
    if [ "$w_mode" = left ]; then
      [ "$w_iv" = 500 ] || { at_left "$w_d" "$w_id"; [ -n "$at_t" ] || return 0; }  # (the monitor just looked)
    else
      l=; read -r l < "$w_d/tag" 2>/dev/null
      case $l in [0-9]*) [ -n "$w_end" ] || return 0; w_iv=600000;; *) at_targets "$w_d" "$w_id";; esac
    fi
    w_s=$w_iv; [ -z "$w_rem" ] || [ "$w_rem" -ge "$w_s" ] || w_s=$w_rem
    f=$(( w_s % 1000 )); case ${#f} in 1) f=00$f;; 2) f=0$f;; esac
    sleep "$(( w_s / 1000 )).$f" & w_sp=$!
    wait "$w_sp"; w_sp=
    [ "$w_iv" -ge 10000 ] || w_iv=$(( w_iv * 2 ))
  done
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
function deadline(f,   line, W, dn, sv, k) {
  dhow = dtag = dwas = delh = ""
  for (k = 1; k <= 2; k++) {
    ndel = 0
    if ((getline line < f) <= 0) { close(f); return "" }
    split(line, W, " "); dn = 0; sv = ""
    while ((getline line < f) > 0) {
      if (line ~ /^@@AT survivors/) { dn = 1; sv = substr(line, 15) }
      else if (line ~ /^@@AT how /) dhow = substr(line, 10)
      else if (line ~ /^@@AT tag /) dtag = substr(line, 10)
      else if (line ~ /^@@AT was /) dwas = substr(line, 10)
      else if (line ~ /^@@AT elsewhere_how /) delh = substr(line, 20)
      else if (line ~ /^@@AT elsewhere /) dels[++ndel] = substr(line, 16)
    }
    close(f)
    if (dn || W[3] == "" || alive(W[3], W[4] == "" ? "-" : W[4])) break
    dn = 2  # its watcher is gone before it checked the kill: once more, its last words may be in now
  }
  return W[1] " " dn sv
}
function cover(id,   h, t) {  # how the processes of the job are found (at_cover)
  h = first(id "/cgroup"); t = first(id "/tag")
  if (h ~ /^\//) h = "cgroup " h; else if (h == "\001" || h == "") h = "- the job directory has no record of a cgroup"
  else { sub(/^- */, "", h); h = "- " h }
  if (t ~ /^[0-9]/) t = "ses " t; else if (t == "\001" || t == "") t = "- the job directory has no record of an audit session"
  else { sub(/^- */, "", t); t = "- " t }
  printf "@@AT how %s %s\n@@AT tag %s %s\n", id, h, id, t
}
function leftovers(id,   f, line, L, n, c) {  # the processes an ended command left running (DIR/left), alive
  f = id "/left"; n = 0
  while ((getline line < f) > 0) {
    if (split(line, L, " ") < 2 || !alive(L[1], L[2])) continue
    c = line; sub(/^[^ ]* [^ ]* ?/, "", c)
    printf "@@AT left %s %s %s\n", id, L[1], c; n++
  }
  close(f); return n
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
    if (dl != "" && dtag != "") printf "@@AT deadline_tag %s %s\n", id, dtag
    if (dl != "" && dwas != "") printf "@@AT deadline_was %s %s\n", id, dwas
    if (dl != "" && delh != "") printf "@@AT deadline_elsewhere_how %s %s\n", id, delh
    for (k = 1; dl != "" && k <= ndel; k++) if (split(dels[k], W, " ") > 1 && alive(W[1], W[2]))
      printf "@@AT deadline_elsewhere %s %s\n", id, dels[k]
    if (rc != "-") {
      if (first(id "/left") != "\001") leftovers(id); else if (alive(mp, ms)) printf "@@AT left_pending %s\n", id
      cover(id)
    }
    lo = first(id "/logout"); if (lo != "\001" && lo != "") printf "@@AT logout %s %s\n", id, lo
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
at_elsewhere() { # DIR [claim] -> at_else: "PID START CGROUP CMDLINE" lines (first 10) of the processes the job may have
                 # handed on (module docstring: started since its command, not the job's (at_t), in a cgroup all of
                 # whose processes started since then or in an audit session newer than the job's, not agent-tools'
                 # own or another job's); at_else_how: "" or "- REASON" (what it could not go by). With "claim", those
                 # holding a file of DIR open are the job's: added to at_t and DIR/lineage instead of listed.
  at_else=; at_else_how=; e_dir=$1; e_claim=${2:-}; e_pl=; read -r e_pl < "$1/pid" 2>/dev/null
  e_tg=; case $at_tag in ses\ *) e_tg=${at_tag#ses };; esac
  # one awk reads every /proc/PID/stat and /proc/PID/cgroup (the 0:: line of cgroup v2, else systemd's v1 one); a
  # process in a PID namespace below this one (NSpid with two pids or more: a container's) is not looked at
  e_c=$(awk -v pl="$e_pl" -v tag="$e_tg" -v job=" $at_t " '
    function cgof(pid,   f, l, c, v) {
      f = "/proc/" pid "/cgroup"; c = v = ""
      while ((getline l < f) > 0) {
        if (l ~ /^0::\//) c = substr(l, 4)
        else if (l ~ /^[0-9]+:name=systemd:\//) { sub(/^[0-9]+:name=systemd:/, "", l); v = l }
      }
      close(f); gsub(/ /, "\\x20", c); gsub(/ /, "\\x20", v); return c != "" ? c : v }
    function first(f,   l) { l = ""; getline l < f; close(f); return l }
    function nested(pid,   f, l, W) {
      f = "/proc/" pid "/status"
      while ((getline l < f) > 0) if (l ~ /^NSpid:/) { close(f); return split(l, W, " ") > 2 }
      close(f); return 0 }
    BEGIN {
      split(pl, P, " "); cs = P[2]
      if (cs !~ /^[0-9]+$/) { print "h the job directory has no record of when its command started"; exit }
      me = cgof("self"); mys = first("/proc/self/sessionid")
      if (me == "") print "h no cgroup hierarchy to tell units and logins by"
      for (i = 1; i < ARGC; i++) {
        line = ""; r = (getline line < ARGV[i]); close(ARGV[i])
        if (r <= 0) continue
        pid = line; sub(/ .*/, "", pid); sub(/.*\) /, "", line); split(line, F, " ")
        if (F[1] == "Z") continue
        c = cgof(pid); s = F[20] + 0
        if (c != "" && (!(c in old) || s < old[c])) old[c] = s
        if (s < cs + 0 || index(job, " " pid " ") || (c != "" && c == me) ||
            c ~ /\/(agent-tools-j_[a-z0-9]+|init)\.scope(\/|$)/) continue
        cg[pid] = c; st[pid] = F[20]; pp[pid] = F[2]
      }
      for (pid in cg) {
        hit = (cg[pid] != "" && old[cg[pid]] >= cs + 0)
        if (!hit && tag != "") {
          x = first("/proc/" pid "/sessionid")
          hit = (x ~ /^[0-9]+$/ && x != "4294967295" && x != mys && x + 0 > tag + 0)
        }
        if (!hit || first("/proc/" pid "/cmdline") ~ /^(sshd[: ]|$)/ || nested(pid)) continue
        print "p " pid " " st[pid] " " pp[pid] " " (cg[pid] == "" ? "-" : cg[pid])
      }
      exit }' /proc/[0-9]*/stat 2>/dev/null)
  e_p=; e_f=
  e_ifs=$IFS; IFS='
'; set -f
  for e_l in $e_c; do
    case $e_l in
      "h "*) at_else_how="- ${e_l#h }";;
      "p "*) IFS=' '; set -- ${e_l#p }; IFS='
'; e_p="$e_p
$1 $2 $3 $4"; e_f="$e_f /proc/$1/environ /proc/$1/cmdline /proc/$3/cmdline";;
    esac
  done
  set +f; IFS=$e_ifs
  [ -n "$e_p" ] || return 0
  # agent-tools' own processes (a shell run as at-warm, at-launch, at-status, at-cancel or at-watch, and its direct
  # children: the waits of watchers and idle sessions) and another job's (its marker) are not handed-on work
  e_ours=$(grep -lzxE -e 'at-(warm|launch|status|cancel|watch|job)' -e 'AGENT_TOOLS_JOB=j_[a-z0-9]+' $e_f 2>/dev/null)
  e_n=0
  e_ifs=$IFS; IFS='
'; set -f
  for e_l in $e_p; do
    IFS=' '; set -- $e_l; IFS='
'
    case "
$e_ours
" in *"
/proc/$1/"*|*"
/proc/$3/cmdline
"*) continue;; esac
    if [ -n "$e_claim" ] && ls -l "/proc/$1/fd" 2>/dev/null | grep -qF " -> $e_dir/"; then
      at_add "$1" && printf '%s %s\n' "$1" "$2" >> "$e_dir/lineage" 2>/dev/null
      continue
    fi
    e_n=$(( e_n + 1 )); [ "$e_n" -le 10 ] || continue
    at_else="$at_else$1 $2 $4 $(tr '\000\n' '  ' < "/proc/$1/cmdline" 2>/dev/null | head -c 200)
"
  done
  set +f; IFS=$e_ifs
  return 0
}
at_cancel() { # JOB_DIR ID GRACE_TENTHS REASON
d=$1; id=$2; grace=$3; reason=$4
[ -d "$d" ] || { printf '@@AT missing\n'; exit 0; }
rc=; read -r rc < "$d/exit" 2>/dev/null
[ -n "$rc" ] && printf '@@AT was %s\n' "$rc"  # the command had ended: what is found now is what it left running
printf '%s\n' "$reason" > "$d/cancel"
at_targets "$d" "$id"
at_elsewhere "$d" claim  # a process holding the job's files open is the job's, wherever it went
first=$at_t
printf '@@AT how %s\n@@AT tag %s\n' "$at_how" "$at_tag"
printf '@@AT targets%s\n' "$first"
if [ -n "$first" ]; then
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
  at_elsewhere "$d" claim
fi
# what it may have handed on, before the survivors line (a reader of the deadline file takes that line as the end)
[ -z "$at_else_how" ] || printf '@@AT elsewhere_how %s\n' "$at_else_how"
printf '%s' "$at_else" | while IFS= read -r l; do printf '@@AT elsewhere %s\n' "$l"; done
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
# unused for IDLE_S seconds (the client vanished in a partition and the host's sshd has not noticed: it keeps the
# session until TCP gives up, hours): exit, removing the directory; the idle watcher is stopped when a request comes
at_is=$3; s=; read -r s < /proc/self/stat 2>/dev/null; s=${s##*) }; set -- $s; at_ms=${20:--}
( trap 'kill "$sp" 2>/dev/null; exit 0' TERM; sleep "$at_is" & sp=$!; wait "$sp"; at_alive $$ "$at_ms" && kill -HUP $$ ) \
  </dev/null >/dev/null 2>&1 &
at_idle=$!
n=; IFS= read -r n || { kill "$at_idle" 2>/dev/null; exit 0; }  # (EOF: the watcher goes too, not in IDLE_S)
kill "$at_idle" 2>/dev/null
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


_FUNCTIONS = {"status": _STATUS, "cancel": _CANCEL}

# The watcher runs as a shell of its own (so that its command line holds no user command: a look for the job's
# processes by their command line never finds it): the launcher gets the functions it needs as its first argument
# (at_lib), defines them with eval and starts the watcher with them.
_WLIB = _LIB + _CANCEL + _WATCH
_TAKE_LIB = 'at_lib=$1; shift; eval "$at_lib"\n'

# The fixed part of each command line, quoted once (a launch is on every call's path).
_EXEC_PREFIX = {name: "exec /bin/sh -c " + _q(_LIB + body + "at_" + name + ' "$@"\n') + f" at-{name} "
                for name, body in _FUNCTIONS.items()}
_EXEC_PREFIX["launch"] = ("exec /bin/sh -c " + _q(_TAKE_LIB + _LAUNCH + 'at_launch "$@"\n') + " at-launch "
                          + _q(_WLIB) + " ")
_WARM_PREFIX = f"exec /bin/sh -c {_q(_TAKE_LIB + _LAUNCH + _STATUS + _WARM)} at-warm {_q(_WLIB)} "
# an input request also needs the launcher's at_in_eof (the pump ends a job's input with it)
_EXEC_PREFIX["input"] = "exec /bin/sh -c " + _q(_LIB + _LAUNCH + _INPUT + 'at_input "$@"\n') + " at-input "


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


#: seconds a warm session waits for its request before it exits by itself (see :func:`warm_script`)
WARM_IDLE_S = 300


def warm_script(base: str, reserved_id: str, idle_s: float = WARM_IDLE_S) -> str:
    """The command line of a warm session: a ``sh`` that defines every job script as a function, makes the
    directory of job ``reserved_id`` under ``base`` (so a launch with that id skips the ``mkdir``), prints
    ``@@AT ready`` (the line :meth:`SshHost.take_warm` waits for), then reads one request
    (:func:`warm_request`) from stdin and runs it. Without a request (EOF), or when none came within ``idle_s``
    seconds (a client gone in a partition, unnoticed by the host's sshd), it removes the empty directory and
    exits (the client drops a warm session whose channel closed).

    :param base: the jobs directory (shell-expanded on the host, as for the other scripts).
    :param reserved_id: the job id whose directory is made ahead of time.
    :param idle_s: seconds to wait for the request (> 0).
    """
    return f"{_WARM_PREFIX}\"{base}\" {_q(reserved_id)} {deadline_word(idle_s)}"


def warm_request(call: str) -> bytes:
    """The bytes a warm session reads: the number of lines of ``call``, a newline, ``call``, a newline.

    :param call: shell text calling one of the functions (``at_status "BASE" 'SPEC'``); quoted words may span
        lines.
    """
    return f"{call.count(chr(10)) + 1}\n{call}\n".encode()
