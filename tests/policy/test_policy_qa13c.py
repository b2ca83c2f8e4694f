"""Issue 13, third round (qa13c): reads of secret files through recursive or indirect readers, deny rules turned
into ask by a glob, a wrapper or a number written another way, journalctl/sort options that reach other trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_tools.policy import PolicySet, parse_command, shell

POLICIES = Path(__file__).resolve().parents[2] / "policies"


@pytest.fixture(scope="module")
def default() -> PolicySet:
    return PolicySet.load([POLICIES / "default.yaml"])


@pytest.fixture(scope="module")
def both() -> PolicySet:
    return PolicySet.load([POLICIES / "default.yaml", POLICIES / "gpu-node.yaml"])


#: the report's reads of private keys and password hashes that no rule saw, and more of the same kind
RECURSIVE_READS = [
    "grep -r . /etc/ssh", "grep -r agent /etc", "grep -r . ~/.ssh", "grep -rI . /root/.ssh", "grep -r . /home",
    "grep -R x /etc", "grep --recursive x /etc", "grep --recur x /etc", "grep -d recurse x /etc",
    "grep --directories=recurse x /etc", "rgrep x /etc", "egrep -rn x /etc/ssh", "grep -rn -e x /etc",
    "grep -r x", "grep -r x .", "cd /etc && grep -r x .", "grep -r x /", "grep -r x ~", 'grep -r x "$HOME"',
    "grep -r x ~root", "grep -r x /proc/1/root/etc", "grep -r x /e*", "sudo grep -r x /etc/ssh",
    "diff -rN /tmp/empty /etc/ssh", "diff -r /etc/ssh /tmp/x", "diff --recursive /tmp/e /root",
    "find /etc -exec grep -H . {} +", "find /etc -name shadow -exec cat {} \\;",
    "find /etc/ssh -name 'ssh_host_ed*' -exec cat {} +", "find /etc -execdir cat {} +",
    "find ~ -name 'id_*' -exec head {} +", "find . -exec cat {} +", "find /etc -exec sudo cat {} +",
    "grep -r agent /etc | tr '$' '%'", "grep -rh agent: /etc | tr '$' '%'", "zcat -rf /etc/ssh",
    "rg x /etc", "rg TODO", "rg -uuu x ~", "cp -r /etc/ssh /tmp/k", "rsync -a /etc/ssh/ /tmp/k",
    # a file named in an option's value
    "diff --from-file=/etc/shadow /dev/null", "wc --files0-from=/etc/shadow", "grep -f/etc/shadow /dev/null",
    # private keys and credentials by other names
    "cat /root/.ssh/deploy_key", "cat /etc/letsencrypt/live/x/privkey.pem", "cat ~/.aws/credentials",
    "cat ~/.docker/config.json", "cat ~/.kube/config", "cat ~/.netrc", "cat /home/u/.pgpass",
    "cat ~/.git-credentials", "cat /proc/1/environ", "cat /run/secrets/db", "head /var/run/secrets/x/token",
]


@pytest.mark.parametrize("command", RECURSIVE_READS)
def test_recursive_and_indirect_reads_of_secret_files_ask(default: PolicySet, both: PolicySet, command: str) -> None:
    for policies, host in ((default, "web1"), (both, "gpu-node-1")):
        d = policies.decide(host, command)
        assert d.decision == "ask", (host, d.rule_id, d.reason)
        assert d.rule_id == "secret-files", (host, d.rule_id, d.reason)


@pytest.mark.parametrize(
    "command",
    ["grep -r x /var/log", "grep -rn TODO /srv/app", "diff -r /srv/a /srv/b", "grep x /etc/passwd",
     "find /var/log -name '*.log' -exec grep -l error {} +", "find /etc -name '*.conf'", "find /etc -exec ls -l {} +",
     "grep -r x /var/log /srv", "cat /etc/ssh/ssh_host_ed25519_key.pub", "ls -la ~/.ssh", "rg --files /etc"],
)
def test_reads_elsewhere_stay_allowed(default: PolicySet, command: str) -> None:
    d = default.decide("web1", command)
    assert d.decision == "allow", (d.rule_id, d.reason)


def test_what_find_hands_a_command_counts_only_for_one_that_opens_it(default: PolicySet) -> None:
    # rm does not read what it deletes: `find / -name x -exec rm {} +` is an ordinary ask, not a secret read
    d = default.decide("web1", "find / -name x -exec rm -rf {} +")
    assert d.decision == "ask" and all(c.rule_id != "secret-files" for c in d.commands), d.reason


def test_reads_are_listed_resolved() -> None:
    cmd = parse_command("cd /srv && grep -r x . /etc")[-1]
    assert set(cmd.reads) >= {"/srv/*", "/etc/*", "~/*"}
    assert parse_command("grep -r x")[0].reads == ["~/*"]
    assert parse_command("grep x /etc/passwd")[0].reads == []
    inner = [c for c in parse_command("find /etc -name shadow -exec cat {} +") if c.program == "cat"]
    assert inner and inner[0].reads == ["/etc/*"]


#: deny rules the report turned into ask: a pattern in the command name or the verb, an unknown wrapper, PID 1
#: written another way, a brace expansion
DENIED = [
    "/usr/sbin/re[b]oot", "/usr/sbin/reboo?", "/???/????/reb??t", "/usr/sbin/[hr]e*", "systemctl rebo?t",
    "systemctl [r]eboot", "systemctl re*t", "/usr/bin/[s]ystemctl reboot", "/usr/bin/[s]udo reboot",
    "[b]ash -c reboot", "sshpass -p x reboot", "timeout 5 /usr/sbin/[hr]e*", "sudo /usr/sbin/reb*",
    "sshpass -p /usr/sbin/[hr]e* ssh backup01 uptime", "unbuffer reboot", "eatmydata rm -rf /",
    "kill -15 0001", 'kill -9 " 1"', "kill -9 $((0+1))", "kill -9 $((010-7))", "kill -9 1 2", "kill -9 -1 1234",
    "kill -- -01", "kill -9 +1", "cp /dev/zero /dev/{sda,null}", "cp /dev/zero /dev/{null,sda}",
    "systemctl {status,reboot}", "mkfs.ex[t]4 /dev/sda1",
]


@pytest.mark.parametrize("command", DENIED)
def test_patterns_wrappers_and_numbers_do_not_turn_deny_into_ask(default: PolicySet, both: PolicySet,
                                                                command: str) -> None:
    for policies, host in ((default, "web1"), (both, "gpu-node-1")):
        d = policies.decide(host, command)
        assert d.decision == "deny", (host, d.rule_id, d.reason)


@pytest.mark.parametrize(
    "command",
    ["kill -1 1234", "kill -HUP 1234", "kill 1234", "kill -9 12", "ls /usr/sbin/re*", "echo {a,b}",
     "sshpass -p x ssh backup01 uptime", "systemctl status 'sglang*'", "cp /tmp/{a,b} /tmp/c"],
)
def test_their_neighbours_are_not_denied(default: PolicySet, command: str) -> None:
    d = default.decide("web1", command)
    assert d.decision != "deny", (d.rule_id, d.reason)


def test_alternatives_only_add_a_deny(default: PolicySet) -> None:
    # each brace alternative is decided alone, but only a deny of one counts: the rest is decided as bash runs it
    d = default.decide("web1", "ls /etc/{passwd,group}")
    assert d.decision == "allow"
    assert [c.argv for c in d.commands] == [["ls", "/etc/passwd", "/etc/group"]]
    cmds = [c for c in parse_command("cp /dev/zero /dev/{sda,null}") if c.argv]
    assert [c.argv for c in cmds if not c.alternative] == [["cp", "/dev/zero", "/dev/sda", "/dev/null"]]
    assert [c.argv for c in cmds if c.alternative] == [["cp", "/dev/zero", "/dev/sda"],
                                                       ["cp", "/dev/zero", "/dev/null"]]


@pytest.mark.parametrize(
    ("text", "value"),
    [("$((0+1))", 1), ("$((010-7))", 1), ("$((0x10))", 16), ("$((7/-2))", -3), ("$((-7%3))", -1),
     ("$(( (2+3)*4 ))", 20), ("$((x))", None), ("$((1/0))", None), ("$((08))", None), ("$((2**3))", None),
     ("$((1 1))", None), ("$(($(id)))", None)],
)
def test_constant_arithmetic_is_read_as_bash_computes_it(text: str, value: int | None) -> None:
    assert shell.constant_arithmetic(text) == value


@pytest.mark.parametrize(
    "command",
    ["journalctl --image=/dev/sda", "journalctl --root=/proc/1/root", "journalctl -D /dev", "journalctl -D/dev",
     "journalctl --directory=/var/log/x", "journalctl --file=/var/log/x.journal", "journalctl --ima=/dev/sda",
     "sort -T /dev x", "sort --temporary-directory=/dev x", "sort -nT/dev x", "sort --temp=/dev x"],
)
def test_journalctl_other_trees_and_sort_temporary_directories_ask(default: PolicySet, both: PolicySet,
                                                                  command: str) -> None:
    for policies, host in ((default, "web1"), (both, "gpu-node-1")):
        assert policies.decide(host, command).decision == "ask", host
    assert default.decide("web1", "journalctl -u sglang -n 50 --no-pager").decision == "allow"


def test_a_pattern_is_compared_with_what_it_may_expand_to(default: PolicySet) -> None:
    # after `--` a pattern names no long option; a relative one no absolute name and no expansion's text ($HOME)
    assert default.decide("web1", "rm -rf -- *", cwd="/srv/app/build").decision == "ask"
    assert default.decide("web1", "rm -rf -- *").decision == "deny"  # the login directory
    assert default.decide("web1", "rm -rf *", cwd="/srv/app/build").decision == "deny"  # a file named --no-pre...
    assert default.decide("web1", "cd / && rm -rf e*").decision == "deny"
    assert default.decide("web1", "kill -- *").decision == "deny"  # kill's -1 after -- is still PID -1
