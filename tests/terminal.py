"""Helpers of the interactive-job tests (issue 17): a program run on a real pseudo-terminal that a person types on,
and the files of a run that hold a secret."""

from __future__ import annotations

import fcntl
import os
import pty
import subprocess
import termios
from pathlib import Path


def typed_on_a_terminal(args: list[str], env: dict[str, str], typed: bytes, *,
                        prompt: bytes = b"(not shown): ") -> tuple[int, bytes, bytes, bytes]:
    """Run ``args`` with a new pseudo-terminal as its controlling terminal (what getpass opens as /dev/tty), type
    ``typed`` once the terminal shows ``prompt``; returns (status, stdout, stderr, what the terminal showed)."""
    master, slave = pty.openpty()

    def controlling_tty() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(args, stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            start_new_session=True, preexec_fn=controlling_tty)
    os.close(slave)
    shown = b""
    while prompt not in shown:
        chunk = os.read(master, 4096)
        assert chunk, shown
        shown += chunk
    os.write(master, typed)
    out, err = proc.communicate(timeout=120)
    try:
        while chunk := os.read(master, 4096):
            shown += chunk
    except OSError:
        pass
    os.close(master)
    return proc.returncode, out, err, shown


def files_holding(root: Path, data: bytes) -> list[Path]:
    """Every regular file under ``root`` (symlinks and named pipes left alone) whose bytes contain ``data``."""
    found = []
    for p in root.rglob("*"):
        try:
            if p.is_file() and not p.is_symlink() and not p.is_fifo() and data in p.read_bytes():
                found.append(p)
        except OSError:  # gone meanwhile, or a socket
            continue
    return found
