"""Output views and pages on a real host (the OpenSSH sshd on loopback, and this machine): a secret is hidden
wherever a view or a page cuts it, control sequences never vanish without trace (colours and progress bars are
cleaned, everything else is shown as a visible escape), and known secret values from a call's env never show
(issue 13, second round)."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from agent_tools.hosts.base import Host
from agent_tools.hosts.registry import HostRegistry
from agent_tools.jobs.journal import Journal
from agent_tools.tools.toolkit import Toolkit

from .conftest import ssh_host_for
from .sshd import RealSshd


def _token(n: int) -> str:
    return "".join(secrets.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789") for _ in range(n))


def _fragments(value: str, n: int = 6) -> set[str]:
    return {value[i:i + n] for i in range(len(value) - n + 1)}


@pytest.fixture
async def tk(real_sshd: RealSshd, tmp_path: Path) -> Toolkit:
    host: Host = ssh_host_for(real_sshd)
    toolkit = Toolkit(HostRegistry({"sshd": host}), journal=Journal(tmp_path / "j.sqlite3"))
    yield toolkit  # type: ignore[misc]
    await toolkit.aclose()


async def test_pages_hide_secrets_they_cut(tk: Toolkit) -> None:
    """job_output with a small limit cuts names from values and values in half: every page is redacted with the
    bytes around it, so no fragment of a secret shows on any page (or on all of them put together)."""
    raw = {"url": _token(16), "flag": _token(16), "mysql": _token(16), "sshpass": _token(16),
           "gh": "ghp_" + _token(36), "env": "ev-" + _token(20)}
    lines = [f"https://bob:{raw['url']}@example.invalid/x", f"tool --password={raw['flag']} --verbose",
             f"mysql -u root -p{raw['mysql']} db", f"sshpass -p {raw['sshpass']} ssh h", f"token {raw['gh']}"]
    command = "printf '%s\\n' " + " ".join(f"'{line}'" for line in lines) + '; echo "$QA_TOKEN"'
    out = await tk.dispatch("run_command", {"host": "sshd", "command": command, "env": {"QA_TOKEN": raw["env"]}})
    assert out["outcome"] == "finished", out
    for limit in (23, 7, 61):
        pages, offset = [], 0
        while True:
            page = await tk.dispatch("job_output", {"job_id": out["job_id"], "offset": offset, "limit": limit})
            pages.append(page["text"])
            offset = page["next_offset"]
            if page["eof"]:
                break
        assert len(pages) >= 4
        joined = "\n".join(pages)
        for name, value in raw.items():
            leaked = [f for f in _fragments(value) if f in joined]
            assert not leaked, (limit, name, leaked[:3], pages)
    assert all(v not in str(out) for v in raw.values())


@pytest.mark.parametrize("pad", [1490, 1505, 1512, 1520, 1530, 1536])
async def test_a_view_cut_inside_a_secret_hides_all_of_it(tk: Toolkit, pad: int) -> None:
    token = "ghp_" + _token(36)
    command = f"head -c {pad} /dev/zero | tr '\\0' a; echo ' {token}'; head -c 20000 /dev/zero | tr '\\0' b"
    out = await tk.dispatch("run_command", {"host": "sshd", "command": command})
    text = out["stdout"]["text"]
    assert out["stdout"]["omitted_bytes"] > 0 and "bytes omitted" in text
    assert not [f for f in _fragments(token[4:]) if f in text], text[1400:1700]


async def test_control_sequences_are_shown_not_dropped(tk: Toolkit) -> None:
    script = (r"printf 'A\033]52;c;cm0gLXJmIH4K\007 B\033]0;TITLE\007 C\033]8;;http://evil.example\033\\link\033]8;;"
              r"\033\\ D\033[2J\033[H E\033[31mred\033[0m F\302\2332K G\342\200\256rev H\r\033[KOVERWRITTEN\n'; "
              r"printf 'bell\007 del\177 bs\b nul\000 end\n'; "
              r"for i in 10 50 100; do printf '\r[%-10s] %3d%%' $(printf '#%.0s' $(seq 1 $((i/10)))) $i; done; echo")
    out = await tk.dispatch("run_command", {"host": "sshd", "command": script})
    text = out["stdout"]["text"]
    for shown in ("\\x1b]52;c;cm0gLXJmIH4K\\x07", "\\x1b]0;TITLE\\x07", "\\x1b]8;;http://evil.example",
                  "\\x1b[2J\\x1b[H", "\\x9b2K", "\\u202erev H\\r\\x1b[KOVERWRITTEN", "bell\\x07", "del\\x7f", "bs\\b",
                  "nul\\0"):
        assert shown in text, (shown, text)
    assert "Ered F" in text  # colours are cleaned away
    assert "[##########] 100%" in text and "50%" not in text  # a progress bar shows its last state
    assert not any(ch in text for ch in "\x1b\x07\x7f\x08\x9b\u202e\r")  # no raw control character at all


def test_a_view_says_colour_codes_were_removed() -> None:
    """qa13: SGR sequences are dropped from ``text``; the view's ``note`` says so, and says nothing otherwise."""
    from agent_tools.output import COLOURS_REMOVED, make_view

    coloured = make_view(b"\x1b[31mred\x1b[0m ok\n", b"", 16)
    assert coloured.text == "red ok\n" and coloured.note == COLOURS_REMOVED
    assert make_view(b"plain\n", b"", 6).note == ""


async def test_a_view_with_escapes_says_so_and_a_literal_backslash_is_not_taken_for_one(tk: Toolkit) -> None:
    """qa12c #8: a NUL shows as ``\\0``, which a command may also print as two characters (its own backslashes are
    kept). What the model reads (``dispatch``) says which: a view whose cleaning showed escapes, collapsed a
    redraw or removed colours carries a ``note`` saying so, also when it holds the whole stream; a view of
    literal backslashes carries none."""
    nul = await tk.dispatch("run_command", {"host": "sshd", "command": r"printf 'a\000b\000c\n'"})
    assert nul["stdout"]["text"] == "a\\0b\\0c\n", nul
    assert "NUL as \\0" in nul["stdout"]["note"], nul
    literal = await tk.dispatch("run_command", {"host": "sshd", "command": r"printf '%s\n' 'a\0b\0c'"})
    assert literal["stdout"] == {"text": "a\\0b\\0c\n"}, literal  # the same text, and no note
    bar = await tk.dispatch("run_command", {"host": "sshd", "command": r"printf 'step 1\rstep 2\rstep 3\n'"})
    assert bar["stdout"]["text"] == "step 3\n" and "last state" in bar["stdout"]["note"], bar
