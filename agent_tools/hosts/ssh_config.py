"""OpenSSH client config files → the options of one asyncssh connection, with ssh(1)'s semantics.

asyncssh parses the files (``asyncssh.config.SSHClientConfig``: ``Host``/``Match``/``Include``, ``%`` tokens,
first value wins); this module applies them the way ssh(1) does where asyncssh's own connect path differs
(checked against ``ssh -G`` and ``ssh`` on the project's test hosts: tests/test_ssh_config.py):

* **Match final** (ssh_config(5): "Match final ... requests that the configuration be re-parsed"): ssh parses
  the files a second time after the first pass, *keeping* every value the first pass obtained, so ``Match final
  host 10.0.0.5`` sees the ``HostName`` the first pass resolved and a ``User`` set there wins over the final
  block's. asyncssh (2.19 to at least 2.24) re-parses from scratch, so such a block never sees the resolved
  host and its options are lost. Here the final pass starts from the first pass's values.
* **An IdentityFile or CertificateFile that does not exist**: ssh skips it (``ssh -v``: "no such identity")
  and authenticates with the others; asyncssh raises ``FileNotFoundError`` for it and no connection is ever
  made. Here missing files are left out (:attr:`ResolvedHost.missing_files`: logged, and named in an
  authentication failure). When every ``IdentityFile`` is missing, asyncssh's default key files are tried
  (ssh would try none of its defaults then; the agent is used either way).
* **Match exec** (ssh_config(5): "The available criteria keywords are ... exec ... %-tokens are accepted"):
  ssh expands the ``%`` tokens of the command (``%h`` the host so far, ``%n`` the alias, ``%p``, ``%r``,
  ``%u``, ``%C``, ``%d``, ``%i``, ``%k``, ``%L``, ``%l``, ``%j``; readconf.c ``match_cfg_line``), runs it with
  ``$SHELL -c`` (``/bin/sh`` when unset; stdin and stdout ``/dev/null``), and only when the criteria before
  it on the line matched. asyncssh (to at least 2.24) runs the command with its tokens unexpanded, so
  ``Match exec "test %h = db1"`` never matched; here it is run as ssh runs it. The command is the line's
  argument as ssh's tokenizer reads it (quotes removed); tokens are substituted without quoting, as ssh does.
* **CanonicalizeHostname** (ssh_config(5)): ssh canonicalizes the host name under ``CanonicalDomains`` (for
  ``yes`` only without ProxyCommand/ProxyJump; ``always`` also with them) and then *always* parses the files a
  final time, with ``Match canonical`` and ``Match final`` true, even when the name was left alone (an address,
  or the local resolver fallback). asyncssh re-parses only when a name changed, so ``Match canonical`` blocks
  were lost; here the final pass is made as ssh makes it, and asyncssh's own canonicalization is turned off.
* **UserKnownHostsFile** takes ``%`` tokens and ``${VAR}`` (ssh_config(5) TOKENS, ENVIRONMENT VARIABLES);
  asyncssh expands them only in key, agent and command options, so ``UserKnownHostsFile ~/.ssh/kh_%h`` named
  a file that does not exist and every host key was refused. Here they are expanded as ssh expands them.
* **``~`` and ``%d``** in file options (``IdentityFile``, ``CertificateFile``, ``UserKnownHostsFile``,
  ``GlobalKnownHostsFile``, ``IdentityAgent``) name the login user's home from the password database
  (misc.c ``tilde_expand``: ``getpwuid(getuid())->pw_dir``; ``%d`` likewise), and so does the default user
  config ``~/.ssh/config``; ``$HOME`` is not read for them. asyncssh expands both from ``$HOME``, so with
  ``HOME`` pointing elsewhere it read another user's known_hosts (trusting keys ssh refuses). Here they are
  expanded as ssh expands them (:func:`expand_tilde`), and so are the default known_hosts files
  (:func:`agent_tools.hosts.host_keys.known_hosts_files`). A relative ``Include`` is the exception ssh makes
  itself: it is globbed with ``GLOB_TILDE``, which reads ``$HOME`` (as asyncssh does too). Left as asyncssh has
  it: the default key files tried when the config names none (or none that exist) are read under ``$HOME``
  (they are the caller's own keys; which host keys are trusted never depends on ``$HOME``).
* **ProxyJump hops** are resolved the same way (ssh runs ``ssh -W host:port hop`` with the same config files),
  so a hop's missing key or ``Match final`` block behaves as it does for ssh.

The resolved options are handed to asyncssh as the configuration of the ``options`` argument of
``asyncssh.connect``, with ``config=None`` ("no new configuration files will be loaded, but any configuration
loaded when constructing the options argument will still apply"), so asyncssh takes every other option
(ciphers, ``ServerAliveInterval``, ``ProxyCommand``, ``IdentityAgent``, ...) from them unchanged.
"""

from __future__ import annotations

import getpass
import hashlib
import ipaddress
import os
import pwd
import re
import shlex
import socket
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from .._asyncssh import SSHClientConfig, SSHConfig, WildcardPatternList, asyncssh

__all__ = ["CanonicalizeError", "JumpHop", "ResolvedHost", "canonical_name", "expand_tilde", "passwd_home",
           "resolve"]

#: options whose values are file names ssh(1) expands ``~`` in (readconf.c / ssh.c ``tilde_expand_filename``)
PATH_OPTIONS = ("IdentityFile", "CertificateFile", "UserKnownHostsFile", "GlobalKnownHostsFile", "IdentityAgent")


class _Configured(asyncssh.SSHClientConnectionOptions):
    """Options that carry only a resolved configuration: ``asyncssh.connect(options=...)`` builds its options on
    ``options.config`` (``SSHClientConnectionOptions.__init__``); nothing else is set here, so every option comes
    from the keyword arguments of the connect call and from that configuration."""

    def __init__(self, config: SSHClientConfig) -> None:  # no prepare(): nothing is loaded until connect builds on it
        self.config = config
        self.kwargs = {}


_NO_ARG_CRITERIA = frozenset({"all", "canonical", "final"})


class _SshConfig(SSHClientConfig):
    """asyncssh's client config with ``Match exec`` run as ssh(1) runs it (see the module docstring)."""

    def _exec_tokens(self) -> dict[str, str]:
        o = self._options
        orig = self._orig_host
        host = str(o.get("Hostname", orig))
        port = str(o.get("Port") or 22)
        local_user = self._local_user
        ruser = str(o.get("User") or local_user)
        jump = o.get("ProxyJump")
        jmphost = jump if isinstance(jump, str) and jump.lower() != "none" else ""
        this = socket.gethostname()
        alias = o.get("HostKeyAlias")
        tokens = {"%": "%", "C": hashlib.sha1((this + host + port + ruser + jmphost).encode()).hexdigest(),
                  "L": this.split(".", 1)[0], "d": passwd_home(), "h": host,
                  "k": alias if isinstance(alias, str) else host, "l": this, "n": orig, "p": port, "r": ruser,
                  "u": local_user, "j": jmphost}
        if hasattr(os, "getuid"):
            tokens["i"] = str(os.getuid())
        return tokens

    def _exec(self, command: str) -> bool:
        tokens = self._exec_tokens()

        def sub(m: re.Match[str]) -> str:
            if m.group(1) not in tokens:
                self._error(f"Match exec: unknown token %{m.group(1)}")
            return tokens[m.group(1)]

        cmd = re.sub(r"%(.)", sub, command)
        shell = os.environ.get("SHELL") or "/bin/sh"
        res = subprocess.run([shell, "-c", cmd], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, check=False)
        return res.returncode == 0

    def _line_words(self) -> list[str] | None:
        """The arguments of the ``Match`` line being parsed, read again from its file: asyncssh splits every
        argument of a ``Match`` line at its first ``=`` (so ``exec "test %h = db1"`` became two words); ssh splits
        only a ``Match=...`` keyword from its value."""
        try:
            with open(self._path) as f:
                line = f.read().splitlines()[self._line_no - 1]
            words = shlex.split(line.strip())
        except (OSError, IndexError, ValueError):
            return None
        if not words:
            return None
        head, _, tail = words[0].partition("=")
        if head.lower() != "match":
            return None
        rest = words[1:]
        if tail:
            rest.insert(0, tail)
        elif rest and rest[0].startswith("="):
            rest[0] = rest[0][1:]
            if not rest[0]:
                rest.pop(0)
        return rest

    def _match_as_ssh(self, option: str, args: list[str]) -> None:
        """``Match`` with each ``exec`` criterion decided here: replaced by ``all`` / ``!all`` once the criteria
        before it are known to match (ssh runs no command after a criterion that failed)."""
        out: list[str] = []
        rest = self._line_words() or list(args)
        args.clear()
        while rest:
            word = rest.pop(0)
            name = word.lower().lstrip("!")
            if name in _NO_ARG_CRITERIA or not rest:
                out.append(word)
                continue
            arg = rest.pop(0)
            if name != "exec":
                out += [word, arg]
                continue
            before = self._matching
            if out:
                SSHConfig._match(self, option, list(out))
            prior = self._matching if out else True
            self._matching = before
            ok = prior and self._exec(arg)
            out.append("all" if ok != word.startswith("!") else "!all")
        SSHConfig._match(self, option, out)

    _handlers = {**SSHClientConfig._handlers, "match": ("Match", _match_as_ssh),  # noqa: RUF012 (as the base)
                 # not read by asyncssh: SshSettings.key_mode applies it
                 "stricthostkeychecking": ("StrictHostKeyChecking", SSHConfig._set_string)}
    # ssh_config(5) TOKENS: UserKnownHostsFile takes % tokens and ${VAR}s too (asyncssh expands neither there)
    _percent_expand = SSHClientConfig._percent_expand | {"UserKnownHostsFile"}

    def _set_tokens(self) -> None:
        super()._set_tokens()
        tokens = self._exec_tokens()  # and %k, %j, which asyncssh does not know
        self._tokens.setdefault("k", tokens["k"])
        self._tokens.setdefault("j", tokens["j"])
        self._tokens["d"] = tokens["d"]  # the password database's home, as ssh: not asyncssh's $HOME


@dataclass(frozen=True)
class JumpHop:
    """One ``ProxyJump`` hop: ``[user@]host[:port]`` (ssh_config(5))."""

    host: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, spec: str) -> JumpHop:
        """``"root@10.0.0.1:2222"`` → ``JumpHop("10.0.0.1", "root", 2222)`` (``ssh://`` URIs are accepted too)."""
        spec = re.sub(r"^ssh://", "", spec.strip())
        user, _, hostport = spec.rpartition("@")
        m = re.fullmatch(r"\[([^\]]+)\](?::(\d+))?|([^:]+)(?::(\d+))?", hostport)
        if not m:
            raise ValueError(f"ProxyJump hop {spec!r} is not [user@]host[:port]")
        host, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
        return cls(host, user or None, int(port) if port else None)


@dataclass
class ResolvedHost:
    """How ssh(1) would reach ``alias`` with the given config files.

    :attr config: the resolved options (asyncssh's config object), given to asyncssh by :meth:`connect_kwargs`.
    :attr hostname: ``HostName`` (the alias itself when unset). :attr port: ``Port`` or 22.
    :attr user: ``User``, or None (asyncssh then uses the local user name).
    :attr identity_files: the ``IdentityFile`` entries that exist, in order (None: the config names none).
    :attr cert_files: the ``CertificateFile`` entries that exist (None: the config names none).
    :attr missing_files: the ``IdentityFile``/``CertificateFile`` entries that do not exist (skipped, as ssh does).
    :attr jumps: the ``ProxyJump`` hops, first hop first (empty: none, or ``ProxyJump none``).
    """

    alias: str
    config: SSHClientConfig
    hostname: str
    port: int
    user: str | None
    identity_files: list[str] | None
    cert_files: list[str] | None
    missing_files: list[str] = field(default_factory=list)
    jumps: list[JumpHop] = field(default_factory=list)

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``asyncssh.connect(alias, ...)`` that make it use these options as resolved."""
        # canonicalize_hostname off: the name was canonicalized by resolve(), as ssh does, and asyncssh would redo it
        kw: dict[str, Any] = {"options": _Configured(self.config), "config": None, "canonicalize_hostname": False}
        if self.identity_files is not None:
            kw["client_keys"] = list(self.identity_files)
            kw["ignore_encrypted"] = True  # as for keys named by a config file: ssh in BatchMode cannot ask either
        if self.cert_files is not None:
            kw["client_certs"] = list(self.cert_files)
        return kw


def _files(value: Any) -> list[str] | None:
    """The distinct entries of a file-list option, in order (the final pass repeats the first pass's)."""
    if not isinstance(value, list):
        return None
    out: list[str] = []
    for v in value:
        if isinstance(v, str) and v not in out:
            out.append(v)
    return out


def _split(files: list[str] | None, missing: list[str]) -> list[str] | None:
    if files is None:
        return None
    present: list[str] = []
    for f in files:
        (present if os.path.exists(f) else missing).append(f)
    return present


class CanonicalizeError(ValueError):
    """``CanonicalizeHostname`` with ``CanonicalizeFallbackLocal no``: the name resolves under none of the
    ``CanonicalDomains`` (ssh: "Could not resolve host")."""


def canonical_name(host: str, config: Any) -> str | None:
    """The name ``host`` canonicalizes to under the config's ``CanonicalDomains`` (ssh_config(5),
    CanonicalizeHostname): None when it is left alone (an address, more dots than ``CanonicalizeMaxDots``
    (default 1), no domains, or none resolves and ``CanonicalizeFallbackLocal`` is yes, the default). A trailing
    dot marks a name already canonical. A CNAME the resolver reports replaces the name only when a
    ``CanonicalizePermittedCNAMEs`` rule allows it. Blocking (resolves names).

    :raises CanonicalizeError: nothing resolved and ``CanonicalizeFallbackLocal`` is no.
    """
    try:
        ipaddress.ip_address(host.strip("[]"))
        return None
    except ValueError:
        pass
    domains = config.get("CanonicalDomains") or []
    max_dots = config.get("CanonicalizeMaxDots")
    if not domains or host.endswith(".") or host.count(".") > (max_dots if isinstance(max_dots, int) else 1):
        return None
    rules = config.get("CanonicalizePermittedCNAMEs") or []
    for domain in domains:
        name = f"{host}.{domain}"
        try:
            info = socket.getaddrinfo(name, None, flags=socket.AI_CANONNAME)
        except (socket.gaierror, UnicodeError):
            continue
        cname = info[0][3] if info else ""
        if cname and cname != name:
            for src, dst in rules:
                if WildcardPatternList(src).matches(name) and WildcardPatternList(dst).matches(cname):
                    return str(cname)
        return name
    if config.get("CanonicalizeFallbackLocal") is False:
        raise CanonicalizeError(f"the host name {host!r} is in none of the CanonicalDomains ({', '.join(domains)}) "
                                "and CanonicalizeFallbackLocal is no")
    return None


def resolve(alias: str, config_paths: Sequence[str | os.PathLike[str]], *, user: str | None = None,
            port: int | None = None) -> ResolvedHost:
    """Resolve ``alias`` through the OpenSSH client config files ``config_paths`` as ssh(1) does (see the module
    docstring). Blocking (reads files; ``Match exec`` runs commands, as ssh does): call it from a worker thread.

    :param user: a ``User`` that overrides the config's (``ssh -l``); :param port: likewise for ``Port``.
    :raises OSError: a config file (or one it ``Include``s by name) cannot be read.
    :raises ValueError: a config line is malformed (asyncssh's ``ConfigParseError``), or a ``ProxyJump`` hop is.
    :raises CanonicalizeError: ``CanonicalizeFallbackLocal no`` and the name is in none of ``CanonicalDomains``.
    """
    try:
        local_user = getpass.getuser()
    except (KeyError, OSError):
        local_user = "root" if hasattr(os, "getuid") and os.getuid() == 0 else ""
    paths = [str(p) for p in config_paths]
    u: Any = user if user is not None else ()
    p: Any = port if port is not None else ()
    first = cast(SSHClientConfig, _SshConfig.load(None, paths, False, False, False, local_user, u, alias, p))
    config = first
    canonicalize = first.get("CanonicalizeHostname")
    if canonicalize:  # ssh: the name is canonicalized, then a final pass in which Match canonical holds
        direct = not first.get("ProxyCommand") and first.get("ProxyJump") in (None, "none")
        if canonicalize == "always" or direct:
            name = canonical_name(str(first.get("Hostname", alias)), first)
            if name is not None:
                first._options["Hostname"] = name
    if canonicalize or first.has_match_final():  # ssh: a second pass that keeps what the first one set
        config = cast(SSHClientConfig, _SshConfig.load(first, paths, False, bool(canonicalize), True, local_user,
                                                       (), alias, ()))
    for option in PATH_OPTIONS:  # ~ as ssh expands it (asyncssh would read $HOME when it opens the file)
        value = config._options.get(option)
        if isinstance(value, str):
            config._options[option] = expand_tilde(value)
        elif isinstance(value, list):
            config._options[option] = [expand_tilde(v) if isinstance(v, str) else v for v in value]
    missing: list[str] = []
    identity = _split(_files(config.get("IdentityFile")), missing)

    certs = _split(_files(config.get("CertificateFile")), missing)
    jump = config.get("ProxyJump")
    jumps = [JumpHop.parse(h) for h in jump.split(",") if h.strip()] if isinstance(jump, str) else []
    hostname = config.get("Hostname", alias)
    cfg_port = config.get("Port", 22)
    cfg_user = config.get("User")
    return ResolvedHost(alias=alias, config=config, hostname=str(hostname),
                        port=int(cfg_port) if isinstance(cfg_port, int) else 22,
                        user=str(cfg_user) if isinstance(cfg_user, str) else None,
                        identity_files=identity, cert_files=certs, missing_files=missing, jumps=jumps)


def passwd_home() -> str:
    """The login user's home directory from the password database, as ssh(1)'s ``~`` and ``%d`` are (misc.c
    ``tilde_expand``: ``getpwuid(getuid())->pw_dir``; ``$HOME`` is not read); ``$HOME`` only when the user has
    no entry (ssh would refuse to run then)."""
    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser("~")


def expand_tilde(path: str) -> str:
    """``path`` with a leading ``~`` expanded as ssh(1) expands it in file options (misc.c ``tilde_expand``):
    ``~`` and ``~/...`` from :func:`passwd_home`, ``~user/...`` from that user's entry; anything else (and an
    unknown user) unchanged."""
    if not path.startswith("~"):
        return path
    name, sep, rest = path[1:].partition("/")
    if name:
        try:
            home = pwd.getpwnam(name).pw_dir
        except KeyError:
            return path
    else:
        home = passwd_home()
    return home.rstrip("/") + "/" + rest if sep else home
