"""The ``fleet_rollout`` benchmark's rounds (qa18 finding 18): a round that a side loses (a host not verified under
the machine's load) is a note naming the hosts, and the other rounds are still measured; a reset that cannot bring
the nodes back ends the measuring with what was measured, instead of the whole scenario dying with no row."""

from __future__ import annotations

from benchmarks.fleet_rollout import LostRound, measure


async def test_a_lost_round_is_a_note_and_the_other_rounds_count() -> None:
    calls: list[str] = []
    a: list[float] = []
    b: list[float] = []
    notes: list[str] = []

    async def side_a() -> None:
        calls.append("A")
        if calls.count("A") == 1:
            raise LostRound("FleetRollout did not verify every host: bench-node-07: failed: restart failed: ...")

    async def side_b() -> None:
        calls.append("B")

    async def reset() -> None:
        calls.append("reset")

    await measure(2, [("A", side_a, a), ("B", side_b, b)], reset, notes)
    assert calls == ["A", "reset", "B", "reset", "B", "reset", "A", "reset"]  # A B, then B A
    assert (len(a), len(b)) == (1, 2)
    assert notes == ["round 1 side A not counted: FleetRollout did not verify every host: bench-node-07: failed: "
                     "restart failed: ..."]


async def test_a_reset_that_cannot_bring_the_nodes_back_ends_the_measuring() -> None:
    a: list[float] = []
    b: list[float] = []
    notes: list[str] = []

    async def side() -> None:
        return None

    async def reset() -> None:
        raise LostRound("the reset did not bring back bench-node-01: restart_service: error: connection lost")

    await measure(2, [("A", side, a), ("B", side, b)], reset, notes)
    assert (len(a), len(b)) == (1, 0)
    assert notes == ["stopped after round 1 side A: the reset did not bring back bench-node-01: restart_service: "
                     "error: connection lost"]
