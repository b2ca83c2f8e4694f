"""Redaction of secrets in text and JSON-like structures."""

from __future__ import annotations

import pytest

from agent_tools.redact import MARK, redact, redact_obj

AWS = "AKIA" + "IOSFODNN7EXAMPLE"
GH = "ghp_" + "a" * 36


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456 python x", f"HF_TOKEN={MARK} python x"),
        ("export OPENAI_API_KEY='sk-x'", f"export OPENAI_API_KEY='{MARK}'"),
        ('AWS_SECRET_ACCESS_KEY="abc/def" aws s3 ls', f'AWS_SECRET_ACCESS_KEY="{MARK}" aws s3 ls'),
        ("DB_PASSWORD=hunter2", f"DB_PASSWORD={MARK}"),
        ("MYSQL_PWD=x mysql", f"MYSQL_PWD={MARK} mysql"),
        ("CLIENT_SECRET=abc", f"CLIENT_SECRET={MARK}"),
        ("curl -H 'Authorization: Bearer eyJhbGciOi.abc'", f"curl -H 'Authorization: Bearer {MARK}'"),
        ("authorization: Basic dXNlcjpwdw==", f"authorization: Basic {MARK}"),
        ("X-Api-Key: abc123", f"X-Api-Key: {MARK}"),
        ("git clone https://user:pw123@github.com/x.git", f"git clone https://user:{MARK}@github.com/x.git"),
        ("mysql -uroot -pSECRET db", f"mysql -uroot -p{MARK} db"),
        ("psql --password=x", f"psql --password={MARK}"),
        ("tool --password hunter2 --x", f"tool --password {MARK} --x"),
        ("sshpass -p s3cret ssh h", f"sshpass -p {MARK} ssh h"),
        (f"key {AWS} end", f"key {MARK} end"),
        (f"token {GH}", f"token {MARK}"),
        ("github_pat_" + "A" * 40, MARK),
        ("sk-proj-" + "x" * 40, MARK),
        ("xoxb-1234567890-abcdef", MARK),
        ("hf_" + "Q" * 34, MARK),
        ("AIza" + "B" * 35, MARK),
        ('{"api_key": "abc", "max_tokens": 512}', f'{{"api_key": "{MARK}", "max_tokens": 512}}'),
    ],
)
def test_redact(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "MAX_TOKENS=512 TOKENIZERS_PARALLELISM=false PWD=/root OLDPWD=/",
        "ssh -p 22 host",
        "http://127.0.0.1:30000/health",
        "max_new_tokens: 100",
    ],
)
def test_leaves_ordinary_text_alone(text: str) -> None:
    assert redact(text) == text


def test_private_key_block() -> None:
    text = "a\n-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\nAAAA\n-----END OPENSSH PRIVATE KEY-----\nz"
    assert redact(text) == f"a\n-----BEGIN OPENSSH PRIVATE KEY-----{MARK}-----END OPENSSH PRIVATE KEY-----\nz"
    truncated = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow"
    assert redact(truncated) == f"-----BEGIN RSA PRIVATE KEY-----{MARK}"


def test_idempotent() -> None:
    text = f"HF_TOKEN=x Authorization: Bearer y {AWS} https://u:p@h"
    once = redact(text)
    assert redact(once) == once


def test_extra_patterns() -> None:
    assert redact("id=corp-12345", [r"corp-\d+"]) == f"id={MARK}"
    assert redact("pin: 4321 ok", [r"pin: (?P<secret>\d+)"]) == f"pin: {MARK} ok"


def test_redact_obj() -> None:
    obj = {"env": {"HF_TOKEN": "hf_x", "HOME": "/root"}, "argv": ["mysql", "-pX"], "n": 3,
           "t": ("Authorization: Bearer abc",), "password": 1234}  # fmt: skip
    out = redact_obj(obj)
    assert out == {"env": {"HF_TOKEN": MARK, "HOME": "/root"}, "argv": ["mysql", "-pX"], "n": 3,
                   "t": (f"Authorization: Bearer {MARK}",), "password": MARK}  # fmt: skip
    assert obj["env"]["HF_TOKEN"] == "hf_x"  # input untouched
