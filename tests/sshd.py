"""A real OpenSSH ``sshd`` on loopback for tests, plus the ``real_sshd`` pytest fixture.

``RealSshd`` runs ``/usr/sbin/sshd -D -e -f CONFIG`` on 127.0.0.1 at a free port, with its own config,
its own ed25519 host key and its own ``authorized_keys`` in a private temp dir, and logs in as a dedicated
unprivileged user (``attest``; root's shell rc on the dev machine costs ~95 ms per command).

It also writes an OpenSSH *client* config (usable by ``ssh -F`` and by ``asyncssh.connect(config=[...])``)
with three aliases:

* ``testsshd``         - the server, strict host key checking against the right key;
* ``testsshd-badkey``  - the same server, but a known_hosts file holding a *different* key;
* ``testsshd-dead``    - a loopback port that is bound but not listening (connection refused at once).

Needs root (sshd must setuid to the login user) and ``/usr/sbin/sshd`` (Debian: ``openssh-server``).
The ``real_sshd`` fixture skips when either is missing unless ``AGENT_TOOLS_REQUIRE_SSHD=1``, in which case
it fails loudly (CI sets it so a broken environment cannot pass by skipping).

Facts used (OpenSSH 9.x, sshd_config(5), sshd(8)):
* ``-D`` stays in the foreground, ``-e`` logs to stderr (we send stderr to ``sshd.log``).
* Privilege separation needs ``/run/sshd``; a ``useradd`` account has a locked ``!`` password and is
  refused with ``UsePAM no`` until ``usermod -p '*'`` (``*`` = no password, not locked).
* StrictModes checks the owner/modes of ``authorized_keys`` and every parent dir, which fails under the
  world-writable ``/tmp``: we run with ``StrictModes no``; the file is still read as the login user, so the
  temp dir is 0755 and the file 0644.
* OpenSSH >= 9.8 penalises sources that connect without authenticating (``PerSourcePenalties``); our
  readiness probe does exactly that, so penalties are switched off when the option is known.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_tools.testing import free_port, known_hosts_line, ssh_config_block

#: the sshd binary (``AGENT_TOOLS_SSHD`` overrides it: tests of the run's closing summary point it at nothing)
SSHD_PATH = os.environ.get("AGENT_TOOLS_SSHD") or "/usr/sbin/sshd"
TEST_USER = "attest"
REQUIRE_ENV = "AGENT_TOOLS_REQUIRE_SSHD"
READY_TIMEOUT_S = 10.0


class SshdError(RuntimeError):
    """sshd could not be set up or did not become ready; the message carries the log tail."""


def sshd_install_hint() -> str:
    """The one command that makes the real-sshd tests runnable here (for the run's closing summary)."""
    if os.geteuid() != 0:
        return "run the tests as root (sshd must switch to the test user)"
    missing = [pkg for pkg, ok in (("openssh-server", os.access(SSHD_PATH, os.X_OK)),
                                   ("openssh-client", shutil.which("ssh-keygen") is not None)) if not ok]
    return f"apt-get install -y {' '.join(missing)}" if missing else "(nothing to install: see the skip reasons)"


def sshd_unavailable_reason() -> str | None:
    """Why a real sshd cannot run here (``None`` when it can)."""
    if os.geteuid() != 0:
        return "real sshd tests need root (sshd must switch to the test user)"
    if not os.access(SSHD_PATH, os.X_OK):
        return f"{SSHD_PATH} is missing (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is missing (apt-get install openssh-client)"
    return None


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=False, capture_output=True, text=True, timeout=30)


def ensure_test_user(user: str = TEST_USER) -> pwd.struct_passwd:
    """Create the unprivileged login user if missing and make sure it is not "locked" for sshd."""
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        res = _run(["useradd", "-m", "-s", "/bin/bash", user])
        if res.returncode not in (0, 9):  # 9: already exists (a parallel worker won the race)
            raise SshdError(f"useradd {user} failed: {res.stderr.strip()}") from None
        entry = pwd.getpwnam(user)
    if _shadow_locked(user):
        res = _run(["usermod", "-p", "*", user])
        if res.returncode != 0:
            raise SshdError(f"usermod -p '*' {user} failed: {res.stderr.strip()}")
    return entry


def _shadow_locked(user: str) -> bool:
    with contextlib.suppress(OSError):
        for line in Path("/etc/shadow").read_text().splitlines():
            fields = line.split(":")
            if fields[0] == user:
                return len(fields) > 1 and fields[1].startswith("!")
    return False


def _keygen(path: Path, comment: str) -> str:
    """Write an ed25519 key pair at ``path`` (+ ``.pub``); return the public key line (type + base64)."""
    res = _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])
    if res.returncode != 0:
        raise SshdError(f"ssh-keygen failed: {res.stderr.strip()}")
    kind, b64 = path.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {b64}"


class RealSshd:
    """A real OpenSSH server on 127.0.0.1 in its own temp dir (see the module docstring).

    Args:
        max_sessions: ``MaxSessions`` (channels per connection; OpenSSH's default is 10).
        max_startups: ``MaxStartups`` (unauthenticated connections; default ``"10:30:100"``).
        client_alive_interval_s: ``ClientAliveInterval`` in seconds (0 = off, the default).
        client_alive_count_max: ``ClientAliveCountMax``.
        user: the login user (created if missing).
        extra_config: more ``sshd_config`` lines appended verbatim.

    Raises:
        SshdError: on ``start()`` when sshd does not answer with an SSH banner within 10 s.
    """

    def __init__(
        self,
        *,
        max_sessions: int = 10,
        max_startups: str = "10:30:100",
        client_alive_interval_s: int = 0,
        client_alive_count_max: int = 3,
        user: str = TEST_USER,
        extra_config: str = "",
    ) -> None:
        self.max_sessions = max_sessions
        self.max_startups = max_startups
        self.client_alive_interval_s = client_alive_interval_s
        self.client_alive_count_max = client_alive_count_max
        self.user = user
        self.extra_config = extra_config
        self.dir = Path(tempfile.mkdtemp(prefix="agent-tools-sshd-"))
        self.dir.chmod(0o755)  # the login user must be able to read authorized_keys
        self.sshd_config_path = self.dir / "sshd_config"
        self.host_key_path = self.dir / "ssh_host_ed25519_key"
        self.client_key_path = self.dir / "id_ed25519"
        self.authorized_keys_path = self.dir / "authorized_keys"
        self.known_hosts_path = self.dir / "known_hosts"
        self.badkey_known_hosts_path = self.dir / "known_hosts_badkey"
        self.config_path = self.dir / "ssh_config"
        self.pid_path = self.dir / "sshd.pid"
        self.log_path = self.dir / "sshd.log"
        self.alias = "testsshd"
        self.badkey_alias = "testsshd-badkey"
        self.dead_alias = "testsshd-dead"
        self.port = 0
        self.dead_port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._dead_sock: socket.socket | None = None
        self._keys_ready = False
        self._penalties_off = True

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> RealSshd:
        """Start sshd (first call picks the port and makes keys); return self once it sends its banner."""
        if self._proc is not None and self._proc.poll() is None:
            return self
        reason = sshd_unavailable_reason()
        if reason is not None:
            raise SshdError(reason)
        ensure_test_user(self.user)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        if not self._keys_ready:
            self._make_keys()
        if self._dead_sock is None:
            # Bound but never listening: connects get RST (ECONNREFUSED) and nobody else can take the port.
            self._dead_sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self._dead_sock.bind(("127.0.0.1", 0))
            self.dead_port = self._dead_sock.getsockname()[1]
        fixed_port = self.port != 0
        last_error: SshdError | None = None
        for _attempt in range(1 if fixed_port else 3):
            if not fixed_port:
                self.port = free_port()
            self._write_server_config()
            self._write_client_files()
            try:
                self._spawn_and_wait()
                return self
            except SshdError as exc:  # lost a port race, or a real failure: retried, then raised
                last_error = exc
        assert last_error is not None
        raise last_error

    def stop(self, *, drop_connections: bool = True) -> None:
        """Stop the listener; with ``drop_connections`` also end every per-connection sshd (default)."""
        if drop_connections:
            self.drop_connections()
        proc = self._proc
        self._proc = None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    def restart(self, *, drop_connections: bool = False) -> None:
        """Restart sshd in place: same port, same host key, same client files.

        Like ``systemctl restart ssh`` (KillMode=process), established connections survive unless
        ``drop_connections`` is set.
        """
        self.stop(drop_connections=drop_connections)
        self.start()

    def drop_connections(self) -> int:
        """SIGTERM every sshd process serving a connection on our port (simulates dropped sessions).

        Finds them by their sockets (``/proc/net/tcp`` local port = ``self.port``), so connections that
        outlived a ``restart()`` (reparented away from the listener) are found too. Returns how many
        processes were signalled.
        """
        if self.port == 0:
            return 0
        listener = self.pid
        count = 0
        for pid in _pids_with_connections_on(self.port):
            if pid in (listener, os.getpid()):
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                count += 1
        return count

    def cleanup(self) -> None:
        """Stop sshd and remove the temp dir."""
        self.stop()
        if self._dead_sock is not None:
            self._dead_sock.close()
            self._dead_sock = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RealSshd:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.cleanup()

    @property
    def pid(self) -> int | None:
        """The listener's pid while it runs."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def log_text(self) -> str:
        """The sshd log so far (``LogLevel VERBOSE``)."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def ssh_argv(self, *remote: str, alias: str | None = None) -> list[str]:
        """``ssh -F CONFIG ALIAS REMOTE...`` for the real OpenSSH client."""
        return ["ssh", "-F", str(self.config_path), alias or self.alias, *remote]

    # ------------------------------------------------------------------ internals

    def _make_keys(self) -> None:
        self._host_pub = _keygen(self.host_key_path, "agent-tools-test-host")
        self._client_pub = _keygen(self.client_key_path, "agent-tools-test-client")
        bad_path = self.dir / "unrelated_host_key"
        self._bad_pub = _keygen(bad_path, "agent-tools-wrong-host")
        bad_path.unlink()
        bad_path.with_suffix(".pub").unlink()
        self.authorized_keys_path.write_text(self._client_pub + "\n")
        self.authorized_keys_path.chmod(0o644)
        self._keys_ready = True

    def _write_server_config(self) -> None:
        lines = [
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            f"HostKey {self.host_key_path}",
            f"PidFile {self.pid_path}",
            f"AuthorizedKeysFile {self.authorized_keys_path}",
            "UsePAM no",
            "StrictModes no",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PubkeyAuthentication yes",
            "PermitRootLogin no",
            f"AllowUsers {self.user}",
            f"MaxSessions {self.max_sessions}",
            f"MaxStartups {self.max_startups}",
            f"ClientAliveInterval {self.client_alive_interval_s}",
            f"ClientAliveCountMax {self.client_alive_count_max}",
            "AllowTcpForwarding yes",
            "X11Forwarding no",
            "PrintMotd no",
            "PrintLastLog no",
            "UseDNS no",
            "LogLevel VERBOSE",
            "Subsystem sftp internal-sftp",
        ]
        if self._penalties_off:
            lines.append("PerSourcePenalties no")
        text = "\n".join(lines) + "\n" + self.extra_config + "\n"
        self.sshd_config_path.write_text(text)
        res = _run([SSHD_PATH, "-t", "-f", str(self.sshd_config_path)])
        if res.returncode != 0 and self._penalties_off and "PerSourcePenalties" in res.stderr:
            self._penalties_off = False  # OpenSSH < 9.8 does not know the option (and does not need it)
            self._write_server_config()
            return
        if res.returncode != 0:
            raise SshdError(f"sshd -t rejected {self.sshd_config_path}: {res.stderr.strip()}")

    def _write_client_files(self) -> None:
        self.known_hosts_path.write_text(known_hosts_line(self._host_pub, port=self.port))
        self.badkey_known_hosts_path.write_text(known_hosts_line(self._bad_pub, port=self.port))

        def block(alias: str, port: int, known_hosts: Path) -> str:
            return ssh_config_block(alias, port=port, user=self.user, identity_file=self.client_key_path,
                                    known_hosts=known_hosts)

        self.config_path.write_text(
            block(self.alias, self.port, self.known_hosts_path)
            + "\n"
            + block(self.badkey_alias, self.port, self.badkey_known_hosts_path)
            + "\n"
            + block(self.dead_alias, self.dead_port, self.known_hosts_path)
        )

    def _spawn_and_wait(self) -> None:
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                [SSHD_PATH, "-D", "-e", "-f", str(self.sshd_config_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=_set_loginuid,
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                code = self._proc.returncode
                self._proc = None
                raise SshdError(f"sshd exited with {code} before it was ready:\n{self._log_tail(log_offset)}")
            if _banner_ok(self.port):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise SshdError(
                    f"sshd sent no SSH banner on 127.0.0.1:{self.port} within {READY_TIMEOUT_S} s:\n"
                    f"{self._log_tail(log_offset)}"
                )
            time.sleep(0.02)  # poll interval of the readiness check, not a synchronisation sleep

    def _log_tail(self, offset: int) -> str:
        return "\n".join(self.log_text()[offset:].splitlines()[-20:])


def _set_loginuid() -> None:
    """In sshd's child before its exec: set its audit loginuid (proc(5) ``/proc/self/loginuid``), as pam_loginuid
    does for a login on a host with PAM (this sshd runs ``UsePAM no``). Its sessions inherit it, and the unprivileged
    test user cannot change it (that needs CAP_AUDIT_CONTROL once it is set), so its jobs get no audit session of
    their own, as on such a host, whatever loginuid the test run itself has (unset when started from no login)."""
    with contextlib.suppress(OSError):
        with open("/proc/self/loginuid", "w") as f:
            f.write("0")


def _banner_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.settimeout(1.0)
            return s.recv(64).startswith(b"SSH-2.0-")
    except OSError:
        return False


def _pids_with_connections_on(port: int) -> set[int]:
    """Pids holding a non-listening TCP socket whose *local* port is ``port`` (sshd's side)."""
    inodes: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if local_port == port and fields[3] != "0A":  # 0A = LISTEN
                inodes.add(fields[9])
    inodes.discard("0")
    pids: set[int] = set()
    if not inodes:
        return pids
    targets = {f"socket:[{inode}]" for inode in inodes}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{entry}/fd"):
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry}/fd/{fd}") in targets:
                        pids.add(int(entry))
                        break
    return pids


# ---------------------------------------------------------------------- pytest fixtures


def require_real_sshd() -> None:
    """Skip (or fail, when ``AGENT_TOOLS_REQUIRE_SSHD=1``) if a real sshd cannot run here."""
    reason = sshd_unavailable_reason()
    if reason is None:
        return
    if os.environ.get(REQUIRE_ENV) == "1":
        pytest.fail(f"{REQUIRE_ENV}=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def real_sshd() -> Iterator[RealSshd]:
    """A started ``RealSshd`` shared by the whole session (MaxSessions 10, no ClientAlive).

    Tests that restart or reconfigure sshd should build their own ``RealSshd`` instead.
    """
    require_real_sshd()
    server = RealSshd()
    try:
        server.start()
    except SshdError as exc:  # the machine can run sshd, so a failure here is a bug: fail, never skip
        server.cleanup()
        pytest.fail(f"real sshd did not start: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.cleanup()
