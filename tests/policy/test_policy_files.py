"""Policy files: line numbers in errors, examples refusing a file, JSON Schema, shipped files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_tools.policy import Policy, PolicyFileError, PolicySet

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
version: 1
hosts: ["*"]
rules:
  - id: ls
    match: [ls]
    decision: allow
  - id: rm-root
    match: [rm]
    match_any_arg: ["/"]
    decision: deny
examples:
  must_allow: [ls -la]
  must_deny: [rm -rf /]
"""


def load_text(tmp_path: Path, text: str, name: str = "p.yaml") -> PolicySet:
    path = tmp_path / name
    path.write_text(text)
    return PolicySet.load([path])


def test_good_file_loads(tmp_path: Path) -> None:
    assert load_text(tmp_path, GOOD).decide("x", "ls").decision == "allow"


@pytest.mark.parametrize(
    ("old", "new", "line", "key", "message"),
    [
        ("    decision: allow", "    decision: maybe", 6, "rules.0.decision", "'allow', 'ask' or 'deny'"),
        ("    match: [ls]", "    match: [ls]\n    mtach: [x]", 6, "rules.0.mtach", "unknown key 'mtach'"),
        ("  - id: ls\n", "  - id: 'bad id'\n", 4, "rules.0.id", "pattern"),
        ("    match: [ls]\n", "", 4, "rules.0.match", "missing required key 'match'"),
        ("version: 1", "version: 2", 1, "version", "1"),
        ("  - id: rm-root", "  - id: ls", 7, "rules.1.id", "already used by rules.0"),
        ("    match: [rm]", "    match: [rm]\n    match: [rm]", 9, "rules.1.match", "duplicate key 'match'"),
    ],
)
def test_errors_name_file_line_and_key(tmp_path: Path, old: str, new: str, line: int, key: str, message: str) -> None:
    assert old in GOOD
    with pytest.raises(PolicyFileError) as info:
        load_text(tmp_path, GOOD.replace(old, new, 1))
    err = info.value
    assert err.path == str(tmp_path / "p.yaml")
    assert (err.line, err.key) == (line, key), str(err)
    assert message in err.message
    assert str(err).startswith(f"{tmp_path / 'p.yaml'}:{line}: {key}: ")


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError) as info:
        load_text(tmp_path, GOOD.replace("    match: [ls]", "    match: [ls"))
    assert info.value.line is not None and info.value.line >= 5
    assert "invalid YAML" in info.value.message


def test_unreadable_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(PolicyFileError, match="cannot read"):
        PolicySet.load([tmp_path / "missing.yaml"])
    with pytest.raises(PolicyFileError, match="empty"):
        load_text(tmp_path, "")


def test_probe_placeholder_must_be_captured(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    decision: allow", "    decision: allow\n    probes: [{kind: systemd_unit, unit: '{unit}'}]"
    )
    with pytest.raises(PolicyFileError) as info:
        load_text(tmp_path, text)
    assert (info.value.line, info.value.key) == (4, "rules.0")
    assert "{unit}" in info.value.message


def test_wrong_example_refuses_the_file_naming_example_and_rule(tmp_path: Path) -> None:
    text = GOOD + "  must_ask: [ls /tmp]\n"  # line 14; rule `ls` allows it
    with pytest.raises(PolicyFileError) as info:
        load_text(tmp_path, text)
    err = info.value
    assert (err.line, err.key) == (14, "examples.must_ask.0")
    assert "example 'ls /tmp' must be ask but is allow (rule 'ls'" in err.message


def test_list_scalars_stay_words(tmp_path: Path) -> None:
    text = (
        "version: 1\nhosts: ['*']\nrules:\n  - {id: k, match: [kill, -9, -1], decision: deny}\n"
        "  - {id: t, match: [rm], match_any_arg: [~], decision: deny}\n"
        "examples: {must_deny: ['kill -9 -1', 'rm -r ~']}\n"
    )
    ps = load_text(tmp_path, text)
    assert ps.policies[0].policy.rules[0].match == ["kill", "-9", "-1"]
    assert ps.policies[0].policy.rules[1].match_any_arg == ["~"]


def test_json_schema_exports() -> None:
    schema = Policy.json_schema()
    assert schema["$schema"].startswith("https://json-schema.org/")
    assert set(schema["required"]) == {"version", "hosts"}
    rule = schema["$defs"]["Rule"]
    assert {"match", "decision", "probes", "detach", "deadline_from"} <= set(rule["properties"])
    json.dumps(schema)


@pytest.mark.parametrize("name", ["default.yaml", "gpu-node.yaml"])
def test_shipped_policies_load_with_examples(name: str) -> None:
    policy_set = PolicySet.load([ROOT / "policies" / name])
    examples = policy_set.policies[0].policy.examples
    assert examples.must_allow and examples.must_ask and examples.must_deny
