"""Which files a simple command writes: through redirections, and through its own operands and options.

A rule's ``redirect_to`` is compared with every file in :attr:`~agent_tools.policy.shell.SimpleCommand.writes`,
so a rule on written paths (block devices, ``/etc``) sees ``cp /dev/zero /dev/sda``, ``tar cf /dev/sda /etc``,
``journalctl --cursor-file=/etc/x`` and ``curl -w '%output{/etc/x}'`` as well as ``> /dev/sda``. A link is a new
name to write its target through, so ``ln -s /dev/sda /tmp/d`` counts as a write of ``/dev/sda`` too.

A watchdog device is armed by opening it at all (Linux Documentation/watchdog/watchdog-api.rst: "the watchdog is
activated as soon as /dev/watchdog is opened", and a close without the magic character leaves it running, so the
machine reboots): ``cat /dev/watchdog`` and ``< /dev/watchdog`` count as writes of it.

A relative file name is also listed resolved against every directory the command may run in (the call's ``cwd``
and each ``cd`` before it in the command line: ``cd /dev && cp zero sda`` writes ``/dev/sda``). ``~`` stands for
the login directory (:func:`join_dir`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from .paths import join_dir, normalise_path

__all__ = ["BENIGN_WRITE_TARGETS", "OUTPUT_OPS", "program_writes", "writes_of"]

BENIGN_WRITE_TARGETS = frozenset(
    {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2", "/proc/self/fd/1", "/proc/self/fd/2"}
)
"""Write targets that are not files: the standard streams and the null device."""

OUTPUT_OPS = frozenset({">", ">>", ">|", "&>", "&>>", "<>", ">&", "&>|"})
"""Redirection operators that open their target for writing."""


class _Redirect(Protocol):
    @property
    def op(self) -> str: ...

    @property
    def target(self) -> str: ...


#: programs that write the file named by their last operand (or by -t/--target-directory)
_WRITES_LAST = frozenset({"cp", "mv", "install", "rsync", "scp", "ln", "link", "ddrescue", "xxd", "xfs_copy",
                          "e2image", "lz4", "objcopy", "ntfscp"})
#: programs that write every file operand
_WRITES_ALL = frozenset({"truncate", "shred", "badblocks", "fallocate"})
#: dd-like programs: ``of=FILE``
_DD_LIKE = frozenset({"dd", "dcfldd", "dc3dd", "sg_dd", "sdd"})
#: programs that make links (the link's target becomes writable through the new name)
_LINKERS = frozenset({"ln", "link", "cp"})
#: options naming an output file: program -> option spellings (short ones take the next word or an attached value)
_OUTPUT_OPTIONS: dict[str, tuple[str, ...]] = {
    "sort": ("-o", "--output"), "wget": ("-O", "--output-document", "-o", "--output-file", "-a", "--append-output"),
    "curl": ("-o", "--output", "-D", "--dump-header", "-c", "--cookie-jar", "--trace", "--trace-ascii", "--stderr",
             "--libcurl", "--etag-save", "--hsts", "--alt-svc"),
    "openssl": ("-out",), "tar": ("-f", "--file"), "pv": ("-o",), "tcpdump": ("-w",), "sfdisk": ("-O", "--backup-file"),
    "journalctl": ("--cursor-file",), "zstd": ("-o",), "zstdmt": ("-o",), "unzstd": ("-o",), "pzstd": ("-o",),
    "brotli": ("-o", "--output"), "lzop": ("-o",), "gpg": ("-o", "--output"), "gpg2": ("-o", "--output"),
    "tree": ("-o", "--output"), "git": ("--output",), "patch": ("-o", "--output"), "uudecode": ("-o",),
    "mkisofs": ("-o",), "genisoimage": ("-o",), "xorrisofs": ("-o",),
    "partclone": ("-o", "-O", "--output", "--overwrite"),
    "ntfsclone": ("-o", "-O", "--output", "--overwrite"), "ssh-keygen": ("-f",), "find": ("-fprint", "-fprint0",
    "-fprintf", "-fls"), "strace": ("-o", "--output"), "ltrace": ("-o", "--output"), "script": ("-O", "--log-out"),
}  # fmt: skip
#: single-dash options that are whole words (``find -fprint FILE``, ``openssl -out FILE``), never getopt clusters
_WORD_OPTIONS = frozenset({"find", "openssl"})
_PROC_ROOT_RE = re.compile(r"^/proc/(?:self|thread-self|[0-9]+)/root(?:/(.*))?$")
#: devices that act when opened, for reading too (a watchdog starts its countdown)
_ARMED_BY_OPEN_RE = re.compile(r"^/dev/watchdog[0-9]*$")
#: programs that look at a file's name or inode without opening it (wdctl opens a watchdog with its magic close)
_STAT_ONLY = frozenset({"ls", "stat", "realpath", "readlink", "basename", "dirname", "test", "[", "[[", "file", "du",
                        "wdctl", "find", "lsof", "fuser", "udevadm", "namei", "echo", "printf", "which", "type",
                        "command"})
_SOCAT_FILE_RE = re.compile(r"^(?:(?:OPEN|CREATE|CREAT|GOPEN|PIPE|FILE):)?([^,:]*/[^,]*)", re.IGNORECASE)


def _family(program: str) -> str:
    """``partclone.ext4`` -> ``partclone``; other names unchanged."""
    return program if program in _OUTPUT_OPTIONS else program.split(".", 1)[0]


def program_writes(program: str, args: Sequence[str]) -> list[str]:
    """Files ``program`` writes because of its operands or options (a block device among them is destroyed).

    :param program: the normalised program name (``cp``, not ``/bin/cp``).
    :param args: its arguments, as words after quote removal.
    """
    args = list(args)
    operands = [a for a in args if not a.startswith("-")]
    out: list[str] = []
    if program in _DD_LIKE or (program == "qemu-img" and args[:1] == ["dd"]):
        out += [a[3:] for a in args if a.startswith("of=")]
    if program in _LINKERS and (program != "cp" or any(a in ("-s", "-l", "--symbolic-link", "--link") or
                                                       (a.startswith("-") and not a.startswith("--") and
                                                        ("s" in a or "l" in a)) for a in args)):
        out += operands[:-1] if len(operands) >= 2 else operands  # `ln -s TARGET` links into the current directory
    if program in _WRITES_LAST or (program == "qemu-img" and args[:1] == ["convert"]):
        target = _target_directory(args)
        if target is not None:
            return [*out, target]
        if program == "xxd":  # only `xxd -r IN OUT` writes a file
            return [*out, *operands[1:2]] if "-r" in args or "-revert" in args else out
        return [*out, *operands[-1:]] if len(operands) >= 2 else out
    if program in _WRITES_ALL:
        if program == "badblocks":  # read-only unless -w (destructive) or -n (non-destructive read-write)
            clusters = [a[1:] for a in args if a.startswith("-") and not a.startswith("--")]
            return operands[:1] if any("w" in c or "n" in c for c in clusters) else []
        return operands
    if program == "socat":
        return [m.group(1) for a in operands if (m := _SOCAT_FILE_RE.match(a))]
    if program == "sed" and any(a == "-i" or a.startswith(("-i", "--in-place")) for a in args):
        scripted = any(a in ("-e", "-f", "--expression", "--file") or a.startswith(("--expression=", "--file="))
                       for a in args)
        return operands if scripted else operands[1:]
    if program == "curl":  # `-w '%output{FILE}...'` (curl 8.3) sends what follows to FILE
        out += [m.group(1) for a in args for m in re.finditer(r"%output\{(?:>>)?([^}]*)\}", a) if m.group(1)]
        if any(a in ("-O", "--remote-name", "--remote-name-all") or (a.startswith("-") and not a.startswith("--")
                                                                     and "O" in a[1:]) for a in args):
            out.append("(a file named by the URL)")
    family = _family(program)
    options = _OUTPUT_OPTIONS.get(family, ())
    if program == "tar" and args and not args[0].startswith("-") and "f" in args[0]:
        # old-style bundled options: `tar cf FILE ...`, `tar czvf FILE ...` (the f takes the next word)
        later = [a for a in args[1:] if not a.startswith("-")]
        if later:
            out.append(later[0])
    for i, a in enumerate(args):
        for opt in options:
            if a == opt and i + 1 < len(args):
                out.append(args[i + 1])
            elif opt.startswith("--") and a.startswith(opt + "="):
                out.append(a.split("=", 1)[1])
            elif (len(opt) == 2 and family not in _WORD_OPTIONS and a.startswith("-") and not a.startswith("--")
                  and opt[1] in a[1:]):
                # a getopt cluster: `-cf FILE` (the letter last: the next word), `-ofile` (the rest of the word)
                rest = a[a.index(opt[1], 1) + 1 :]
                if rest:
                    out.append(rest)
                elif i + 1 < len(args):
                    out.append(args[i + 1])
    return out


def _armed_by_open(word: str, cwds: Sequence[str | None]) -> bool:
    """Whether ``word`` names a device that acts when opened (a watchdog), also relative to one of ``cwds``."""
    names = [word] if word.startswith("/") else [j for c in cwds if (j := join_dir(c, word)) is not None]
    return any(_ARMED_BY_OPEN_RE.match(normalise_path(n)) for n in names)


def _target_directory(args: Sequence[str]) -> str | None:
    for i, a in enumerate(args):
        if a in ("-t", "--target-directory") and i + 1 < len(args):
            return args[i + 1]
        if a.startswith("--target-directory="):
            return a.split("=", 1)[1]
    return None


def writes_of(argv: Sequence[str], redirects: Sequence[_Redirect], cwds: Sequence[str | None]) -> list[str]:
    """Every file the command ``argv`` with ``redirects`` writes, relative names also resolved against ``cwds``.

    :param argv: the command's words (``argv[0]`` the normalised program name); may be empty (a pseudo-command).
    :param redirects: its redirections (enclosing ones included).
    :param cwds: the directories it may run in (``~`` the login directory, None where unknown).
    """
    targets: list[str] = []
    for redir in redirects:
        if redir.op not in OUTPUT_OPS:
            if _armed_by_open(redir.target, cwds):
                targets.append(redir.target)
            continue
        if redir.op == ">&" and (redir.target.isdigit() or redir.target == "-"):
            continue
        targets.append(redir.target)
    program = argv[0] if argv else ""
    if program == "tee":
        targets.extend(a for a in argv[1:] if not a.startswith("-"))
    elif program:
        targets.extend(program_writes(program, argv[1:]))
    if program not in _STAT_ONLY:  # `ls -l /dev/watchdog` looks at the node, `cat` and `dd if=` open it
        targets.extend(w for a in argv[1:] if _armed_by_open(w := a.split("=", 1)[-1], cwds))
    out: list[str] = []
    for target in targets:
        if target in ("", "-") or target in BENIGN_WRITE_TARGETS or normalise_path(target) in BENIGN_WRITE_TARGETS:
            continue
        out.append(target)
        root = _PROC_ROOT_RE.match(normalise_path(target))
        if root is not None:  # /proc/self/root/dev/sda is /dev/sda
            out.append(normalise_path("/" + (root.group(1) or "")))
        if not target.startswith(("/", "~", "(")):
            for cwd in cwds:
                resolved = join_dir(cwd, target)
                if resolved is not None and resolved not in out:
                    out.append(resolved)
    return list(dict.fromkeys(out))
