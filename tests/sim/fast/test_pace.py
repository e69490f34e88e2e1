"""Saturated streams over many blocks: after the first block the solver guesses from the group's pace (ends,
and claims on shared servers) and skips the pass over free servers; the answers stay exact and one pass per
block suffices."""

from __future__ import annotations

import numpy as np
import pytest

import sim.fast.block as block_module
from sim.core.steps import Claim, Delay, Rebase, Wake
from sim.fast import Group, Server, solve
from scalar_reference import run_pipelines
from event_reference import run_events
from test_pipelines import series, solve_all

BLOCK = 1024


@pytest.fixture
def passes(monkeypatch):
    """Counts the passes the solver runs."""
    count = [0]
    run = block_module.Pass.run

    def counted(self):
        count[0] += 1
        return run(self)

    monkeypatch.setattr(block_module.Pass, "run", counted)
    return count


def _polls(ops: int, high: int, seed: int = 3):
    return series(np.random.default_rng(seed).integers(0, high, ops))


def test_a_saturated_stream_needs_one_pass_per_block(passes):
    ops = 16 * BLOCK
    steps = (Delay(200_000), Claim(0, 3_000, 3_000, 3_000, eager=True), Claim(1, 70_000, 24_000, 24_000, 550_000),
             Claim(2, 82_800, 0, 0, 300_000), Claim(3, 77_000, 5_800, 0, 0, True), Rebase(True),
             Delay(draws="poll"), Wake())
    servers = [Server(f"s{i}") for i in range(4)]
    group = Group(steps, ops, 128, {"poll": _polls(ops, 40_000)})
    assert solve_all(servers, [group], block=BLOCK) == run_pipelines(servers, [group])
    blocks = ops // BLOCK
    assert passes[0] <= blocks + 4  # the first blocks learn the pace; then one pass each


@pytest.mark.parametrize("responder", [False, True])
def test_a_saturated_stream_with_a_shared_server_keeps_its_claims_pace(passes, responder):
    """A WRITE's shape: read requests and, after the wire, the completion entry share the PCIe up link. With a
    responder stage after the wire (as a WRITE has), the completion entry's event keys keep the pace too."""
    ops = 8 * BLOCK
    back = (Claim(3, 1_000, 1_000, 1_000, 200_000),) if responder else ()
    steps = (Delay(1_000), Claim(0, 1_500, 1_500, 1_500), Delay(550_000), Claim(1, 75_000, 1_500, 1_500, eager=True),
             Claim(2, 82_800, 0, 0, 300_000), *back, Delay(400_000), Claim(0, 1_500, 1_500, 1_500, 150_000),
             Rebase(True), Delay(draws="poll"), Wake())
    servers = [Server("up"), Server("down"), Server("wire"), Server("responder")]
    group = Group(steps, ops, 128, {"poll": _polls(ops, 40_000, seed=5)})
    assert solve_all(servers, [group], block=BLOCK) == run_events(servers, [group])
    if responder:
        # blocks keep the operations done before the next can claim; the first ones, small and doubling, learn
        # the pace
        assert passes[0] <= 1.2 * ops // BLOCK + 6


def test_a_stream_that_stops_queueing_is_still_exact(passes):
    ops = 6 * BLOCK
    polls = np.random.default_rng(8).integers(0, 40_000, ops)
    polls[3 * BLOCK:] += 5_000_000  # the host polls slowly from here on: the window, not the wire, sets the pace
    steps = (Delay(1_000), Claim(0, 2_000, 2_000, 2_000), Claim(1, 82_800, 0, 0, 300_000), Rebase(True),
             Delay(draws="poll"), Wake())
    servers = [Server("a"), Server("b")]
    group = Group(steps, ops, 64, {"poll": series(polls)})
    assert solve_all(servers, [group], block=BLOCK) == run_pipelines(servers, [group])



@pytest.mark.parametrize("start", [0, 5_000_000_000])
def test_one_at_a_time_with_a_turn_on_a_shared_server_needs_one_pass_after_the_free_servers(passes, start):
    """One operation at a time whose claim in a turn (a send queue's, on the port) comes after another claim on the
    same port: the pass over free servers knows no posts but the first, so it leaves the turn's order to the real
    passes (the claims' own times are its lower bound); the guessed claims then hold, and every block takes that
    pass and one more."""
    ops = 256
    steps = (Delay(1_000), Claim(0, 1_500, 1_500, 1_500, 150_000), Claim(1, 82_800, 0, 0, 300_000),
             Delay(400_000), Claim(0, 2_000, 2_000, 2_000, 300_000, turn="send"), Rebase(True), Delay(draws="poll"),
             Wake())
    servers = [Server("port"), Server("wire")]
    group = Group(steps, ops, 1, {"poll": _polls(ops, 40_000, seed=11)})
    pieces = list(solve(servers, [group], start, block=BLOCK))
    assert passes[0] == 2 * len(pieces)
    assert ([np.concatenate([p.post for p in pieces]).tolist()], [np.concatenate([p.done for p in pieces]).tolist()]
            ) == run_events(servers, [group], start)
