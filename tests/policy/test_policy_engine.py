"""Decisions under the shipped policies, and how decisions combine."""

from __future__ import annotations

import random
import shlex
from pathlib import Path

import pytest

from agent_tools.policy import Decision, PolicySet

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module")
def gpu() -> PolicySet:
    return PolicySet.load([POLICIES / "gpu-node.yaml"])


@pytest.fixture(scope="module")
def both() -> PolicySet:
    return PolicySet.load([POLICIES / "default.yaml", POLICIES / "gpu-node.yaml"])


@pytest.fixture(params=["gpu-node.yaml alone", "default.yaml + gpu-node.yaml"])
def gpu_sets(request: pytest.FixtureRequest, gpu: PolicySet, both: PolicySet) -> PolicySet:
    return gpu if request.param == "gpu-node.yaml alone" else both


def test_restart_asks_detaches_and_probes_the_unit(gpu_sets: PolicySet) -> None:
    d = gpu_sets.decide("gpu-node-1", "systemctl daemon-reload && systemctl restart sglang.service")
    assert d.decision == "ask"
    assert d.rule_id == "restart-sglang"
    assert d.detach_immediately
    assert d.deadline_from == "unit_timeout"
    assert {"kind": "systemd_unit", "unit": "sglang.service"} in d.probes
    assert {"kind": "http", "url": "http://127.0.0.1:30000/health"} in d.probes
    assert [c.decision for c in d.commands] == ["allow", "ask"]
    assert d.commands[0].rule_id == "daemon-reload"


def test_unit_name_gets_service_suffix(gpu_sets: PolicySet) -> None:
    d = gpu_sets.decide("gpu-node-1", "sudo systemctl --no-block restart sglang")
    assert d.probes[0] == {"kind": "systemd_unit", "unit": "sglang.service"}
    other = gpu_sets.decide("gpu-node-1", "systemctl start nginx.socket")
    assert other.rule_id == "restart-unit" and other.probes == [{"kind": "systemd_unit", "unit": "nginx.socket"}]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("nvidia-smi --query-gpu=memory.used --format=csv", {"allow"}),
        ('bash -c "rm -rf /"', {"deny"}),
        ("sudo rm -rf / --no-preserve-root", {"deny"}),
        ("/bin/rm -rf /", {"deny"}),
        ("FOO=1 rm -rf /*", {"deny"}),
        ("echo ok; rm -rf /", {"deny"}),
        ("true && \\rm -rf /", {"deny"}),
        ("echo cm0gLXJmIC8= | base64 -d | sh", {"ask", "deny"}),
        ('eval "$CMD"', {"ask"}),
        ("$(echo rm) -rf /", {"ask", "deny"}),
        ("find / -name x -exec rm -rf {} +", {"ask", "deny"}),
        ("ssh other 'reboot'", {"deny"}),
    ],
)
def test_required_decisions(gpu_sets: PolicySet, command: str, expected: set[str]) -> None:
    assert gpu_sets.decide("gpu-node-1", command).decision in expected


def test_ssh_is_decided_as_the_remote_command(gpu: PolicySet) -> None:
    d = gpu.decide("gpu-node-1", "ssh other 'reboot'")
    (cmd,) = d.commands
    assert cmd.argv == ["reboot"] and cmd.target_host == "other"
    assert d.rule_id == "power"


def test_opaque_command_is_never_allowed_by_an_allow_rule() -> None:
    ps = PolicySet.from_text(
        "version: 1\nhosts: ['*']\nrules:\n  - {id: py, match: [python3], decision: allow}\n"
        "  - {id: all, match: ['**'], decision: allow}\n"
    )
    d = ps.decide("h", "python3 -c 'import os'")
    assert d.decision == "ask" and d.rule_id == "<opaque>"
    assert d.commands[0].matched_rule_id == "py"
    assert ps.decide("h", "echo 'unterminated").decision == "ask"  # parse error
    assert ps.decide("h", "python3 train.py").decision == "allow"


def test_deny_rule_still_applies_to_opaque_command(both: PolicySet) -> None:
    d = both.decide("web-1", "PATH=/tmp:$PATH rm -rf /")
    assert d.decision == "deny" and d.commands[0].opaque


def test_strictest_wins_and_deciding_rule_supplies_budget() -> None:
    ps = PolicySet.from_text(
        """
version: 1
hosts: ['*']
defaults: {budget_s: 7, on_timeout: kill}
rules:
  - {id: slow, match: [slow], decision: allow, budget_s: 120, on_timeout: detach}
  - {id: risky, match: [risky], decision: ask, budget_s: 3}
  - {id: bad, match: [bad], decision: deny}
"""
    )
    assert ps.decide("h", "slow").budget_s == 120
    assert ps.decide("h", "slow; risky").decision == "ask"
    d = ps.decide("h", "slow; risky")
    assert (d.rule_id, d.budget_s, d.on_timeout) == ("risky", 3, "kill")  # on_timeout from defaults
    assert ps.decide("h", "risky && bad").rule_id == "bad"
    unmatched = ps.decide("h", "other")
    assert (unmatched.decision, unmatched.rule_id, unmatched.budget_s) == ("ask", "<default>", 7)
    assert ps.decide("h", "").decision == "ask"


def test_no_file_weakens_another() -> None:
    """A deny of any file stands; a rule of one file is not weakened by a rule of another (strictest wins); the
    explicit default of the most specific file is not weakened by a general file's rule; a specific file's rule
    may still allow what a general file only leaves to its default."""
    general = """
version: 1
hosts: ['*']
defaults: {decision: ask}
rules:
  - {id: no-reboot, match: [reboot], decision: deny}
  - {id: restart-ask, match: [restart-it], decision: ask}
  - {id: echo-ok, match: [echo], decision: allow}
"""
    specific = """
version: 1
hosts: ['gpu-*']
defaults: {decision: ask}
rules:
  - {id: allow-reboot, match: [reboot], decision: allow}
  - {id: restart-ok, match: [restart-it], decision: allow}
  - {id: reload-ok, match: [reload-it], decision: allow}
"""
    ps = PolicySet.from_text(general, specific)
    assert [p.path for p in ps.policies_for("gpu-1")] == ["<string:1>", "<string:0>"]
    assert ps.decide("gpu-1", "reboot").rule_id == "no-reboot"
    restart = ps.decide("gpu-1", "restart-it")
    assert (restart.decision, restart.rule_id) == ("ask", "restart-ask")
    echo = ps.decide("gpu-1", "echo hi")  # the specific file's own default (ask) holds over the general allow
    assert (echo.decision, echo.rule_id) == ("ask", "<default>") and "may not weaken" in echo.reason
    assert ps.decide("web-1", "echo hi").decision == "allow"
    assert ps.decide("gpu-1", "reload-it").decision == "allow"  # refines the general default
    assert ps.decide("web-1", "restart-it").decision == "ask"
    assert ps.decide("nowhere", "ls").policy_files == ["<string:0>"]
    assert PolicySet([]).decide("h", "ls").rule_id == "<no-policy>"


def test_exact_glob_beats_wildcard_regardless_of_order() -> None:
    a = "version: 1\nhosts: ['gpu-*']\nrules: [{id: a, match: [x], decision: ask, budget_s: 5}]\n"
    b = "version: 1\nhosts: ['gpu-1']\nrules: [{id: b, match: [x], decision: ask, budget_s: 7}]\n"
    assert PolicySet.from_text(a, b).decide("gpu-1", "x").rule_id == "b"
    assert PolicySet.from_text(b, a).decide("gpu-1", "x").budget_s == 7


def test_match_tokens() -> None:
    ps = PolicySet.from_text(
        r"""
version: 1
hosts: ['*']
rules:
  - {id: star, match: [tool, '*', end], exact: true, decision: deny}
  - {id: opts, match: [tool, '-**', run, '{unit:*.service}'], decision: deny}
  - {id: glob, match: ['mk*'], decision: deny}
  - {id: contain, match: [rm], args_contain: ['-r|-R'], match_any_arg: ['/[*]'], decision: deny}
  - {id: only, match: [q], only_args: ['-a|-b'], decision: allow}
  - {id: redir, match: ['**'], redirect_to: '/dev/sd*', decision: deny}
"""
    )
    decide = lambda c: ps.decide("h", c).rule_id  # noqa: E731
    assert decide("tool x end") == "star"
    assert decide("tool x end more") == "<default>"
    assert decide("tool -q --v run a.service") == "opts"
    assert decide("tool -q --v run a.socket") == "<default>"
    assert decide("mkfoo") == "glob"
    assert decide("rm -r /*") == "contain"
    assert decide("rm -r /tmp") == "<default>"  # [*] is a literal star
    assert decide("q -a -b") == "only"
    assert decide("q -a -c") == "<default>"
    assert decide("echo > /dev/sdb") == "redir"
    assert decide("echo > /dev/null") == "<default>"


def test_xargs_commands_cannot_satisfy_exact_or_only_args() -> None:
    ps = PolicySet.from_text(
        "version: 1\nhosts: ['*']\nrules:\n  - {id: x, match: [wc, -l], exact: true, decision: allow}\n"
        "  - {id: y, match: [cat], only_args: ['-n'], decision: allow}\n"
    )
    assert ps.decide("h", "wc -l").decision == "allow"
    assert ps.decide("h", "ls | xargs wc -l").decision == "ask"
    assert ps.decide("h", "ls | xargs cat -n").decision == "ask"


def test_decision_is_json_serialisable(both: PolicySet) -> None:
    d = both.decide("gpu-node-1", "systemctl restart sglang")
    assert Decision.model_validate_json(d.model_dump_json()) == d


def test_connection_and_redact_patterns_merge(both: PolicySet) -> None:
    conn = both.connection("gpu-node-1")
    assert conn.known_hosts == "strict" and conn.max_sessions == 8
    assert both.defaults("gpu-node-1").budget_s == 15
    assert both.defaults("web-1").budget_s == 30
    assert both.redact_patterns("web-1") == []


def test_never_raises_on_junk(both: PolicySet) -> None:
    rng = random.Random(1234)
    alphabet = [*"abrm -f/;|&<>()[]{}$`'\"\\\n*?~=#!%0123456789", "rm", "sudo", "bash -c", "<<", "$(", "${"]
    for _ in range(1500):
        command = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        assert both.decide("gpu-node-1", command).decision in ("allow", "ask", "deny")


@pytest.fixture(scope="module")
def default() -> PolicySet:
    return PolicySet.load([POLICIES / "default.yaml"])


def test_random_redefinitions_are_never_allowed(default: PolicySet, gpu: PolicySet, both: PolicySet) -> None:
    """A command an allow rule covers, redefined (function, alias, hash -p, enable) and then called in any of
    many ways, is never allowed by either shipped policy."""
    rng = random.Random(1313)
    names = ["ls", "cat", "echo", ":", "true", "nvidia-smi", "free", "df", "ps", "journalctl", "date", "grep",
             "uptime", "pwd"]
    for _ in range(700):
        name = rng.choice(names)
        body = rng.choice(["echo hi", ":", "ls", "curl -s http://127.0.0.1:9/", f"{name}|{name}&", "true", "date"])
        define = rng.choice([f"{name}(){{ {body}; }}", f"{name} () {{ {body}; }}", f"function {name} {{ {body}; }}",
                             f"function {name}() {{ {body}; }}", f"alias {name}={shlex.quote(body)}",
                             f"hash -p /tmp/evil {name}", f"enable -n {name}"])
        call = rng.choice([name, f"{name} -l /tmp", f"bash -c {shlex.quote(name)}", f"time {name}",
                           f"eval {name}", f"{name} | head", f"( {name} )"])
        glue = rng.choice(["; ", " && ", "\n", " || ", " & "])
        prefix = rng.choice(["", "ls; ", "df -h && ", "nvidia-smi -L\n"])
        command = rng.choice([f"{prefix}{define}{glue}{call}", f"{prefix}{call}{glue}{define}"])
        if rng.random() < 0.3:
            command = f"bash -c {shlex.quote(command)}"
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
            d = ps.decide(host, command)
            assert d.decision != "allow", (command, host, d.reason)


def test_random_block_device_writes_are_denied(default: PolicySet, gpu: PolicySet, both: PolicySet) -> None:
    """Any program of the list writing any block device, through any wrapper, is denied by both shipped
    policies."""
    rng = random.Random(2026)
    devices = ["/dev/sda", "/dev/sdb1", "/dev/nvme0n1", "/dev/nvme1n1p2", "/dev/vdb", "/dev/xvda", "/dev/md0",
               "/dev/mapper/vg-root", "/dev/disk/by-id/nvme-x", "/dev/dm-0", "/dev/loop0", "//dev/sda",
               "/dev/./nvme0n1", "/dev/../dev/sda", "/dev/zram0", "/dev/mmcblk0", "/dev/block/8:0", "/dev/vg0/root",
               "/dev/char/1:1", "/dev/watchdog", "/dev/bcache0", "/proc/self/root/dev/sda", "/proc/1/root/dev/nvme0n1",
               "~/../../dev/sda", "../../../../../../../../dev/nvme0n1", "~/../../../../../../dev/vdb",
               "~sys/sda", "~root/../dev/nvme0n1", "/proc/1/cwd/dev/sda", "/proc/self/cwd/../../../../../../dev/vdb",
               "/proc/1/task/1/cwd/dev/nvme0n1"]
    forms = ["cp /dev/zero {d}", "cp -f image.raw {d}", "mv image {d}", "install -m 600 img {d}", "rsync -a img {d}",
             "truncate -s 0 {d}", "tee {d} < /dev/zero", "echo x | tee -a {d}", "dd if=/dev/zero of={d} bs=1M",
             "cat /dev/zero > {d}", "cat > {d}", "pv /dev/zero > {d}", "pv -o {d} img", "shred -n1 {d}",
             "mkfs.ext4 {d}", "mkfs -t xfs {d}", "wipefs -a {d}", "blkdiscard {d}", "curl -so {d} http://127.0.0.1/",
             "sort -o {d} list", "tar -cf {d} /srv", "badblocks -w {d}", ": > {d}", "{{ echo x; }} > {d}",
             "printf x >> {d}", "xxd -r dump {d}", "exec 3>{d}", "cat /dev/zero 1<>{d}", "tar cf {d} /etc",
             "tar czvf {d} /srv", "socat -u /dev/zero {d}", "zstd -d x.zst -o {d}", "journalctl -n1 --cursor-file={d}",
             "openssl rand -out {d} 9", "ln -s {d} /tmp/l", "f() {{ cat /dev/zero; }} > {d}; f",
             "sort --outp={d} list", "sort --out {d} list", "ss -D {d}", "ss -tnD{d}", "tar --crea --fi {d} /etc",
             "sed -n 'w {d}' f", "sed 's/a/b/w {d}' f", "awk 'BEGIN{{print 1 > \"{d}\"}}'", "vim -c 'w! {d}' -c q",
             "ed -s {d}", "script -q {d}", "logsave {d} true", "dd_rescue img {d}", "bmaptool copy img {d}",
             "python3 -c 'open(\"{d}\", \"wb\")'", "perl -pi -e s/a/b/ {d}", "gawk -i inplace 1 {d}"]
    wrappers = ["{c}", "sudo {c}", "sudo -n -u root {c}", "nice -n 5 {c}", "timeout 5 {c}", "env -i {c}",
                "nohup {c}", "time {c}", "busybox {c}", "bash -c {q}", "sh -c {q}", "ssh other {q}", "eval {q}",
                "true && {c}", "ls; {c}", "toybox {c}", "taskset -c 1 {c}", "nsenter -t 1 -m {c}",
                "systemd-run --unit x {c}", "flock /tmp/l -c {q}", "perf stat {c}", "runuser -u root -- {c}",
                "script -qc {q} /dev/null", "tmux new -d {q}", "parallel ::: {q}", "screen -dm {c}", "caffeinate {c}",
                "capsh -- -c {q}"]
    in_script = ("sed", "awk", "python3", "vim")  # the name is in the program's own text: no tilde expansion there
    for _ in range(700):
        form, device = rng.choice(forms), rng.choice(devices)
        if form.startswith(in_script) and device.startswith("~"):
            device = device.replace("~sys", "/dev").replace("~root", "/root").replace("~", "../../../../../../..")
        command = form.format(d=device)
        wrapped = rng.choice(wrappers)
        if wrapped.startswith(("busybox", "nohup", "time", "sudo", "nice", "timeout", "env", "toybox", "taskset",
                               "nsenter", "systemd-run", "perf", "runuser", "screen", "caffeinate")) and (
                command.startswith(("{", ":", "exec", "f()")) or ">" in command or "|" in command or ";" in command):
            wrapped = "bash -c {q}"  # a wrapper runs a program, not shell syntax
        full = wrapped.format(c=command, q=shlex.quote(command))
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
            d = ps.decide(host, full)
            assert d.decision == "deny", (full, host, d.decision, d.reason)


def test_random_watchdog_opens_are_denied_and_looks_are_not(default: PolicySet, gpu: PolicySet,
                                                             both: PolicySet) -> None:
    """Opening a watchdog device arms it, for reading too (Linux watchdog-api.rst): the host reboots when the
    countdown ends. Any program reading it, by any name and from any directory, is denied; a look at its inode
    (ls -l, stat) is not."""
    rng = random.Random(1309)
    names = ["/dev/watchdog", "/dev/watchdog0", "/dev/watchdog1", "//dev/watchdog", "/dev/./watchdog0",
             "/dev/../dev/watchdog", "/dev/watch*", "/dev/w?tchdog", "/dev/[w]atchdog0", "/dev/char/10:130",
             "/proc/1/root/dev/watchdog", "/proc/self/root/dev/watchdog0", "~/../../../../dev/watchdog",
             "~sys/watchdog", "~root/../dev/watchdog0", "/proc/1/cwd/dev/watchdog", "/proc/1/fd/4",
             "/proc/self/cwd/../../../../../../dev/watchdog1"]
    opens = ["cat {w}", "head -c1 {w}", "tail -c1 {w}", "od -N1 {w}", "xxd -l1 {w}", "grep -c x {w}", "cat < {w}",
             "exec 3<{w}", "dd if={w} of=/dev/null count=1", "wc -c {w}", "cmp {w} /dev/null", "md5sum {w}"]
    wrappers = ["{c}", "sudo {c}", "timeout 1 {c}", "bash -c {q}", "true; {c}", "nice {c}"]
    relative_names = ["watchdog", "watchdog0", "./watchdog1", "../dev/watchdog", "~+/watchdog"]
    for _ in range(150):
        form = rng.choice(opens)
        command = form.format(w=rng.choice(names))
        wrapped = rng.choice(wrappers)
        if ("<" in command or command.startswith("exec")) and wrapped not in ("{c}", "true; {c}"):
            wrapped = "bash -c {q}"
        full = wrapped.format(c=command, q=shlex.quote(command))
        relative = form.format(w=rng.choice(relative_names))
        for cwd, text in ((None, full), ("/dev", relative), (None, f"cd /dev && {relative}")):
            for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
                d = ps.decide(host, text, cwd=cwd)
                assert d.decision == "deny", (text, cwd, host, d.decision, d.reason)
    for form in ("F={w}; cat $F", "cat $(echo {w})", "echo {w} | xargs cat", "echo {w} | xargs -I{{}} od {{}}",
                 "for f in {w}; do head -c1 $f; done", "find {w} -exec cat {{}} +", "du --files0-from={w}",
                 "file -s {w}", "wc --files0-f={w}"):
        for name in names:
            command = form.format(w=name)
            for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
                assert ps.decide(host, command).decision != "allow", (command, host)
    for look in ("ls -l /dev/watchdog", "stat /dev/watchdog0", "ls -la /dev/ | grep watchdog", "file /dev/watchdog",
                 "ls /dev/watch*"):
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1")):
            assert ps.decide(host, look).decision == "allow", look
    for read in ("tar -tf /dev/sda", "tar tvf /dev/nvme0n1", "tar --list --file=/dev/sda"):  # a read of a disk
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1")):
            assert ps.decide(host, read).decision == "ask", read


def test_random_relative_device_writes_are_denied(default: PolicySet, gpu: PolicySet, both: PolicySet) -> None:
    """A device named relative to a directory the command line moved to (a cd, a pushd, env -C, sudo -D, the call's
    cwd) is the device."""
    rng = random.Random(7331)
    names = ["sda", "nvme0n1", "sdb1", "vda", "md0", "dm-0", "mapper/vg-root", "block/8:0", "disk/by-id/x"]
    writes = ["cp zero {n}", "cat zero > {n}", "dd if=zero of={n}", "tee {n} < zero", "tar cf {n} /etc",
              "truncate -s 0 {n}", "ln -s {n} /tmp/l"]
    moves = ["cd /dev && {w}", "cd /dev; {w}", "cd / && cd dev && {w}", "pushd /dev; {w}", "(cd /dev; {w})",
             "cd /tmp; cd /dev; {w}", "env -C /dev {w}", "sudo -D /dev {w}", "cd /dev || exit; {w}",
             "builtin cd /dev; {w}", "command cd /dev && {w}", "cd ../../../../../../../../dev && {w}",
             "cd ~/../../../../../dev; {w}", "cd; cd ../../../..; cd dev; {w}"]
    for _ in range(400):
        write = rng.choice(writes).format(n=rng.choice(names))
        move = rng.choice(moves)
        if move.startswith(("env", "sudo")) and (">" in write or "<" in write):
            move = "cd /dev && {w}"
        for cwd, command in ((None, move.format(w=write)), ("/dev", write)):
            for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
                d = ps.decide(host, command, cwd=cwd)
                assert d.decision == "deny", (command, cwd, host, d.decision, d.reason)


def test_random_text_run_as_code_is_never_allowed(default: PolicySet, gpu: PolicySet, both: PolicySet) -> None:
    """Text the policy cannot see (quoted code, input, a command's output, $_ and the positional parameters) that
    reaches a place where bash evaluates it (arithmetic, a subscript, a variable-name operand, ${!x}, ${x@P}) is
    never allowed, however it is stored and read."""
    rng = random.Random(4242)
    sources = ["x='a[$(id)]'", "read x <<< 'a[$(id)]'", "read -r x < /tmp/f", "x=$(cat /tmp/f)", "x=$1",
               ": 'a[$(id)]'; x=$_", "set -- 'a[$(id)]'; x=$1", "mapfile -t x < /tmp/f", "declare x=\"$(cat /tmp/f)\"",
               "printf -v x %s \"$(cat /tmp/f)\"", "for x in $(cat /tmp/f); do :; done", "IFS= read -r x <<< 'a'",
               "getopts ab x", "x=`cat /tmp/f`", "read y < /tmp/f; x=y"]
    sinks = ["echo $((x))", "echo $[x]", "((x))", "let y=x+1", "[[ $x -eq 1 ]]", "[[ x -lt 2 ]]", "echo ${a[x]}",
             "echo ${a[$x]}", "b[x]=1", "echo ${s:x}", "echo ${s:0:x}", "declare -i y=x", "test -v \"$x\"",
             "printf -v \"$x\" 1", "read \"$x\" <<< 1", "echo ${!x}", "echo ${x@P}",
             "for ((i=x; i<1; i++)); do :; done",
             "unset \"$x\"", "[ -v \"$x\" ]", "(( y = x * 2 ))", "echo $(( x + 1 ))"]
    for _ in range(800):
        command = rng.choice(sources) + rng.choice(["; ", " && ", "\n", " || "]) + rng.choice(sinks)
        shape = rng.choice(["{c}", "ls; {c}", "bash -c {q}", "{{ {c}; }}", "( {c} )", "if true; then {c}; fi"])
        command = shape.format(c=command, q=shlex.quote(command))
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
            d = ps.decide(host, command)
            assert d.decision != "allow", (command, host, d.reason)
    # only text the policy cannot see counts: arithmetic on literals and loop counters is still a read
    for command in ["x=5; echo $((x + 1))", "for i in 1 2 3; do echo $((i * 2)); done", "echo $((3 * 4))",
                    "n=2; m=n; echo $((m))", "echo ${#HOME}", "ls; echo ${!HO*}",
                    "read -r line < /etc/hostname; echo $line", "printf -v out %s ok; echo $out",
                    "test -v HOME && echo set"]:
        d = default.decide("web-1", command)
        assert d.decision == "allow", (command, d.reason)


def test_random_hidden_substitutions_are_decided(default: PolicySet, gpu: PolicySet, both: PolicySet) -> None:
    """A command substitution where tree-sitter-bash reads plain text (a backquote or ``<(...)`` in any ${...}
    operator, nested backquotes, a backquote in an unquoted here-document) runs in bash: a denied inner command is
    denied, a harmless one is never allowed (nested backquotes, which the parser sees, decide like any command)."""
    rng = random.Random(1331)
    denied = ["rm -rf /", "reboot", "dd if=/dev/zero of=/dev/sda", "cat /dev/watchdog", "shutdown -h now",
              "mkfs.ext4 /dev/sda1"]
    harmless = ["date", "id", "touch /tmp/x", "uptime"]
    ops = [":-", "-", ":=", ":+", ":?", "#", "##", "%", "%%", "/a/", "//a/", "/#a/", "^", ",,", ":-~", ":-{a,"]
    places = ["echo ${{x{op}`{c}`}}", "echo ${{x{op}${{y:-`{c}`}}}}", 'echo "${{x{op}\'`{c}`\'}}"',
              "cat <<EOF\n${{x{op}`{c}`}}\nEOF", "cat <<EOF\n`{c}`\nEOF", "grep x <<-EOF\n\t`{c}`\nEOF",
              "echo `echo \\`{c}\\``", "ls ${{x:-<({c})}}", "echo ${{x:->({c})}}", "x=${{y{op}`{c}`}} ls"]
    commands = ["ls -l {p}", "journalctl -u {p}", "systemctl status {p}", "cat < {p}", "test {p}", "{p}"]
    for _ in range(600):
        inner_denied = rng.random() < 0.6
        inner = rng.choice(denied if inner_denied else harmless)
        place = rng.choice(places).format(op=rng.choice(ops), c=inner)
        if not place.startswith(("echo", "ls")) or "\n" in place:
            command = place
        else:
            command = rng.choice(commands).format(p=place.split(" ", 1)[1])
        if rng.random() < 0.2:
            command = f"bash -c {shlex.quote(command)}"
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
            d = ps.decide(host, command)
            if inner_denied:
                assert d.decision == "deny", (command, host, d.decision, d.reason)
            elif "\\`" not in command:
                assert d.decision != "allow", (command, host, d.reason)


def test_random_variables_that_change_what_runs_are_never_allowed(default: PolicySet, gpu: PolicySet,
                                                                  both: PolicySet) -> None:
    """A variable not known to be inert, set inline, through env, exported, by set -a or in the call's env, makes
    an allowed command ask; so does an env value holding shell code. Inert ones (LC_ALL, TZ) do not."""
    rng = random.Random(9001)
    names = ["PATH", "LD_PRELOAD", "LD_LIBRARY_PATH", "BASH_ENV", "ENV", "HOME", "XDG_CONFIG_HOME", "GIT_DIR",
             "GIT_CONFIG_COUNT", "GIT_CONFIG_KEY_0", "PYTHONPATH", "PERL5OPT", "GCONV_PATH", "GLIBC_TUNABLES",
             "RIPGREP_CONFIG_PATH", "CURL_HOME", "PAGER", "SYSTEMD_PAGER", "FOO", "MY_SETTING", "SHELLOPTS", "PS4",
             "IFS", "OPENSSL_CONF", "LESSOPEN", "AWS_CONFIG_FILE", "SSH_ASKPASS", "TMPDIR"]
    commands = ["ls", "cat /etc/hostname", "free -g", "nvidia-smi", "journalctl -n 5", "ls | head", "df -h"]
    for _ in range(600):
        name, value, command = rng.choice(names), rng.choice(["/tmp/evil", "1", "x", "$(id)"]), rng.choice(commands)
        placed = rng.choice(["{n}={v} {c}", "env {n}={v} {c}", "export {n}={v}; {c}", "set -a; {n}={v}; {c}",
                             "{n}={v}; export {n}; {c}", "declare -x {n}={v}; {c}", None])
        if placed is None:
            env, line = {name: value}, command
        else:
            env, line = None, placed.format(n=name, v=shlex.quote(value), c=command)
        for ps, host in ((default, "web-1"), (gpu, "gpu-node-1"), (both, "gpu-node-1")):
            d = ps.decide(host, line, env=env)
            assert d.decision != "allow", (line, env, host, d.reason)
    for env in ({"LC_ALL": "C"}, {"TZ": "UTC", "HF_TOKEN": "hf_x"}, {"CUDA_VISIBLE_DEVICES": "0", "lower": "x"}):
        assert default.decide("web-1", "ls", env=env).decision == "allow", env
    assert default.decide("web-1", "ls", env={"LC_ALL": "$(id)"}).decision == "ask"


def test_a_rule_on_cwd_applies_only_where_it_says_and_the_reason_tells(default: PolicySet) -> None:
    """git-read trusts only the login directory's repository (its config can run programs): elsewhere git asks,
    and the reason names the rule and where the command runs."""
    assert default.decide("web-1", "git log --oneline -5").decision == "allow"
    for command, cwd, where in (("cd /srv/repo && git status", None, "cannot know for sure"),
                                ("git status", "/srv/repo", "/srv/repo"), ("git status", "work", "~/work")):
        d = default.decide("web-1", command, cwd=cwd)
        assert d.decision == "ask" and "rule git-read covers it only where" in d.reason and where in d.reason, d
    ps = PolicySet.from_text("version: 1\nhosts: ['*']\nrules:\n"
                             "  - {id: app-git, match: [git, status], cwd: '/srv/app|/srv/app/*', decision: allow}\n")
    assert ps.decide("h", "git status", cwd="/srv/app/sub").decision == "allow"
    assert ps.decide("h", "cd /srv/app && git status").decision == "ask"  # cd may have failed: ~ or /srv/app
    assert ps.decide("h", "git status", cwd="/srv/other").decision == "ask"


def test_option_values_are_not_the_verb(default: PolicySet, gpu: PolicySet) -> None:
    """``-**`` skips an option's value with it (systemctl -p VALUE); for a program whose options are not known an
    allow rule does not look past an option that may take the next word."""
    for ps, host in ((default, "web-1"), (gpu, "gpu-node-1")):
        for command in ("systemctl -p status restart x", "systemctl --property status stop x",
                        "systemctl -t status kill x", "systemctl --prop status restart x",
                        "systemctl -ap status start x",
                        "systemctl --state status restart x", "systemctl -o status restart x"):
            assert ps.decide(host, command).decision != "allow", (host, command)
        for command in ("systemctl -n 5 status x", "systemctl --lines=5 status x", "systemctl -pstatus show x",
                        "systemctl --no-pager status x", "systemctl -l --no-pager status x"):
            assert ps.decide(host, command).decision == "allow", (host, command)
    ps = PolicySet.from_text("version: 1\nhosts: ['*']\nrules:\n"
                             "  - {id: a, match: [tool, '-**', show], decision: allow}\n"
                             "  - {id: d, match: [tool, '-**', wipe], decision: deny}\n")
    assert ps.decide("h", "tool -x show").decision == "ask"  # -x may take `show` as its value
    assert ps.decide("h", "tool --x=1 show").decision == "allow"
    assert ps.decide("h", "tool -x wipe").decision == "deny"
    assert ps.decide("h", "tool -x wipe now").decision == "deny"
    assert ps.decide("h", "tool -x v wipe").decision == "deny"


def test_a_glob_that_may_expand_to_a_device_is_a_device_write(default: PolicySet, gpu: PolicySet) -> None:
    """The shell expands a pathname pattern before the program runs: ``cp x /d?v/sda`` writes /dev/sda."""
    for ps, host in ((default, "web-1"), (gpu, "gpu-node-1")):
        for command in ("cp x /d?v/sda", "cat x > /d*/sda", "cp x /*/nvme0n1", "cat x > /dev/sd[a-c]",
                        "tee /dev/[!n]da < x", "dd if=x of=/de[v]/sda"):
            assert ps.decide(host, command).decision == "deny", (host, command)
        for command in ("cp x /tmp/*.txt", "echo > /etc/*.conf", "cp x /dev/shm/*"):
            assert ps.decide(host, command).decision == "ask", (host, command)
