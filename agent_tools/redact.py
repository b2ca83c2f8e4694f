"""Replace secrets in text with ``[REDACTED]``, keeping the name of what was hidden.

Covered: private key blocks (``-----BEGIN ... PRIVATE KEY-----``, also ``AGE-SECRET-KEY-1...``); passwords in
URLs (``https://user:[REDACTED]@host``) and signed-URL query parameters (``sig=``, ``X-Amz-Signature=``...);
``Authorization`` / ``Proxy-Authorization`` headers (the scheme is kept), ``Cookie``/``Set-Cookie`` values and
``X-Api-Key`` style headers; ``--password=x``, ``--password x``, ``--token x``, ``--api-key x`` (any option
whose name ends in one of the secret names below), ``mysql -pSECRET``, ``sshpass -p x`` and ``curl -u
user:pw``; ``NAME=value`` / ``name: value`` where NAME ends in TOKEN, SECRET, PASSWORD, PASSWD, _PWD, API_KEY,
ACCESS_KEY, ACCOUNT_KEY, SECRET_KEY, PRIVATE_KEY, CREDENTIAL(S) or AUTH_TOKEN (case-insensitive;
``MAX_TOKENS`` and ``TOKENIZERS_PARALLELISM`` are left alone); and value shapes of common providers: AWS access
key ids (``AKIA``/``ASIA``), GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``, ``ghr_``, ``github_pat_``), GitLab
(``glpat-``), OpenAI/Anthropic style ``sk-...``, Slack ``xox[abprs]-`` and webhook URLs, Hugging Face ``hf_``,
Google ``AIza...`` and OAuth ``ya29.``, Stripe ``sk_live_``/``rk_live_``/``whsec_``, npm ``npm_``, PyPI
``pypi-``, Docker Hub ``dckr_pat_``, DigitalOcean ``dop_v1_``, HashiCorp Vault ``hvs.``, Databricks ``dapi``
and JSON Web Tokens. Shapes are public prefixes documented by each provider (e.g. GitHub "About
authentication"; AWS IAM identifiers; GitLab "Personal access tokens").

A value that is shell code rather than a literal (it starts with ``$`` or a backquote: ``TOKEN=$(vault read
...)``, ``--password "$PW"``) is left as it is, and unquoted values end at shell operators (``; | & < > (
)``), so redacting a command line never hides what it runs from a person reading it.

Redaction is best effort: a secret in a shape nobody listed passes through. Extra patterns (e.g. from a
policy file's ``redact`` list) replace their whole match, or only the group named ``secret`` if they have one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

__all__ = ["MARK", "is_secret_name", "redact", "redact_argv", "redact_event", "redact_obj"]

MARK = "[REDACTED]"
"""The marker that replaces a secret."""

_SECRET_WORDS = (
    r"(?:token|secret|password|passwd|_pwd|api[_-]?key|access[_-]?key|account[_-]?key|secret[_-]?key|"
    r"private[_-]?key|credentials?|auth[_-]?token)"
)
_SECRET_NAME = rf"[A-Za-z0-9_.-]*?{_SECRET_WORDS}"
_SECRET_KEY_RE = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether ``name`` (a variable, option or key name) names a secret: it ends in TOKEN, SECRET, PASSWORD, ...
    (case-insensitive; see the module docstring)."""
    return bool(_SECRET_KEY_RE.match(name))

# the body is base64 and PEM headers (also with JSON's literal \n); a truncated block ends where that stops
_PRIVATE_KEY_RE = re.compile(
    r"(-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY((?: BLOCK)?)-----)((?:[A-Za-z0-9+/=\s,:.-]|\\[nr])*?)"
    r"(-----END \2PRIVATE KEY\3-----|(?=[^A-Za-z0-9+/=\s,:.\\-])|\Z)"
)
_URL_CREDENTIALS_RE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)@")
_AUTH_HEADER_RE = re.compile(
    r"((?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|bot|digest|negotiate)\s+)?)"
    r"([^\s\"',;]+)",
    re.IGNORECASE,
)
_API_KEY_HEADER_RE = re.compile(r"\b((?:x-)?api-?key\s*:\s*)([^\s\"',;]+)", re.IGNORECASE)
_COOKIE_RE = re.compile(r"\b((?:set-)?cookie\s*:\s*)([^\n\"']+)", re.IGNORECASE)
#: an unquoted shell word: stops at whitespace, quotes and shell operators
_WORD = r"[^\s\"';|&<>()`]+"
#: a quoted value inside a quoted script, as shlex.quote writes it ('"'"'VALUE'"'"', and deeper): the same run
#: of three or more quote characters on both sides
_NESTED_SQ = r"(?P<q>['\"]{3,})[^'\"\n]*(?P=q)"
_QUOTE_RUN_RE = re.compile(r"['\"]{3,}")
_VALUE = rf"({_NESTED_SQ}|\"[^\"]*\"|'[^']*'|{_WORD})"
_PASSWORD_FLAG_RE = re.compile(
    rf"(--(?:[A-Za-z0-9_]+[_-])?(?:pass|{_SECRET_WORDS})(?:=|\s+)){_VALUE}", re.IGNORECASE
)
_MYSQL_P_RE = re.compile(rf"(\b(?:mysql\w*|mariadb\w*)\b[^\n;|&]*?\s-p){_VALUE}")
_SSHPASS_RE = re.compile(rf"(\bsshpass\b[^\n;|&]*?\s-p\s*){_VALUE}")
_CURL_USER_RE = re.compile(r"(\bcurl\b[^\n;|&]*?\s(?:-u\s*|--user(?:=|\s+))[\"']?[^\s:\"']+:)([^\s\"'@;|&]+)")
_SIGNED_URL_RE = re.compile(
    r"((?<=[?&])(?:sig|signature|X-Amz-Signature|X-Amz-Credential|X-Amz-Security-Token|X-Goog-Signature|"
    r"X-Goog-Credential)=)([^&\s\"'#]+)",
    re.IGNORECASE,
)
_ASSIGNMENT_RE = re.compile(
    rf"(?<![A-Za-z0-9_])([\"']?)({_SECRET_NAME})\1(\s*(?:=|:)\s*)(\[REDACTED\]|{_NESTED_SQ}|\"[^\"\n]*\"|'[^'\n]*'|"
    rf"[^\s\"',;&|)}}\]<>(`]+)",
    re.IGNORECASE,
)
_SHAPES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
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
    )
)


_SHAPES_RE = re.compile("|".join(f"(?:{p.pattern})" for p in _SHAPES))
_SECRET_HINT_RE = re.compile(r"(?:token|secret|passw(?:or)?d|_pwd|key|credentials?)[\"']?\s*[=:]")
# the same as _ASSIGNMENT_RE for lower-cased text, without IGNORECASE (4x faster)
_ASSIGNMENT_LOW_RE = re.compile(_ASSIGNMENT_RE.pattern.replace(r"\[REDACTED\]", r"\[redacted\]"))


def _sub_assignments(text: str) -> str:
    low = text.lower()
    if len(low) != len(text):  # a character whose lower case is longer: spans would not line up
        return _ASSIGNMENT_RE.sub(
            lambda m: m.group(1) + m.group(2) + m.group(1) + m.group(3) + _keep_quotes(m.group(4)), text)
    out: list[str] = []
    pos = 0
    for m in _ASSIGNMENT_LOW_RE.finditer(low):
        quote, name, sep, value = (text[m.start(i):m.end(i)] for i in range(1, 5))
        out += [text[pos:m.start()], quote, name, quote, sep, _keep_quotes(value)]
        pos = m.end()
    return "".join(out) + text[pos:] if out else text


def _keep_quotes(value: str) -> str:
    if value[:1] in ("$", "`") or value[:2] in ('"$', '"`'):
        return value  # shell code (an expansion), not a literal secret: keep it visible
    run = _QUOTE_RUN_RE.match(value)
    if run is not None and len(value) >= 2 * len(run.group()) and value.endswith(run.group()):
        return run.group() + MARK + run.group()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + MARK + value[0]
    return MARK


def redact(text: str, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> str:
    """Return ``text`` with secrets replaced by ``[REDACTED]`` (key names, schemes and quotes kept).

    :param text: any text: a command line, command output, a log line.
    :param extra_patterns: more regexes; each replaces its whole match, or only its ``secret`` group.
    :raises re.error: an extra pattern does not compile.
    """
    if not text:
        return text
    low = text.lower()
    # each pattern only runs when a word it needs is in the text (a 6 KB output view is read ~10x faster)
    if "private key" in low:
        text = _PRIVATE_KEY_RE.sub(lambda m: f"{m.group(1)}{MARK}{m.group(5)}", text)
    if "://" in text:
        text = _URL_CREDENTIALS_RE.sub(lambda m: f"{m.group(1)}{MARK}@", text)
    if "authorization" in low:
        text = _AUTH_HEADER_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "key" in low:
        text = _API_KEY_HEADER_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "cookie" in low:
        text = _COOKIE_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "--" in text:
        text = _PASSWORD_FLAG_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "mysql" in low or "mariadb" in low:
        text = _MYSQL_P_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "sshpass" in text:
        text = _SSHPASS_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "curl" in text:
        text = _CURL_USER_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    if "sig" in low or "x-amz-" in low or "credential" in low:
        text = _SIGNED_URL_RE.sub(lambda m: m.group(1) + MARK, text)
    if _SECRET_HINT_RE.search(low):
        text = _sub_assignments(text)
    text = _SHAPES_RE.sub(MARK, text)
    for pattern in extra_patterns:
        compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
        if "secret" in compiled.groupindex:
            text = compiled.sub(lambda m: _replace_group(m, "secret"), text)
        else:
            text = compiled.sub(MARK, text)
    return text


def _replace_group(match: re.Match[str], group: str) -> str:
    start, end = match.span(group)
    if start < 0:
        return match.group(0)
    base = match.start()
    whole = match.group(0)
    return whole[: start - base] + MARK + whole[end - base :]


def redact_obj(obj: Any, extra_patterns: Iterable[str | re.Pattern[str]] = ()) -> Any:
    """Redact a JSON-like structure: every string (keys too: an ``env`` mapping's names are the caller's text) is
    redacted and the value of a secret-named key is hidden.

    Returns a new structure (dicts, lists and tuples are copied; other values are returned as they are).
    """
    patterns = tuple(extra_patterns)
    if isinstance(obj, str):
        return redact(obj, patterns)
    if isinstance(obj, dict):
        out: dict[Any, Any] = {}
        for key, value in obj.items():
            if isinstance(key, str) and _SECRET_KEY_RE.match(key) and isinstance(value, str | int | float):
                out[key] = MARK if value != "" else value
            else:
                out[redact(key, patterns) if isinstance(key, str) else key] = redact_obj(value, patterns)
        return out
    if isinstance(obj, list):
        return [redact_obj(item, patterns) for item in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(item, patterns) for item in obj)
    return obj


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
