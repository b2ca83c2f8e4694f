"""Adversarial corpus: a denied command is never allowed, however it is spelled."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent_tools.policy import PolicySet

ROOT = Path(__file__).resolve().parents[2]
CORPUS: list[dict[str, Any]] = yaml.safe_load((Path(__file__).parent / "adversarial_corpus.yaml").read_text())[
    "entries"
]
SETS = {
    "default": (["default.yaml"], "web-1"),
    "gpu-node": (["gpu-node.yaml"], "gpu-node-1"),
    "both": (["default.yaml", "gpu-node.yaml"], "gpu-node-1"),
}


@pytest.fixture(scope="module")
def policy_sets() -> dict[str, tuple[PolicySet, str]]:
    return {
        name: (PolicySet.load([ROOT / "policies" / f for f in files]), host) for name, (files, host) in SETS.items()
    }


def test_corpus_is_large_and_varied() -> None:
    assert len(CORPUS) >= 60
    assert len({(e["cmd"], e.get("cwd"), str(e.get("env"))) for e in CORPUS}) == len(CORPUS)
    families = Counter(e["family"] for e in CORPUS)
    assert len(families) >= 8 and min(families.values()) >= 4


@pytest.mark.parametrize("name", list(SETS))
def test_no_denied_command_is_allowed(name: str, policy_sets: dict[str, tuple[PolicySet, str]]) -> None:
    policy_set, host = policy_sets[name]
    failures = []
    for entry in CORPUS:
        got = policy_set.decide(host, entry["cmd"], cwd=entry.get("cwd"), env=entry.get("env"))
        ok = got.decision == "deny" if entry["expect"] == "deny" else got.decision != "allow"
        if not ok:
            failures.append(f"{entry['cmd']!r}: expected {entry['expect']}, got {got.decision} ({got.rule_id})")
    assert not failures, "\n".join(failures)
