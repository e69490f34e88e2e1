"""Claims carried from block to block (:class:`sim.fast.block_pass.Carry`) keep their final times.

A kept operation's claims that the next block's claims may still interleave with are carried as pending and merged
again with them. A pass whose guesses put a later claim before one of them computes another finish for it; where
the block kept nothing (or only operations before that claim), that pass's value was carried on, and a server
served after the pending claims started from it: the passes then settled on an answer the event engine does not
give (a stream on one shared server, forks, detours and eager claims, a drawn poll delay). Likewise an operation
that skips a claim (an unsignaled work request's CQE) was kept while that claim's place in the server's order was
not settled, and its zero job carried a finish from a pass that had served it late. These pipelines are random
ones that did so, checked against the event engine's own interpreter."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from models.verbs.workloads import moderated_signal
from sim.core.steps import Check, Claim, Delay, Detour, Fork, Rebase, Wake
from sim.fast import Group, Server
from sim.fast.speedups import ALL, NONE
from test_pipelines import run_events, series, solve_all

START_PS = 11


def steps(skipped_by: str | None) -> tuple:
    """A request's walk: claims on server 0 from seven positions (one in a fork, two in detours, two eager), one on
    server 1, two drawn poll delays; the last claim on server 0 (a CQE) is skipped by ``skipped_by``'s operations."""
    return (Delay(2293), Claim(0, 9622, 1169, 123, 4582), Delay(5, "poll"),
            Fork((Delay(620), Claim(0, 5461, 848, 6112, 324, eager=True))), Claim(0, 180, 26, 16415, 1871, eager=True),
            Detour((Delay(1371), Claim(0, 2583, 356, 4545, 364))), Claim(1, 3748, 861, 20000, 1963),
            Delay(5, "poll"), Claim(0, 151, 18, 304, 1468), Detour((Delay(534), Claim(0, 279, 166, 1443, 70))),
            Claim(0, 40000, 32767, 5384, 46471, eager=True), Check("c4", 144),
            Claim(0, 674, 427, 67, 1612, skipped_by=skipped_by), Rebase(True), Delay(0, "poll"), Wake())


def moderated_draws(seed: int, ops: int, cq_mod: int) -> dict:
    """Random poll delays (up to 40 ns) and perftest's signaling of every ``cq_mod``-th work request and the last."""
    return {"poll": series(np.random.default_rng(seed).integers(0, 40_001, ops)),
            "unsignaled": series((~moderated_signal(np.arange(ops), cq_mod, ops - 1)).astype(np.int64))}


@pytest.mark.parametrize("seed", [0, 7, 14])
def test_a_stream_on_a_shared_server_completes_as_the_event_engine_says(seed):
    ops = 50
    poll = np.random.default_rng(seed).integers(0, 40_001, ops)
    group = Group(steps(None), ops, 20, {"poll": series(poll)})
    servers = [Server("s0"), Server("s1")]
    expected = run_events(servers, [group], START_PS)
    for block in (8, 64, 1024):
        assert solve_all(servers, [group], START_PS, block, ALL) == expected, block
    assert solve_all(servers, [group], START_PS, 64, NONE) == expected


@pytest.mark.parametrize("seed", [1, 5, 6])
def test_a_moderated_stream_on_a_shared_server_completes_as_the_event_engine_says(seed):
    """Every sixth work request signaled (perftest -Q 6), the accelerations on: the pace's guesses put the burst
    one completion posts before the carried claims."""
    ops, cq_mod = 60, 6
    draws = moderated_draws(seed, ops, cq_mod)
    group = Group(steps("unsignaled"), ops, 20, draws, unsignaled="unsignaled")
    servers = [Server("s0"), Server("s1")]
    assert solve_all(servers, [group], START_PS, 64, ALL) == run_events(servers, [group], START_PS, cq_mod)


def test_an_operation_is_kept_once_the_claim_it_skips_has_its_place():
    """Every third work request signaled; the pace's guesses (the crawl off) served an unsignaled one's skipped CQE
    claim after two later 37 ns claims, and the server was taken as free only after them."""
    ops, cq_mod = 90, 3
    steps = (Delay(18706), Claim(0, 18457, 555, 19039, 2302), Detour((Delay(287), Claim(0, 194, 15, 148, 132))),
             Claim(1, 51, 15, 2832, 1555), Delay(5, "poll"), Claim(0, 4123, 1227, 211, 1283),
             Claim(0, 37154, 232, 4129, 20126), Claim(2, 12976, 11635, 1510, 282), Claim(2, 39999, 1244, 602, 96),
             Claim(0, 179, skipped_by="unsignaled"), Rebase(True), Delay(0, "poll"), Wake())
    draws = moderated_draws(3, ops, cq_mod)
    group = Group(steps, ops, 23, draws, unsignaled="unsignaled")
    servers = [Server("s0"), Server("s1"), Server("s2")]
    expected = run_events(servers, [group], START_PS, cq_mod)
    assert solve_all(servers, [group], START_PS, 16, ALL) == expected
    assert solve_all(servers, [group], START_PS, 16, replace(ALL, crawl=False)) == expected
