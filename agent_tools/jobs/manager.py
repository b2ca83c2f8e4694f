"""Running commands under a budget as durable jobs, and following, paging and cancelling them.

Every command starts as a job (see :mod:`agent_tools.jobs.scripts`): when it ends within its budget the
launcher reports exit status and output in the same round trip (``finished``); when the budget runs out
first, the controller sends EOF and closes the channel, and the job goes on under its monitor on the host
(``detached``) or its whole process tree is killed (``killed``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import re
import secrets
import shlex
import signal as _signal
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from typing import Any, Literal

import anyio
import structlog

from ..errors import (
    AgentToolsError,
    BadArguments,
    ChannelOpenFailed,
    ConnectionLost,
    ConnectUnfinished,
    ExecUnconfirmed,
    HostBusy,
    HostError,
    HostUnreachable,
    InputRefused,
    JobNotFound,
    UnknownHost,
)
from ..hosts.base import ConnectProgress, Host, HostProcess, run_on
from ..outcomes import (
    Detached,
    ErrorOutcome,
    Finished,
    JobCancelResult,
    JobInput,
    JobOutput,
    JobStatus,
    Killed,
    Leftover,
    NeedsInput,
    ProbeReport,
)
from ..output import VIEW_CONTEXT_BYTES, OutputView, clean_lines, clean_window, view_request
from ..probes.readiness import judge
from ..redact import add_secret_values, redact
from .discover import discover_script, parse_discovery, split_env_line
from .exits import exit_note, never_ends
from .hints import JobFacts, NextCall, guide, render
from .journal import JobRecord, Journal, now
from .scripts import (
    cancel_request,
    cancel_script,
    input_script,
    launch_request,
    launch_script,
    status_request,
    status_script,
    warm_script,
)
from .terminal import drew_screen, interactive_need
from .wire import (
    Elsewhere,
    HostJobState,
    RawView,
    WireError,
    WireReader,
    parse_deadline,
    parse_elsewhere,
    parse_status,
    read_view,
)

__all__ = ["DEFAULT_JOBS_DIR", "JobRunner", "job_id_for_key", "new_job_id"]

log = structlog.get_logger(__name__)

#: jobs directory on every host; expanded by the host's shell (so ``$HOME`` is the remote user's).
DEFAULT_JOBS_DIR = "${XDG_STATE_HOME:-$HOME/.local/state}/agent-tools/jobs"

#: seconds a host gets, beyond a call's own time (``budget_s``, ``wait_s``, ``grace_s``), to answer it: past that
#: the call returns ``unreachable``, ``connection_lost`` or ``busy``, unless the host is answering (slow, not
#: gone). A host that stops answering is found dead sooner (``SshSettings.liveness_timeout_s``, 3 s).
ANSWER_TIMEOUT_S = 4.0

#: a call whose time is up while its host is answering (slow, not gone) gets this many seconds more, again and
#: again, up to ``_EXTEND_MAX_S`` in all (see ``_answer_within``)
_EXTEND_S = 4.0
_EXTEND_MAX_S = 60.0

#: seconds the look at a job gets once its launch's budget ran out (it may have ended right at the budget)
_LOOK_S = 0.7

#: pause before a long-poll looks again after its look failed for the link (the connection dropped or went silent)
_RELOOK_S = 0.5

#: longest a call waits for a warm session that is starting (it would start a new session otherwise), seconds
_WARM_WAIT_S = 2.0

#: largest launch command line an exec request can carry: sshd hands it to the login shell as one argument,
#: and Linux limits one argument to 128 KiB (MAX_ARG_STRLEN, execve(2)); a margin for the shell's own use
_MAX_EXEC_BYTES = 130_000

#: a warm session that fails this soon after its request (seconds) was dead before the call (a drop not noticed
#: yet, a killed shell): the call is tried once more on a new session. Later failures (keepalive noticing a
#: partition) are reported at once, so an unreachable host still says so within its keepalive/connect deadline.
_WARM_RETRY_S = 1.0

#: longest command sent through a warm session (longer ones start a new session: see ``_take_warm``)
_WARM_MAX_COMMAND = 8192

#: largest single write to a job's stdin (bytes; a pipe holds 64 KiB, pipe(7))
MAX_INPUT_BYTES = 65_536

#: largest command accepted (Linux MAX_ARG_STRLEN is 128 KiB per argument; execve(2)).
MAX_COMMAND_BYTES = 100_000

#: the launcher's own report words: any of them means the launch request reached it
_LAUNCH_WORDS = frozenset({"started", "error", "exit", "view", "end"})
_JOB_ID_RE = re.compile(r"^j_[a-z0-9]{8,32}$")
#: journal states the host is not asked about again (their job cannot change any more)
_SETTLED = frozenset({"exited", "killed", "not_started"})

# A running job with a pipe waiting on a secret: its newest output ends in a password/passphrase prompt.
_SECRET_PROMPT_RE = re.compile(
    r"(?:\[sudo\] password for [^\n]*|[^\n]{0,80}\b(?:[Pp]assword|[Pp]assphrase|[Pp]asscode|PIN|[Ss]ecret|[Tt]oken)"
    r"\b[^\n]{0,60}:[ \t]*)$")


def find_secret_prompt(*texts: str) -> str | None:
    """The password/passphrase prompt that ends one of ``texts`` (a running job's newest output), else None."""
    for text in texts:
        m = _SECRET_PROMPT_RE.search(text[-400:].rstrip("\r"))
        if m is not None:
            return m.group(0).strip()
    return None


def _secret_next(job_id: str) -> str:
    return (f"job {job_id} waits on a password: a person types it, out of band, with `agent-tools input {job_id} "
            "--secret` (no echo, straight to the job); never send it with job_input. Then "
            f"job_status(job_id='{job_id}', wait_s=30)")


def new_job_id() -> str:
    """A fresh, unguessable job id: ``j_`` + 16 characters, the base32 (RFC 4648, lower case) of 80 bits from
    :mod:`secrets` (one ``urandom`` call)."""
    return "j_" + base64.b32encode(secrets.token_bytes(10)).decode().lower()


def job_id_for_key(host: str, key: str) -> str:
    """The job id a keyed launch claims on the host itself (``JobRunner.run(..., key_on_host=True)``): ``j_`` + 16
    characters, the base32 (RFC 4648, lower case) of the first 80 bits of SHA-256 over ``host`` NUL ``key``. The
    same host alias and key give the same id in every process and on every machine, so the host's job directory
    (its ``command`` file, created exclusively) decides which launch started the job."""
    digest = hashlib.sha256(host.encode() + b"\0" + key.encode()).digest()
    return "j_" + base64.b32encode(digest[:10]).decode().lower()


def check_job_id(job_id: str) -> None:
    """:raises BadArguments: ``job_id`` is not of the form ``j_...``."""
    if not _JOB_ID_RE.match(job_id):
        raise BadArguments(f"job_id {job_id!r} is not a job id (expected 'j_' followed by letters/digits, "
                           "as returned by run_command)")


def _signal_name(code: int) -> str | None:
    if code > 128:
        try:
            return _signal.Signals(code - 128).name.removeprefix("SIG")
        except ValueError:
            return None
    return None


class JobRunner:
    """Runs commands as durable jobs on hosts and keeps them in a :class:`Journal`.

    :param journal: where jobs are recorded.
    :param jobs_dir: the jobs directory on every host (shell-expanded there).
    :param view_bytes: bytes of each stream shown to the agent per result (head + tail), int.
    :param warm: use warm sessions on hosts that keep them (``SshHost.take_warm``): the launcher is started
        ahead of time, with the next job's directory made, and the call only writes its request to it (one
        round trip instead of channel open + exec + login shell + mkdir; see docs/performance.md).
    :param answer_timeout_s: seconds a host gets, beyond a call's own time (``budget_s`` of :meth:`run`,
        ``wait_s`` of :meth:`job_status`, ``grace_s`` of :meth:`cancel`, none for :meth:`job_output` and
        :meth:`refresh_host`), before the call gives up with ``unreachable`` (no connection), ``busy`` (every
        session channel taken by other calls) or ``connection_lost`` (float > 0). A host that is answering
        (slow, not gone: ``SshHost.answering``) gets more time, up to 60 s more.
    """

    def __init__(self, journal: Journal, *, jobs_dir: str = DEFAULT_JOBS_DIR, view_bytes: int = 6144,
                 warm: bool = True, answer_timeout_s: float = ANSWER_TIMEOUT_S) -> None:
        if not answer_timeout_s > 0:
            raise ValueError("answer_timeout_s must be > 0 seconds")
        self.journal = journal
        self.jobs_dir = jobs_dir
        self.view_bytes = view_bytes
        self.warm = warm
        self.answer_timeout_s = answer_timeout_s
        #: job id -> the lock its probe checks take: one check of a job at a time in this process (a background
        #: look and the agent's job_status would otherwise judge it twice at once, each from the other's old cursor)
        self._judging: dict[str, anyio.Lock] = {}

    # ------------------------------------------------------------------ sessions
    def _warm_session(self) -> tuple[str, str]:
        job_id = new_job_id()
        return job_id, warm_script(self.jobs_dir, job_id)

    async def _take_warm(self, host: Host, wait_s: float) -> tuple[str, HostProcess] | None:
        """A warm session of ``host`` (its reserved job id and process), or None (the host keeps none, or none
        is ready or became ready within ``wait_s`` seconds)."""
        take = getattr(host, "take_warm", None)
        if not self.warm or take is None:
            return None
        got: tuple[str, HostProcess] | None = await take("agent_tools.jobs:" + self.jobs_dir, self._warm_session,
                                                         wait_s=wait_s)
        return got

    async def _open(self, host: Host, warm: tuple[str, HostProcess] | None, script: Callable[[], str],
                    request: Callable[[], bytes]) -> tuple[HostProcess, bool]:
        """Run one job script: as a request written to the warm session ``warm`` when there is one (falling back
        to a new session if that one is gone), else as ``script()`` on a new session.

        :returns: the process, and whether it is the warm session (then the request is written but, unlike an
            exec request, not yet acknowledged: the script's first reply is the acknowledgement).
        :raises HostError: as :meth:`Host.start`.
        """
        if warm is not None:
            proc = warm[1]
            try:
                await proc.write_stdin(request())
                return proc, True
            except HostError as exc:  # nothing was sent: the channel was already gone
                log.debug("job.warm_session_gone", host=host.name, error=exc.message)
                with anyio.CancelScope(shield=True):
                    await proc.close()
        return await host.start(script()), False

    # ------------------------------------------------------------------ run
    async def run(
        self,
        host: Host,
        command: str,
        *,
        budget_s: float = 15.0,
        on_timeout: Literal["detach", "kill"] = "detach",
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        detach_immediately: bool = False,
        deadline_s: float | None = None,
        probes: list[dict[str, Any]] | None = None,
        idempotency_key: str | None = None,
        key_on_host: bool = False,
        kill_grace_s: float = 0.5,
        display_command: str | None = None,
        _claim_retried: bool = False,
        hard_deadline_s: float | None = None,
        hard_deadline_why: str = "",
        stdin: Literal["none", "pipe"] = "none",
        tty: bool = False,
    ) -> Finished | NeedsInput | Detached | Killed | ErrorOutcome:
        """Run ``command`` on ``host`` within ``budget_s`` seconds.

        Steps: (1) record the job in the journal; (2) start the launcher on the host (connect + channel
        open + exec all count against the budget); (3) wait for the exit report until the budget runs out;
        (4) on time-out, detach (EOF to the launcher, channel closed, job keeps running) or kill the job's
        whole process tree (TERM, ``kill_grace_s``, KILL, survivors checked). Returns by about
        ``budget_s`` + 1 s normally, and within ``budget_s`` + 4 s whatever happens (a host that stops
        answering included: connect, channel open and the exec's answer all count against the budget, and an exec
        already sent gets at most 3 s more to be answered). When the budget runs out (or the connection fails
        after the command was sent) the job is looked at on the host, on a new connection if need be, and after a
        failed connection until the budget is over: a job that ended is ``finished``; ``detached`` says it still
        runs only when a look got an answer, else that the host went silent and the job's state is not known.

        What a failed start says is what is known: an ``error`` whose launch provably never reached the host
        (no connection, the session refused or never opened, every channel busy, the launcher refused it) has
        the job id, is journalled ``not_started`` and says nothing was started; one whose request went out
        without an answer (the connection dropped or stopped answering) is ``error`` of kind
        ``start_unconfirmed`` with the job id, journalled ``unconfirmed`` until :meth:`job_status` settles it
        (``running``/``exited`` once the host shows it, ``not_started`` once it shows no such job after the
        launch window). Such a call must not be repeated blindly (use ``idempotency_key``).

        :param budget_s: seconds the call may block (float > 0).
        :param on_timeout: ``detach`` (keep running as a job) or ``kill``.
        :param cwd: working directory on the host (None: the login directory).
        :param env: extra environment variables for the command.
        :param detach_immediately: start the job and return ``detached`` at once (services, restarts).
        :param deadline_s: seconds from start after which the job counts as past its deadline.
        :param probes: probe specs (dicts) to judge the job's readiness by.
        :param idempotency_key: a second call with the same key on the same host returns the first job
            instead of starting another one (client retries after a dropped connection); one with another
            command under that key is refused (:class:`BadArguments`: it was not run).
        :param key_on_host: the key is also claimed on the host (needs ``idempotency_key``): the job's id is
            :func:`job_id_for_key` and the host's job directory decides, so a call from another process or
            machine, with another journal (a retried Temporal activity on a new worker), finds the job the first
            call started and follows it instead of launching it twice (the ``command`` file is created
            exclusively; a launch that lost the race for the directory itself is tried once more). No warm
            session is used (its job id is reserved in advance).
        :param display_command: the command as shown in outcomes and the journal; defaults to ``command``.
            Either is redacted (:func:`agent_tools.redact.redact`): the raw command goes only to the host.
        :param hard_deadline_s: seconds from the command's start after which the job's monitor kills its whole
            tree on the host (TERM, 2 s, KILL; see :mod:`agent_tools.jobs.scripts`), whether or not this process
            is still there; the job then reads ``killed`` by ``deadline`` (float > 0; None: no deadline).
        :param hard_deadline_why: where that deadline comes from, in words (shown with it).
        :param stdin: ``none`` (``/dev/null``) or ``pipe``: a named pipe in the job directory, held open on the
            host, that :meth:`job_input` writes to from any later call or process (see
            :mod:`agent_tools.jobs.scripts`, "Input").
        :param tty: run under a pseudo-terminal (80x24) owned by the host-side monitor, fed by the same pipe
            (implies ``stdin="pipe"``); a host with neither util-linux ``script`` nor ``python3`` refuses the
            launch (``error`` of kind ``unsupported``, nothing ran).
        :returns: ``finished``, ``needs_input``, ``detached``, ``killed`` or ``error``; never raises for
            host problems (they become ``error`` outcomes).
        :raises BadArguments: invalid arguments (also returned as ``error`` by the tools layer).
        """
        for what, text in (("command", command), ("cwd", cwd or ""), *((f"env {k}", f"{k}={v}")
                                                                        for k, v in (env or {}).items())):
            if not _valid_utf8(text):
                raise BadArguments(f"the {what} holds text that is not valid UTF-8 (bytes that were not UTF-8, or a "
                                   "lone surrogate): write such bytes with an escape ($'\\xff') and retry")
        shown = redact(display_command if display_command is not None else command)
        if not command.strip():
            raise BadArguments("command is empty")
        if len(command.encode()) > MAX_COMMAND_BYTES:
            raise BadArguments(f"command is {len(command.encode())} bytes; the limit is {MAX_COMMAND_BYTES}: "
                               "write a script with write_file and run that")
        if not budget_s > 0:
            raise BadArguments(f"budget_s must be > 0 seconds, got {budget_s}")
        for key in env or {}:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise BadArguments(f"environment variable name {key!r} is not valid")
        if on_timeout not in ("detach", "kill"):
            raise BadArguments(f"on_timeout must be 'detach' or 'kill', got {on_timeout!r}")
        if hard_deadline_s is not None and not 0 < hard_deadline_s < float("inf"):
            raise BadArguments(f"deadline_s must be a number of seconds > 0, got {hard_deadline_s}")
        if stdin not in ("none", "pipe"):
            raise BadArguments(f"stdin must be 'none' or 'pipe', got {stdin!r}")
        in_mode = "tty" if tty else stdin

        if key_on_host and not idempotency_key:
            raise BadArguments("key_on_host needs an idempotency_key")
        claimed = job_id_for_key(host.name, idempotency_key) if key_on_host and idempotency_key else None
        reuse = False  # the journal has the claimed id from a launch that never reached the host: launch again
        if idempotency_key:
            prior = self.journal.find_idempotent(host.name, idempotency_key)
            if claimed is not None and prior is None:
                with contextlib.suppress(JobNotFound):
                    prior = self.journal.get(claimed)
            if claimed is not None and prior is not None and prior.job_id == claimed:
                reuse = prior.state == "not_started"  # the host decides below whether it started after all
                prior = None if reuse else prior
            elif prior is not None and prior.state in ("not_started", "unconfirmed"):
                prior = await self._release_unstarted(host, prior)
            if prior is not None:
                log.info("job.idempotent_hit", host=host.name, job_id=prior.job_id)
                _same_command(prior, shown, host.name)
                return await self._outcome_of_existing(host, prior, budget_s)

        exec_len = len(launch_script(self.jobs_dir, "j_" + "x" * 16, command, cwd=cwd, mode="fg", head_bytes=0,
                                     tail_bytes=0, env=dict(env) if env else None, deadline_s=hard_deadline_s))
        if exec_len > _MAX_EXEC_BYTES:
            raise BadArguments(f"the command is {exec_len} bytes once quoted for the host's shell; the limit is "
                               f"{_MAX_EXEC_BYTES} (Linux MAX_ARG_STRLEN): write it to a file with write_file and "
                               "run that")

        t0 = anyio.current_time()
        # a warm session reads its request byte by byte (dash's `read`): long commands go on a new session
        warm = (await self._take_warm(host, min(_WARM_WAIT_S, budget_s / 4))
                if len(command) <= _WARM_MAX_COMMAND and claimed is None else None)
        job_id = claimed or (warm[0] if warm is not None else new_job_id())
        rec = JobRecord(job_id=job_id, host=host.name, command=shown, base=self.jobs_dir, created_at=now(),
                        cwd=cwd, budget_s=budget_s, deadline_s=deadline_s, probes=list(probes or []),
                        readiness="pending" if probes else "none", idempotency_key=idempotency_key,
                        meta={"on_timeout": on_timeout, **_reached(host), **({"key_on_host": True} if claimed
                                                                             else {}),
                              **({"env": sorted(env)} if env else {}),  # the names only (values may be secrets)
                              **({"hard_deadline_s": hard_deadline_s, "hard_deadline_why": hard_deadline_why}
                                 if hard_deadline_s is not None else {}),
                              **({"stdin": in_mode} if in_mode != "none" else {})})
        if reuse:
            self.journal.update(job_id, state="running", finished_at=None, exit_status=None, signal=None,
                                readiness=rec.readiness, probes=rec.probes, deadline_s=deadline_s,
                                budget_s=budget_s, meta=rec.meta)
        elif idempotency_key:
            # the unique (host, key) index decides a race with another task or process that also missed above
            holder = self.journal.add_idempotent(rec)
            if holder.job_id != job_id:
                log.info("job.idempotent_race", host=host.name, job_id=holder.job_id)
                if warm is not None:
                    await warm[1].close_stdin()
                    await warm[1].close()
                _same_command(holder, shown, host.name)
                return await self._outcome_of_existing(host, holder, budget_s)
        else:
            self.journal.add(rec)
        head, tail = view_request(self.view_bytes)  # the view's bytes and context past its cuts
        mode = "bg" if detach_immediately else "fg"
        env_ = dict(env) if env else None
        log.debug("job.start", host=host.name, job_id=job_id, budget_s=budget_s, on_timeout=on_timeout)

        started = False
        sent = False  # the launch reached the host for sure (exec request accepted, or the warm session answered)
        written = False  # the launch request was written to a warm session (not yet answered)
        exit_code: int | None = None
        at_deadline: tuple[float | None, list[int] | None] | None = None  # the monitor killed it at its deadline
        deadline_how = deadline_tag = ""  # how that kill found the job's processes (HostJobState.deadline_how, _tag)
        deadline_else: list[Elsewhere] = []  # what it may have handed on (HostJobState.deadline_elsewhere)
        deadline_else_how = ""
        deadline_was: int | None = None  # the command had ended before that kill (it was of its leftovers)
        cover = {"how": "", "tag": ""}  # how the look for leftovers found the job's processes (see _unchecked)
        writing: list[int] = []  # leftovers that still hold the job's output files open
        logout = ""  # why the job dies when this login ends (see scripts.at_logout)
        views: dict[str, RawView] = {}
        leftovers: list[Leftover] = []
        ended = "-"  # how the command ended: exit | signal | - (see HostJobState.ended)
        launch_error: str | None = None
        relaunch_found = False  # the second try found the job started by the first (see below)
        refused = False  # the launcher said it could not set the job up (it never ran the command)
        maybe_sent = False  # a launch request was written to a warm session at some point (it may have arrived)
        proc: HostProcess | None = None
        heard: float | None = None  # when the launch last heard from the host (loop clock)
        lost: HostError | None = None  # the connection failed after the command was sent
        try:
            with anyio.move_on_after(budget_s - (anyio.current_time() - t0)):
                for attempt in (1, 2):
                    t_open = anyio.current_time()
                    try:
                        proc, written = await self._open(
                            host, warm if attempt == 1 else None,
                            lambda: launch_script(self.jobs_dir, job_id, command, cwd=cwd, mode=mode,
                                                  head_bytes=head, tail_bytes=tail, env=env_,
                                                  deadline_s=hard_deadline_s, stdin=in_mode),
                            lambda: launch_request(self.jobs_dir, job_id, command, cwd=cwd, mode=mode,
                                                   head_bytes=head, tail_bytes=tail, env=env_,
                                                   deadline_s=hard_deadline_s, stdin=in_mode))
                        maybe_sent = maybe_sent or written
                        sent = not written
                        reader = WireReader(proc.read_stdout)
                        while True:
                            words = await reader.header()
                            if words is None:
                                break
                            heard = anyio.current_time()
                            if words[0] in _LAUNCH_WORDS:
                                sent = True  # the launcher answered: the request arrived
                            if words[0] == "started":
                                started = True
                                if detach_immediately:
                                    break
                            elif words[0] == "error":
                                launch_error, refused = " ".join(words[1:]), not started
                            elif words[0] == "exit":
                                exit_code = int(words[1]) if words[1].lstrip("-").isdigit() else None
                                ended = words[2] if len(words) > 2 else "-"
                            elif words[0] == "left" and len(words) > 1 and words[1].isdigit():
                                leftovers.append(Leftover(pid=int(words[1]),
                                                          command=redact(" ".join(words[2:]).strip())))
                            elif words[0] == "deadline":
                                at_deadline = parse_deadline(words[1:])
                            elif words[0] == "deadline_how":
                                deadline_how = " ".join(words[1:])
                            elif words[0] == "deadline_tag":
                                deadline_tag = " ".join(words[1:])
                            elif words[0] == "deadline_elsewhere" and (e := parse_elsewhere(words[1:])):
                                deadline_else.append(e)
                            elif words[0] == "deadline_elsewhere_how":
                                deadline_else_how = " ".join(words[1:])
                            elif words[0] == "deadline_was":
                                deadline_was = int(words[1]) if words[1].lstrip("-").isdigit() else None
                            elif words[0] in ("how", "tag"):
                                cover[words[0]] = " ".join(words[1:])
                            elif words[0] == "writing":
                                writing = [int(w) for w in words[1:] if w.isdigit()]
                            elif words[0] == "logout":
                                logout = " ".join(words[1:])
                            elif words[0] == "view":
                                name, raw = await read_view(reader, words)
                                views[name] = raw
                            elif words[0] == "end":
                                break
                    except HostError as exc:
                        if not _dead_on_arrival(written, sent, t_open):
                            raise
                        failure: str | None = exc.message
                    else:
                        failure = "it ended without a word" if _dead_on_arrival(written, sent, t_open) else None
                    if failure is not None:
                        # The warm session was dead before it answered (a dropped connection the client had not
                        # noticed yet, a killed shell). Launch once more on a new session (a fresh connection if
                        # need be) with the same job id: the command file is created exclusively, so if the first
                        # try did start the job, this one says so instead of running it twice.
                        log.info("job.warm_session_dead", host=host.name, job_id=job_id, error=failure)
                        with anyio.CancelScope(shield=True):
                            await proc.close()  # type: ignore[union-attr]
                        proc, written = None, False
                        continue
                    if attempt == 2 and launch_error is not None and "exists already" in launch_error:
                        launch_error, relaunch_found, refused = None, True, False
                    break
        except HostError as exc:
            if proc is not None:
                with anyio.CancelScope(shield=True):
                    await proc.close()
            if not sent:
                if isinstance(exc, ExecUnconfirmed) or written or maybe_sent:
                    # the request went out (an exec request, or a request written to a warm session) and the host
                    # never answered: it may have arrived
                    return self._unconfirmed(rec, exc.message)
                return self._not_started(rec, exc)
            # the command was sent; the job may be running: followed below, on a new connection, for the rest of the
            # budget (a short blip does not end the call)
            log.warning("job.start_connection_error", host=host.name, job_id=job_id, error=exc.message)
            lost, proc = exc, None
        except WireError as exc:
            launch_error = f"unexpected launcher output: {exc}"
            refused = False
        except BaseException:
            # cancelled from outside (the client gave up): never leave the session open and its channel slot
            # taken; EOF lets the launcher exit, the job itself runs on under its monitor
            if proc is not None:
                with anyio.CancelScope(shield=True):
                    with anyio.move_on_after(0.3):
                        await proc.close_stdin()
                    await proc.close()
            raise

        elapsed = anyio.current_time() - t0
        if sent or started:
            self._remember_machine(rec, host)
        if proc is not None and (exit_code is None or detach_immediately):
            # Budget ran out (or detach-at-once): EOF makes the launcher exit; the monitor keeps the job.
            with anyio.CancelScope(shield=True):
                with anyio.move_on_after(0.3):
                    await proc.close_stdin()
                await proc.close()
        elif proc is not None:
            with anyio.CancelScope(shield=True):
                await proc.close()

        if relaunch_found:
            return self._detached(rec, elapsed, None, why="the warm session ended without answering, but the job "
                                                           "had started on the host: it runs there as a job")
        if claimed is not None and launch_error is not None and "exists already" in launch_error:
            # the host holds this key's job already (another process or machine launched it): follow that one
            log.info("job.claim_found_on_host", host=host.name, job_id=job_id)
            self.journal.update(job_id, meta={**rec.meta, "found_on_host": True})
            return await self._outcome_of_existing(host, self.journal.get(job_id), budget_s)
        if (claimed is not None and launch_error is not None and refused and not _claim_retried
                and "cannot create the job directory" in launch_error):
            # another launch of the same key made the directory between this one's check and its mkdir: once
            # more, and the exclusive command file decides which of them started the job
            self.journal.update(job_id, state="not_started", finished_at=now())
            return await self.run(host, command, budget_s=budget_s, on_timeout=on_timeout, cwd=cwd, env=env,
                                  detach_immediately=detach_immediately, deadline_s=deadline_s, probes=probes,
                                  idempotency_key=idempotency_key, key_on_host=True, kill_grace_s=kill_grace_s,
                                  display_command=display_command, hard_deadline_s=hard_deadline_s,
                                  hard_deadline_why=hard_deadline_why, _claim_retried=True)
        if launch_error is not None:
            # the launcher refused before running the command (no job directory, missing cwd): never started
            self.journal.update(job_id, state="not_started" if refused else "lost", finished_at=now(),
                                meta={**rec.meta, "error": launch_error})
            if launch_error.startswith("unsupported:"):  # the host lacks what the call needs (a terminal owner)
                return ErrorOutcome(host=host.name, command=shown, kind="unsupported", message=launch_error,
                                    retryable=False, job_id=job_id)
            return ErrorOutcome(host=host.name, command=shown, kind="launch", message=launch_error,
                                retryable=False, job_id=job_id)

        if not sent and not written:
            if maybe_sent:  # a warm session got the request and died without a word; the new one got nowhere
                return self._unconfirmed(rec, f"{host.name}: no session within the {budget_s:g} s budget after a "
                                              "ready session ended without answering")
            # No exec request went out for this call (SshHost.start sends none once its caller gave up before the
            # session opened), and nothing was written to a session: provably not started.
            busy = getattr(host, "channels_busy", None)
            if callable(busy) and busy():
                # not a network problem: every session channel to the host was taken by other calls
                return self._not_started(rec, HostBusy(
                    host.name, f"{host.name}: every SSH session channel to the host was in use by other calls for "
                               f"the whole {budget_s:g} s budget; nothing was started. Retry, give a larger "
                               "budget_s, or run fewer commands at once"))
            return self._not_started(rec, _unreached(
                host, f"{host.name}: no session within the {budget_s:g} s budget (connect + channel open); "
                      "nothing was started", budget_s, "budget"))

        if logout:
            rec.meta = {**rec.meta, "logout": logout}
            self.journal.update(job_id, meta=rec.meta)
        if (exit_code is not None and not detach_immediately and at_deadline is not None and exit_code > 128
                and deadline_was is None):
            return self._deadline_killed(rec, exit_code, views, elapsed, *at_deadline,
                                         unchecked=_unchecked(deadline_how, deadline_tag, deadline_else,
                                                              deadline_else_how, rec.host))
        if exit_code is not None and not detach_immediately:
            return self._finished(rec, exit_code, views, elapsed, leftovers, ended,
                                  unchecked=_unchecked(cover["how"], cover["tag"]), writing=writing)

        if detach_immediately and started:
            return self._detached(rec, elapsed, None, why="the rule says detach at once; " + _runs_on(rec),
                                  at_once=True)

        # Budget ran out, or the connection failed after the command was sent (``lost``).
        if on_timeout == "kill" and lost is None:
            return await self._kill_after_budget(host, rec, t0, kill_grace_s, started)
        # Look at the job: once (it may have ended right at the budget), or, after a lost connection, on a new one
        # until the budget is over (it may end within it). Only a look that got an answer says it still runs.
        now_ = anyio.current_time()
        st, heard = await self._look_until(host, job_id, max(t0 + budget_s, now_ + _LOOK_S) if lost else now_ + _LOOK_S,
                                           head, tail, heard, follow=lost is not None)
        if st is not None and st.present and st.exit_code is not None:
            if st.deadline_s is not None and st.cancelled and st.exit_code > 128 and st.deadline_was is None:
                return self._deadline_killed(rec, st.exit_code, st.views, anyio.current_time() - t0, st.deadline_s,
                                             st.deadline_survivors, unchecked=_deadline_unchecked(st, rec.host))
            return self._finished(rec, st.exit_code, st.views, anyio.current_time() - t0,
                                  [Leftover(pid=p, command=redact(c)) for p, c in st.leftovers], ended=st.ended,
                                  unchecked=_unchecked(st.how, st.tag), left_pending=st.leftovers_pending)
        if on_timeout == "kill":
            return await self._kill_after_budget(host, rec, t0, kill_grace_s, started)
        if written and not sent and (st is None or not st.present):
            return self._unconfirmed(rec, f"{host.name}: no answer from the host within the {budget_s:g} s budget "
                                          "to a launch request written to a ready session (hung, overloaded, or "
                                          "the connection stopped answering)")
        if st is None:
            # nothing said it runs: the link went silent (or dropped) and no look got through
            last = (f"the host's last word came {heard - t0:.1f} s into the call"
                    + (" (the job had started)" if started else "") if heard is not None
                    else "the command was sent and the host said nothing")
            why = (last + (f"; then the connection failed ({lost.message})" if lost is not None else "")
                   + f"; no look at the job got an answer within its {budget_s:g} s budget, so whether it still runs "
                   "or has ended is not known")
            return self._detached(rec, anyio.current_time() - t0, None, why=why, next_hint=(
                f"job_status(job_id='{job_id}', wait_s=30) settles it once the host answers; do not run the command "
                "again (it was started)"))
        why = "still running when its budget ran out; " + _runs_on(rec)  # (budget_s says how long it was)
        if lost is not None:
            why += f" (the connection failed after the command was sent, {lost.message}; a new one saw it running)"
        if not started:
            why += " (the start was not confirmed before the budget ran out)"
        return self._detached(rec, anyio.current_time() - t0, st, why=why)

    async def _look_until(self, host: Host, job_id: str, until: float, head: int, tail: int, heard: float | None,
                          *, follow: bool) -> tuple[HostJobState | None, float | None]:
        """Look at job ``job_id`` on the host (its state and output views) until a look got an answer, or, with
        ``follow``, until one shows it ended; never past ``until`` (loop clock). A look that fails (the connection
        dropped or did not answer) is made again after a short pause, on a new connection if need be.

        :param heard: when the host last answered (loop clock, None: never), updated by the looks.
        :returns: the last look that got an answer (None when none did), and when the host last answered.
        """
        st: HostJobState | None = None
        pause = 0.2
        while True:
            with anyio.move_on_at(until):
                try:
                    got = (await self._status(host, [(job_id, 0, 0, head, tail)])).get(job_id)
                    if got is not None:
                        st, heard = got, anyio.current_time()
                except (HostError, WireError) as exc:
                    log.warning("job.status_after_launch_failed", job_id=job_id, error=str(exc))
            ended = st is not None and (st.exit_code is not None or not st.present)
            if ended or (st is not None and not follow) or anyio.current_time() + pause >= until:
                return st, heard
            await anyio.sleep(pause)
            pause = min(pause * 1.6, 1.0)

    def _remember_machine(self, rec: JobRecord, host: Host) -> None:
        """Record the host key the launch's connection authenticated with the job (the machine's identity: a later
        process that reaches the alias elsewhere must not conclude anything from there; see hosts/reach.py)."""
        conn = rec.meta.get("connection")
        if not isinstance(conn, dict) or "host_key" in conn:
            return
        key = (_reached(host).get("connection") or {}).get("host_key")
        if key:
            rec.meta = {**rec.meta, "connection": {**conn, "host_key": key}}
            self.journal.update(rec.job_id, meta=rec.meta)

    def _not_started(self, rec: JobRecord, exc: HostError) -> ErrorOutcome:
        """The launch provably never reached the host: journalled ``not_started`` (not a lost job)."""
        self.journal.update(rec.job_id, state="not_started", finished_at=now(),
                            meta={**rec.meta, "error": exc.message})
        log.info("job.not_started", host=rec.host, job_id=rec.job_id, kind=exc.kind)
        # an alias no one knows has no job to follow: the id would only send the agent to job_status for nothing
        job_id = None if isinstance(exc, UnknownHost) else rec.job_id
        return ErrorOutcome(host=rec.host, command=rec.command, kind=exc.kind, message=redact(exc.message),
                            retryable=exc.retryable, job_id=job_id)

    def _unconfirmed(self, rec: JobRecord, message: str) -> ErrorOutcome:
        """The launch request went out and the host never answered: the job may be running. Journalled
        ``unconfirmed`` until the host is asked (:meth:`apply_state`)."""
        self.journal.update(rec.job_id, state="unconfirmed", meta={**rec.meta, "error": message})
        log.warning("job.start_unconfirmed", host=rec.host, job_id=rec.job_id, error=message)
        return ErrorOutcome(
            host=rec.host, command=rec.command, kind="start_unconfirmed", retryable=False, job_id=rec.job_id,
            message=f"{redact(message)}. The start of job {rec.job_id} is unconfirmed: the host may have received "
                    f"it and the command may be running. job_status(job_id='{rec.job_id}') settles it once the host "
                    "answers (running or exited if it started, not_started if it never did); do not run the "
                    "command again before that, unless with the same idempotency_key")

    def _finished(self, rec: JobRecord, code: int, views: dict[str, RawView],
                  elapsed: float, leftovers: list[Leftover] | None = None, ended: str = "-", *,
                  unchecked: str = "", writing: list[int] | None = None,
                  left_pending: bool = False) -> Finished | NeedsInput:
        """``ended``: how the command ended (``exit``, ``signal``, ``-``: :attr:`HostJobState.ended`); a status above
        128 names a signal unless the command is known to have exited with it, and a job a signal killed is
        journalled ``killed``. ``unchecked``: what the look for leftovers could not see (:func:`_unchecked`);
        ``writing``: leftovers that still hold the job's output files open (more output may come); ``left_pending``:
        the monitor was still looking for leftovers (``leftovers`` not known yet). ``next`` comes
        from :func:`~agent_tools.jobs.hints.guide`, as ``job_status``'s does (none for a plain success)."""
        out = views.get("stdout", RawView(0, b"", b""))
        err = views.get("stderr", RawView(0, b"", b""))
        ov, ev = out.view(budget=self.view_bytes), err.view(budget=self.view_bytes)
        sig = _signal_name(code) if ended != "exit" else None
        state = "killed" if ended == "signal" else "exited"
        left = leftovers or []
        meta = _with_leftovers(rec.meta, [(p.pid, p.command) for p in left], left_pending)
        self.journal.update(rec.job_id, state=state, exit_status=code, signal=sig, finished_at=now(),
                            stdout_seen=out.size, stderr_seen=err.size, meta=meta)
        rec.state, rec.exit_status, rec.signal, rec.meta = state, code, sig, meta
        log.debug("job.finished", host=rec.host, job_id=rec.job_id, exit_status=code, duration_s=round(elapsed, 3))
        if code != 0:
            need = interactive_need(rec.command, ev.text, ov.text, stdin=str(rec.meta.get("stdin") or "none"))
            if need is not None:
                # what a full-screen program drew for a screen nobody sees is left out (all of it stays on the host)
                screen = need.terminal and ov.total_bytes and drew_screen(ov.text)
                shown = OutputView(total_bytes=ov.total_bytes, omitted_bytes=ov.total_bytes) if screen else ov
                return NeedsInput(host=rec.host, command=rec.command, prompt=need.prompt, exit_status=code,
                                  duration_s=round(elapsed, 3), stdout=shown, stderr=ev, job_id=rec.job_id,
                                  next=need.next)
        if left:
            log.info("job.leftovers", host=rec.host, job_id=rec.job_id, pids=[p.pid for p in left])
        cut = ov.truncated or ev.truncated
        n_left = -1 if left_pending else len(left)
        self._note_exit(rec, ov.text, ev.text)
        nexts = "" if code == 0 and not n_left else guide(facts_of(rec, state=state, output_cut=cut,
                                                                   leftovers=n_left)).next_text()
        if left and _hard_deadline(rec) is not None:
            nexts += _kill_words(rec, "them at the job's deadline:")
        if writing:
            nexts += (f"; process(es) {writing} still hold its output open: job_output(job_id='{rec.job_id}') "
                      "later shows what they add")
        return Finished(host=rec.host, command=rec.command, exit_status=code, signal=sig,
                        duration_s=round(elapsed, 3), stdout=ov, stderr=ev, job_id=rec.job_id, leftovers=left,
                        unchecked=unchecked, next=nexts.removeprefix("; "))

    def _note_exit(self, rec: JobRecord, stdout: str, stderr: str) -> None:
        """Keep with an exited job what its non-zero exit status means (:func:`~agent_tools.jobs.exits.exit_note`),
        decided once from the output shown when its end was first seen (a later look has no new output), so that
        every later result says the same."""
        if rec.exit_status in (None, 0) or "exit_note" in rec.meta:
            return
        rec.meta = {**rec.meta, "exit_note": exit_note(rec.command, rec.exit_status, stdout, stderr, rec.host)}
        self.journal.update(rec.job_id, meta=rec.meta)

    def _deadline_killed(self, rec: JobRecord, code: int, views: dict[str, RawView], elapsed: float,
                         limit_s: float | None, survivors: list[int] | None, *, unchecked: str = "") -> Killed:
        """The launcher reported the exit of a job its monitor killed at the job's deadline: ``killed`` by
        ``deadline``, its output kept; ``unchecked``: what the kill's look could not see (:func:`_unchecked`)."""
        out = views.get("stdout", RawView(0, b"", b""))
        err = views.get("stderr", RawView(0, b"", b""))
        sig = _signal_name(code)
        meta = {**rec.meta, "killed_by": "deadline"}
        self.journal.update(rec.job_id, state="killed", exit_status=code, signal=sig, finished_at=now(),
                            stdout_seen=out.size, stderr_seen=err.size, meta=meta)
        rec.meta = meta
        log.info("job.deadline_killed", host=rec.host, job_id=rec.job_id, exit_status=code, deadline_s=limit_s)
        return Killed(host=rec.host, command=rec.command, job_id=rec.job_id, signal=sig or "TERM", by="deadline",
                      reason=deadline_why(rec, limit_s, survivors, unchecked), survivors=survivors or [],
                      unchecked=unchecked,
                      duration_s=round(elapsed, 3), exit_status=code, stdout=out.view(budget=self.view_bytes),
                      stderr=err.view(budget=self.view_bytes))

    def _detached(self, rec: JobRecord, elapsed: float, st: HostJobState | None, *, why: str,
                  next_hint: str | None = None, at_once: bool = False) -> Detached | NeedsInput:
        """``at_once``: it detached without waiting for its budget (no ``budget_s`` then). A job with a pipe whose
        newest output ends in a password prompt is ``needs_input`` with ``secret`` instead."""
        ov = ev = OutputView()
        if st is not None:
            if "stdout" in st.views:
                ov = st.views["stdout"].view(budget=self.view_bytes)
            if "stderr" in st.views:
                ev = st.views["stderr"].view(budget=self.view_bytes)
            self.journal.update(rec.job_id, stdout_seen=st.stdout_bytes, stderr_seen=st.stderr_bytes)
        hint = next_hint or guide(facts_of(rec, state="running")).next_text()
        prompt = find_secret_prompt(ev.text, ov.text) if rec.meta.get("stdin") and st is not None else None
        if prompt is not None:  # running, waiting on a password typed into its pipe
            self._note_prompt(rec, prompt, st)
            return NeedsInput(host=rec.host, command=rec.command, prompt=prompt, secret=True,
                              duration_s=round(elapsed, 3), stdout=ov, stderr=ev, job_id=rec.job_id,
                              next=_secret_next(rec.job_id))
        log.debug("job.detached", host=rec.host, job_id=rec.job_id, elapsed_s=round(elapsed, 3))
        return Detached(host=rec.host, command=rec.command, job_id=rec.job_id, elapsed_s=round(elapsed, 3),
                        budget_s=None if at_once else rec.budget_s or 0.0, deadline_s=rec.deadline_s,
                        why=why + _kill_words(rec),
                        hard_deadline_s=_hard_deadline(rec), readiness=rec.readiness if rec.probes else "none",
                        stdout=ov, stderr=ev, next=hint)

    def _note_prompt(self, rec: JobRecord, prompt: str | None, st: HostJobState | None) -> None:
        """Remember (or forget) the secret prompt a running job's newest output ends in, with the output sizes it was
        seen at: a later look with no new output still knows the job waits on it."""
        if prompt is None and "prompt" not in rec.meta:
            return
        meta = {k: v for k, v in rec.meta.items() if k != "prompt"}
        if prompt is not None and st is not None:
            meta["prompt"] = {"text": prompt, "at": [st.stdout_bytes, st.stderr_bytes]}
        rec.meta = meta
        self.journal.update(rec.job_id, meta=meta)

    async def _kill_after_budget(self, host: Host, rec: JobRecord, t0: float, grace_s: float,
                                 started: bool) -> Killed | Detached | NeedsInput:
        reason = f"still running when its {rec.budget_s or 0:g} s budget ran out (on_timeout=kill)"
        res: JobCancelResult | None = None
        with anyio.move_on_after(grace_s + 1.0):
            res = await self.cancel(host, rec.job_id, grace_s=grace_s, reason=reason, by="budget")
        if res is None:
            return self._detached(rec, anyio.current_time() - t0, None,
                                  why=reason + "; the kill did not complete in time: the job may still run",
                                  next_hint=f"job_cancel(job_id='{rec.job_id}')")
        head, tail = view_request(self.view_bytes)  # the view's bytes and context past its cuts
        st: HostJobState | None = None
        with anyio.move_on_after(0.5):
            try:
                st = (await self._status(host, [(rec.job_id, 0, 0, head, tail)])).get(rec.job_id)
            except (HostError, WireError):
                st = None
        ov = st.views["stdout"].view(budget=self.view_bytes) if st and "stdout" in st.views else OutputView()
        ev = st.views["stderr"].view(budget=self.view_bytes) if st and "stderr" in st.views else OutputView()
        return Killed(host=rec.host, command=rec.command, job_id=rec.job_id,
                      signal="KILL" if res.escalated else "TERM", by="budget", reason=reason,
                      survivors=res.survivors, unchecked=res.unchecked,
                      duration_s=round(anyio.current_time() - t0, 3),
                      exit_status=st.exit_code if st else None, stdout=ov, stderr=ev)

    async def _release_unstarted(self, host: Host, prior: JobRecord) -> JobRecord | None:
        """A keyed job that did not start (``not_started``), or whose start is ``unconfirmed``: free its key
        (returns None: the caller starts the job now) when it provably never started; an unconfirmed one is
        first settled on the host (:meth:`apply_state`): if it started after all, or may still be starting, it
        holds the key (returned).

        :raises HostError: the host cannot be asked about an unconfirmed start (the caller could not start the
            job either).
        """
        if prior.state == "unconfirmed":
            with _answer_within(host, self.answer_timeout_s, "the check of an unconfirmed start"):
                st = (await self._status(host, [(prior.job_id, 0, 0, 0, 0)]))[prior.job_id]
            state, *_ = self.apply_state(prior, st)
            if state != "not_started":
                return prior
        self.journal.update(prior.job_id, idempotency_key=None,
                            meta={**prior.meta, "released_idempotency_key": prior.idempotency_key})
        log.info("job.idempotency_key_released", host=host.name, job_id=prior.job_id)
        return None

    async def _outcome_of_existing(self, host: Host, rec: JobRecord,
                                   budget_s: float) -> Finished | NeedsInput | Detached | Killed | ErrorOutcome:
        try:
            status = await self.job_status(host, rec.job_id, wait_s=0)
        except AgentToolsError as exc:
            return _error(exc, host.name, rec.command)
        why = "a job with this idempotency key was already started; no second job was launched"
        if status.state == "exited" and status.exit_status is not None:
            head, tail = view_request(self.view_bytes)  # the view's bytes and context past its cuts
            try:
                with _answer_within(host, self.answer_timeout_s, "the output of the existing job"):
                    st = (await self._status(host, [(rec.job_id, 0, 0, head, tail)])).get(rec.job_id)
            except HostError as exc:
                return _error(exc, host.name, rec.command)
            return self._finished(rec, status.exit_status, st.views if st else {}, status.elapsed_s)
        return Detached(host=rec.host, command=rec.command, job_id=rec.job_id, elapsed_s=status.elapsed_s,
                        budget_s=budget_s, deadline_s=rec.deadline_s, why=why + f" (state: {status.state})",
                        stdout=status.new_stdout, stderr=status.new_stderr, next=status.next)

    # ------------------------------------------------------------------ status
    async def _status(self, host: Host, specs: list[tuple[str, int, int, int, int]]) -> dict[str, HostJobState]:
        """One round trip: the host-side state of several jobs (see :func:`status_script`).

        :raises HostError: the host cannot be reached; :class:`ConnectionLost` when the report was cut short.
        """
        warm = await self._take_warm(host, _WARM_WAIT_S)
        incomplete = 0
        while True:
            t_open = anyio.current_time()
            proc, warmed = await self._open(host, warm, lambda: status_script(self.jobs_dir, specs),
                                            lambda: status_request(self.jobs_dir, specs))
            reader = WireReader(proc.read_stdout)
            try:
                await proc.close_stdin()
                states = await parse_status(reader)
                missing = [j for j, *_ in specs if j not in states]
                if missing and incomplete == 0:
                    # the report ended without a line for some jobs (the host's shell could not run awk?): ask
                    # once more on a new session; never guess a state
                    log.warning("job.status_incomplete", host=host.name, missing=missing[:3], got=len(states),
                                warm=warmed)
                    incomplete, warm = 1, None
                    continue
                if missing:
                    raise HostError(host.name, f"{host.name}: the job status report has no line for {missing[0]} "
                                               "(the host could not start awk: out of processes or memory?)")
                return states
            except (HostError, WireError) as exc:
                if _dead_on_arrival(warmed, reader.got_data, t_open):
                    # the warm session was dead (a dropped connection not noticed yet, a killed shell): a status
                    # report only reads, so ask again on a new session
                    log.info("job.warm_session_lost", host=host.name, error=str(exc))
                    warm = None
                    continue
                if isinstance(exc, HostError):
                    raise
                raise ConnectionLost(host.name, f"{host.name}: the job status report was cut short ({exc}); "
                                                "the connection dropped?") from exc
            finally:
                with anyio.CancelScope(shield=True):
                    await proc.close()

    async def host_states(self, host: Host, job_ids: list[str]) -> dict[str, HostJobState]:
        """Host-side state of many jobs on one host in one round trip (no output views, no output sizes).

        :raises HostError: the host cannot be reached.
        """
        if not job_ids:
            return {}
        return await self._status(host, [(j, 0, 0, 0, 0) for j in job_ids])

    async def look(self, host: Host, job_id: str) -> JobRecord:
        """One look at job ``job_id`` on ``host`` without reading its output: its host-side state (unless settled
        in the journal) and, when it has probes whose verdict can still change (``pending``, or ``ready`` with
        units to check again), its readiness (:meth:`_evaluate_probes`). Both are recorded in the journal, as
        ``job_status`` would; the output the agent has not seen stays unseen. Used to tell a client that a job it
        started ended or changed readiness.

        :returns: the job's journal record after the look.
        :raises JobNotFound: unknown job id.
        :raises HostError: the host cannot be reached, or did not answer within ``answer_timeout_s``.
        """
        check_job_id(job_id)
        rec = self.journal.get(job_id)
        if rec.state in _SETTLED or rec.state == "lost":
            state, code, why = rec.state, rec.exit_status, rec.state
        else:
            with _answer_within(host, self.answer_timeout_s, "the look at the job"):
                st = (await self._status(host, [(job_id, 0, 0, 0, 0)]))[job_id]
            state, code, _sig, why = self.apply_state(rec, st)
        if rec.probes and rec.readiness in ("pending", "ready") and state != "not_started":
            with anyio.move_on_after(self.answer_timeout_s * 2):  # a slow probe: judged at the next look
                async with self._judge_lock(job_id, wait=False) as free:
                    if free:  # else a job_status is checking it right now, and records what it finds
                        await self._evaluate_probes(host, self.journal.get(job_id), state, code, why)
        return self.journal.get(job_id)

    @contextlib.asynccontextmanager
    async def _judge_lock(self, job_id: str, *, wait: bool) -> AsyncIterator[bool]:
        """Hold job ``job_id``'s probe-check lock (see ``_judging``); yields False, without waiting, when ``wait``
        is off and another check holds it."""
        lock = self._judging.setdefault(job_id, anyio.Lock())
        if not wait and lock.locked():
            yield False
            return
        try:
            async with lock:
                yield True
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._judging.pop(job_id, None)

    async def newest_output(self, host: Host, job_id: str, *, max_bytes: int = 400) -> str:
        """The last lines job ``job_id`` wrote that the agent has not been shown yet (the tail of its new stdout,
        else stderr; at most ``max_bytes`` bytes, cleaned and redacted as every view), "" when there are none. They
        stay unseen: the agent's next ``job_status`` still shows them. For progress messages while a call waits.

        :raises HostError: the host cannot be reached, or did not answer within ``answer_timeout_s``.
        """
        rec = self.journal.get(job_id)
        with _answer_within(host, self.answer_timeout_s, "the job's newest output"):
            st = (await self._status(host, [(job_id, rec.stdout_seen, rec.stderr_seen, 0,
                                             max_bytes + VIEW_CONTEXT_BYTES)]))[job_id]
        for stream in ("stdout", "stderr"):
            raw = st.views.get(stream)
            data = (raw.tail or raw.head) if raw is not None else b""  # all of the new bytes fit: in the head
            if not data.strip():
                continue
            cut = max(0, len(data) - max_bytes)
            lines = [ln for ln in clean_window(data, cut, len(data)).splitlines() if ln.strip()]
            if lines:
                return "\n".join(lines[-3:])
        return ""

    async def refresh_host(self, host: Host, *, max_skip: int = 3000, exclude: Collection[str] = ()) -> list[str]:
        """Rediscover and refresh every job on ``host`` in one round trip: list the host's job directories
        (command's first bytes, created time, state), add jobs the journal does not know (with
        :meth:`Journal.ensure`, marked ``meta.rediscovered``), and record the host-side state of every job
        not yet final. Jobs already ``exited``/``killed``/``not_started`` in the journal are skipped on the host.
        Bounded by ``answer_timeout_s`` when the host stops answering.

        :param max_skip: at most this many final job ids are sent to be skipped (the command line must stay
            below 128 KiB); older final jobs are listed again and ignored.
        :param exclude: job ids whose state is not to be concluded from this host (they were started on another
            machine than the one the alias reaches now: see :func:`agent_tools.hosts.reach.check_same_machine`).

        A rediscovered command is the raw text of the host's ``command`` file without the line the launcher wrote
        for the call's ``env`` (its variable names are kept in ``meta.env``): it is redacted before it is kept
        (:func:`agent_tools.redact.redact`), like every command the journal stores.
        :returns: the ids of the jobs that were added to the journal.
        :raises HostError: the host cannot be reached, or did not answer within ``answer_timeout_s``.
        """
        known = self.journal.states(host.name)
        # settled jobs whose command left processes running are asked about again (what still runs of them)
        left = self.journal.with_leftovers(host.name)
        final = [j for j, s in known.items() if s in _SETTLED and j not in left][:max_skip]
        with _answer_within(host, self.answer_timeout_s, "the job listing"):
            proc = await host.start(discover_script(self.jobs_dir, final))
            try:
                await proc.close_stdin()
                found, states = await parse_discovery(WireReader(proc.read_stdout))
            except WireError as exc:
                raise ConnectionLost(host.name, f"{host.name}: the job listing was cut short ({exc})") from exc
            finally:
                with anyio.CancelScope(shield=True):
                    await proc.close()
        added: list[str] = []
        for f in found:
            command, env_names = split_env_line(f.command)
            meta = {"rediscovered": True, **_reached(host), **({"env": env_names} if env_names else {})}
            if f.job_id not in known and _JOB_ID_RE.match(f.job_id) and self.journal.ensure(
                    JobRecord(job_id=f.job_id, host=host.name, command=redact(command), base=self.jobs_dir,
                              created_at=f.created_at, meta=meta)):
                added.append(f.job_id)
        if added:
            log.info("jobs.rediscovered", host=host.name, count=len(added))
        listed = {f.job_id for f in found}
        skipped = set(final)
        for job_id, state in known.items():
            if (state in _SETTLED and job_id not in left) or job_id in skipped or job_id in exclude:
                continue
            st = states.get(job_id) or HostJobState(job_id, present=job_id in listed)
            self.apply_state(self.journal.get(job_id), st)
        for job_id in added:
            if job_id in states:
                self.apply_state(self.journal.get(job_id), states[job_id])
        return added

    def apply_state(self, rec: JobRecord, st: HostJobState) -> tuple[str, int | None, str | None, str]:
        """Derive (state, exit_status, signal, why) from host facts, and record terminal states.

        "pid gone and no exit status" is ``killed`` (when a cancel was recorded) or ``lost`` — never success.
        A ``not_started`` job stays so; an ``unconfirmed`` start becomes what the host shows, or ``not_started``
        when the host has no job directory for it once its launch window (budget + 5 s) is over.
        """
        state: str
        code: int | None = None
        sig: str | None = None
        by = ""  # who killed a killed job, when agent-tools did: deadline | cancel
        if rec.state == "not_started":  # provably never reached the host (see run): nothing to ask it
            return "not_started", None, None, _not_started_why(rec)
        if (not st.present and rec.state in ("running", "unconfirmed")
                and now() - rec.created_at < _launch_window_s(rec)):
            # journalled just before the launch went out (another task or process asking this early), or a
            # start the host has not confirmed whose request may still be on its way
            state, why = "running", "starting: the launch is in progress (no job directory on the host yet)"
            if rec.state == "unconfirmed":
                left = _launch_window_s(rec) - (now() - rec.created_at)
                state, why = "unconfirmed", (
                    "the start is unconfirmed: the host has not received the command (its job directory holds no "
                    f"command); nothing ran so far. Within {left:.0f} s it either arrives (running) or is known never "
                    "to (not_started)")
        elif not st.present and rec.state == "unconfirmed":
            # the launch window is over: a request that had reached the host would have made the job directory,
            # and nothing sent into the abandoned connection can arrive any more (SshHost: SO_LINGER 0)
            state, why = "not_started", ("the start was never confirmed and the host never received the command: "
                                         "it never started (nothing ran)")
        elif not st.present:
            state, why = "lost", "the job directory is missing on the host (deleted, or never started)"
        elif st.exit_code is not None:
            code = st.exit_code
            sig = _signal_name(code) if st.ended != "exit" else None
            by_deadline = st.deadline_s is not None and st.deadline_was is None
            if st.cancelled and sig and by_deadline:
                state, why, by = "killed", deadline_why(rec, st.deadline_s, st.deadline_survivors,
                                                        _deadline_unchecked(st, rec.host),
                                                        interrupted=st.deadline_interrupted), "deadline"
            elif st.cancelled and sig and st.deadline_s is None:
                state, why, by = "killed", f"cancelled: {st.cancel_reason or rec.cancel_reason or 'on request'}", \
                    "cancel"
            elif sig and st.boot_id and st.current_boot and st.boot_id != st.current_boot:
                # systemd stops a job's scope at shutdown: the monitor saw the signal and wrote the exit status
                state, why = "killed", (f"killed by signal {sig} when the host shut down: the host rebooted (boot id "
                                        f"{st.boot_id[:8]}… → {st.current_boot[:8]}…); it did not exit by itself")
            elif st.ended == "signal" and sig:
                state, why = "killed", (f"killed by signal {sig} from outside agent-tools (kill, the OOM killer, a "
                                        "shutdown" + (", or logind at the end of the login that started it: "
                                                      + st.logout if st.logout else "") + "): it did not exit by "
                                        "itself")
            elif st.ended == "exit" and code > 128:
                state, why = "exited", f"exited with status {code} (it exited by itself: no signal killed it)"
            else:
                state, why = "exited", f"exited with status {code}" + (
                    f" (signal {sig} by the shell's 128+N convention; whether a signal killed it or it exited with "
                    "that status, this host's shell does not tell)" if sig else "")
            if st.deadline_was is not None and st.deadline_s is not None:
                # the command had ended by itself; what it left running was killed at its deadline
                why = deadline_why(rec, st.deadline_s, st.deadline_survivors,
                                   _deadline_unchecked(st, rec.host), was=st.deadline_was,
                                   interrupted=st.deadline_interrupted)
        elif st.boot_id and st.current_boot and st.boot_id != st.current_boot:
            state, why = "lost", (f"the host rebooted (boot id {st.boot_id[:8]}… → {st.current_boot[:8]}…) and "
                                  "no exit status was written: the job died with it")
        elif st.alive or st.monitor_alive:
            state, why = "running", "running"
            if st.deadline_s is not None and st.deadline_interrupted:
                why = (f"still running past its {st.deadline_s:g} s deadline: the kill was interrupted before it was "
                       "checked (its watcher on the host is gone): job_cancel stops it")
            elif st.deadline_s is not None and st.deadline_survivors and st.alive:
                why = (f"still running past its {st.deadline_s:g} s deadline: the kill left SURVIVORS "
                       f"{st.deadline_survivors}: job_cancel tries again")
            elif st.deadline_s is not None and st.deadline_survivors is not None:
                why = f"killed at its {st.deadline_s:g} s deadline; its end is being recorded on the host"
            elif st.deadline_s is not None:
                why = f"being killed on the host: it ran past its {st.deadline_s:g} s deadline"
        elif st.pid is None and now() - rec.created_at < 10:
            state, why = "running", "starting"
        elif st.cancelled:
            reason = st.cancel_reason or rec.cancel_reason or "on request"
            state, why, by = "killed", f"cancelled ({reason}); no exit status", "cancel"
        elif st.logout:
            state, why = "lost", ("the job's processes are gone and no exit status was written; most likely logind "
                                  "killed them when the SSH connection that started it closed: "
                                  f"{st.logout} (never counted as success)")
        else:
            state, why = "lost", ("the job's processes are gone and no exit status was written: it was killed "
                                  "from outside or the host lost it (never counted as success)")
        meta = rec.meta
        if st.present and st.exit_code is not None:
            meta = _with_leftovers(meta, [(p, redact(c)) for p, c in st.leftovers], st.leftovers_pending)
        if state == "killed" and by and meta.get("killed_by") != by:
            meta = {**meta, "killed_by": by}
        if meta != rec.meta:
            rec.meta = meta
            self.journal.update(rec.job_id, meta=meta)
        if state != "running" and rec.state != state:
            finished = _finished_at(rec, st)
            self.journal.update(rec.job_id, state=state, exit_status=code, signal=sig, finished_at=finished)
            rec.state, rec.exit_status, rec.signal, rec.finished_at = state, code, sig, finished
        elif state == "running" and rec.state in ("lost", "unconfirmed") and st.present:
            # recorded lost too early (e.g. the launch's connection failed after the exec went out): the host's
            # job directory is the source of truth
            self.journal.update(rec.job_id, state="running", exit_status=None, signal=None, finished_at=None)
            rec.state = "running"
        return state, code, sig, why

    async def job_status(self, host: Host, job_id: str, *, wait_s: float = 0.0) -> JobStatus:
        """State of job ``job_id`` and the output it wrote since the previous status call.

        Long-polls: returns as soon as the job's state or readiness changes, once it is settled (see below),
        or after ``wait_s`` seconds (float, >= 0). Settled means: without probes, no longer running; with
        probes, readiness is no longer ``pending``. A ``ready`` job's units are checked again on every call
        (:mod:`agent_tools.probes.readiness`): readiness turns ``failed`` when the unit died since.
        ``why``, ``next`` and the summary come from :func:`agent_tools.jobs.hints.guide`. Returns within
        ``wait_s`` + ``answer_timeout_s`` when the host stops answering; a probe check still under way then is left for
        the next call (readiness unchanged). A look that fails for the link (the connection dropped or stopped
        answering) is made again, on a new connection, while ``wait_s`` lasts: a short blip does not end the
        long-poll. A ``not_started`` job is answered from the journal.

        :raises JobNotFound: unknown job id.
        :raises HostError: the host cannot be reached, or did not answer in time (``unreachable``,
            ``connection_lost``, ``busy``).
        """
        check_job_id(job_id)
        if wait_s < 0:
            raise BadArguments("wait_s must be >= 0 seconds")
        rec = self.journal.get(job_id)
        if rec.state == "not_started":
            g = guide(facts_of(rec, detail=_not_started_why(rec)))
            return JobStatus(job_id=job_id, host=rec.host, command=rec.command, state="not_started",
                             elapsed_s=elapsed_of(rec), deadline_s=rec.deadline_s, why=g.why, next=g.next_text())
        head, tail = view_request(self.view_bytes)  # the view's bytes and context past its cuts
        t_end = anyio.current_time() + wait_s
        t_hard = t_end + self.answer_timeout_s
        first: tuple[str, str] | None = None
        delay = 0.2
        reports: list[ProbeReport] = []
        ready_why = ""
        while True:
            try:
                with _answer_within(host, t_hard - anyio.current_time(), "job_status", wait_s + self.answer_timeout_s):
                    st = (await self._status(host, [(job_id, 0, 0, 0, 0)]))[job_id]
            except (ConnectionLost, HostUnreachable) as exc:
                # the link dropped or went silent: within the long-poll's time, look again (on a new connection)
                # instead of ending the call on a blip; past it, the error stands
                if anyio.current_time() + _RELOOK_S >= t_end:
                    raise
                log.info("job.status_relook", host=host.name, job_id=job_id, error=exc.message)
                await anyio.sleep(_RELOOK_S)
                continue
            state, code, sig, why = self.apply_state(rec, st)
            if rec.probes:
                # probes get the time left, less a moment for the output fetch below
                with anyio.move_on_after(t_hard - anyio.current_time() - self.answer_timeout_s / 2) as probing:
                    async with self._judge_lock(job_id, wait=True):
                        rec = self.journal.get(job_id)  # as a check that ran meanwhile left it
                        reports, ready_why = await self._evaluate_probes(host, rec, state, code, why)
                if probing.cancelled_caught:  # (the journal: a check that ran meanwhile may have recorded some)
                    rec = self.journal.get(job_id)
                    reports = [ProbeReport(**r) for r in rec.meta.get("last_probes", [])]
                    ready_why = ("the probe check did not finish within this call's time; the next job_status "
                                 "checks again")
            if first is None:
                first = (state, rec.readiness)
            remaining = t_end - anyio.current_time()
            settled = rec.readiness != "pending" if rec.probes else (state not in ("running", "unconfirmed")
                                                                     and not st.leftovers_pending)
            if (state, rec.readiness) != first or settled or remaining <= 0:
                break
            await anyio.sleep(min(delay, remaining))
            delay = min(delay * 1.6, 2.0)
        if state == "not_started":
            g = guide(facts_of(rec, state=state, detail=why))
            return JobStatus(job_id=job_id, host=rec.host, command=rec.command, state="not_started",
                             elapsed_s=elapsed_of(rec), deadline_s=rec.deadline_s, why=g.why, next=g.next_text())
        # fetch the new output since what the agent has seen
        rec = self.journal.get(job_id)
        with _answer_within(host, t_hard - anyio.current_time(), "job_status", wait_s + self.answer_timeout_s):
            view_states = await self._status(host, [(job_id, rec.stdout_seen, rec.stderr_seen, head, tail)])
        vst = view_states[job_id]
        new_out = (vst.views["stdout"].view(rec.stdout_seen, budget=self.view_bytes) if "stdout" in vst.views
                   else OutputView())
        new_err = (vst.views["stderr"].view(rec.stderr_seen, budget=self.view_bytes) if "stderr" in vst.views
                   else OutputView())
        # the views were cut at the sizes measured when they were read (RawView.size), which can be later than
        # the job line's sizes: count as seen exactly what was shown
        out_seen = vst.views["stdout"].size if "stdout" in vst.views else vst.stdout_bytes
        err_seen = vst.views["stderr"].size if "stderr" in vst.views else vst.stderr_bytes
        self.journal.update(job_id, stdout_seen=max(rec.stdout_seen, out_seen),
                            stderr_seen=max(rec.stderr_seen, err_seen))
        # every byte in a result already (no view ever had to cut: the streams fit one view): no job_output hint
        cut = new_out.truncated or new_err.truncated or max(vst.stdout_bytes, vst.stderr_bytes) > self.view_bytes
        need = (interactive_need(rec.command, new_err.text, new_out.text,
                                 stdin=str(rec.meta.get("stdin") or "none"))
                if state == "exited" and code not in (None, 0) else None)
        if state == "exited":
            self._note_exit(rec, new_out.text, new_err.text)
        left = [Leftover(pid=p, command=redact(c)) for p, c in st.leftovers] if state != "running" else []
        unchecked = ""
        if state in ("exited", "killed"):
            if st.deadline_s is not None and st.deadline_how:
                unchecked = _deadline_unchecked(st, rec.host)
            elif st.how:
                unchecked = _unchecked(st.how, st.tag)
        g = guide(facts_of(rec, state=state, detail=why, readiness_detail=ready_why, output_cut=cut,
                           needs=need.next if need is not None else "",
                           leftovers=-1 if st.leftovers_pending and state != "running" else len(left)))
        # the kill deadline matters while the command runs, once it killed it, and while its leftovers run
        kill_s = (_hard_deadline(rec) if state == "running" or killed_by(rec, state) == "deadline" or left
                  else None)
        prompt: str | None = None
        if rec.meta.get("stdin") and state == "running":
            if new_out.total_bytes or new_err.total_bytes:
                prompt = find_secret_prompt(new_err.text, new_out.text)
                self._note_prompt(rec, prompt, vst)
            elif isinstance(rec.meta.get("prompt"), dict):
                prompt = str(rec.meta["prompt"].get("text") or "") or None
        elif "prompt" in rec.meta:
            self._note_prompt(rec, None, None)
        return JobStatus(job_id=job_id, host=rec.host, command=rec.command, state=state,
                         exit_status=code, signal=sig, readiness=rec.readiness, by=killed_by(rec, state),
                         elapsed_s=elapsed_of(rec), deadline_s=rec.deadline_s, hard_deadline_s=kill_s,
                         why=g.why, probes=reports, new_stdout=new_out, new_stderr=new_err, leftovers=left,
                         unchecked=unchecked, prompt=prompt, secret=prompt is not None,
                         next=_secret_next(job_id) if prompt is not None else g.next_text())

    async def _evaluate_probes(self, host: Host, rec: JobRecord, state: str, code: int | None,
                               why: str) -> tuple[list[ProbeReport], str]:
        """Look at a job's readiness once (:func:`agent_tools.probes.readiness.judge`: pending jobs are judged,
        ready ones have their units checked again) and record it in the journal.

        :returns: the probe reports and the readiness evidence (for ``why``).
        """
        last = [ProbeReport(**r) for r in rec.meta.get("last_probes", [])]
        if rec.readiness not in ("pending", "ready"):
            return last, str(rec.meta.get("readiness_why", ""))
        newer = self._newer_restart(rec)
        if newer is not None:
            unit = _restarted_unit(rec)
            was = "it had been ready; " if rec.readiness == "ready" else ""
            detail = (f"superseded: {was}a newer restart of {unit} (job {newer.job_id}) took over; the unit's state is "
                      "that job's to judge")
            meta = dict(rec.meta, readiness_why=detail, superseded_by=newer.job_id, settled_at=now())
            self.journal.update(rec.job_id, readiness="superseded", meta=meta)
            log.info("job.readiness", host=rec.host, job_id=rec.job_id, readiness="superseded", was=rec.readiness,
                     by=newer.job_id)
            rec.readiness, rec.meta = "superseded", meta
            return last, detail
        verdict = await judge(host, rec.probes, readiness=rec.readiness, state=state, exit_status=code,
                              state_detail=why, elapsed_s=now() - rec.created_at, deadline_s=rec.deadline_s,
                              last=last)
        meta = dict(rec.meta, last_probes=[p.model_dump() for p in verdict.reports], readiness_why=verdict.detail)
        if verdict.readiness != "pending" and rec.readiness == "pending":
            # a verdict that follows from the command's end holds since that end, one of the deadline since the
            # deadline: not since this look
            meta["settled_at"] = (rec.finished_at if verdict.at_end and rec.finished_at is not None else
                                  rec.created_at + rec.deadline_s if verdict.at_deadline and rec.deadline_s else
                                  now())
        self.journal.update(rec.job_id, probes=verdict.specs, readiness=verdict.readiness, meta=meta)
        if verdict.readiness != rec.readiness:
            log.info("job.readiness", host=rec.host, job_id=rec.job_id, readiness=verdict.readiness,
                     was=rec.readiness)
        rec.probes, rec.readiness, rec.meta = verdict.specs, verdict.readiness, meta
        return verdict.reports, verdict.detail

    def _newer_restart(self, rec: JobRecord) -> JobRecord | None:
        """The newest restart of the same unit on the same host started after ``rec`` (a restart_service job:
        a ``systemctl restart`` command followed by a systemd_unit probe), or None; only for such a job itself."""
        unit = _restarted_unit(rec)
        if unit is None:
            return None
        for other in self.journal.list(rec.host, limit=50):  # newest first
            if other.created_at <= rec.created_at or other.job_id == rec.job_id:
                break
            if other.state != "not_started" and _restarted_unit(other) == unit:
                return other
        return None

    async def refresh_readiness(self, host: Host, *, limit: int = 20) -> int:
        """Look again at the readiness of the newest ``limit`` jobs on ``host`` whose readiness can still
        change (``pending``, or ``ready`` with units to check again), concurrently; best effort (a job whose
        look fails keeps its recorded readiness). Used by ``list_jobs(host=...)``.

        :returns: how many jobs changed readiness.
        """
        recs = [r for r in self.journal.list(host.name)
                if r.probes and (r.readiness == "pending" or (r.readiness == "ready" and any(
                    p.get("kind") == "systemd_unit" and not p.get("final") for p in r.probes)))][:limit]
        changed = 0

        async def one(rec: JobRecord) -> None:
            nonlocal changed
            was = rec.readiness
            try:
                await self._evaluate_probes(host, rec, rec.state, rec.exit_status,
                                            f"{rec.state}" + (f" with status {rec.exit_status}"
                                                              if rec.exit_status is not None else ""))
            except (HostError, WireError) as exc:
                log.warning("job.readiness_refresh_failed", job_id=rec.job_id, error=str(exc))
            changed += rec.readiness != was

        async with anyio.create_task_group() as tg:
            for rec in recs:
                tg.start_soon(one, rec)
        return changed

    # ------------------------------------------------------------------ output
    async def job_output(self, host: Host, job_id: str, *, stream: Literal["stdout", "stderr"] = "stdout",
                         offset: int = 0, limit: int = 16384, tail_lines: int | None = None,
                         grep: str | None = None) -> JobOutput:
        """A page of raw output: bytes ``[offset, offset + limit)`` of ``stream``, cleaned for reading.

        :param offset: byte offset into the stream (int >= 0).
        :param limit: bytes to return at most (int, 1..1048576).
        :param tail_lines: the page holds the last ``tail_lines`` lines of the stream instead of starting at
            ``offset`` (tail(1) ``-n``; one more round trip finds where they start) and ends at the stream's end:
            when those lines are longer than ``limit``, their start is left out (``cut_before`` says how many
            bytes; ``offset`` is where the page starts); with ``grep``, the last so many matching lines.
        :param grep: only the lines matching this extended regex, case-insensitive (grep(1) ``-a -i -E``), from
            ``offset`` on, each written ``OFFSET:line`` with the byte offset where it starts in the stream;
            ``matches`` counts the matching lines from ``offset`` on, and ``next_offset`` is where the search goes on
            (after the last line shown). See :meth:`_grep_output`.
        :raises JobNotFound, BadArguments, HostError: (``HostError`` also when the host did not answer within
            ``answer_timeout_s``)
        """
        check_job_id(job_id)
        if stream not in ("stdout", "stderr"):
            raise BadArguments("stream must be 'stdout' or 'stderr'")
        if offset < 0 or not 0 < limit <= 1 << 20:
            raise BadArguments("offset must be >= 0 and limit between 1 and 1048576 bytes")
        if tail_lines is not None and tail_lines < 1:
            raise BadArguments("tail_lines must be >= 1")
        rec = self.journal.get(job_id)
        if grep is not None:
            return await self._grep_output(host, rec, stream, offset, limit, grep, tail_lines)
        tail_start: int | None = None
        if tail_lines is not None:  # the page ends at the stream's end: longer lines lose their start, not their end
            tail_start, size = await self._tail_offset(host, rec, stream, tail_lines)
            offset = max(tail_start, size - limit)
        # bytes [offset - C, offset + limit + C): the page plus context on both sides, so that a secret the page's
        # edges cut is found and hidden (redaction only; the page itself is [offset, offset + limit))
        start = max(0, offset - VIEW_CONTEXT_BYTES)
        o, e = (start, 0) if stream == "stdout" else (0, start)
        st = (await self._status(host, [(job_id, o, e, offset - start + limit + VIEW_CONTEXT_BYTES, 0)]))[job_id]
        if not st.present:
            raise JobNotFound(job_id, f"job {job_id}: its directory is gone from {rec.host}")
        raw = st.views.get(stream, RawView(0, b"", b""))
        total = st.stdout_bytes if stream == "stdout" else st.stderr_bytes
        window = raw.head
        lead = offset - start
        if tail_start is not None and offset > tail_start:
            skip = 0  # a tail page cut at its start begins at a character, not inside one
            while skip < 3 and lead + skip < len(window) and window[lead + skip] & 0xC0 == 0x80:
                skip += 1
            offset, lead = offset + skip, lead + skip
        data = window[lead : lead + limit]
        cut = _split_utf8_tail(data) if offset + len(data) < total else 0
        if 0 < cut < len(data):
            data = data[:-cut]  # never split a UTF-8 character across two pages (the next page starts with it)
        nxt = offset + len(data)
        return JobOutput(job_id=job_id, stream=stream, offset=offset, next_offset=nxt, total_bytes=total,
                         text=clean_window(window, lead, lead + len(data)), eof=nxt >= total,
                         cut_before=None if tail_start is None else max(0, offset - tail_start))

    def _stream_file(self, job_id: str, stream: str) -> str:
        """The shell word of a job's output file on the host (the jobs dir expanded there, inside double quotes)."""
        return f'"{self.jobs_dir}/{job_id}/{stream}"'

    async def _tail_offset(self, host: Host, rec: JobRecord, stream: str, lines: int) -> tuple[int, int]:
        """``(the byte offset of the lines-th line from the end, the size)`` of a job's stream (tail(1) ``-n``), one
        round trip.

        :raises JobNotFound: its directory is gone from the host.
        """
        f = self._stream_file(rec.job_id, stream)
        script = (f'[ -d "$(dirname {f})" ] || {{ echo missing; exit 0; }}; [ -f {f} ] || {{ echo 0 0; exit 0; }}; '
                  f"echo $(wc -c < {f}) $(tail -n {int(lines)} {f} | wc -c)")
        with _answer_within(host, self.answer_timeout_s, "job_output"):
            res = await run_on(host, script)
        words = res.stdout.decode("ascii", "replace").split()
        if words[:1] == ["missing"]:
            raise JobNotFound(rec.job_id, f"job {rec.job_id}: its directory is gone from {rec.host}")
        if len(words) != 2 or not all(w.isdigit() for w in words):
            raise ConnectionLost(host.name, f"{host.name}: no answer about the size of job {rec.job_id}'s {stream}")
        return max(0, int(words[0]) - int(words[1])), int(words[0])

    async def _grep_output(self, host: Host, rec: JobRecord, stream: Literal["stdout", "stderr"], offset: int,
                           limit: int, pattern: str, tail_lines: int | None) -> JobOutput:
        """The lines of a job's stream from ``offset`` on that match ``pattern`` (grep(1) ``-a -b -i -E``: the
        pattern is an ERE, case-insensitive; ``-b`` gives each line's byte offset, made absolute here), at most
        ``limit`` bytes of them (whole lines; ``tail_lines``: the last so many), each line cleaned for reading
        (:func:`agent_tools.output.clean_window`: escapes shown, secrets hidden) and cut to 1,000 characters: one
        round trip finds them with their count, a second reads :data:`~agent_tools.output.VIEW_CONTEXT_BYTES` of
        the stream on both sides of each, so a secret a line is only part of (a private key's body line, a
        ``password`` line of a multi-line ``.netrc`` entry) is found and hidden as in a page of the stream.

        :raises BadArguments: grep says the pattern is not a valid regex. :raises JobNotFound: no job directory.
        """
        if "\n" in pattern or not pattern:
            raise BadArguments("grep must be one line of regex (grep -iE), not empty")
        f = self._stream_file(rec.job_id, stream)
        other: Literal["stdout", "stderr"] = "stderr" if stream == "stdout" else "stdout"
        g = self._stream_file(rec.job_id, other)
        q = shlex.quote(pattern)
        select = f"| tail -n {int(tail_lines)} " if tail_lines is not None else ""
        # (no match: how many lines of the other stream match, so the answer can say where they are)
        script = (f'[ -d "$(dirname {f})" ] || {{ echo missing; exit 0; }}; s=0; [ -f {f} ] && s=$(wc -c < {f}); '
                  f"n=$(tail -c +{offset + 1} {f} 2>/dev/null | grep -a -c -i -E -e {q}); rc=$?; "
                  f'[ "$rc" -gt 1 ] && {{ echo bad; tail -c +{offset + 1} {f} | grep -a -i -E -e {q} 2>&1 >/dev/null '
                  f"| head -c 300; exit 0; }}; o=0; [ \"${{n:-0}}\" = 0 ] && o=$(grep -a -c -i -E -e {q} {g} "
                  f"2>/dev/null); echo $s ${{n:-0}} ${{o:-0}}; tail -c +{offset + 1} {f} 2>/dev/null | "
                  f"grep -a -b -i -E -e {q} {select}| head -c {limit + 4096}")
        with _answer_within(host, self.answer_timeout_s, "job_output"):
            res = await run_on(host, script)
        head, _, body = res.stdout.partition(b"\n")
        words = head.decode("ascii", "replace").split()
        if words[:1] == ["missing"]:
            raise JobNotFound(rec.job_id, f"job {rec.job_id}: its directory is gone from {rec.host}")
        if words[:1] == ["bad"]:
            raise BadArguments(f"grep {pattern!r}: {body.decode('utf-8', 'replace').strip()[:300]} (an extended "
                               "regex, as grep -iE reads it)")
        if len(words) != 3 or not all(w.isdigit() for w in words):
            raise ConnectionLost(host.name, f"{host.name}: no answer about job {rec.job_id}'s {stream}")
        total, count, elsewhere = int(words[0]), int(words[1]), int(words[2])
        found: list[tuple[int, bytes]] = []
        used = 0
        for raw in body.split(b"\n"):
            at, sep, line = raw.partition(b":")
            if not sep or not at.isdigit():
                continue  # the last, partial line (head -c) or an empty one
            if used + len(raw) + 1 > limit and found:
                break
            found.append((offset + int(at), line))
            used += len(raw) + 1
        windows = _context_windows([(start, start + len(line)) for start, line in found], total)
        found = found[: sum(n for _, _, n in windows)]  # lines past the context budget wait for the next page
        around = await self._read_windows(host, rec, stream, [(a, b) for a, b, _ in windows])
        # each window cleaned once for all of its lines (thousands of matches must not mean thousands of windows)
        cleaned: dict[int, str] = {}
        for a, data in around:
            mine = [(start, line) for start, line in found if a <= start and start + len(line) <= a + len(data)]
            texts = clean_lines(data, [(start - a, start - a + len(line)) for start, line in mine])
            cleaned.update((start, text) for (start, _), text in zip(mine, texts, strict=True))
        shown: list[str] = []
        nxt = offset
        for start, line in found:
            shown.append(f"{start}:{cleaned[start][:1000]}")
            nxt = start + len(line) + 1
        # every line asked for was shown (all matches, or the last tail_lines of them): the search is at the end
        complete = len(shown) == (min(count, tail_lines) if tail_lines is not None else count)
        hint = ""
        if not count and elsewhere:
            hint = render([NextCall("job_output", {"job_id": rec.job_id, "stream": other, "grep": pattern},
                                    f"shows them: {elsewhere} matching line(s) are on {other}, none on {stream}")])
        return JobOutput(job_id=rec.job_id, stream=stream, offset=offset,
                         next_offset=max(total, offset) if complete else nxt, total_bytes=total,
                         text="".join(s + "\n" for s in shown), grep=pattern, matches=count, eof=complete,
                         next=hint)

    # ------------------------------------------------------------------ input
    async def job_input(self, host: Host, job_id: str, text: str, *, eof: bool = False, newline: bool = True,
                        key: str | None = None, wait_s: float = 2.0, secret: bool = False) -> JobInput:
        """Write ``text`` to the stdin of job ``job_id`` (started with ``stdin="pipe"`` or ``tty``), then return
        its state and the output it wrote since the previous look (as :meth:`job_status`).

        The write is queued on the host in order and written by one writer per job (see
        :mod:`agent_tools.jobs.scripts`, "Input"); it needs no SSH session to stay open afterwards. Each write
        carries an idempotency ``key``, recorded in the job directory: a retry with the same key (this call's own
        retry after a dropped connection, or the caller's) is ``duplicate``, never written twice. After the write
        the host waits, up to ``wait_s`` seconds, until the job's output grew and then was quiet for 0.2 s.

        :param text: what to type; control characters are allowed (``\x03`` is Ctrl-C under ``tty``).
        :param eof: end the job's input after this write (a terminal gets Ctrl-D instead: it has no EOF of its
            own); later writes are refused.
        :param newline: append ``\n`` to a non-empty ``text`` (also when ``text`` is empty and not ``eof``:
            pressing Enter).
        :param key: the write's idempotency key (1-64 of ``A-Za-z0-9_-``; default: a new one per call).
        :param wait_s: seconds (float, 0..60) to wait for the job's answer.
        :param secret: ``text`` is a secret a person typed (a password): it is hidden (``[REDACTED]``) wherever it
            appears in this process's later results (:func:`agent_tools.redact.add_secret_values`); like every
            write, it is in no log or journal and is emptied from the host's queue once written.
        :raises BadArguments: bad ``job_id``/``key``/``wait_s``, or more than ``MAX_INPUT_BYTES`` to write.
        :raises InputRefused: the job has no pipe, has ended, or its input was ended.
        :raises JobNotFound, HostError: as :meth:`job_status`.
        """
        check_job_id(job_id)
        if secret:
            add_secret_values([text])
        if not 0 <= wait_s <= 60:
            raise BadArguments("wait_s must be between 0 and 60 seconds")
        key = key or "k_" + base64.b32encode(secrets.token_bytes(10)).decode().lower()  # a replay pairs these
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", key):
            raise BadArguments("idempotency_key must be 1-64 letters, digits, '_' or '-'")
        if not _valid_utf8(text):
            raise BadArguments("text holds characters that are not valid UTF-8 (a lone surrogate)")
        rec = self.journal.get(job_id)
        mode = str(rec.meta.get("stdin", "none"))
        if mode == "none" and not rec.meta.get("rediscovered"):
            raise InputRefused(job_id, f"job {job_id} was started without stdin='pipe': its stdin is /dev/null and "
                                       "no input can reach it; start the command again with stdin='pipe' (or tty)")
        if rec.state in _SETTLED or rec.state == "lost":
            raise InputRefused(job_id, f"job {job_id} is {rec.state}: nothing reads its input any more")
        data = text.encode() + (b"\n" if newline and (text or not eof) else b"")
        if eof and mode == "tty":
            data, eof = data + b"\x04", False
        if len(data) > MAX_INPUT_BYTES:
            raise BadArguments(f"the input is {len(data)} bytes; one write takes at most {MAX_INPUT_BYTES}: split "
                               "it, or write a file with write_file and have the job read that")
        word = ""
        with _answer_within(host, wait_s + self.answer_timeout_s, "job_input"):
            for attempt in (1, 2, 3):
                proc: HostProcess | None = None
                try:
                    proc = await host.start(input_script(self.jobs_dir, job_id, key, len(data), eof=eof,
                                                         wait_s=wait_s))
                    reader = WireReader(proc.read_stdout)
                    await proc.write_stdin(data)
                    await proc.close_stdin()
                    words: list[str] = []
                    while (h := await reader.header()) is not None and h[0] != "end":
                        if h[0] == "input":
                            words = h[1:]
                except (HostError, WireError) as exc:  # the data arrives whole or is not queued (see the script)
                    if isinstance(exc, HostError) and not isinstance(exc, ConnectionLost | ChannelOpenFailed):
                        raise  # unreachable, auth, host key: another try cannot do better
                    if attempt == 3:
                        raise ConnectionLost(host.name, f"{host.name}: the input to {job_id} was cut short ({exc}); "
                                                        "it was written at most once") from exc
                    log.info("job.input_retry", host=host.name, job_id=job_id, error=str(exc))
                    continue  # the same key: if the first try got through, the host says duplicate
                finally:
                    if proc is not None:
                        with anyio.CancelScope(shield=True):
                            await proc.close()
                word = words[0] if words else ""
                if word == "short" and attempt < 3:
                    continue
                break
        if word in ("nopipe", "ended", "closed", "missing", "short", ""):
            why = {"nopipe": "was started without stdin='pipe' (its stdin is /dev/null)",
                   "ended": "has ended: nothing reads its input any more",
                   "closed": "had its input ended (eof) by an earlier write",
                   "missing": "has no job directory on the host any more",
                   "short": "did not get the whole write (the connection kept dropping); nothing was written",
                   "": "gave no answer to the write"}[word]
            raise InputRefused(job_id, f"job {job_id} {why}; nothing was written")
        log.info("job.input", host=rec.host, job_id=job_id, bytes=len(data), result=word, eof=eof)
        status = await self.job_status(host, job_id, wait_s=0)
        return JobInput(**status.model_dump(), input=word, input_bytes=len(data))

    async def _read_windows(self, host: Host, rec: JobRecord, stream: str,
                            windows: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
        """Bytes ``[a, b)`` of a job's stream for each window, in one round trip (the stream only grows, so each
        comes back whole). :raises ConnectionLost: the answer is not what was asked for."""
        if not windows:
            return []
        f = self._stream_file(rec.job_id, stream)
        script = "; ".join(f"tail -c +{a + 1} {f} | head -c {b - a}" for a, b in windows)
        with _answer_within(host, self.answer_timeout_s, "job_output"):
            res = await run_on(host, script, max_output_bytes=sum(b - a for a, b in windows) + 1)
        if len(res.stdout) != sum(b - a for a, b in windows):
            raise ConnectionLost(host.name, f"{host.name}: job {rec.job_id}'s {stream} around the matching lines "
                                            "did not come back whole")
        out: list[tuple[int, bytes]] = []
        pos = 0
        for a, b in windows:
            out.append((a, res.stdout[pos : pos + b - a]))
            pos += b - a
        return out

    # ------------------------------------------------------------------ cancel
    async def cancel(self, host: Host, job_id: str, *, grace_s: float = 5.0, reason: str = "cancelled on request",
                     by: str = "cancel") -> JobCancelResult:
        """Kill job ``job_id``'s whole process tree: TERM, wait up to ``grace_s`` seconds, KILL; then check.

        The cancel reason is written to the job directory before any signal, so the job reads ``killed``.
        Returns within ``grace_s`` + ``answer_timeout_s`` when the host stops answering; a job that never
        started (``not_started``) is answered from the journal.

        :raises JobNotFound, HostError: (``HostError`` also when the host did not answer in time)
        """
        check_job_id(job_id)
        rec = self.journal.get(job_id)
        if rec.state == "not_started":
            return JobCancelResult(job_id=job_id, host=rec.host, state="not_started",
                                   message="the job never started (nothing ran); nothing to kill")
        limit_s = grace_s + self.answer_timeout_s
        t_hard = anyio.current_time() + limit_s
        self.journal.update(job_id, cancel_reason=reason)
        signalled: list[int] = []
        escalated: list[int] = []
        survivors: list[int] = []
        how = tag = ""  # "cgroup PATH" or "- REASON"; "ses N" or "- REASON" (see the cancel script)
        elsewhere: list[Elsewhere] = []  # what the job may have handed on, still running (see _unchecked)
        else_how = ""
        was: int | None = None  # the command's exit status, when it had ended before the cancel
        missing = False
        with _answer_within(host, limit_s, "job_cancel"):
            warm = await self._take_warm(host, _WARM_WAIT_S)
            while True:
                t_open = anyio.current_time()
                proc, warmed = await self._open(
                    host, warm, lambda: cancel_script(self.jobs_dir, job_id, grace_s=grace_s, reason=reason),
                    lambda: cancel_request(self.jobs_dir, job_id, grace_s=grace_s, reason=reason))
                reader = WireReader(proc.read_stdout)
                try:
                    await proc.close_stdin()
                    while (words := await reader.header()) is not None:
                        pids = [int(w) for w in words[1:] if w.isdigit()]
                        if words[0] == "missing":
                            missing = True
                        elif words[0] == "was":
                            was = int(words[1]) if words[1].lstrip("-").isdigit() else None
                        elif words[0] == "how":
                            how = " ".join(words[1:])
                        elif words[0] == "tag":
                            tag = " ".join(words[1:])
                        elif words[0] == "elsewhere" and (e := parse_elsewhere(words[1:])) is not None:
                            elsewhere.append(e)
                        elif words[0] == "elsewhere_how":
                            else_how = " ".join(words[1:])
                        elif words[0] == "targets":
                            signalled = pids
                        elif words[0] == "escalated":
                            escalated = pids
                        elif words[0] == "survivors":
                            survivors = pids
                except HostError:
                    if not _dead_on_arrival(warmed, reader.got_data, t_open):
                        raise
                    warm = None  # the warm session was dead before it answered: cancel again on a new session
                    continue
                finally:
                    with anyio.CancelScope(shield=True):
                        await proc.close()
                if _dead_on_arrival(warmed, reader.got_data, t_open):
                    warm = None  # it ended without a word (killed shell): cancel again on a new session
                    continue
                break
        if missing:
            self.journal.update(job_id, state="lost", finished_at=now())
            return JobCancelResult(job_id=job_id, host=rec.host, state="lost",
                                   message="the job directory is gone from the host; nothing to kill")
        # wait briefly for the monitor to record the exit status of the killed command
        state = "killed"
        with anyio.move_on_at(min(anyio.current_time() + 1.0, t_hard)):
            while True:
                st = (await self.host_states(host, [job_id]))[job_id]
                if st.exit_code is not None or not st.monitor_alive:
                    s, *_ = self.apply_state(rec, st)
                    state = s
                    break
                await anyio.sleep(0.05)
        if state == "running":
            state = "killed"
        unchecked = _unchecked(how, tag, elsewhere, else_how, rec.host)
        handed = (f"; {len(elsewhere)} process(es) it may have handed to systemd or a login still run (unchecked "
                  "names them and how to stop them)" if elsewhere else "")
        if not signalled:
            msg = ("nothing of the job was running; no signal sent" if not unchecked else
                   "nothing of the job was found running; no signal sent" + (handed or " (see unchecked for what "
                                                                              "could not be checked)"))
        else:
            whose = (f"the command had exited with status {was} before; {len(signalled)} process(es) it left "
                     "running were sent TERM" if was is not None else f"sent TERM to {len(signalled)} process(es)")
            msg = (whose + (f", KILL to {len(escalated)} that outlived the {grace_s:g} s grace" if escalated else "")
                   + (f"; SURVIVORS: {survivors}" if survivors else
                      "; no survivors" if not unchecked else
                      "; none of those survived" + (handed or " (see unchecked for what could not be checked)")))
        log.info("job.cancelled", host=rec.host, job_id=job_id, by=by, signalled=len(signalled),
                 escalated=len(escalated), survivors=survivors, checked=how.split(" ")[0] or "-", was=was)
        final_state: Literal["killed", "exited", "lost"] = (
            "exited" if state == "exited" and (not signalled or was is not None) else
            "lost" if state == "lost" else "killed")
        if final_state == "killed":
            cur = self.journal.get(job_id)
            # the end the host recorded (apply_state above: the exit file's run time) stays; else now
            ended = cur.finished_at if cur.state == "killed" and cur.finished_at is not None else now()
            self.journal.update(job_id, state="killed", finished_at=ended,
                                meta={**cur.meta, "killed_by": cur.meta.get("killed_by", by)})
        return JobCancelResult(job_id=job_id, host=rec.host, state=final_state, signalled=signalled,
                               escalated=escalated, survivors=survivors, unchecked=unchecked, message=msg)


def _unchecked(how: str, tag: str, elsewhere: Sequence[Elsewhere] = (), else_how: str = "", host: str = "") -> str:
    """What a look for a job's processes could not see (see :func:`agent_tools.jobs.scripts.cancel_script`), from
    the scripts' ``how`` (``cgroup PATH``, or ``- REASON`` without one) and ``tag`` (``ses N``: the job's own audit
    session, or ``- REASON``) lines, and, for a kill (cancel, deadline), the processes it may have handed on
    (``elsewhere``: :class:`~agent_tools.jobs.wire.Elsewhere`, still running) and why that look could not be made
    whole (``else_how``: ``- REASON``, "" when it was).

    With an audit session every process the job starts is in sight, whatever it does to its cgroup, session or
    environment, except one that starts an audit session of its own (root may) and leaves the job's cgroup too: it
    is then in a unit, scope or login that began while the job ran, or in a newer audit session, and the look for
    what the job handed on lists it, with the processes systemd or sshd started for the job (``systemd-run
    --unit``, ``ssh host cmd``): nothing tells whose those are, so they are named with the call that stops them,
    never counted as "no survivors". Without an audit session, a process that left the job's cgroup (when it has
    one), session and process group and dropped its environment marker, before any look saw it and after its
    parent ended, cannot be found. "" when nothing was out of sight.

    :param host: the job's host alias (for the stop call named with ``elsewhere``).
    """
    parts: list[str] = []
    if not (tag.startswith("ses ") or not (how or tag)):  # (neither: the report did not say, as a replay's)
        why_tag = tag.removeprefix("-").strip() or "not recorded"
        if how.startswith("cgroup "):
            parts.append("a process that left its cgroup, its session and its environment (systemd-run --scope or su, "
                         f"with setsid and env -i) before a look saw it cannot be found: no audit session of its own: "
                         f"{why_tag}")
        else:
            reason = how.removeprefix("-").strip() or "the host did not say how it looked"
            parts.append(f"processes that left both its session and its environment (env -i with setsid) cannot be "
                         f"found: no cgroup for it: {reason}; no audit session of its own: {why_tag}")
    if else_how:
        parts.append("units and logins it may have had started for it (systemd-run --unit, ssh) could not be looked "
                     f"for: {else_how.removeprefix('-').strip()}")
    if elsewhere:
        parts.append(_handed_on(elsewhere, host))
    return "; ".join(parts)


def _deadline_unchecked(st: HostJobState, host: str) -> str:
    """:func:`_unchecked` of the kill a job's deadline made (as its status reports it)."""
    return _unchecked(st.deadline_how, st.deadline_tag, st.deadline_elsewhere, st.deadline_elsewhere_how, host)


def _handed_on(elsewhere: Sequence[Elsewhere], host: str) -> str:
    """The processes a kill found the job may have handed on (:func:`_unchecked`), with the call that stops them:
    ``systemctl stop`` of their units (``--user`` in a user manager's), ``kill`` of those in no unit."""
    shown: list[str] = []
    system: list[str] = []
    user: list[str] = []
    pids: list[str] = []
    for e in elsewhere:
        unit = e.cgroup.rstrip("/").rsplit("/", 1)[-1]
        named = re.fullmatch(r"[\w@:.\\-]+\.(service|scope)", unit) is not None
        shown.append(f"{e.pid} {redact(e.command)!r}" + (f" ({unit})" if named else ""))
        (user if named and "/user@" in e.cgroup else system if named else pids).append(unit if named else str(e.pid))
    calls = [c for c in (("systemctl stop " + " ".join(dict.fromkeys(system))) if system else "",
                         ("systemctl --user stop " + " ".join(dict.fromkeys(user))) if user else "",
                         ("kill " + " ".join(pids)) if pids else "") if c]
    stop = " && ".join(calls)
    return ("still running and started while it ran, in a unit, login or audit session of their own (systemd-run, "
            "ssh, a new loginuid): nothing on the host says whether they are the job's: " + ", ".join(shown)
            + f"; if they are, stop them with run_command(host='{host}', command={stop!r})")


def _with_leftovers(meta: dict[str, Any], leftovers: list[tuple[int, str]], pending: bool = False) -> dict[str, Any]:
    """``meta`` with the processes a job's ended command left running (``leftovers``: [pid, command line] pairs, as
    last seen; left out when there are none) and whether its monitor was still looking for them (``pending``):
    ``list_jobs`` shows them and asks the host about such jobs again."""
    out = {k: v for k, v in meta.items() if k not in ("leftovers", "leftovers_pending")}
    if leftovers:
        out["leftovers"] = [[pid, command] for pid, command in leftovers]
    if pending:
        out["leftovers_pending"] = True
    return out


def _recorded_leftovers(rec: JobRecord) -> list[Leftover]:
    """The leftovers last seen of a job (see :func:`_with_leftovers`)."""
    return [Leftover(pid=int(p), command=str(c)) for p, c in rec.meta.get("leftovers") or []
            if isinstance(p, int)]


def _dead_on_arrival(warmed: bool, answered: bool, t_open: float) -> bool:
    """A request went to a warm session (``warmed``) that failed or ended without answering within
    ``_WARM_RETRY_S`` of ``t_open``: it was dead before the call, and the call is tried once more on a new
    session (later failures are real: reported at once)."""
    return warmed and not answered and anyio.current_time() - t_open < _WARM_RETRY_S


@contextlib.contextmanager
def _answer_within(host: Host, limit_s: float, what: str, shown_s: float | None = None) -> Iterator[None]:
    """Bound a call's round trips to ``host`` by ``limit_s`` seconds (float; <= 0: none left): past it the call
    fails with what the host was doing, as far as it can tell (:func:`_no_answer`).

    A host that is slow but answering is not cut off: when the time is up while the host says it is answering
    (``SshHost.answering``: its connection is open and watched for liveness, so a call waiting on it would
    have failed within ``liveness_timeout_s`` had it stopped answering; hosts without that method count as
    answering), the bound moves on by ``_EXTEND_S``, up to ``_EXTEND_MAX_S`` in all.

    :param shown_s: the limit as the caller sees it (for the message; default ``limit_s``).
    """
    answering = getattr(host, "answering", None)
    t0 = anyio.current_time()
    loop = asyncio.get_running_loop()
    handle: asyncio.TimerHandle | None = None

    def check(scope: anyio.CancelScope) -> None:
        nonlocal handle
        now_ = loop.time()
        if now_ - t0 - limit_s < _EXTEND_MAX_S and (answering is None or answering()):
            scope.deadline = now_ + _EXTEND_S
            handle = loop.call_at(scope.deadline - 0.01, check, scope)

    with anyio.CancelScope(deadline=t0 + max(limit_s, 0.0)) as scope:
        handle = loop.call_at(scope.deadline - 0.01, check, scope)
        try:
            yield
        finally:
            handle.cancel()
    if scope.cancelled_caught:
        raise _no_answer(host, what, shown_s if shown_s is not None else limit_s)


def _no_answer(host: Host, what: str, limit_s: float) -> HostError:
    """The error for a call whose time ran out: ``busy`` when every session channel was taken by other calls
    (the host answers them), ``unreachable`` (or ``connecting``: :func:`_unreached`) when there is no
    connection, ``connection_lost`` otherwise."""
    busy = getattr(host, "channels_busy", None)
    if callable(busy) and busy():
        return HostBusy(host.name, f"{host.name}: every SSH session channel to the host was in use by other calls "
                                   f"for the {limit_s:g} s {what} had; retry, or run fewer commands at once")
    connected = getattr(host, "connected", None)
    if callable(connected) and not connected():
        return _unreached(host, f"{host.name}: no SSH connection within the {limit_s:g} s {what} had", limit_s,
                          what)
    return ConnectionLost(host.name, f"{host.name}: no answer from the host within the {limit_s:g} s {what} had "
                                     "(the connection is open but the host did not reply: overloaded, or the "
                                     "network stopped passing packets)")


#: TCP's initial retransmission timeout (RFC 6298 2.1: 1 s): a SYN unanswered for longer was lost or dropped
_TCP_INITIAL_RTO_S = 1.0


def _unreached(host: Host, message: str, limit_s: float, what: str) -> HostUnreachable:
    """The error for a call whose time ran out with no connection: :class:`HostUnreachable` (``message``) only
    when something says the host does not answer (it is known not to, or the connect attempt's SYN went
    unanswered past TCP's initial retransmission timeout), else :class:`ConnectUnfinished`: the time was too
    short to connect (the host answered and the handshake was under way, or its answer was not due yet).
    Hosts without ``connect_progress`` (not SSH) keep ``message``."""
    progress = getattr(host, "connect_progress", None)
    p: ConnectProgress | None = progress() if callable(progress) else None
    if p is None or (p.tcp_s is None and (p.unanswered or p.waited_s >= _TCP_INITIAL_RTO_S)):
        return HostUnreachable(host.name, message)
    if p.tcp_s is not None:
        how = (f"the host answered: TCP connected {p.tcp_s:.2f} s into the attempt, the SSH handshake and login "
               "were under way")
    else:
        how = f"the host was asked {p.waited_s:.2f} s before: too early to say it does not answer"
    last = f"; the last connect took {p.last_connect_s:.2f} s" if p.last_connect_s is not None else ""
    return ConnectUnfinished(host.name, f"{host.name}: the {limit_s:g} s {what} ran out while connecting ({how}"
                                        f"{last}); nothing was started. Retry with more time")


def _not_started_why(rec: JobRecord) -> str:
    error = rec.meta.get("error")
    return "it never started: nothing ran on the host" + (f" ({error})" if error else "")


def _launch_window_s(rec: JobRecord) -> float:
    """Seconds after a job is journalled during which its directory may not exist yet: the launch gets the
    call's budget (connect + channel open + exec), plus a margin for clocks and the launcher itself."""
    return (rec.budget_s or 15.0) + 5.0


def _valid_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


#: at most this many bytes of context are read for one page of grep matches (lines past it are left for the next
#: page)
_GREP_CONTEXT_BUDGET_BYTES = 1 << 20


def _context_windows(lines: list[tuple[int, int]], size: int) -> list[tuple[int, int, int]]:
    """The windows of a stream to read around ``lines`` (``[start, end)`` byte ranges, in order): each line with
    :data:`~agent_tools.output.VIEW_CONTEXT_BYTES` on both sides (not past ``size``, the stream's size when it was
    searched, or the line's end: bytes that surely exist), overlapping windows merged, as ``(a, b, n)``
    with ``n`` the number of lines a window holds; they stop at the first line that would take the bytes read past
    :data:`_GREP_CONTEXT_BUDGET_BYTES` (always after one line at least)."""
    out: list[list[int]] = []
    spent = 0
    for start, end in lines:
        a, b = max(0, start - VIEW_CONTEXT_BYTES), min(end + VIEW_CONTEXT_BYTES, max(size, end))
        if out and a <= out[-1][1]:
            cost = max(0, b - out[-1][1])
            if spent + cost > _GREP_CONTEXT_BUDGET_BYTES and spent:
                break
            out[-1][1] = max(out[-1][1], b)
            out[-1][2] += 1
        else:
            cost = b - a
            if spent + cost > _GREP_CONTEXT_BUDGET_BYTES and spent:
                break
            out.append([a, b, 1])
        spent += cost
    return [(a, b, n) for a, b, n in out]


def _same_command(prior: JobRecord, shown: str, host: str) -> None:
    """A call whose idempotency key already started ``prior`` must be a retry of that call: another command under
    the same key is refused (HTTP APIs answer a reused key with other parameters the same way), so that its
    caller never reads the first command's result as its own. Commands are compared as journalled (redacted).

    :raises BadArguments: ``shown`` is not the command ``prior`` runs (the key itself is not repeated: it may be
        a secret, and the journal keeps only its digest).
    """
    if prior.command != shown:
        raise BadArguments(f"this idempotency_key already started job {prior.job_id} on {host} with another command "
                           f"({prior.command[:120]!r}), so {shown[:120]!r} was not run: a key names one command "
                           f"(a retry of it); use a new key to run this one, or job_status(job_id='{prior.job_id}') "
                           "for that job")


def _split_utf8_tail(data: bytes) -> int:
    """Bytes at the end of ``data`` that start a UTF-8 character whose remaining bytes are not in ``data``
    (0..3): a page cut there would show the character as two U+FFFD."""
    for back in range(1, min(4, len(data)) + 1):
        b = data[-back]
        if b & 0xC0 != 0x80:  # a lead byte (or ASCII): does its sequence fit?
            need = 2 if b & 0xE0 == 0xC0 else 3 if b & 0xF0 == 0xE0 else 4 if b & 0xF8 == 0xF0 else 1
            return back if need > back else 0
    return 0


def _finished_at(rec: JobRecord, st: HostJobState) -> float:
    """When a job that is now seen terminal ended (unix seconds): its start plus the run time the host
    recorded (the ``exit`` file's uptimes), else now (the first sight of its end)."""
    t = now()
    if st.duration_s is not None and st.duration_s >= 0:
        return min(t, rec.created_at + st.duration_s)
    return t


def elapsed_of(rec: JobRecord) -> float:
    """A job's ``elapsed_s``: 0 for a job that did not start (``not_started``) or whose start is not confirmed
    yet (``unconfirmed``); seconds from its start until now while it runs or its readiness is pending;
    frozen once it is over, at its end (the host's record of the run time, else when its end was first seen)
    or, with probes, when the readiness verdict was reached (``deadline_exceeded``: at the deadline, whenever it
    was first seen), whichever is later. The same on every later look."""
    if rec.state in ("not_started", "unconfirmed"):
        return 0.0  # nothing ran (so far)
    settled = rec.meta.get("settled_at") if rec.probes else None
    if rec.state == "running" or (rec.probes and rec.readiness == "pending"):
        end = now()
    else:
        ends = [t for t in (rec.finished_at, settled) if isinstance(t, int | float)]
        end = max(ends) if ends else now()
    return round(max(0.0, end - rec.created_at), 3)


def _hard_deadline(rec: JobRecord) -> float | None:
    value = rec.meta.get("hard_deadline_s")
    return float(value) if isinstance(value, int | float) else None


def _runs_on(rec: JobRecord) -> str:
    """What becomes of a detached job: it keeps running on the host, or, when logind kills the user's processes at
    the end of the login that started it (``meta.logout``: scripts.at_logout), only while that login lasts."""
    logout = rec.meta.get("logout")
    if logout:
        return (f"the job runs on only while this SSH connection stays open: {logout}; it dies when the connection "
                "closes (a CLI call closes it at once)")
    return "the job keeps running on the host"


def _kill_words(rec: JobRecord, what: str = "it") -> str:
    """``; the host kills WHAT N s after its start (why)`` for a job launched with a deadline, else ``""``."""
    limit = _hard_deadline(rec)
    if limit is None:
        return ""
    source = rec.meta.get("hard_deadline_why")
    return f"; the host kills {what} {limit:g} s after its start" + (f" ({source})" if source else "")


def deadline_why(rec: JobRecord, limit_s: float | None, survivors: list[int] | None, unchecked: str = "", *,
                 was: int | None = None, interrupted: bool = False) -> str:
    """Why a job killed at its deadline ended, in words: the deadline, where it came from, what is left.

    :param unchecked: what the kill's survivor check could not see (:func:`_unchecked`): "no survivors" only
        without it.
    :param was: the command's exit status when it had ended before the deadline (the kill was of its leftovers).
    :param interrupted: the kill's watcher is gone before it checked the kill.
    """
    limit = limit_s if limit_s is not None else _hard_deadline(rec)
    source = rec.meta.get("hard_deadline_why")
    at = (f"{limit:g} s " if limit is not None else "") + "deadline" + (f" ({source})" if source else "")
    if was is not None:
        text = (f"exited with status {was}; the processes it left running were killed on the host by its monitor at "
                f"its {at}: TERM, KILL 2 s later to anything left")
    else:
        text = (f"killed on the host by its monitor: still running at its {at}; TERM to its whole tree, KILL 2 s "
                "later to anything left")
    if interrupted:
        return text + ("; the kill was interrupted before it was checked (its watcher on the host is gone): "
                       "job_cancel finishes it")
    if survivors is None:
        return text + " (the check for survivors had not finished)"
    if survivors:
        return text + f"; SURVIVORS: {survivors}"
    return text + ("; no survivors" if not unchecked else
                   "; none of what it found survived (unchecked says what it could not see)")


def killed_by(rec: JobRecord, state: str | None = None) -> Literal["budget", "deadline", "cancel"] | None:
    """Who killed a ``killed`` job (``budget``: on_timeout=kill, ``deadline``: its monitor on the host,
    ``cancel``: job_cancel); None for a job in any other state, and for one something outside agent-tools killed
    (a signal from another program, a shutdown: its ``why`` says what)."""
    if (state or rec.state) != "killed":
        return None
    by = rec.meta.get("killed_by")
    return by if by in ("budget", "deadline", "cancel") else None


def _restarted_unit(rec: JobRecord) -> str | None:
    """The unit a restart job restarts (``systemctl restart ... UNIT`` with a systemd_unit probe of it), else None."""
    if "systemctl restart" not in rec.command:
        return None
    return next((str(p["unit"]) for p in rec.probes if p.get("kind") == "systemd_unit" and p.get("unit")
                 and str(p["unit"]) in rec.command), None)


def facts_of(rec: JobRecord, *, state: str | None = None, detail: str = "", readiness_detail: str = "",
             output_cut: bool = True, needs: str = "", leftovers: int | None = None) -> JobFacts:
    """:class:`~agent_tools.jobs.hints.JobFacts` of a journal row (``state`` overrides the recorded one;
    ``output_cut``, ``needs``: see :class:`~agent_tools.jobs.hints.JobFacts`; ``leftovers``: how many processes its
    ended command left running still run, default as last recorded; the exit note as :meth:`JobRunner._note_exit`
    kept it)."""
    if leftovers is None:
        leftovers = len(rec.meta.get("leftovers") or [])
    units = tuple(str(p["unit"]) for p in rec.probes if p.get("kind") == "systemd_unit" and p.get("unit"))
    state = state or rec.state
    kept = rec.meta.get("exit_note")
    note = kept if state == "exited" and isinstance(kept, str) else ""
    endless = never_ends(rec.command) if state == "running" and not rec.probes else None
    return JobFacts(job_id=rec.job_id, host=rec.host, state=state, readiness=rec.readiness,
                    exit_status=rec.exit_status, signal=rec.signal, detail=detail,
                    readiness_detail=readiness_detail or str(rec.meta.get("readiness_why", "")), units=units,
                    deadline_s=rec.deadline_s, superseded_by=str(rec.meta.get("superseded_by", "")),
                    output_cut=output_cut, killed_by=killed_by(rec, state) or "", needs=needs,
                    leftovers=leftovers, exit_note=note, endless=endless[0] if endless else "",
                    endless_follow=bool(endless and endless[1]),
                    unit_only=bool(rec.probes) and all(p.get("kind") == "systemd_unit" for p in rec.probes))


def _reached(host: Host) -> dict[str, Any]:
    """``{"connection": ...}``: how ``host`` was reached, for a later process to follow its jobs the same way
    (:mod:`agent_tools.hosts.reach`); empty for local and other hosts."""
    from ..hosts.reach import connection_info

    info = connection_info(host)
    return {"connection": info} if info is not None else {}


def _error(exc: AgentToolsError, host: str | None, command: str | None) -> ErrorOutcome:
    """The ``error`` outcome of ``exc``; its message and the command are redacted (a host's error text can quote
    the command line it failed on)."""
    return ErrorOutcome(host=host, command=None if command is None else redact(command), kind=exc.kind,
                        message=redact(exc.message), retryable=exc.retryable, job_id=getattr(exc, "job_id", None))
