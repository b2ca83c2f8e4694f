"""Redaction of secrets in text and JSON-like structures."""

from __future__ import annotations

import pytest

from agent_tools.redact import (
    MARK,
    add_patterns,
    add_secret_values,
    redact,
    redact_obj,
    redact_slice,
    review_text,
    secret_env_values,
)

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
        # an empty user name (redis AUTH with a password only, a token as the password)
        ("redis-cli -u redis://:R3disPa55word@127.0.0.1:6379/0", f"redis-cli -u redis://:{MARK}@127.0.0.1:6379/0"),
        ("psql postgres://:pw@h/db", f"psql postgres://:{MARK}@h/db"),
        ("git clone https://:tok@github.com/x", f"git clone https://:{MARK}@github.com/x"),
        ("DATABASE_URL=postgres://:pw@h psql", f"DATABASE_URL=postgres://:{MARK}@h psql"),
        ("curl http://host:8080/a@b", "curl http://host:8080/a@b"),
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
        '{"connection": {"host_key": "SHA256:bngkdTXaHsM+qfUOS4CnohStHAuIWt6Uskno1YaDPlQ"}}',
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
    # a host's key fingerprint is public: the journal keeps it to tell the job's machine from another
    key = {"connection": {"host_key": "SHA256:bngkdTXaHsM+qfUOS4CnohStHAuIWt6Uskno1YaDPlQ",
                          "public_key": "ssh-ed25519 AAAA"}}
    assert redact_obj(key) == key


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("DB_PASS=QA13a", "QA13a"),
        ("export SMTP_PASS=QA13d", "QA13d"),
        ("OPENAI_KEY=QA13c", "QA13c"),
        ("signing_key: QA13g", "QA13g"),
        ("GH_PAT=QA13i", "QA13i"),
        ("curl --oauth2-bearer QA13x http://h/", "QA13x"),
        ("openssl enc -pass pass:QA13r -in f", "QA13r"),
        ("keytool -list -storepass QA13store", "QA13store"),
        ("gpg --passphrase QA13phrase -c f", "QA13phrase"),
        ("redis-cli -a QA13redis ping", "QA13redis"),
        ("aws configure set aws_secret_access_key QA13aws", "QA13aws"),
        ("docker login -u u -p QA13kk registry", "QA13kk"),
        ("htpasswd -b f user QA13h", "QA13h"),
        ("htpasswd -bc /etc/nginx/htpw user QA13hc", "QA13hc"),
        ("htpasswd -nb user QA13hn", "QA13hn"),
        ("smbclient -U user%QA13smb //h/s", "QA13smb"),
        ("<password>QA13gg</password>", "QA13gg"),
        ("https://u:QA13p@ss@host/x", "QA13p@ss"),
        ("vault login QA13jj", "QA13jj"),
        ("ssh-keygen -t ed25519 -N QA13q -f k", "QA13q"),
        ("unzip -P QA13zip a.zip", "QA13zip"),
        ("ldapsearch -D cn=x -w QA13ldap", "QA13ldap"),
        ("ipmitool -U admin -P QA13ipmi power status", "QA13ipmi"),
        ("curl --proxy-user bob:QA13proxy http://h/", "QA13proxy"),
        ("password: hunter2", "hunter2"),
        ("password: correcthorse", "correcthorse"),
        ("token: Zq8xW2 expires in 3600 s", "Zq8xW2"),
        ("token: qwertyuiopasdfghjk expires soon", "qwertyuiopasdfghjk"),
        ('{"secret": "not-set-s3cr3t"}', "not-set-s3cr3t"),
        ("Set-Cookie: sid=QA13cookie; Path=/", "QA13cookie"),
        ("curl -H 'Cookie: session=QA13sess' x", "QA13sess"),
        ("DB_PASSWORD=QA13quoted' x", "QA13quoted"),
        ("mysql -u root -pPASSWORD db", "PASSWORD"),
        ('{"auths": {"reg.example": {"auth": "dXNlcjpRQTEzZG9ja2VyCg=="}}}', "dXNlcjpRQTEzZG9ja2VyCg=="),
        ('"auth":"QA13cG9kbWFuOnB3"', "QA13cG9kbWFuOnB3"),
    ],
)
def test_more_secret_shapes(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out and MARK in out, out
    assert "ss@" not in out  # no tail of a URL password containing @


@pytest.mark.parametrize(
    "text",
    [
        "tee /etc/passwd: no rule matches 'tee'",
        "find / -name token: -delete",
        "cat /run/secrets/db_password: permission denied",
        "openssl enc -pass env:PW -in f",
        "ssh-keygen -N '' -f key",
        # words of messages and commands in a secret's place (qa13, qa14): nothing is hidden, nothing is eaten
        "ERROR 1045 (28000): Access denied for user root@localhost (using password: YES)",
        "ERROR 1045 (28000): Access denied for user 'root'@'localhost' (using password: NO)",
        "passwd: Authentication token manipulation error",
        "passwd: password unchanged",
        "New password: Password change has been aborted.",
        "token: expired, run gh auth login",
        "secret: not set",
        "echo customsecret: no",
        "api_key=\nPassword: incorrect",
        'printf "%s\\n" "api_key=" "Password: incorrect"; passwd agent',
        "Enter passphrase:\nsomething else",
        "x-api-key: missing",
        "Authorization: denied",
        "chmod 777 authorization: /etc/shadow: no rule matches 'chmod'",
        "systemctl stop nginx.service cookie: ssh.service systemd-networkd.service",
        "echo Cookie: a; rm -rf /tmp/dir",
        '{"password": "not set", "token": null}',
        "  --password PASSWORD   the password to log in with\n  --api-key=API_KEY",
        "GOOGLE_APPLICATION_CREDENTIALS=/srv/app/creds.json python train.py",
        "SSL_KEY=/etc/ssl/private/server.key nginx",
        "--password-file ~/.pgpass",
        '{"auth": "required", "authType": "basic"}',
    ],
)
def test_ordinary_text_is_not_mangled(text: str) -> None:
    assert redact(text) == text


def test_an_approval_prompt_hides_only_certain_shapes_and_counts_them() -> None:
    """In a command a header-like `name: value` may be shell words: at a prompt only certain shapes are hidden."""
    command = f"curl -H 'X-Api-Key: k3y{GH[4:12]}' -H 'Authorization: Bearer {GH}' x"
    assert redact(command) == f"curl -H 'X-Api-Key: {MARK}' -H 'Authorization: Bearer {MARK}' x"
    shown, hidden = review_text(command)
    assert shown == f"curl -H 'X-Api-Key: k3y{GH[4:12]}' -H 'Authorization: Bearer {MARK}' x"
    assert hidden == 1
    assert review_text("HF_TOKEN=abc --password=x ls [REDACTED]") == (f"HF_TOKEN={MARK} --password={MARK} ls {MARK}", 2)


def test_a_slice_is_redacted_with_the_context_around_it() -> None:
    text = "x" * 30 + f" password={'p' * 12} " + GH + " tail"
    for start in range(0, len(text), 7):
        for end in range(start + 1, len(text) + 1, 5):
            part = redact_slice(text, start, end)
            assert "ppp" not in part and GH[5:12] not in part, (start, end, part)
    assert redact_slice(text, 0, 10) == "x" * 10


def test_process_wide_patterns_and_known_values() -> None:
    assert redact("id corp-t13aaaabbbbcc") == "id corp-t13aaaabbbbcc"
    add_patterns([r"corp-t13[a-z]{10}"])
    assert redact("id corp-t13aaaabbbbcc") == f"id {MARK}"
    add_secret_values(["v4lue-T13-known", "short"])
    assert redact("echo v4lue-T13-known short") == f"echo {MARK} short"
    assert secret_env_values({"QA_TOKEN": "abc123456", "LANG": "C", "X": GH}) == ["abc123456", GH]
