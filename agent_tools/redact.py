"""Replace secrets in text with ``[REDACTED]``, keeping the name of what was hidden.

Covered: private key blocks (``-----BEGIN ... PRIVATE KEY-----``, also ``AGE-SECRET-KEY-1...``); passwords in URLs
(``https://user:[REDACTED]@host``, also with an empty user name: ``redis://:[REDACTED]@host``; up to the last
``@`` of the authority) and signed-URL query parameters (``sig=``,
``X-Amz-Signature=``...); ``Authorization`` / ``Proxy-Authorization`` headers (the scheme is kept),
``Cookie``/``Set-Cookie`` values and ``X-Api-Key`` style headers; ``--password=x``, ``--password x``, ``--token x``,
``--api-key x``, ``--oauth2-bearer x``, ``--passphrase x`` (any option whose name ends in one of the secret names
below), ``-pass pass:x`` / ``-storepass x`` style options (openssl, keytool); program-specific ones: ``mysql
-pSECRET``, ``sshpass -p x``, ``curl -u user:pw``, ``redis-cli -a x``, ``docker login -p x``, ``htpasswd -b FILE
USER PW``, ``smbclient -U user%pw``, ``vault login TOKEN``, ``ssh-keygen -N/-P x``, ``zip/unzip -P x``, ``ldapsearch
-w x``, ``ipmitool -P x``, ``aws configure set aws_secret_access_key x``, ``useradd -p x``, ``az login -p x``,
``lftp -u user,x``, ``echo 'user:x' | chpasswd``; ``.netrc`` entries (``machine h login u password x``, on one line
or several; ``default ...``); ``user:x@host`` without a scheme (an scp destination, an alias); ``Bearer x`` of 16
characters or more without a header; PuTTY key files' private lines; a private key's body lines whatever repeats
before them (``FILE:`` from ``grep -r``, ``> `` from diff, ``cat -n``'s numbers, colours, ``cat -A``'s ``$``); ``echo
'x' | passwd --stdin``; a shadow(5) line's hash field whatever it looks like (``tr '$' '%'``); ``.pgpass`` lines
and YAML block scalars and lists under a secret-named key (uncertain); ``?key=`` in a URL; ``NAME=value`` /
``password => 'value'`` / ``name: value`` / ``<name>value</name>`` where NAME ends in TOKEN, SECRET, PASSWORD,
PASSWD, PASS, _PWD, _PAT, KEY (as in ``OPENAI_KEY``; ``API_KEY``, ``ACCESS_KEY``...), CREDENTIAL(S), AUTH_TOKEN,
SECRET_KEY_BASE or PSK
(case-insensitive; ``MAX_TOKENS``,
``TOKENIZERS_PARALLELISM``, ``host_key`` and ``public_key`` are left alone); and value shapes of common providers:
AWS access key ids (``AKIA``/``ASIA``), GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``),
GitLab (``glpat-``), OpenAI/Anthropic style ``sk-...``, Slack ``xox[abprs]-`` and webhook URLs, Hugging Face
``hf_``, Google ``AIza...`` and OAuth ``ya29.``, Stripe ``sk_live_``/``rk_live_``/``whsec_``, npm ``npm_``, PyPI
``pypi-``, Docker Hub ``dckr_pat_``, DigitalOcean ``dop_v1_``, HashiCorp Vault ``hvs.``, Databricks ``dapi``,
JSON Web Tokens, Telegram bot tokens, Discord webhooks, a Google service account's ``private_key_id``, and crypt(5)
password hashes as shadow(5) keeps them (``$6$salt$...``, ``$y$j9T$salt$...``, ``$5$``, ``$1$``, bcrypt ``$2b$``,
scrypt ``$7$``, ``$gy$``, Argon2; also with their ``$`` turned into another symbol) and Apache's ``$apr1$`` and
``{SHA}``. A name written in full-width letters or with invisible characters inside (``ＰＡＳＳＷＯＲＤ=``,
``PASS\u200bWORD=``) is read as the name it shows. Shapes are public prefixes documented by
each provider (e.g. GitHub "About authentication"; AWS IAM identifiers; GitLab "Personal access tokens"; a
registry's ``"auth"`` in a Docker or Podman config file, base64 of ``user:password``: containers-auth.json(5)).

A value that is shell code rather than a literal (it starts with ``$`` or a backquote: ``TOKEN=$(vault read
...)``, ``--password "$PW"``) is left as it is, and unquoted values end at shell operators (``; | & < > (
)``), so redacting a command line never hides an operator from a person reading it. A name and its value are on
one line (``api_key=`` at the end of a line takes nothing from the next), and a quote that opened before the
name closes the value (``"api_key=" "next word"``). A ``name: value`` pair is only taken as a secret where
``name`` is a key, not a path (``/etc/passwd: no such file``), and not when the value is an option (``-name
token: -delete``). Values that are not secrets are left alone wherever they stand: a help text's
metavariable (``--password PASSWORD``), a placeholder in brackets (``<token>``), a file path
(``GOOGLE_APPLICATION_CREDENTIALS=/srv/creds.json``).

Certain and uncertain shapes. Provider token shapes, private keys, URL passwords, signed-URL parameters, the values
of secret-named assignments and options and of the program-specific options above, and ``Authorization`` with a
scheme are *certain*: the hidden span is a secret value, never code. Header-like ``name: value`` pairs (``token:
x``, ``X-Api-Key: x``, ``Authorization: x``; ``Cookie:`` needs ``name=value`` pairs) are not: in messages the
words after them are often prose (``using password: YES``, ``secret: not set``, ``passwd: Authentication token
manipulation error``) and in a command they may stand for shell words (``systemctl stop x cookie:
ssh.service``). Such a value is hidden only when it is not a placeholder or status word (yes, no, not, set,
expired, incorrect...) and either looks like a secret (letters with digits or symbols, or a capital after a
small letter) or is the whole of its item (nothing but a comment or a separator follows on its line).
:func:`redact` hides both kinds (for storage and output); ``redact(..., certain_only=True)`` hides only certain
ones, and :func:`review_text` of those only spans that cannot be code (for an approval prompt, where a person
must see every word that runs; it also says how many spans it hid; :func:`review_gaps` counts what the stored,
fully redacted form hides beyond that).

Process-wide additions (:func:`add_patterns`, :func:`add_secret_values`): the ``redact:`` patterns of every policy
file loaded in this process and the values of secret-named variables given in a call's ``env`` are applied by every
call of :func:`redact`, so every path that stores or shows text (journal, approvals, logs, results, cassettes, the
CLI) hides them. A value a certain rule found is remembered the same way (at most 1024, oldest dropped; only
values specific enough: 6 characters or more with a letter and a digit, a symbol or an inner capital, or 12 or
more), so ``smbclient -U user%VALUE`` in a command hides ``VALUE`` where its output or a transcript's tool result
repeats it bare, later in the same process. Redaction is best effort: a secret in a shape nobody listed passes
through. Extra patterns replace their whole match, or only the group named ``secret`` if they have one.

Every span is found on the original text and then replaced, so :func:`secret_spans` and :func:`redact_slice` let a
caller redact a page or a view of a longer text with the context on both sides of the cut (a secret that straddles
the cut is hidden on both pages).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any

__all__ = ["MARK", "add_patterns", "add_secret_values", "is_secret_name", "may_hold_code", "redact", "redact_argv",
           "redact_event", "redact_obj", "redact_slice", "redact_slices", "review_gaps", "review_text",
           "secret_env_values", "secret_spans"]

MARK = "[REDACTED]"
"""The marker that replaces a secret."""

_SECRET_WORDS = (
    r"(?:token|secret|password|passwd|passphrase|_pwd|_pass|_pat|api[_-]?key|access[_-]?key|account[_-]?key|"
    r"secret[_-]?key|private[_-]?key|signing[_-]?key|_key|credentials?|auth[_-]?token|secret[_-]?key[_-]?base|psk)"
)
_SECRET_NAME = rf"[A-Za-z0-9_.-]*?{_SECRET_WORDS}"
_SECRET_KEY_RE = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)
#: names that end like a secret but hold none (token counts; a host's or a public key, its fingerprint)
_NOT_SECRET_RE = re.compile(r"^(?:(?:max|num|min)_?(?:new_)?tokens?|(?:ssh_)?host_?keys?|public_?keys?|pub_?keys?|"
                            r"(?:ssh_)?authorized_keys?)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether ``name`` (a variable, option or key name) names a secret: it ends in TOKEN, SECRET, PASSWORD, ...
    (case-insensitive; see the module docstring)."""
    return bool(_SECRET_KEY_RE.match(name)) and not _NOT_SECRET_RE.search(name)


# the body is base64 and PEM headers (also with JSON's literal \n); a truncated block ends where that stops
_PRIVATE_KEY_RE = re.compile(
    r"(-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY((?: BLOCK)?)-----)((?:[A-Za-z0-9+/=\s,:.-]|\\[nr])*?)"
    r"(-----END \2PRIVATE KEY\3-----|(?=[^A-Za-z0-9+/=\s,:.\\-])|\Z)"
)
#: horizontal whitespace (also redact_argv's separator): a name and its value are on one line
_HS = r"[^\S\r\n]"
# the password runs to the last `@` of the authority (`u:p@ss@host`), never past a `/`, `?`, `#` or a quote
_URL_CREDENTIALS_RE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@'\"]*:)([^/\s?#'\"]+)@")
_AUTH_SCHEME_RE = re.compile(
    rf"((?:proxy-)?authorization{_HS}*[:=]{_HS}*[\"']?(?:bearer|basic|token|bot|digest|negotiate){_HS}+)"
    r"([^\s\"',;]+)",
    re.IGNORECASE,
)
_AUTH_HEADER_RE = re.compile(rf"((?:proxy-)?authorization{_HS}*[:=]{_HS}*[\"']?)"
                             r"(?!(?:bearer|basic|token|bot|digest|negotiate)\s)([^\s\"',;]+)", re.IGNORECASE)
_API_KEY_HEADER_RE = re.compile(rf"\b((?:x-)?api-?key{_HS}*:{_HS}*)([^\s\"',;]+)", re.IGNORECASE)
#: a Cookie header's value is `name=value` pairs (RFC 6265), to the end of the line or a quote
_COOKIE_RE = re.compile(rf"\b((?:set-)?cookie{_HS}*:{_HS}*)([^\s=;,\"']+=[^\n\"']*)", re.IGNORECASE)
#: an unquoted shell word: stops at whitespace, quotes and shell operators
_WORD = r"[^\s\"';|&<>()`]+"
#: a quoted value inside a quoted script, as shlex.quote writes it ('"'"'VALUE'"'"', and deeper): the same run
#: of three or more quote characters on both sides
_NESTED_SQ = r"(?P<q>['\"]{3,})[^'\"\n]*(?P=q)"
_QUOTE_RUN_RE = re.compile(r"['\"]{3,}")
_VALUE = rf"({_NESTED_SQ}|\"[^\"]*\"|'[^']*'|{_WORD})"
_PASSWORD_FLAG_RE = re.compile(
    rf"(--(?:[A-Za-z0-9_]+[_-])?(?:pass|bearer|{_SECRET_WORDS})(?:=|{_HS}+)){_VALUE}", re.IGNORECASE
)
#: openssl/keytool style single-dash options (``-pass pass:x``, ``-passin pass:x``, ``-storepass x``)
_DASH_PASS_RE = re.compile(rf"(\s-(?:[a-z]+)?pass(?:word|in|out|phrase)?{_HS}+(?:pass:)?)(?!env:|file:|fd:|stdin\b)"
                           rf"{_VALUE}")
#: (program, option) pairs whose next word (or attached value, for ``-pX``) is a secret
_PROGRAM_OPTIONS: tuple[tuple[str, str], ...] = (
    (r"mysql\w*|mariadb\w*", r"-p"), (r"sshpass", r"-p\s*"), (r"redis-cli", r"-a\s+"),
    (r"docker|podman|nerdctl|az", r"login\b[^\n;|&]*?\s-p\s+"), (r"ssh-keygen", r"-[NP]\s*"),
    (r"useradd|usermod", r"-p\s+"),
    (r"zip|unzip|7z|7za|unrar", r"-P\s*|-p"), (r"ldap\w+", r"-w\s+"), (r"ipmitool|sqlcmd|bcp", r"-P\s+"),
    (r"mongo|mongosh|mongodump|mongorestore", r"-p\s+"),
)
_PROGRAM_OPTION_RES = tuple(re.compile(rf"(\b(?:{prog})\b[^\n;|&]*?\s(?:{opt})){_VALUE}")
                            for prog, opt in _PROGRAM_OPTIONS)
_CURL_USER_RE = re.compile(r"(\bcurl\b[^\n;|&]*?\s(?:-u\s*|-U\s*|--user(?:=|\s+)|--proxy-user(?:=|\s+))[\"']?"
                           r"[^\s:\"']+:)([^\s\"'@;|&]+)")
_SMB_USER_RE = re.compile(r"(\b(?:smbclient|rpcclient|smbmap|smbcacls|net)\b[^\n;|&]*?\s(?:-U|--user(?:=|\s+))\s*"
                          r"[\"']?[^\s%\"']+%)([^\s\"';|&]+)")
#: ``htpasswd -b FILE USER PW``; with -n (print, no file) ``htpasswd -nb USER PW``
_HTPASSWD_RE = re.compile(rf"(\bhtpasswd\s+(?:-[A-Za-z]+\s+)*-(?![A-Za-z]*n)[A-Za-z]*b[A-Za-z]*\s+(?:-[A-Za-z]+\s+)*"
                          rf"{_WORD}\s+{_WORD}\s+){_VALUE}")
_HTPASSWD_N_RE = re.compile(rf"(\bhtpasswd\s+(?:-[A-Za-z]+\s+)*-(?=[A-Za-z]*n)[A-Za-z]*b[A-Za-z]*\s+(?:-[A-Za-z]+\s+)*"
                            rf"{_WORD}\s+){_VALUE}")
_VAULT_LOGIN_RE = re.compile(rf"(\bvault\s+login\s+(?:-[A-Za-z-]+(?:=\S+)?\s+)*)(?!-){_VALUE}")
_AWS_SET_RE = re.compile(rf"(\baws\s+configure\s+set\s+(?:\S+\.)?{_SECRET_NAME}\s+){_VALUE}", re.IGNORECASE)
_SIGNED_URL_RE = re.compile(
    r"((?<=[?&])(?:sig|signature|key|X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature|"
    r"X-Goog-Credential)=)([^&\s\"'#]+)",
    re.IGNORECASE,
)
_ASSIGNMENT_RE = re.compile(
    rf"(?<![A-Za-z0-9_/])([\"']?)({_SECRET_NAME})\1({_HS}*={_HS}*|{_HS}+=>{_HS}*(?=[\"']))"
    rf"(\[REDACTED\]|{_NESTED_SQ}|\"[^\"\n]*\"|'[^'\n]*'|"
    rf"[^\s\"',;&|)}}\]<>(`]+)",
    re.IGNORECASE,
)
# `name: value` (YAML, JSON, logs): the name is a key (not the end of a path), the value not an option
_COLON_RE = re.compile(
    rf"(?<![A-Za-z0-9_/.-])([\"']?)({_SECRET_NAME})\1({_HS}*:{_HS}*)(?!-)(\[REDACTED\]|{_NESTED_SQ}|\"[^\"\n]*\"|'[^'\n]*'|"
    rf"[^\s\"',;&|)}}\]<>(`]+)",
    re.IGNORECASE,
)
#: a .netrc entry (netrc(5)): ``machine NAME`` (or ``default``), then login/account/port tokens in any order before
#: ``password VALUE``, on one line or several
_NETRC_TOKENS = r"(?:[ \t\r\n]+(?:login|account|port|protocol)[ \t\r\n]+\S+)"
#: (a ``login`` token before the password, or right after it: "machine learning password manager" is prose)
_NETRC_RE = re.compile(rf"(\b(?:machine[ \t\r\n]+\S+|default){_NETRC_TOKENS}*?[ \t\r\n]+login[ \t\r\n]+\S+"
                       rf"{_NETRC_TOKENS}*[ \t\r\n]+password[ \t\r\n]+){_VALUE}")
_NETRC_LOGIN_AFTER_RE = re.compile(rf"(\b(?:machine[ \t\r\n]+\S+|default){_NETRC_TOKENS}*[ \t\r\n]+password"
                                   rf"[ \t\r\n]+){_VALUE}(?=[ \t\r\n]+login[ \t\r\n])")
#: ``Bearer TOKEN`` outside an Authorization header (a token of 16 characters or more)
_BEARER_RE = re.compile(r"(\bBearer[ \t]+)([A-Za-z0-9._~+/-]{16,}=*)")
#: ``echo 'user:PW' | chpasswd`` and ``lftp -u user,PW``
_CHPASSWD_RE = re.compile(r"(\becho\b[^\n|;&]*?[\s\"'][^\s:\"'|]+:)([^\s\"'|;&]+)(?=[\"']?[^\n|;&]*\|\s*(?:sudo\s+)?"
                          r"chpasswd\b)")
_LFTP_USER_RE = re.compile(r"(\blftp\b[^\n;|&]*?\s-u\s+[\"']?[^\s,\"']+,)([^\s\"';|&]+)")
#: ``user:PASSWORD@host`` without a scheme (a host alias, a git or scp destination); not ``mailto:x@y``
_USERINFO_RE = re.compile(r"(?<![\w/:@.%+-])((?!(?:mailto|sip|sips|xmpp|tel|urn|data|news):)(?![0-9]+:)"
                          r"[A-Za-z0-9._%+-]+:)([^\s@/:'\"]+)@(?=[A-Za-z0-9\[])")
#: a PuTTY private key file (PuTTY-User-Key-File-2/3): the base64 lines after ``Private-Lines: N``
_PUTTY_RE = re.compile(r"(Private-Lines:[ \t]*\d+\r?\n)((?:[A-Za-z0-9+/=]+\r?\n)*[A-Za-z0-9+/=]+(?=\r?\n|$))")
#: a registry login in a Docker/Podman config (~/.docker/config.json, auth.json): "auth" is base64 of user:password
_DOCKER_AUTH_RE = re.compile(r"(\"auth\"\s*:\s*\")([A-Za-z0-9+/]{12,}={0,2})(?=\")")
_XML_RE = re.compile(rf"(<({_SECRET_NAME})>)([^<\n]+)(?=</\2>)", re.IGNORECASE)
#: a Google Cloud service account key file's key id (its "private_key" is a PEM block, found as one)
_GCP_KEY_ID_RE = re.compile(r"(\"private_key_id\"\s*:\s*\")([0-9a-f]{40})(?=\")")
#: ``echo 'PW' | passwd --stdin USER`` (passwd(1) of Red Hat systems reads the new password from stdin)
_PASSWD_STDIN_RE = re.compile(r"(\becho\b[^\n|;&]*?[\s\"'])([^\s\"'|;&]+)(?=[\"']?[ \t]*\|[ \t]*(?:sudo[ \t]+)?passwd"
                              r"[ \t]+--stdin\b)")
#: a shadow(5) line (``name:HASH:lastchg:min:max:warn:inactive:expire:``) whatever its hash looks like now (``tr '$'
#: '%'`` changes the crypt(5) shape, not the line's): the second field of 12 characters or more
_SHADOW_LINE_RE = re.compile(r"(?:^|(?<=[\s:>+]))([A-Za-z_][A-Za-z0-9_.-]*\$?:)([^:\s]{12,})"
                             r"(?=:\d*:\d*:\d*:\d*:\d*:\d*:)", re.MULTILINE)
#: a .pgpass line (``hostname:port:database:username:password``, PostgreSQL "The Password File")
_PGPASS_RE = re.compile(r"^([^:\s]*[A-Za-z.*][^:\s]*:(?:[0-9]{1,5}|\*):[^:\s]*[A-Za-z*][^:\s]*:"
                        r"[^:\s]*[A-Za-z*][^:\s]*:)(\S*[^\s0-9]\S*)$", re.MULTILINE)
_SHAPES: tuple[str, ...] = (
    r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",
    r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
    r"\bglpat-[A-Za-z0-9_-]{20,}",
    r"\bsk-(?:proj-|svcacct-|admin-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,}",
    r"\b(?:[rs]k_live|whsec)_[A-Za-z0-9]{16,}\b",
    r"\bxox[abprse]-[A-Za-z0-9-]{10,}",
    r"\bhooks\.slack\.com/services/[A-Za-z0-9/]{20,}",
    r"\bhf_[A-Za-z0-9]{30,}\b",
    r"\bAIza[0-9A-Za-z_-]{35}",
    r"\bya29\.[0-9A-Za-z_-]{20,}",
    r"\bnpm_[A-Za-z0-9]{36}\b",
    r"\bpypi-[A-Za-z0-9_-]{50,}",
    r"\bdckr_pat_[A-Za-z0-9_-]{20,}",
    r"\bdop_v1_[a-f0-9]{64}\b",
    r"\bhvs\.[A-Za-z0-9_-]{24,}",
    r"\bdapi[0-9a-f]{32}\b",
    r"\bAGE-SECRET-KEY-1[0-9A-Z]{50,}",
    r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    # crypt(5) password hashes (shadow(5)): MD5, SHA-256/512 (rounds=N), bcrypt, yescrypt, gost-yescrypt, scrypt,
    # Argon2 (libxcrypt's prefixes)
    r"\$(?:1|5|6)\$(?:rounds=\d+\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{22,86}",
    r"\$2[abxy]\$\d\d\$[./A-Za-z0-9]{53,}",
    r"\$(?:y|gy|7)\$[./A-Za-z0-9]+\$[./A-Za-z0-9]{1,64}\$[./A-Za-z0-9]{20,}",
    r"\$argon2(?:id|i|d)\$v=\d+\$m=\d+,t=\d+,p=\d+\$[A-Za-z0-9+/]+\$[A-Za-z0-9+/]{16,}",
    # Apache's htpasswd: MD5 (apr1) and SHA-1
    r"\$apr1\$[./A-Za-z0-9]{1,8}\$[./A-Za-z0-9]{22}",
    r"\{SHA\}[A-Za-z0-9+/]{27}=",
    # the same crypt(5) hashes with their `$` turned into another symbol on the way out (`tr '$' '%'`)
    r"(?P<d1>[%#@!^&*~|+=;,_-])(?:1|5|6)(?P=d1)(?:rounds=\d+(?P=d1))?[./A-Za-z0-9]{1,16}(?P=d1)[./A-Za-z0-9]{22,86}",
    r"(?P<d2>[%#@!^&*~|+=;,_-])(?:y|gy|7)(?P=d2)[./A-Za-z0-9]+(?P=d2)[./A-Za-z0-9]{1,64}(?P=d2)[./A-Za-z0-9]{20,}",
    r"(?P<d3>[%#@!^&*~|+=;,_-])2[abxy](?P=d3)\d\d(?P=d3)[./A-Za-z0-9]{53,}",
    # a Telegram bot token (in a URL path: api.telegram.org/botID:TOKEN/), a Discord webhook
    r"(?<![0-9])[0-9]{6,12}:AA[A-Za-z0-9_-]{30,}",
    r"\bdiscord(?:app)?\.com/api/webhooks/[0-9]{6,}/[A-Za-z0-9_-]{40,}",
)
_SHAPES_RE = re.compile("|".join(f"(?:{p})" for p in _SHAPES))
_SECRET_HINT_RE = re.compile(r"(?:token|secret|passw(?:or)?d|pass|_pwd|_pat|key|key_base|credentials?|psk)[\"']?\s*"
                             r"(?:[=:]|=>)")
# the same as _ASSIGNMENT_RE/_COLON_RE for lower-cased text, without IGNORECASE (4x faster)
_ASSIGNMENT_LOW_RE = re.compile(_ASSIGNMENT_RE.pattern.replace(r"\[REDACTED\]", r"\[redacted\]"))
_COLON_LOW_RE = re.compile(_COLON_RE.pattern.replace(r"\[REDACTED\]", r"\[redacted\]"))

Span = tuple[int, int]


@dataclass(frozen=True)
class _Rule:
    """One pattern: where it may apply (``gate`` on the text and its lower case), the group holding the secret,
    whether quotes around the value are kept (and a ``$...`` value left alone), whether it is certain, and
    whether the value found is remembered as a known secret (:func:`_learn`)."""

    regex: re.Pattern[str]
    group: int | str
    gate: Callable[[str, str], bool]
    certain: bool
    keep_quotes: bool = True
    learn: bool = True


_RULES: tuple[_Rule, ...] = (
    _Rule(_PRIVATE_KEY_RE, 4, lambda t, lo: "private key" in lo, True, keep_quotes=False, learn=False),
    _Rule(_URL_CREDENTIALS_RE, 2, lambda t, lo: "://" in t, True, keep_quotes=False),
    _Rule(_AUTH_SCHEME_RE, 2, lambda t, lo: "authorization" in lo, True),
    _Rule(_AUTH_HEADER_RE, 2, lambda t, lo: "authorization" in lo, False),
    _Rule(_API_KEY_HEADER_RE, 2, lambda t, lo: "key" in lo, False),
    _Rule(_COOKIE_RE, 2, lambda t, lo: "cookie" in lo, False),
    _Rule(_PASSWORD_FLAG_RE, 2, lambda t, lo: "--" in t, True),
    _Rule(_DASH_PASS_RE, 2, lambda t, lo: "pass" in lo, True),
    *(_Rule(r, 2, lambda t, lo: True, True) for r in _PROGRAM_OPTION_RES),
    _Rule(_CURL_USER_RE, 2, lambda t, lo: "curl" in t, True),
    _Rule(_SMB_USER_RE, 2, lambda t, lo: "%" in t, True),
    _Rule(_HTPASSWD_RE, 2, lambda t, lo: "htpasswd" in t, True),
    _Rule(_HTPASSWD_N_RE, 2, lambda t, lo: "htpasswd" in t, True),
    _Rule(_VAULT_LOGIN_RE, 2, lambda t, lo: "vault" in t, True),
    _Rule(_AWS_SET_RE, 2, lambda t, lo: "aws" in t, True),
    _Rule(_SIGNED_URL_RE, 2, lambda t, lo: "sig" in lo or "x-amz-" in lo or "credential" in lo or "key=" in lo, True,
          keep_quotes=False),
    _Rule(_DOCKER_AUTH_RE, 2, lambda t, lo: '"auth"' in t, True, keep_quotes=False),
    _Rule(_NETRC_RE, 2, lambda t, lo: "password" in lo and ("machine" in lo or "default" in lo), True),
    _Rule(_NETRC_LOGIN_AFTER_RE, 2, lambda t, lo: "password" in lo and ("machine" in lo or "default" in lo), True),
    _Rule(_BEARER_RE, 2, lambda t, lo: "Bearer" in t, True, keep_quotes=False),
    _Rule(_CHPASSWD_RE, 2, lambda t, lo: "chpasswd" in t, True, keep_quotes=False),
    _Rule(_LFTP_USER_RE, 2, lambda t, lo: "lftp" in t, True, keep_quotes=False),
    _Rule(_USERINFO_RE, 2, lambda t, lo: "@" in t and ":" in t, True, keep_quotes=False),
    _Rule(_PUTTY_RE, 2, lambda t, lo: "private-lines" in lo, True, keep_quotes=False, learn=False),
    _Rule(_XML_RE, 3, lambda t, lo: "</" in t, True, keep_quotes=False),
    _Rule(_GCP_KEY_ID_RE, 2, lambda t, lo: "private_key_id" in t, True, keep_quotes=False, learn=False),
    _Rule(_PASSWD_STDIN_RE, 2, lambda t, lo: "--stdin" in t, True, keep_quotes=False),
    _Rule(_SHADOW_LINE_RE, 2, lambda t, lo: ":::" in t or t.count(":") >= 8, True, keep_quotes=False, learn=False),
    _Rule(_PGPASS_RE, 2, lambda t, lo: t.count(":") >= 4, False, keep_quotes=False),
    _Rule(_SHAPES_RE, 0, lambda t, lo: True, True, keep_quotes=False, learn=False),
)
_PROGRAM_GATE = re.compile(r"mysql|mariadb|sshpass|redis-cli|docker|podman|nerdctl|ssh-keygen|zip|7z|unrar|ldap|"
                           r"ipmitool|sqlcmd|bcp|mongo|useradd|usermod|\baz\b")

# process-wide additions (see the module docstring); guarded because MCP HTTP serves from several threads
_LOCK = threading.Lock()
_EXTRA: list[re.Pattern[str]] = []
_VALUES: set[str] = set()
_MIN_VALUE_CHARS = 6
#: values found by certain rules, oldest first (a dict as an ordered set), at most _MAX_LEARNED
_LEARNED: dict[str, None] = {}
_MAX_LEARNED = 1024
#: one regex for every known value, rebuilt when the values change (a version counter)
_KNOWN: list[Any] = [-1, None]
_VERSION = [0]


def add_patterns(patterns: Iterable[str | re.Pattern[str]]) -> None:
    """Apply ``patterns`` in every later :func:`redact` of this process (a policy file's ``redact:`` list).

    :raises re.error: a pattern does not compile.
    """
    compiled = [re.compile(p) if isinstance(p, str) else p for p in patterns]
    with _LOCK:
        for p in compiled:
            if all(p.pattern != q.pattern for q in _EXTRA):
                _EXTRA.append(p)


def add_secret_values(values: Iterable[str]) -> None:
    """Hide these literal values in every later :func:`redact` of this process (values of secret-named variables a
    call gave in its ``env``: a command that echoes them must not show them). Values shorter than 6 characters are
    ignored (they would hide ordinary text). Kept in memory only."""
    with _LOCK:
        before = len(_VALUES)
        _VALUES.update(v for v in values if len(v) >= _MIN_VALUE_CHARS)
        if len(_VALUES) != before:
            _VERSION[0] += 1


def _learnable(value: str) -> bool:
    """Whether a value a certain rule found is specific enough to hide wherever it appears again: 6 to 256
    characters on one line, with a letter, and a digit, a symbol or a capital after a small letter (or 12
    characters or more), so a plain word such as ``secret`` or ``PASSWORD``, or a number, is never hidden on its
    own."""
    if not _MIN_VALUE_CHARS <= len(value) <= 256 or "\n" in value or value.upper() == MARK:
        return False
    if not any(c.isalpha() for c in value):
        return False
    return len(value) >= 12 or _secret_shaped(value)


def _secret_shaped(value: str) -> bool:
    """Letters with digits or symbols, or a capital after a small letter (``hunter2``, ``p@ss``, ``xYz``)."""
    return any(c.isalpha() for c in value) and (
        any(c.isdigit() for c in value) or _SYMBOL_RE.search(value) is not None
        or _INNER_CAPITAL_RE.search(value) is not None)


def _learn(values: list[str]) -> None:
    """Remember ``values`` (found by certain rules) as known secrets of this process: the same value shown later
    without a shape around it (a command's ``smbclient -U u%VALUE``, then ``VALUE`` in its output, a transcript's
    tool result) is hidden too."""
    with _LOCK:
        changed = False
        for value in values:
            if value not in _LEARNED and value not in _VALUES and _learnable(value):
                _LEARNED[value] = None
                changed = True
        while len(_LEARNED) > _MAX_LEARNED:
            del _LEARNED[next(iter(_LEARNED))]
        if changed:
            _VERSION[0] += 1


def _known_values_re() -> re.Pattern[str] | None:
    """One regex matching every known value (longest first), or None; call with _LOCK held."""
    if _KNOWN[0] != _VERSION[0]:
        values = sorted({*_VALUES, *_LEARNED}, key=len, reverse=True)
        _KNOWN[:] = [_VERSION[0], re.compile("|".join(map(re.escape, values))) if values else None]
    return _KNOWN[1]  # type: ignore[no-any-return]


def _value_span(text: str, start: int, end: int) -> Span | None:
    """The span of a value to hide: quotes kept around it, a value that is shell code (``$...``) left alone."""
    value = text[start:end]
    if value[:1] in ("$", "`") or value[:2] in ('"$', '"`'):
        return None  # shell code (an expansion), not a literal secret: keep it visible
    run = _QUOTE_RUN_RE.match(value)
    if run is not None and len(value) >= 2 * len(run.group()) and value.endswith(run.group()):
        n = len(run.group())
        return (start + n, end - n) if end - start > 2 * n else None
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return (start + 1, end - 1) if end - start > 2 else None
    if value.upper() == MARK or _not_a_secret(value, text[max(0, start - 40):start]):
        return None
    return start, end


#: a help text's metavariable (``--password PASSWORD``, ``--api-key API_KEY``)
_METAVAR_RE = re.compile(r"[A-Z][A-Z_-]*")
_METAVAR_WORD_RE = re.compile(r"TOKEN|SECRET|PASS|KEY|PWD|CRED|AUTH")
_OPTION_BEFORE_RE = re.compile(r"(?:^|\s)-{1,2}[\w-]+(?:=|[^\S\r\n]+)$")
#: a file path: under a well-known directory, relative to home or here, or naming a file with an extension
_PATH_RE = re.compile(r"(?:~|\.{1,2})?/[\w.@:+-]+(?:/[\w.@:+-]*)*")
_PATH_ROOTS = frozenset({"etc", "run", "var", "home", "root", "tmp", "opt", "usr", "srv", "mnt", "dev", "proc", "sys",
                         "lib", "bin", "sbin", "boot", "media", "data", "workspace", "app", "secrets", "certs"})
_EXTENSION_RE = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}:?$")
_SYMBOL_RE = re.compile(r"[!@#%^&*+=~?]")
_INNER_CAPITAL_RE = re.compile(r"[^\W\d_A-Z][^\W\d_a-z]")


def _not_a_secret(value: str, before: str) -> bool:
    """A value in a secret's place that is not one: a help text's metavariable (``--password PASSWORD``,
    ``--token=TOKEN``; ``before`` is the text before the value), a placeholder in brackets (``<token>``,
    ``{password}``) or a file path (``/etc/ssl/private/key.pem``, ``~/.netrc``: where a secret is, not the
    secret)."""
    if _METAVAR_RE.fullmatch(value) and _METAVAR_WORD_RE.search(value) and _OPTION_BEFORE_RE.search(before):
        return True
    if value[:1] + value[-1:] in ("<>", "{}", "[]"):
        return True
    if _PATH_RE.fullmatch(value):
        first = value.lstrip("~.").lstrip("/").split("/", 1)[0]
        return value[0] in "~." or first in _PATH_ROOTS or _EXTENSION_RE.search(value) is not None
    return False


#: values that stand for "no secret here" in messages (``using password: YES``, ``token: expired``)
_PLACEHOLDERS = frozenset({
    "yes", "no", "y", "n", "true", "false", "none", "null", "nil", "not", "set", "unset", "empty", "blank", "expired",
    "invalid", "incorrect", "wrong", "bad", "required", "missing", "changed", "unchanged", "updated", "ok", "okay",
    "on", "off", "enabled", "disabled", "unknown", "hidden", "redacted", "masked", "provided", "given", "present",
    "absent", "supplied", "na", "n/a", "tbd", "todo", "default", "denied", "failed", "refused", "granted", "pending",
    "error", "success", "valid", "revoked", "found", "is", "was", "for", "of", "the", "a", "an", "to", "in", "and",
    "or", "from", "by", "with", "too", "short", "long", "weak", "strong", "match", "matches", "mismatch", "again",
    "accepted", "rejected", "saved", "stored", "used", "generated", "created", "deleted", "removed", "unavailable",
    # the secret's own name in its place (``New password: Password change has been aborted``)
    "password", "passwd", "passphrase", "pass", "token", "secret", "key", "credential", "credentials",
})
_PLACEHOLDER_RE = re.compile(r"[*xX.#_-]+|\(.*\)")
#: what may follow a value that ends its item: the end of the line, a comment, a separator or a closing bracket
_ITEM_END_RE = re.compile(r"[^\S\r\n]*(?:$|[\r\n#,;)}\]\"'])")


def _plausible(text: str, start: int, end: int, after: int) -> bool:
    """Whether the value ``text[start:end]`` of an uncertain ``name: value`` pair (``after`` is where the pair's
    match ends) is taken for a secret: not a placeholder or status word (``password: YES``, ``secret: not set``),
    and either shaped like one (letters with digits or symbols, a capital inside, or 16 letters and digits
    or more) or the whole of its item (the rest of the line is empty, a comment or a separator), so a word that
    begins a sentence (``passwd: Authentication token manipulation error``) is left alone."""
    value = text[start:end]
    words = value.lower().split()
    if not words or all(w.strip(".,!") in _PLACEHOLDERS for w in words) or _PLACEHOLDER_RE.fullmatch(value):
        return False
    if _secret_shaped(value) or (len(value) >= 16 and value.isalnum()):
        return True
    return _ITEM_END_RE.match(text, after) is not None


def _assignment_spans(text: str, low: str, certain_only: bool, learned: list[str]) -> list[Span]:
    spans: list[Span] = []
    pairs = [(_ASSIGNMENT_LOW_RE, _ASSIGNMENT_RE, True)]
    if not certain_only:
        pairs.append((_COLON_LOW_RE, _COLON_RE, False))
    for fast, slow, certain in pairs:
        # a character whose lower case is longer would shift the spans: read the text itself (slower)
        matches = fast.finditer(low) if len(low) == len(text) else slow.finditer(text)
        for m in matches:
            if not is_secret_name(text[m.start(2):m.end(2)]):
                continue
            vstart, vend = m.start(4), m.end(4)
            opener = text[m.start(2) - 1] if not m.group(1) and m.start(2) > 0 else ""
            if opener in ("\"", "'") and not _QUOTE_RUN_RE.match(text, vstart):
                # `"api_key=" "next word"`: the quote that opened before the name closes the value
                cut = text.find(opener, vstart, vend)
                if cut == vstart:
                    continue
                if cut > 0:
                    vend = cut
            span = _value_span(text, vstart, vend)
            if span is None or (not certain and not _plausible(text, *span, m.end(4))):
                continue
            spans.append(span)
            if certain:
                learned.append(text[span[0]:span[1]])
    return spans


_PEM_BEGIN_RE = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
_PEM_END_RE = re.compile(r"-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----")
#: a terminal escape sequence (CSI, or OSC ended by BEL or ST): grep --color puts them around every line
_ANSI = r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b\n]*(?:\x07|\x1b\\))"
_ANSI_RE = re.compile(_ANSI)
#: a line of a key's body: base64, or an RFC 1421 header (an encrypted PEM key's Proc-Type and DEK-Info)
_PEM_BODY_RE = re.compile(r"[A-Za-z0-9+/=]+|(?:Proc-Type|DEK-Info|Comment):.*")
_MAX_KEY_LINES = 4096


def _line_prefix_re(prefix: str) -> re.Pattern[str]:
    """A pattern for the text before a key's BEGIN marker on its line (``/etc/ssh/k:``, ``> ``, ``+``, ``  12\t``),
    as it starts every later line of the same key: its digits may change (grep -n, cat -n), blanks may grow or
    shrink, and terminal escapes may come and go anywhere in it."""
    ansi = f"(?:{_ANSI})*"
    parts = [ansi]
    for token in re.findall(r"[0-9]+|[ \t]+|.", _ANSI_RE.sub("", prefix), re.DOTALL):
        parts.append(r"[0-9]+" if token[0].isdigit() else r"[ \t]*" if token[0] in " \t" else re.escape(token))
        parts.append(ansi)
    return re.compile("".join(parts))


def _key_body_spans(text: str) -> list[Span]:
    """The body of each private key block whose lines carry something besides the key: a prefix repeated on every
    line (``FILE:`` from ``grep -r``, ``FILE:N:`` from ``grep -rn``, ``> `` from diff, ``+`` from a unified diff,
    ``cat -n``'s numbers), terminal colours (``grep --color``) or a ``$`` at the end (``cat -A``). From the line after
    the BEGIN marker, each line that starts with the BEGIN line's prefix and holds key text (base64, a PEM header,
    nothing) is hidden after the prefix, up to the END marker; a line that does not stops it."""
    spans: list[Span] = []
    for m in _PEM_BEGIN_RE.finditer(text):
        start = text.rfind("\n", 0, m.start()) + 1
        prefix = _line_prefix_re(text[start:m.start()])
        pos = text.find("\n", m.end())
        for _ in range(_MAX_KEY_LINES):
            if pos < 0:
                break
            pos += 1
            eol = text.find("\n", pos)
            eol = len(text) if eol < 0 else eol
            at = prefix.match(text, pos, eol)
            if at is None:
                break
            body = _ANSI_RE.sub("", text[at.end():eol]).rstrip("\r")
            body = body.removesuffix("$").removesuffix("^M").strip()
            end = _PEM_END_RE.search(text, at.end(), eol)
            if end is not None:
                if end.start() > at.end():
                    spans.append((at.end(), end.start()))
                break
            if body and not _PEM_BODY_RE.fullmatch(body):
                break
            if body:
                spans.append((at.end(), eol))
            pos = eol if eol < len(text) else -1
    return spans


#: ``name: |`` (or ``>``) and the lines indented below it: a YAML block scalar (YAML 1.2, 8.1); ``name:`` and ``- item``
#: lines below it: a block sequence
_YAML_BLOCK_RE = re.compile(r"^([ \t]*)([\"']?)([A-Za-z0-9_.-]+)\2[ \t]*:[ \t]*[|>][-+0-9]*[ \t]*(?:#[^\n]*)?\n"
                            r"((?:\1[ \t]+[^\n]*\S[^\n]*(?:\n|$)|[ \t]*\n)+)", re.MULTILINE)
_YAML_LIST_RE = re.compile(r"^([ \t]*)([\"']?)([A-Za-z0-9_.-]+)\2[ \t]*:[ \t]*(?:#[^\n]*)?\n"
                           r"((?:\1[ \t]*-[ \t]+[^\n]*(?:\n|$))+)", re.MULTILINE)
_YAML_ITEM_RE = re.compile(r"^[ \t]*-[ \t]+(.*?)[ \t]*$", re.MULTILINE)
_YAML_LINE_RE = re.compile(r"^[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def _yaml_spans(text: str) -> list[Span]:
    """Values of a secret-named YAML key written on the lines below it: a block scalar (``token: |`` and the
    indented lines), or a list (``secrets:`` or ``passwords:`` and its ``- VALUE`` items). Not of certain shape
    (a ``name: value`` pair's rules: :func:`_plausible`)."""
    spans: list[Span] = []
    for m in _YAML_BLOCK_RE.finditer(text):
        if not is_secret_name(m.group(3)):
            continue
        lines = [line for line in _YAML_LINE_RE.finditer(text, m.start(4), m.end(4)) if line.group(1)]
        if lines and _plausible(text, lines[0].start(1), lines[-1].end(1), lines[-1].end(1)):
            spans += [line.span(1) for line in lines]
    for m in _YAML_LIST_RE.finditer(text):
        name = m.group(3)
        if not (is_secret_name(name) or (name.endswith("s") and is_secret_name(name[:-1]))):
            continue
        for item in _YAML_ITEM_RE.finditer(text, m.start(4), m.end(4)):
            span = _value_span(text, *item.span(1)) if item.group(1) else None
            if span is not None and _plausible(text, *span, item.end(1)):
                spans.append(span)
    return spans


#: what changes how text looks to a pattern without changing what a person reads: full-width forms of ASCII
#: (``ＰＡＳＳＷＯＲＤ=``), invisible characters (zero-width spaces and joiners, the word joiner, a BOM, a soft hyphen:
#: ``PASS\u200bWORD=``) and terminal escapes (``grep --color=always .`` colours every character of a key apart)
_FOLD_RE = re.compile(f"[\uff01-\uff5e\u200b-\u200f\u2060-\u2064\ufeff\u00ad]|{_ANSI}")


def _folded(text: str) -> tuple[str, list[int]]:
    """``text`` with full-width ASCII made ASCII, invisible characters and terminal escapes dropped, and for each
    character of the result its index in ``text``."""
    out: list[str] = []
    where: list[int] = []
    pos = 0
    for m in _FOLD_RE.finditer(text):
        out.append(text[pos:m.start()])
        where.extend(range(pos, m.start()))
        code = ord(m.group()[0])
        if len(m.group()) == 1 and 0xFF01 <= code <= 0xFF5E:
            out.append(chr(code - 0xFEE0))
            where.append(m.start())
        pos = m.end()
    out.append(text[pos:])
    where.extend(range(pos, len(text)))
    return "".join(out), where


def secret_spans(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = (), *,
                 certain_only: bool = False) -> list[Span]:
    """The ``(start, end)`` character spans of ``text`` that :func:`redact` hides, sorted and merged.

    :param certain_only: only spans whose shape is certain (see the module docstring).
    """
    if not text:
        return []
    low = text.lower()
    spans: list[Span] = []
    learned: list[str] = []
    programs = _PROGRAM_GATE.search(text) is not None
    for rule in _RULES:
        if (certain_only and not rule.certain) or not rule.gate(text, low):
            continue
        if not programs and rule.regex in _PROGRAM_OPTION_RES:
            continue
        for m in rule.regex.finditer(text):
            start, end = m.span(rule.group)
            if start < 0 or start == end:
                continue
            span = _value_span(text, start, end) if rule.keep_quotes else (start, end)
            if span is None or (not rule.certain and not _plausible(text, *span, end)):
                continue
            spans.append(span)
            if rule.certain and rule.learn:
                learned.append(text[span[0]:span[1]])
    if _SECRET_HINT_RE.search(low):
        spans += _assignment_spans(text, low, certain_only, learned)
    if "private key" in low:
        spans += _key_body_spans(text)
    if not certain_only and ":" in text and "\n" in text:
        spans += _yaml_spans(text)
    if learned:
        _learn(learned)
    with _LOCK:
        extra = [*_EXTRA, *(re.compile(p) if isinstance(p, str) else p for p in extra_patterns)]
        known = _known_values_re()
    for pattern in extra:
        group: int | str = "secret" if "secret" in pattern.groupindex else 0
        for m in pattern.finditer(text):
            start, end = m.span(group)
            if start >= 0 and start < end:
                spans.append((start, end))
    if known is not None:
        spans += [m.span() for m in known.finditer(text)]
    if _FOLD_RE.search(text):  # what the same text holds once full-width and invisible characters are read away
        folded, where = _folded(text)
        spans += [(where[a], where[b - 1] + 1) for a, b in secret_spans(folded, extra_patterns,
                                                                         certain_only=certain_only) if b > a]
    return _merge(spans)


def _merge(spans: list[Span]) -> list[Span]:
    merged: list[Span] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _apply(text: str, spans: list[Span], start: int = 0, end: int | None = None) -> str:
    end = len(text) if end is None else end
    out: list[str] = []
    pos = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        out += [text[pos:s], MARK]
        pos = e
    out.append(text[pos:end])
    return "".join(out)


def redact(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = (), *, certain_only: bool = False) -> str:
    """Return ``text`` with secrets replaced by ``[REDACTED]`` (key names, schemes and quotes kept).

    :param text: any text: a command line, command output, a log line.
    :param extra_patterns: more regexes; each replaces its whole match, or only its ``secret`` group.
    :param certain_only: hide only spans whose shape is certain (an approval prompt: see the module docstring).
    :raises re.error: an extra pattern does not compile.
    """
    if not text:
        return text
    spans = secret_spans(text, extra_patterns, certain_only=certain_only)
    return _apply(text, spans) if spans else text


def redact_slice(text: str, start: int, end: int, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> str:
    """``redact(text)[start:end]`` as it should be shown: ``text[start:end]`` with every secret span that reaches
    into it hidden, the secrets found with the context of all of ``text`` (a secret cut by ``start`` or ``end`` is
    hidden in part too).

    :param text: the window: the slice plus context on both sides.
    :param start: where the slice begins in ``text`` (characters). :param end: where it ends.
    """
    return redact_slices(text, [(start, end)], extra_patterns)[0]


def redact_slices(text: str, ranges: Iterable[tuple[int, int]],
                  extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> list[str]:
    """:func:`redact_slice` of each ``(start, end)`` of ``ranges`` (characters) in one window: its secrets are
    found once, whatever the number of slices (a search's many matching lines in one stretch of output)."""
    spans = secret_spans(text, extra_patterns)
    return [_apply(text, spans, start, end) for start, end in ranges]


#: characters a span hidden in an approval prompt may not hold: through them hidden text could be code (``$``, a
#: backquote, ``<(``), end a command or a quoted string, change how bash reads what follows, or expand into other
#: words (a glob's ``* ? [ ]``, braces, ``~``: ``sshpass -p /usr/sbin/[hr]e* ssh h`` runs reboot). A literal
#: password holding one (``--password 'pa$$w(1)'``) is shown as it is: the person approving must see every word
#: that runs.
_PROMPT_UNSAFE = frozenset("$`;|&<>()\n\r'\"\\*?[]{}~")


def may_hold_code(text: str) -> bool:
    """Whether ``text`` holds a character through which hidden text could be code or end a word (see
    :func:`review_text`): a prompt shows such text rather than hide it."""
    return not _PROMPT_UNSAFE.isdisjoint(text)


def _review_spans(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> list[Span]:
    return [(a, b) for a, b in secret_spans(text, extra_patterns, certain_only=True)
            if not may_hold_code(text[a:b])]


def review_text(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> tuple[str, int]:
    """``text`` as a person approving it is shown it, and how many spans were hidden (``[REDACTED]`` already in
    ``text`` does not count): only secrets of certain shape are hidden, and only where the hidden text holds no
    character that could make it code, end a word or expand it (``$``, a backquote, ``;``, ``|``, ``&``, ``<``,
    ``>``, ``(``, ``)``, a quote, a backslash, a line break, ``*``, ``?``, ``[``, ``]``, ``{``, ``}``, ``~``):
    ``--password "a$(id)"`` and ``sshpass -p /usr/bin/[st]* ...`` are shown whole."""
    spans = _review_spans(text, extra_patterns)
    return (_apply(text, spans) if spans else text), len(spans)


def review_gaps(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> int:
    """How many spans :func:`redact` hides in ``text`` that :func:`review_text` shows: what a person reading the
    redacted (stored) form of ``text`` cannot see but would be shown in a prompt (shell code in a secret's place,
    a value of uncertain shape). 0: the stored form hides nothing but values of certain shape."""
    shown = _review_spans(text, extra_patterns)
    return sum(1 for a, b in secret_spans(text, extra_patterns) if not any(s <= a and b <= e for s, e in shown))


def redact_obj(obj: Any, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> Any:
    """Redact a JSON-like structure: every string (keys too: an ``env`` mapping's names are the caller's text) is
    redacted and the value of a secret-named key is hidden (a string or a number; a boolean holds no secret: a
    result's ``secret: true`` says that a prompt asks for one).

    Returns a new structure (dicts, lists and tuples are copied; other values are returned as they are).
    """
    patterns = tuple(extra_patterns)
    if isinstance(obj, str):
        return redact(obj, patterns)
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if (isinstance(key, str) and is_secret_name(key) and isinstance(value, str | int | float)
                    and not isinstance(value, bool)):
                out[key] = MARK if value != "" else value
            else:
                out[redact(key, patterns) if isinstance(key, str) else key] = redact_obj(value, patterns)
        return out
    if isinstance(obj, list):
        return [redact_obj(item, patterns) for item in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(item, patterns) for item in obj)
    return obj


def secret_env_values(env: Mapping[str, str] | None) -> list[str]:
    """The values of ``env`` that are secrets by their variable's name (``QA_TOKEN``) or by their shape."""
    return [v for k, v in (env or {}).items() if is_secret_name(k) or _SHAPES_RE.fullmatch(v)]


_ARGV_SEP = "\x1f"  # a separator the patterns read as whitespace (str.isspace) that no argument holds


def redact_argv(argv: list[str], extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> list[str]:
    """Redact a command's words together, so ``["--password", "x"]`` and ``["mysql", "-p", ...]`` are seen as
    the command line they form; returns as many words as given.

    :param argv: the words (e.g. :attr:`agent_tools.policy.SimpleCommand.argv`).
    """
    if any(_ARGV_SEP in word for word in argv):
        return [redact(word, extra_patterns) for word in argv]
    words = redact(_ARGV_SEP.join(argv), extra_patterns).split(_ARGV_SEP)
    return words if len(words) == len(argv) else [redact(word, extra_patterns) for word in argv]


def redact_event(logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> Mapping[str, Any]:
    """A structlog processor: every string in the event (the message and every value) redacted.

    :func:`agent_tools.logs.configure_logging` and the library's default configuration put it first; an
    application that configures structlog itself should add it to its own processors, before the renderer.
    """
    return redact_obj(dict(event_dict))  # type: ignore[no-any-return]
