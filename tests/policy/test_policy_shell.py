"""The shell parser: simple commands, unquoting, wrappers, opaque constructs."""

from __future__ import annotations

import shlex

import pytest

from agent_tools.policy import parse_command
from agent_tools.policy.shell import normalise_path


def argvs(command: str) -> list[list[str]]:
    """The commands the line runs (alternative readings of a brace or glob word, which only add a deny, left out)."""
    return [c.argv for c in parse_command(command) if not c.alternative]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("a; b && c || d", [["a"], ["b"], ["c"], ["d"]]),
        ("a | b |& c &", [["a"], ["b"], ["c"]]),
        ("a\nb", [["a"], ["b"]]),
        ("(a; { b; })", [["a"], ["b"]]),
        ("x $(y `z`)", [["x", "$(y `z`)"], ["y", "`z`"], ["z"]]),
        ("diff <(a) >(b)", [["diff", "<(a)", ">(b)"], ["a"], ["b"]]),
        ("if a; then b; elif c; then d; else e; fi", [["a"], ["b"], ["c"], ["d"], ["e"]]),
        ("for i in 1 2; do a $i; done; while b; do c; done", [["a", "$i"], ["b"], ["c"]]),
        ("case $x in y) a;; *) b;; esac", [["a"], ["b"]]),
        ("f() { a; }; f", [[], ["a"], ["f"]]),  # the definition (a pseudo-command, since f is called), body, call
        ("r''m \\-rf '/'\"x\"", [["rm", "-rf", "/x"]]),
        ("$'\\x72m' a", [["rm", "a"]]),
        ("echo {a,b}{1..2}", [["echo", "a1", "a2", "b1", "b2"]]),
        ("rm \\\n  -rf /", [["rm", "-rf", "/"]]),
    ],
)
def test_simple_commands(command: str, expected: list[list[str]]) -> None:
    assert argvs(command) == expected


@pytest.mark.parametrize(
    ("command", "argv", "wrappers"),
    [
        ("sudo -u root -E -- rm x", ["rm", "x"], ["sudo"]),
        ("env -i -- LC_ALL=C x", ["x"], ["env"]),
        ("nice -n 5 nohup timeout -s KILL 5 stdbuf -o0 x", ["x"], ["nice", "nohup", "timeout", "stdbuf"]),
        ("ionice -c3 setsid -f time -p command exec x", ["x"], ["ionice", "setsid", "time", "command", "exec"]),
        ("bash -lc 'sh -ec \"x y\"'", ["x", "y"], ["bash -c", "sh -c"]),
        ("chroot /mnt x", ["x"], ["chroot /mnt"]),
        ("watch -n 2 'x | y'", ["x"], ["watch"]),
        ("su - root -c 'x'", ["x"], ["su -c"]),
        ("eval 'x y'", ["x", "y"], ["eval"]),
    ],
)
def test_wrappers_unwrapped(command: str, argv: list[str], wrappers: list[str]) -> None:
    first = parse_command(command)[0]
    assert first.argv == argv
    assert first.wrappers == wrappers
    assert not first.opaque


def test_program_paths_are_normalised() -> None:
    for spelling in ("/usr/bin/rm", "/bin/rm", "\\rm", "'rm'", '"rm"', "/usr//bin/../bin/rm"):
        (cmd,) = parse_command(f"{spelling} x")
        assert cmd.program == "rm", spelling
        assert not cmd.opaque, spelling


def test_program_outside_system_dirs_is_opaque() -> None:
    (cmd,) = parse_command("./ls")
    assert cmd.program == "ls" and cmd.opaque


def test_ssh_marks_target_host_and_parses_remote_command() -> None:
    (cmd,) = parse_command("ssh -p 2222 -o BatchMode=yes root@gpu-2 'sudo systemctl restart x'")
    assert cmd.argv == ["systemctl", "restart", "x"]
    assert cmd.target_host == "gpu-2"
    assert cmd.wrappers == ["ssh gpu-2", "sudo"]


def test_xargs_marks_args_from_stdin() -> None:
    (cmd,) = parse_command("xargs -0 -n1 rm -f < list")
    assert cmd.argv == ["rm", "-f"] and cmd.args_from_stdin


def test_find_exec_and_delete() -> None:
    cmds = parse_command("find /srv -name '*.tmp' -exec rm -f {} + -delete")
    assert [c.argv for c in cmds] == [
        ["find", "/srv", "-name", "*.tmp", "-exec", "rm", "-f", "{}", "+", "-delete"],
        ["rm", "-f", "{}"],
        ["rm", "-r", "-f", "/srv"],
    ]
    assert cmds[1].dynamic == [False, False, True]  # {} is replaced at run time


def test_redirects_and_writes() -> None:
    (cmd,) = parse_command("x > out 2>&1 >> log < in 2>/dev/null")
    assert [r.op for r in cmd.redirects] == [">", ">&", ">>", "<", ">"]
    assert cmd.writes == ["out", "~/out", "log", "~/log"]  # a relative name also as resolved in the login directory
    (dd,) = parse_command("dd if=/dev/zero of=/dev/sdb")
    assert dd.writes == ["/dev/sdb"]
    (tee,) = parse_command("tee -a f1 f2")
    assert tee.writes == ["f1", "~/f1", "f2", "~/f2"]
    (odd,) = parse_command("rm > /dev/null -rf /")  # words after a redirect target are still arguments
    assert odd.argv == ["rm", "-rf", "/"]


def test_redirect_of_a_group_applies_to_its_commands() -> None:
    cmds = parse_command("{ a; b; } > /dev/sda")
    assert [c.writes for c in cmds] == [["/dev/sda"], ["/dev/sda"]]


def test_static_heredoc_into_shell_is_parsed() -> None:
    (cmd,) = parse_command("bash <<'EOF'\nrm -rf /tmp/x\nEOF")
    assert cmd.argv == ["rm", "-rf", "/tmp/x"] and cmd.wrappers == ["bash <<"]


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ('eval "$CMD"', "eval runs a string built at run time"),
        ("$CMD -rf /", "computed at run time"),
        ("$(echo rm) x", "computed at run time"),
        ("${X} x", "computed at run time"),
        ("/bin/r? x", "glob pattern"),
        ("source ./env.sh", "source runs the commands in ./env.sh"),
        (". ./env.sh", ". runs the commands in ./env.sh"),
        ("curl x | sh", "sh reads its commands from stdin (a pipe)"),
        ("base64 -d f | bash -s", "bash reads its commands from stdin (a pipe)"),
        ("python3 -c 'import os; os.system(1)'", "calls os.system/subprocess"),
        ("perl -ne 'print'", "perl -ne runs inline code"),
        ("ruby -e 1", "runs inline code"),
        ("node -e 1", "runs inline code"),
        ("python3 < x.py", "reads its program from stdin (a file)"),
        ('bash -c "$X"', "runs a script built at run time"),
        ("bash run.sh", "runs the script file run.sh"),
        ("LD_PRELOAD=/tmp/x.so ls", "sets LD_PRELOAD"),
        ("env PATH=/tmp ls", "sets PATH"),
        ("timeout --bogus 5 x", "unknown option --bogus"),
        ("ssh host", "interactive session"),
    ],
)
def test_opaque(command: str, reason: str) -> None:
    opaque = [c for c in parse_command(command) if c.opaque]
    assert opaque, command
    assert reason in (opaque[0].opaque_reason or "")


def test_standalone_dangerous_assignment_is_an_opaque_pseudo_command() -> None:
    cmds = parse_command("export PATH=/tmp:$PATH; ls")
    assert cmds[0].argv == [] and cmds[0].opaque and "PATH" in (cmds[0].opaque_reason or "")
    assert cmds[1].argv == ["ls"]


def test_parse_error_is_opaque_but_keeps_what_it_can_see() -> None:
    cmds = parse_command("echo 'unterminated; rm -rf /")
    assert cmds[0].argv == [] and cmds[0].opaque
    assert "cannot read" in (cmds[0].opaque_reason or "")


def test_deep_nesting_is_bounded() -> None:
    (cmd,) = parse_command("nohup " * 20 + "rm -rf /")
    assert cmd.opaque and "nested deeper" in (cmd.opaque_reason or "")
    nested = "rm -rf /"
    for _ in range(4):  # bash -c 'bash -c ...' four levels deep, each a script parsed again
        nested = "bash -c " + shlex.quote(nested)
    assert parse_command(nested)[-1].argv == ["rm", "-rf", "/"]
    assert parse_command("eval " * 10 + "rm -rf /")[-1].opaque
    cmds = parse_command("( " * 500 + "rm -rf /" + " )" * 500)  # no recursion limit in the walk
    assert [c.argv for c in cmds] == [["rm", "-rf", "/"]]


@pytest.mark.parametrize(
    ("path", "normal"),
    [("//", "/"), ("/.", "/"), ("/./etc/", "/etc"), ("/usr/..", "/"), ("~/", "~"), ("rel/..", "rel/..")],
)
def test_normalise_path(path: str, normal: str) -> None:
    assert normalise_path(path) == normal


@pytest.mark.parametrize(
    ("command", "redefined"),
    [
        (":(){ :|:& };:", ":"),
        ("function ls { echo; }; ls -l", "ls"),
        ("alias ls='echo x'; ls", "ls"),
        ("enable -n echo; echo x", "echo"),
        ("hash -p /tmp/x ls; ls", "ls"),
        ("bash -c 'ls(){ :; }; ls'", "ls"),
        ("ls; ls(){ :; }", "ls"),  # conservative: a call before the definition counts too
    ],
)
def test_a_redefined_name_makes_its_calls_and_definition_opaque(command: str, redefined: str) -> None:
    commands = parse_command(command)
    calls = [c for c in commands if c.program == redefined and not c.defines]
    assert calls and all(c.opaque and "redefined" in (c.opaque_reason or "") for c in calls)
    definitions = [c for c in commands if redefined in c.defines]
    assert definitions and all(c.opaque for c in definitions)


def test_a_function_nobody_calls_runs_nothing_but_its_body_is_still_parsed() -> None:
    assert argvs("ls(){ rm -rf /; }") == [["rm", "-rf", "/"]]
    assert not any(c.opaque for c in parse_command("ls(){ :; }; echo ok"))


@pytest.mark.parametrize(
    ("command", "writes"),
    [
        ("cp /dev/zero /dev/sda", ["/dev/sda"]),
        ("cp -t /dev/disk x y", ["/dev/disk", "/dev/disk/x", "/dev/disk/y"]),  # the files made inside it
        ("mv a b c/", ["c/", "~/c"]),
        ("rsync -a src/ host:dst/", ["host:dst/", "~/host:dst"]),
        ("truncate -s0 a b", ["a", "~/a", "b", "~/b"]),
        ("badblocks -sv /dev/sda", []),
        ("badblocks -wsv /dev/sda", ["/dev/sda"]),
        ("curl -so out http://x", ["out", "~/out"]),
        ("curl --output=out http://x", ["out", "~/out"]),
        ("sort -oout in", ["out", "~/out"]),
        ("tar -czf a.tgz dir", ["a.tgz", "~/a.tgz"]),
        ("xxd -r dump out", ["out", "~/out"]),
        ("xxd dump", []),
        ("cp a /dev/null", []),
    ],
)
def test_programs_writing_their_operands(command: str, writes: list[str]) -> None:
    assert parse_command(command)[0].writes == writes


def test_a_call_env_is_decided_like_an_export_at_the_start() -> None:
    cmds = parse_command("ls", env={"LD_PRELOAD": "/x.so", "LC_ALL": "C", "QA": "a[$(id)]", "x": "$(id)"})
    pseudo = [c for c in cmds if not c.argv]
    assert [c.text for c in pseudo] == ["env LD_PRELOAD=…", "env QA=…", "env x=…"]
    assert all(c.opaque and (c.opaque_reason or "").startswith("env: ") for c in pseudo)
    assert cmds[-1].argv == ["ls"] and not cmds[-1].opaque


def test_directories_a_command_may_run_in() -> None:
    cd, cp, _ = parse_command("cd /dev && cp zero sda; git status")
    assert cd.cwd == "~" and cp.cwds == ["~", "/dev"] and cp.cwd is None
    assert cp.writes == ["sda", "~/sda", "/dev/sda"]
    (only,) = parse_command("cp zero sda", cwd="/dev")
    assert only.cwd == "/dev" and "/dev/sda" in only.writes
    (rel,) = parse_command("touch x", cwd="work")
    assert rel.cwd == "~/work"
    (inner,) = parse_command("env -C /srv make")
    assert inner.cwd == "/srv"
    remote = parse_command("cd /dev; ssh h 'cp zero sda'")[-1]
    assert remote.target_host == "h" and remote.cwd == "~" and "/dev/sda" not in remote.writes
    assert parse_command('cd "$D"; ls')[-1].cwds == ["~", None]


def test_sinks_are_pseudo_commands_naming_what_bash_evaluates() -> None:
    reasons = [c.opaque_reason or "" for c in parse_command(": 'a[$(id)]'; echo ${!_} ${_@P} $(($_))") if not c.argv]
    assert any(r.startswith("indirect expansion") for r in reasons)
    assert any(r.startswith("prompt expansion") for r in reasons)
    assert any(r.startswith("arithmetic expansion") and "$_" in r for r in reasons)
    assert not [c for c in parse_command("x=5; echo $((x + 1)) ${!HO*} ${#x}") if c.opaque]


@pytest.mark.parametrize(
    ("command", "writes"),
    [
        ("cat /dev/zero 1<>/dev/sda", ["/dev/sda"]),
        ("tar cf /dev/sda /etc", ["/dev/sda"]),
        ("socat -u /dev/zero OPEN:/dev/sda,wronly", ["/dev/zero", "/dev/sda"]),
        ("zstd -d x.zst -o /dev/sda", ["/dev/sda"]),
        ("journalctl -n1 --cursor-file=/var/c", ["/var/c"]),
        ("curl -w '%output{/etc/x}%{http_code}' http://h/", ["/etc/x"]),
        ("ln -s /dev/sda /tmp/d", ["/dev/sda", "/tmp/d"]),
        ("sed -i s/a/b/ /etc/f", ["/etc/f"]),
        ("echo > /proc/self/root/dev/sda", ["/proc/self/root/dev/sda", "/dev/sda"]),
        ("find / -fprint /etc/x -name y", ["/etc/x"]),
    ],
)
def test_more_programs_writing_their_operands(command: str, writes: list[str]) -> None:
    assert parse_command(command)[-1].writes == writes


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("unset PATH; ls", "unset PATH"),  # bash then looks commands up in the current directory: ./ls
        ("unset -v -- IFS", "unset IFS"),
        ("PATH[0]=.; ls", "sets PATH"),
        ("PATH+=:.; ls", "sets PATH"),
        ("BASH_CMDS[ls]=/tmp/evil; ls", "sets BASH_CMDS"),  # bash's command hash table: ls runs /tmp/evil
        ("declare -A BASH_ALIASES=([ls]=x); ls", "sets BASH_ALIASES"),
        ("sleep 1 & wait -n -p PATH; ls", "wait assigns PATH"),
        ("set -k; ls LD_PRELOAD=/tmp/evil.so", "sets LD_PRELOAD"),
        ("set -o keyword; git status GIT_DIR=/tmp/e", "sets GIT_DIR"),
        ("systemctl --host=other status x", "another host"),
        ("systemctl -Hother status x", "another host"),
        ("hostnamectl --ho other", "another host"),
        ("ssh -o ProxyCommand='touch /tmp/x' h true", "ssh -o ProxyCommand"),
        ("ssh -oproxycommand=id h true", "ssh -o proxycommand"),
        ("ssh -o 'LocalCommand id' -o PermitLocalCommand=yes h true", "ssh -o LocalCommand"),
        ("ssh -vF /tmp/cfg h true", "ssh -F"),
        ("ssh -E /dev/sda h true", "ssh -E"),
    ],
)
def test_what_changes_the_program_run_or_runs_local_code_is_opaque(command: str, why: str) -> None:
    reasons = " | ".join(c.opaque_reason or "" for c in parse_command(command) if c.opaque)
    assert why in reasons, (command, reasons)


def test_harmless_neighbours_of_those_stay_clear() -> None:
    for command in ("unset x; ls", "unset -f PATH", "x[0]=1; ls", "set -e; ls LD=1", "systemctl -n 5 status x",
                    "ssh -o BatchMode=yes -p 22 h uptime", "ssh -J jump h true"):
        assert not [c for c in parse_command(command) if c.opaque], command
    assert parse_command("ssh -o ProxyCommand=x h rm -rf /")[-1].argv == ["rm", "-rf", "/"]  # still decided


@pytest.mark.parametrize(
    ("command", "written"),
    [
        ("sort --outp=/dev/sda list", "/dev/sda"),  # getopt_long(3) abbreviation
        ("sort --out /dev/sda list", "/dev/sda"),
        ("journalctl -n1 --cursor-f=/dev/sda", "/dev/sda"),
        ("ss -tnD/dev/sda", "/dev/sda"),
        ("ss --diag=/dev/sda", "/dev/sda"),
        ("cat x > ~/../../dev/sda", "/dev/sda"),  # .. above the login directory reach / once deep enough
        ("cp x ../../../../../../dev/sda", "/dev/sda"),
        ("cd ../../../../../../dev; cp x sda", "/dev/sda"),
        ("builtin cd /dev && cp x sda", "/dev/sda"),
        ("ln -s /dev /tmp/X", "/dev/*"),  # a write under the link is one under /dev
        ("ln -s / /tmp/R", "/dev/*"),
        ("cat /dev/watch*", "/dev/watch*"),
        ("cat /dev/[w]atchdog", "/dev/[w]atchdog"),
        ("cat /dev/char/10:130", "/dev/char/10:130"),
        ("cat /proc/1/root/dev/watchdog", "/proc/1/root/dev/watchdog"),
        ("du --files0-from=/dev/watchdog", "/dev/watchdog"),
        ("file -s /dev/watchdog0", "/dev/watchdog0"),
        ("tar -cf /dev/sda /etc", "/dev/sda"),
        ("tar -f /dev/sda -r x", "/dev/sda"),
        ("tar -tf /dev/sda --delete x", "/dev/sda"),
    ],
)
def test_writes_seen_through_abbreviations_paths_links_and_globs(command: str, written: str) -> None:
    assert written in parse_command(command)[-1].writes, parse_command(command)[-1].writes


def test_reads_are_not_writes() -> None:
    for command in ("tar -tf /dev/sda", "tar tf /dev/sda", "tar --list --file=/dev/sda",
                    "file /dev/watchdog", "du -sh /dev", "ls /dev/watch*", "cat /dev/sda", "cat ~/x"):
        assert parse_command(command)[-1].writes == [], command
    # an extraction reads the archive and writes what it holds below the working directory
    assert parse_command("tar -xvf /dev/sda")[-1].writes == ["./*", "~/*"]
    assert parse_command("tar -xvf /dev/sda -C /dev")[-1].writes == ["/dev/*"]
    assert parse_command("ls ~/../x")[-1].argv == ["ls", "~/../x"]
    assert normalise_path("~/../../dev/sda") == "~/../../dev/sda"  # not ~/dev/sda: the login directory's parent


@pytest.mark.parametrize(
    "command",
    ["F=/dev/watchdog; cat $F", "cat $(echo /dev/watchdog)", "cat /dev/$(echo watchdog)",
     "for f in /dev/*; do cat $f; done",
     "echo /dev/watchdog | xargs cat", "echo /dev/watchdog | xargs -I{} head -c1 {}", "find /dev -exec cat {} +",
     "cd /; find . -exec grep x {} +", "find \"$D\" -exec cat {} +"],
)
def test_a_file_named_at_run_time_may_be_a_watchdog(command: str) -> None:
    assert any("watchdog" in (c.opaque_reason or "") for c in parse_command(command)), command


def test_files_named_by_the_login_directory_or_found_below_it_are_not() -> None:
    for command in ('cat "$HOME/.bashrc"', "cat ${HOME}/x", "find . -name '*.py' -exec grep -l TODO {} +",
                    "find / -name x -exec ls -l {} +", "ls $(echo /dev)", "echo $F"):
        assert not [c for c in parse_command(command) if c.opaque], command


@pytest.mark.parametrize(
    ("command", "written"),
    [("cp -t /dev sda", "/dev/sda"), ("cp --targ=/dev sda", "/dev/sda"), ("cp -t/dev sda", "/dev/sda"),
     ("cp /tmp/sda /dev", "/dev/sda"), ("mv img/nvme0n1 /dev/", "/dev/nvme0n1"), ("cd /; cp sda dev", "/dev/sda"),
     ("uniq list /dev/sda", "/dev/sda")],
)
def test_a_copy_into_a_directory_of_devices_writes_the_device(command: str, written: str) -> None:
    assert written in parse_command(command)[-1].writes


def test_the_last_input_redirection_is_what_a_shell_reads() -> None:
    """bash applies redirections left to right: ``bash <<< 'ls' < /tmp/x`` reads /tmp/x (it was parsed as ``ls``)."""
    for command in ("bash <<< 'ls' < /tmp/x", "sh <<EOF < /tmp/x\nls\nEOF", "bash <<< ls 0</tmp/x",
                    "{ bash < /tmp/x; } <<< ls"):
        assert any(c.opaque for c in parse_command(command)), command
        assert ["ls"] not in [c.argv for c in parse_command(command)], command
    assert [c.argv for c in parse_command("bash < /tmp/x <<EOF\nls\nEOF")] == [["ls"]]  # the last one wins
    assert [c.argv for c in parse_command("{ bash <<< 'ls'; } < /tmp/x")] == [["ls"]]


def test_an_interactive_shell_is_opaque_a_login_shell_is_not() -> None:
    for command in ("bash -i <<< ls", "bash -ic ls", "bash -o pipefail -i -c ls", "bash --rcfile /tmp/x -c ls"):
        assert any("interactive" in (c.opaque_reason or "") for c in parse_command(command)), command
    for command in ("bash -lc ls", "bash --login -c ls", "bash -c ls -i"):
        assert not [c for c in parse_command(command) if c.opaque], command


@pytest.mark.parametrize(
    ("command", "written"),
    [("cat <<EOF > /dev/sda\nx\nEOF", "/dev/sda"), ("cat <<EOF >/etc/passwd\nx\nEOF", "/etc/passwd"),
     ("cat <<'EOF' 1<>/dev/nvme0n1\nx\nEOF", "/dev/nvme0n1"), ("cat <<A <<B >> /etc/issue\nx\nA\ny\nB", "/etc/issue")],
)
def test_a_redirection_after_a_here_document_on_its_line_is_seen(command: str, written: str) -> None:
    """tree-sitter-bash nests the redirections that follow ``<<EOF`` inside the here-doc node: ``cat <<EOF >
    /dev/sda`` was allowed as a plain ``cat``."""
    assert any(written in c.writes for c in parse_command(command))


def test_a_redirection_of_a_statement_that_is_no_command_is_kept() -> None:
    for command, target in (("[ 1 ] > /dev/sda", "/dev/sda"), ("((x=1)) < /dev/watchdog", "/dev/watchdog"),
                            ("declare x > /etc/issue", "/etc/issue")):
        assert any(target in c.writes for c in parse_command(command)), command
