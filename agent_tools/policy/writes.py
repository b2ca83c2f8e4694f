"""Which files a simple command writes: through redirections, and through its own operands and options.

A rule's ``redirect_to`` is compared with every file in :attr:`~agent_tools.policy.shell.SimpleCommand.writes`,
so a rule on written paths (block devices, ``/etc``) sees ``cp /dev/zero /dev/sda``, ``tar cf /dev/sda /etc``,
``journalctl --cursor-file=/etc/x`` and ``curl -w '%output{/etc/x}'`` as well as ``> /dev/sda``. A link is a new
name to write its target through, so ``ln -s /dev/sda /tmp/d`` counts as a write of ``/dev/sda`` too.

A watchdog device is armed by opening it at all (Linux Documentation/watchdog/watchdog-api.rst: "the watchdog is
activated as soon as /dev/watchdog is opened", and a close without the magic character leaves it running, so the
machine reboots): ``cat /dev/watchdog`` and ``< /dev/watchdog`` count as writes of it.

A long option may be abbreviated (getopt_long(3): ``sort --outp=F`` is ``--output=F``); a glob counts for a watchdog
when it may expand to one (``cat /dev/watch*``), and so do ``/dev/char/MAJOR:MINOR`` and ``/proc/PID/root/dev/...``;
``du --files0-from=F`` and ``file -s`` open what they name; ``grep -D read -r`` opens every device below its start
(``/dev/*``). ``tar -tf``/``-xf``/``-df`` read the archive (only ``-c``, ``-r``, ``-u``, ``-A`` and ``--delete``
write it), and an extraction (``tar -x``, ``unzip``, ``cpio -i``) writes every name below its directory (``-C DIR/*``).
A link to ``/``, ``/dev`` or a directory of device nodes counts as a write of every device under it (``ln -s /dev X;
cp y X/sda``). Files a program's own script names count too: sed's ``w``/``r`` commands and ``s///w`` flag, awk's
``print > "F"``, an editor's operands and ``-c`` commands, an interpreter's inline code (every absolute or ``./``
name in it), ``perl -i``/``gawk -i inplace`` operands, ``script``'s typescript, ``logsave``'s log. ``cp -vt /dev``
is ``-v -t /dev``. A name only the host resolves (``~sys/sda``, ``/proc/1/cwd/dev/sda``) is every name it may stand
for (:func:`~agent_tools.policy.paths.indirect_names`).

A relative file name is also listed resolved against every directory the command may run in (the call's ``cwd``
and each ``cd`` before it in the command line: ``cd /dev && cp zero sda`` writes ``/dev/sda``). ``~`` stands for
the login directory (:func:`join_dir`); ``..`` that climb above it (or an unknown directory) also as the path from
``/`` they reach once they climb that deep (:func:`~agent_tools.policy.paths.climbed`: ``~/../../dev/sda``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol

from .options import is_long_abbreviation
from .paths import climbed, indirect_names, join_dir, normalise_path

__all__ = ["BENIGN_WRITE_TARGETS", "OPENS_OPERANDS", "OUTPUT_OPS", "STAT_ONLY", "may_open_armed", "program_writes",
           "writes_of"]

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
_WRITES_LAST = frozenset({"cp", "mv", "install", "rsync", "scp", "ln", "link", "ddrescue", "dd_rescue", "myrescue",
                          "xxd", "xfs_copy", "e2image", "lz4", "objcopy", "ntfscp"})
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
    "ss": ("-D", "--diag"), "wget2": ("-O", "--output-document", "-o", "--output-file"),
    "sg_raw": ("-o", "--outfile"),
}  # fmt: skip
#: single-dash options that are whole words (``find -fprint FILE``, ``openssl -out FILE``), never getopt clusters
_WORD_OPTIONS = frozenset({"find", "openssl"})
#: directories of device nodes (a link to one is a way to write every device it holds)
_DEVICE_DIR_RE = re.compile(r"^/dev/(?:disk(?:/[^/]+)?|block|char|mapper|md|bus(?:/.*)?)/?$")
_PROC_ROOT_RE = re.compile(r"^/proc/(?:self|thread-self|[0-9]+)/root(?:/(.*))?$")
#: devices that act when opened, for reading too (a watchdog starts its countdown); /dev/char/MAJOR:MINOR names every
#: character device by number (10:130 is the watchdog, watchdogN have a dynamic major)
_ARMED_BY_OPEN_RE = re.compile(r"^/dev/(?:watchdog[0-9]*|char/.*)$")
#: names a glob is tried against: a word such as /dev/watch* or /dev/w?tchdog expands to one of them
_ARMED_SAMPLES = ("/dev/watchdog", "/dev/watchdog0", "/dev/watchdog1", "/dev/char/10:130")
#: options of the stat-only programs below that name a file they do open (du --files0-from=F reads F), and those
#: that make them open their operands (file -s reads block and character devices: file(1))
_STAT_ONLY_OPENS: dict[str, tuple[str, ...]] = {
    "du": ("--files0-from", "-X", "--exclude-from"), "file": ("-f", "--files-from", "-m", "--magic-file"),
    "find": ("-files0-from",),
}
_STAT_ONLY_OPEN_OPERANDS: dict[str, tuple[str, ...]] = {"file": ("-s", "--special-files")}
#: programs that look at a file's name or inode without opening it (wdctl opens a watchdog with its magic close)
STAT_ONLY = frozenset({"ls", "stat", "realpath", "readlink", "basename", "dirname", "test", "[", "[[", "file", "du",
                        "wdctl", "find", "lsof", "fuser", "udevadm", "namei", "echo", "printf", "which", "type",
                        "command"})
#: programs that open the files their operands name (a watchdog among them is armed): a name computed at run time
#: (``cat $F``, ``cat $(cmd)``) may be one
OPENS_OPERANDS = frozenset({
    "cat", "tac", "head", "tail", "grep", "egrep", "fgrep", "zgrep", "rg", "wc", "md5sum", "sha1sum", "sha256sum",
    "sha512sum", "b2sum", "cksum", "sum", "cut", "tr", "diff", "cmp", "comm", "column", "nl", "zcat", "jq", "sort",
    "uniq", "od", "hexdump", "xxd", "strings", "less", "more", "dd", "pv", "paste", "join", "fold", "fmt", "expand",
    "unexpand", "base64", "base32", "awk", "gawk", "mawk", "sed", "tee", "cp", "tar", "gzip", "zstd", "xz", "bzip2",
    "lz4", "split", "csplit", "shuf", "pr", "look", "iconv", "yq", "bat", "view", "vim", "vi", "nano",
})  # fmt: skip
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
    out: list[str] = _script_writes(program, args)
    if program in _DD_LIKE or (program == "qemu-img" and args[:1] == ["dd"]):
        out += [a[3:] for a in args if a.startswith("of=")]
    if program in _LINKERS and (program != "cp" or any(a in ("-s", "-l", "--symbolic-link", "--link") or
                                                       (a.startswith("-") and not a.startswith("--") and
                                                        ("s" in a or "l" in a)) for a in args)):
        linked = operands[:-1] if len(operands) >= 2 else operands  # `ln -s TARGET` links into the current directory
        out += linked
        for to in map(normalise_path, linked):  # `ln -s /dev X; cp y X/sda`: a write under X is one under /dev
            if to in ("/", "/dev", "/proc") or _PROC_ROOT_RE.match(to) or _DEVICE_DIR_RE.match(to):
                out.append(to + "/*" if to.startswith("/dev") else "/dev/*")
    if program in _WRITES_LAST or (program == "qemu-img" and args[:1] == ["convert"]):
        target = _target_directory(program, args)
        if target is not None:  # `cp -t /dev sda` writes /dev/sda
            sources = [o for o in operands if o != target]
            return [*out, target, *(_into(target, o) for o in sources)]
        if program == "xxd":  # only `xxd -r IN OUT` writes a file
            return [*out, *operands[1:2]] if "-r" in args or "-revert" in args else out
        if len(operands) < 2:
            return out
        # the last operand may be a directory of devices: `cp sda /dev` writes /dev/sda
        dest = operands[-1]
        into = [] if program in ("ln", "link") or not _holds_devices(dest) else [_into(dest, o) for o in operands[:-1]]
        return [*out, dest, *into]
    if program == "uniq" and len(operands) >= 2:  # uniq(1): INPUT OUTPUT
        return [*out, operands[1]]
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
    if program == "tar" and _tar_only_reads(args):
        options = ()  # `tar -tf /dev/sda` lists an archive (a read); -c, -r, -u, -A and --delete write it
    if program == "tar" and options and args and not args[0].startswith("-") and "f" in args[0]:
        # old-style bundled options: `tar cf FILE ...`, `tar czvf FILE ...` (the f takes the next word)
        later = [a for a in args[1:] if not a.startswith("-")]
        if later:
            out.append(later[0])
    for i, a in enumerate(args):
        for opt in options:
            if opt.startswith("--") and is_long_abbreviation(a, opt):  # getopt_long(3): `--outp=F` is `--output=F`
                if "=" in a:
                    out.append(a.split("=", 1)[1])
                elif i + 1 < len(args):
                    out.append(args[i + 1])
            elif a == opt and i + 1 < len(args):
                out.append(args[i + 1])
            elif (len(opt) == 2 and family not in _WORD_OPTIONS and a.startswith("-") and not a.startswith("--")
                  and opt[1] in a[1:]):
                # a getopt cluster: `-cf FILE` (the letter last: the next word), `-ofile` (the rest of the word)
                rest = a[a.index(opt[1], 1) + 1 :]
                if rest:
                    out.append(rest)
                elif i + 1 < len(args):
                    out.append(args[i + 1])
    return out


_TAR_WRITE_MODES = frozenset("cruA")
_TAR_READ_MODES = frozenset("txd")
_TAR_LONG_WRITE = ("--create", "--append", "--update", "--catenate", "--concatenate", "--delete")
_TAR_LONG_READ = ("--list", "--extract", "--get", "--diff", "--compare")


#: programs whose own script (an operand or an option's value) names files they write: sed's ``w FILE`` (also the
#: ``s///w FILE`` flag) and ``r FILE`` (an open), awk's ``print > "FILE"`` / ``getline < "FILE"``, an editor's ex
#: commands (``vim -c 'w! FILE'``), an interpreter's inline code (``python3 -c 'open("/dev/sda","wb")'``: every
#: absolute or ``./``, ``../`` name in it counts, as the policy cannot tell a read from a write there)
_AWK_FILE_RE = re.compile(r"(?:>>?|<)\s*\"([^\"]+)\"")
_CODE_NAME_RE = re.compile(r"((?<![A-Za-z0-9_.~$])/[A-Za-z0-9_.+:@%-][A-Za-z0-9_.+:@%/-]*|"
                           r"(?<![A-Za-z0-9_./])\.\.?/[A-Za-z0-9_.+:@%/-]+)")
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
#: editors: they save to the files they open (``ed -s /dev/sda <<< w``, ``vim -c wq /dev/sda``)
_EDITORS = frozenset({"vi", "vim", "nvim", "ex", "view", "vim.basic", "vim.tiny", "ed", "red", "nano", "emacs",
                      "mcedit", "joe", "jed"})
#: interpreters and the short options whose value is inline code
_CODE_OPTIONS = {"python": "c", "pypy": "c", "perl": "eE", "ruby": "e", "node": "ep", "nodejs": "ep", "bun": "e",
                 "php": "r", "lua": "e", "luajit": "e", "Rscript": "e", "pwsh": "c"}
#: archive extractors: `tar -x -C DIR`, `unzip -d DIR`, `cpio -i` write every name below the directory
_EXTRACT_DIR_OPTIONS = {"tar": ("-C", "--directory"), "unzip": ("-d",), "cpio": ("-D", "--directory")}


def _option_values(args: Sequence[str], short: str, longs: Sequence[str] = ()) -> list[str]:
    """The values of short options ``short`` (letters; ``-e V``, ``-eV``, last in a cluster ``-ne V``) and of long
    options ``longs`` (``--expression=V``, ``--expression V``, or an abbreviation)."""
    out: list[str] = []
    for i, a in enumerate(args):
        if a == "--":
            break
        if a.startswith("--"):
            if any(is_long_abbreviation(a, long) for long in longs):
                out.extend([a.split("=", 1)[1]] if "=" in a else args[i + 1 : i + 2])
            continue
        if a.startswith("-") and len(a) > 1:
            for j, letter in enumerate(a[1:], 1):
                if letter in short:
                    out.extend([a[j + 1 :]] if a[j + 1 :] else args[i + 1 : i + 2])
                    break
    return out


def _script_writes(program: str, args: Sequence[str]) -> list[str]:
    """Files a program's own script (sed, awk, an editor's commands, inline interpreter code) names as outputs, and
    what an in-place edit or an archive extraction writes."""
    family = re.sub(r"[0-9.]+$", "", program)
    operands = [a for a in args if not a.startswith("-")]
    if program == "sed":
        scripts = _option_values(args, "e", ("--expression",))
        return [f for text in scripts or operands[:1] for f in _sed_files(text)]
    if program in _AWKS or program.endswith("awk"):
        programs = _option_values(args, "e", ("--source",)) or operands[:1]
        out = [m.group(1) for text in programs for m in _AWK_FILE_RE.finditer(text)]
        if any(v == "inplace" for v in _option_values(args, "i", ("--include",))):
            out += operands[1:]  # gawk -i inplace: every file operand is rewritten
        return out
    if program in _EDITORS:
        commands = [a[1:] for a in args if a.startswith("+")]
        commands += _option_values(args, "cS", ("--cmd",))
        named = [m.group(1) for text in commands for m in _CODE_NAME_RE.finditer(text)]
        return [*named, *(o for o in operands if not o.startswith("+") and o not in commands)]
    if family in _CODE_OPTIONS:
        code = _option_values(args, _CODE_OPTIONS[family], ("--eval", "--print", "--command"))
        named = [m.group(1) for text in code for m in _CODE_NAME_RE.finditer(text)]
        in_place = family in ("perl", "ruby") and any(a.startswith("-") and not a.startswith("--") and "i" in
                                                        a[1:].split("e", 1)[0] for a in args)
        return [*named, *(o for o in operands if o not in code)] if in_place else named
    if program in _EXTRACT_DIR_OPTIONS and _extracts(program, args):
        options = _EXTRACT_DIR_OPTIONS[program]
        dirs = _option_values(args, "".join(o[1] for o in options if len(o) == 2),
                              [o for o in options if o.startswith("--")]) or ["."]
        return [d.rstrip("/") + "/*" for d in dirs]
    if program == "script":  # the typescript and every log file it names (not the -c command)
        skip = set(_option_values(args, "cEm", ("--command", "--echo", "--logging-format")))
        return [a for a in operands if a not in skip]
    if program == "logsave":  # logsave [-asv] LOGFILE PROGRAM...
        return operands[:1]
    if program == "bmaptool" and "copy" in operands:
        return operands[-1:]
    return []


def _sed_delimited(script: str, i: int, delimiter: str) -> int:
    """Index just past the unescaped ``delimiter`` closing the field that starts at ``i``."""
    while i < len(script) and script[i] != delimiter:
        i += 2 if script[i] == "\\" else 1
    return i + 1


def _sed_files(script: str) -> list[str]:
    """The files a sed script writes or reads by name: ``w FILE``, ``W FILE``, ``r FILE``, ``R FILE`` and the
    ``s///w FILE`` flag (each file name runs to the end of its line: sed(1), GNU sed manual "Commands")."""
    out: list[str] = []
    i, n = 0, len(script)
    while i < n:
        ch = script[i]
        if ch in " \t\n;{}!,0123456789$~+":
            i += 1
            continue
        if ch == "/" or (ch == "\\" and i + 1 < n):  # an address /re/ or \cREc
            delimiter = "/" if ch == "/" else script[i + 1]
            i = _sed_delimited(script, i + (1 if ch == "/" else 2), delimiter)
            continue
        end = script.find("\n", i)
        end = n if end == -1 else end
        if ch in "sy" and i + 1 < n:
            delimiter = script[i + 1]
            j = _sed_delimited(script, _sed_delimited(script, i + 2, delimiter), delimiter)
            flags = re.match(r"[gpiImMe0-9]*", script[j:])
            j += flags.end() if flags else 0
            if ch == "s" and script[j : j + 1] == "w":
                out.append(script[j + 1 : end].strip())
                i = end
            else:
                i = j
        elif ch in "rRwW":
            out.append(script[i + 1 : end].strip())
            i = end
        elif ch in "aice":  # text, or a command, to the end of the line
            i = end
        elif ch in "btT:":  # a label, to `;` or the end of the line
            semicolon = script.find(";", i, end)
            i = end if semicolon == -1 else semicolon
        else:
            i += 1
    return [f for f in out if f]


def _extracts(program: str, args: Sequence[str]) -> bool:
    """Whether an archiver extracts: ``tar -x``/``xf``/``--extract``/``--get``, ``cpio -i``/``--extract``, ``unzip``
    (unless it only lists, tests or prints)."""
    if program == "unzip":
        return not any(a in ("-l", "-t", "-v", "-Z", "-p", "-c") for a in args)
    longs = ("--extract", "--get") if program == "tar" else ("--extract",)
    if any(is_long_abbreviation(a, long) for a in args for long in longs):
        return True
    letter = "x" if program == "tar" else "i"
    return any(letter in a.lstrip("-") for i, a in enumerate(args)
               if (a.startswith("-") and not a.startswith("--")) or (i == 0 and program == "tar"))


def _tar_only_reads(args: Sequence[str]) -> bool:
    """Whether ``tar ARGS`` surely only reads its archive (a list, extract or compare mode, and no mode that writes
    it): tar(1) "-c, -r, -u, -A, --delete" write the archive, "-t, -x, -d" read it."""
    modes: set[str] = set()
    for i, a in enumerate(args):
        if a == "--":
            break
        if a.startswith("--"):
            if any(is_long_abbreviation(a, m) for m in _TAR_LONG_WRITE):
                return False
            if any(is_long_abbreviation(a, m) for m in _TAR_LONG_READ):
                modes.add("t")
        elif a.startswith("-") or i == 0:  # the first word may be old-style bundled letters (`tar tf x`)
            letters = a.lstrip("-")
            if "f" in letters:
                letters = letters[: letters.index("f")]  # what follows f in `-fx` is its value
            modes |= set(letters) & (_TAR_WRITE_MODES | _TAR_READ_MODES)
    return bool(modes) and not modes & _TAR_WRITE_MODES


def _glob_re(pattern: str) -> re.Pattern[str]:
    """A pathname-expansion pattern as a regex (``*`` and ``?`` do not cross ``/``; bash(1) Pattern Matching)."""
    out, i = [], 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            body = "^" + body[1:] if body[:1] in ("!", "^") else body
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return re.compile("".join(out) + r"\Z")


def may_open_armed(word: str, cwds: Sequence[str | None]) -> bool:
    """Whether ``word`` names a device that acts when opened (a watchdog), also relative to one of ``cwds``,
    through ``/proc/PID/root``, or as a glob that may expand to one (``/dev/watch*``)."""
    names = indirect_names(word, cwds) or ([word] if word.startswith("/") else [
        j for c in cwds for j in (join_dir(c, word), climbed(c, word)) if j is not None])
    for name in names:
        normal = normalise_path(name)
        root = _PROC_ROOT_RE.match(normal)
        if root is not None:
            normal = normalise_path("/" + (root.group(1) or ""))
        if _ARMED_BY_OPEN_RE.match(normal):
            return True
        if any(c in normal for c in "*?["):
            try:
                glob = _glob_re(normal)
            except re.error:
                return True  # a pattern the policy cannot read might name anything
            if any(glob.match(sample) for sample in _ARMED_SAMPLES):
                return True
    return False


_GREPS = frozenset({"grep", "egrep", "fgrep", "rgrep", "zgrep"})


def _grep_reads_devices(program: str, args: Sequence[str]) -> bool:
    """GNU grep opens the devices it finds while recursing only with ``-D read`` (``--devices=read``); grep(1):
    "if an input file is a device ... By default, devices are read if they are on the command line or if the -R or
    -r option is not used"."""
    if program not in _GREPS or not any(v == "read" for v in _option_values(args, "D", ("--devices",))):
        return False
    return program == "rgrep" or "recurse" in _option_values(args, "d", ("--directories",)) or any(
        is_long_abbreviation(a, "--recursive") or is_long_abbreviation(a, "--dereference-recursive")
        or (a.startswith("-") and not a.startswith("--") and ("r" in a or "R" in a)) for a in args)


def _devices_below(word: str, cwds: Sequence[str | None]) -> str | None:
    """``/dev/*`` (or the device directory below it) when the directory ``word`` may hold device nodes: ``/``,
    ``/dev``, a directory below ``/dev``, ``/proc/PID/root``, one the policy cannot know."""
    names = indirect_names(word, cwds) or ([word] if word.startswith("/") else [
        j for c in cwds for j in (join_dir(c, word), climbed(c, word)) if j is not None])
    if not names and any(c is None for c in cwds):
        return "/dev/*"
    for name in map(normalise_path, names):
        if name in ("/", "/*") or name.startswith("/*/"):
            return "/dev/*"
        if name == "/dev" or name.startswith("/dev/"):
            return name + "/*"
    return None


def _opened_by_stat_only(program: str, args: Sequence[str]) -> list[str]:
    """The words a program that otherwise only looks at names (:data:`STAT_ONLY`) opens all the same."""
    opts = _STAT_ONLY_OPENS.get(program, ())
    out: list[str] = []
    for i, a in enumerate(args):
        following = args[i + 1 : i + 2]
        for opt in opts:
            if opt.startswith("--"):
                if is_long_abbreviation(a, opt):
                    out.extend([a.split("=", 1)[1]] if "=" in a else following)
            elif a == opt:
                out.extend(following)
            elif program != "find" and a.startswith(opt):
                out.append(a[len(opt) :])
    flags = _STAT_ONLY_OPEN_OPERANDS.get(program, ())
    if any(a in flags or any(is_long_abbreviation(a, f) for f in flags if f.startswith("--"))
           or (a.startswith("-") and not a.startswith("--") and "s" in a[1:]) for a in args if flags):
        out.extend(a for a in args if not a.startswith("-"))
    return out


#: programs whose ``-t DIR`` is the target directory, and the short options of each that take a value (getopt(3):
#: in a cluster such as ``-vt /dev`` or ``-vt/dev`` the ``t`` takes the rest of the word or the next one)
_TARGET_DIRECTORY_VALUES = {"cp": "S", "mv": "S", "install": "gmoS", "ln": "S"}


def _target_directory(program: str, args: Sequence[str]) -> str | None:
    """The directory of ``-t DIR`` / ``--target-directory=DIR`` (also inside a cluster: ``cp -vt /dev x``)."""
    values = _TARGET_DIRECTORY_VALUES.get(program, "")
    for i, a in enumerate(args):
        if a == "--":
            break
        if is_long_abbreviation(a, "--target-directory"):
            if "=" in a:
                return a.split("=", 1)[1]
            return args[i + 1] if i + 1 < len(args) else None
        if not a.startswith("-") or a.startswith("--") or len(a) < 2:
            continue
        letters = a[1:] if program in _TARGET_DIRECTORY_VALUES else a[1:2]  # others: only a bare `-t`
        for j, letter in enumerate(letters):
            if letter == "t":
                rest = letters[j + 1 :] if program in _TARGET_DIRECTORY_VALUES else a[2:]
                return rest or (args[i + 1] if i + 1 < len(args) else None)
            if letter in values:
                break  # the rest of the word is this option's value
    return None


def _holds_devices(directory: str) -> bool:
    """Whether ``directory`` is (or may be, relative to a directory the command moved to) one of device nodes."""
    if not directory.startswith(("/", "~")):
        return directory.rstrip("/").rsplit("/", 1)[-1] in ("dev", "disk", "block", "mapper", "by-id", "by-path",
                                                             "by-uuid", "by-label", "by-partuuid", "")
    normal = normalise_path(directory)
    root = _PROC_ROOT_RE.match(normal)
    if root is not None:
        normal = normalise_path("/" + (root.group(1) or ""))
    return normal == "/dev" or bool(_DEVICE_DIR_RE.match(normal))


def _into(directory: str, source: str) -> str:
    """The file ``source`` is copied to inside ``directory`` (its last component there)."""
    name = source.rstrip("/").rsplit("/", 1)[-1] or source
    return directory.rstrip("/") + "/" + name


def writes_of(argv: Sequence[str], redirects: Sequence[_Redirect], cwds: Sequence[str | None]) -> list[str]:
    """Every file the command ``argv`` with ``redirects`` writes, relative names also resolved against ``cwds``.

    :param argv: the command's words (``argv[0]`` the normalised program name); may be empty (a pseudo-command).
    :param redirects: its redirections (enclosing ones included).
    :param cwds: the directories it may run in (``~`` the login directory, None where unknown).
    """
    targets: list[str] = []
    for redir in redirects:
        if redir.op not in OUTPUT_OPS:
            if may_open_armed(redir.target, cwds):
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
    if _grep_reads_devices(program, argv[1:]):  # `grep -D read -r x /dev` opens every device below /dev
        targets.extend(d for a in argv[1:] if not a.startswith("-") and (d := _devices_below(a, cwds)) is not None)
    if program not in STAT_ONLY:  # `ls -l /dev/watchdog` looks at the node, `cat` and `dd if=` open it
        targets.extend(w for a in argv[1:] if may_open_armed(w := a.split("=", 1)[-1], cwds))
    elif program:
        targets.extend(w for w in _opened_by_stat_only(program, argv[1:]) if may_open_armed(w, cwds))
    out: list[str] = []
    for target in targets:
        if target in ("", "-") or target in BENIGN_WRITE_TARGETS or normalise_path(target) in BENIGN_WRITE_TARGETS:
            continue
        # absolute names lexically normalised before any rule sees them: `/dev/shm/../sda` is /dev/sda, not a file
        # under the harmless /dev/shm
        out.append(normalise_path(target) if target.startswith("/") else target)
        indirect = indirect_names(target, cwds)
        if indirect is not None:  # `~sys/sda` (on Debian /dev/sda), `/proc/1/cwd/dev/sda`, `~+/sda`, /proc/1/root
            out.extend(n for n in indirect if n not in out)
            continue
        root = _PROC_ROOT_RE.match(normalise_path(target))
        if root is not None:  # /proc/self/root/dev/sda is /dev/sda
            out.append(normalise_path("/" + (root.group(1) or "")))
        if not target.startswith(("/", "(")):
            for cwd in [*cwds] if not target.startswith("~") else ["~"]:
                for resolved in (join_dir(cwd, target) if not target.startswith("~") else None,
                                 climbed(cwd, target)):  # `../../../dev/sda` from the login directory is /dev/sda
                    if resolved is not None and resolved not in out:
                        out.append(resolved)
    return list(dict.fromkeys(out))
