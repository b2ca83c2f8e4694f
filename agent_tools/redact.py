"""Replace secrets in text with ``[REDACTED]``, keeping the name of what was hidden.

Covered: private key blocks; passwords in URLs (``https://user:[REDACTED]@host``); ``Authorization`` /
``Proxy-Authorization`` headers (the scheme is kept) and ``X-Api-Key`` style headers; ``--password=x``,
``--password x``, ``mysql -pSECRET`` and ``sshpass -p x``; ``NAME=value`` / ``name: value`` where NAME ends in
TOKEN, SECRET, PASSWORD, PASSWD, _PWD, API_KEY, ACCESS_KEY, SECRET_KEY, PRIVATE_KEY, CREDENTIAL(S) or
AUTH_TOKEN (case-insensitive; ``MAX_TOKENS`` and ``TOKENIZERS_PARALLELISM`` are left alone); and value shapes
of common providers: AWS access key ids (``AKIA``/``ASIA``), GitHub (``ghp_``, ``gho_``, ``ghu_``, ``ghs_``,
``ghr_``, ``github_pat_``), OpenAI/Anthropic style ``sk-...``, Slack ``xox[abprs]-``, Hugging Face ``hf_``,
Google ``AIza...``, Stripe ``sk_live_``/``rk_live_`` and JSON Web Tokens. Shapes are public prefixes documented
by each provider (e.g. GitHub "About authentication"; AWS IAM identifiers).

Redaction is best effort: a secret in a shape nobody listed passes through. Extra patterns (e.g. from a
policy file's ``redact`` list) replace their whole match, or only the group named ``secret`` if they have one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["MARK", "redact", "redact_obj"]

MARK = "[REDACTED]"
"""The marker that replaces a secret."""

_SECRET_NAME = (
    r"[A-Za-z0-9_.-]*?(?:token|secret|password|passwd|_pwd|api[_-]?key|access[_-]?key|secret[_-]?key|"
    r"private[_-]?key|credentials?|auth[_-]?token)"
)
_SECRET_KEY_RE = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)

_PRIVATE_KEY_RE = re.compile(
    r"(-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY((?: BLOCK)?)-----)(.*?)(-----END \2PRIVATE KEY\3-----|\Z)", re.DOTALL
)
_URL_CREDENTIALS_RE = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)@")
_AUTH_HEADER_RE = re.compile(
    r"((?:proxy-)?authorization\s*[:=]\s*[\"']?(?:(?:bearer|basic|token|bot|digest|negotiate)\s+)?)"
    r"([^\s\"',;]+)",
    re.IGNORECASE,
)
_API_KEY_HEADER_RE = re.compile(r"\b((?:x-)?api-?key\s*:\s*)([^\s\"',;]+)", re.IGNORECASE)
_PASSWORD_FLAG_RE = re.compile(r"(--pass(?:word|wd)?(?:=|\s+))(\"[^\"]*\"|'[^']*'|[^\s\"']+)", re.IGNORECASE)
_MYSQL_P_RE = re.compile(r"(\b(?:mysql\w*|mariadb\w*)\b[^\n;|&]*?\s-p)([^\s\"']+|\"[^\"]*\"|'[^']*')")
_SSHPASS_RE = re.compile(r"(\bsshpass\b[^\n;|&]*?\s-p\s*)([^\s\"']+|\"[^\"]*\"|'[^']*')")
_ASSIGNMENT_RE = re.compile(
    rf"(?<![A-Za-z0-9_])([\"']?)({_SECRET_NAME})\1(\s*(?:=|:)\s*)(\[REDACTED\]|\"[^\"\n]*\"|'[^'\n]*'|[^\s\"',;&|)}}\]]+)",
    re.IGNORECASE,
)
_SHAPES: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p)
    for p in (
        r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
        r"\bgh[pousr]_[A-Za-z0-9]{36,}\b",
        r"\bgithub_pat_[A-Za-z0-9_]{22,}\b",
        r"\bsk-(?:proj-|svcacct-|admin-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,}",
        r"\b[rs]k_live_[A-Za-z0-9]{16,}\b",
        r"\bxox[abprs]-[A-Za-z0-9-]{10,}",
        r"\bhf_[A-Za-z0-9]{30,}\b",
        r"\bAIza[0-9A-Za-z_-]{35}",
        r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",
    )
)


def _keep_quotes(value: str) -> str:
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
    text = _PRIVATE_KEY_RE.sub(lambda m: f"{m.group(1)}{MARK}{m.group(5)}", text)
    text = _URL_CREDENTIALS_RE.sub(lambda m: f"{m.group(1)}{MARK}@", text)
    text = _AUTH_HEADER_RE.sub(lambda m: m.group(1) + MARK, text)
    text = _API_KEY_HEADER_RE.sub(lambda m: m.group(1) + MARK, text)
    text = _PASSWORD_FLAG_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    text = _MYSQL_P_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    text = _SSHPASS_RE.sub(lambda m: m.group(1) + _keep_quotes(m.group(2)), text)
    text = _ASSIGNMENT_RE.sub(
        lambda m: m.group(1) + m.group(2) + m.group(1) + m.group(3) + _keep_quotes(m.group(4)), text
    )
    for shape in _SHAPES:
        text = shape.sub(MARK, text)
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
    """Redact a JSON-like structure: every string is redacted and the value of a secret-named key is hidden.

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
                out[key] = redact_obj(value, patterns)
        return out
    if isinstance(obj, list):
        return [redact_obj(item, patterns) for item in obj]
    if isinstance(obj, tuple):
        return tuple(redact_obj(item, patterns) for item in obj)
    return obj
