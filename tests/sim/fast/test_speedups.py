"""Every acceleration of the vectorized core switched off, alone or all together, gives the same answer to the
picosecond: the solver's passes reach the one consistent solution whatever their first guesses, and a server's
jobs are the same whichever way its solve finds them (:mod:`sim.fast.speedups`)."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import sim.fast.block as block_module
import sim.fast.solver as solver_module
from bench.speedups import naked_window
from sim.core.steps import Claim, Delay, Detour, Fork, Rebase, Wake
from sim.fast import ALL, NONE, Group, Server, Speedups, Unsolvable, solve
from test_pipelines import claim, group, moderated, run_events, series, shared_pipelines, solve_all
from tests.properties import examples

SETTINGS = settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
ONE_OFF = [replace(ALL, **{f.name: False}) for f in fields(Speedups)]
"""Each acceleration switched off alone."""


def answers(servers, groups, speedups: Speedups, block: int) -> dict[int, tuple]:
    """Per group: its operations' posts, completions and marks (the pieces they come in may differ: how many
    operations a block keeps depends on how soon its passes agree)."""
    out: dict[int, tuple] = {}
    for piece in solve(servers, groups, 11, block=block, speedups=speedups):
        post, done, marks = out.setdefault(piece.group, ([], [], {}))
        post += piece.post.tolist()
        done += piece.done.tolist()
        for label, times in piece.marks.items():
            marks.setdefault(label, []).extend(times.tolist())
    return out


def same_with_every_setting(servers, groups, block: int) -> None:
    try:
        reference = answers(servers, groups, ALL, block)
    except Unsolvable as exc:
        assume(False)
        raise AssertionError from exc
    for speedups in [NONE, *ONE_OFF]:
        assert answers(servers, groups, speedups, block) == reference, speedups


@SETTINGS
@given(data=st.data())
def test_shared_servers_give_one_answer_with_or_without_accelerations(data):
    """Shared servers (merged claims), drawn delays, gates and side chains, in blocks of several sizes."""
    servers, groups = shared_pipelines(data)
    same_with_every_setting(servers, groups, data.draw(st.sampled_from([16, 64, 1024])))


@SETTINGS
@given(data=st.data())
def test_moderated_completions_give_one_answer_with_or_without_accelerations(data):
    """perftest -Q: operations that deliver no completion skip the claims only a signaled one makes, each posted by
    the latest completion delivered a window back (the pace keeps an idle latency for each kind)."""
    servers, groups = shared_pipelines(data)
    cq_mod = data.draw(st.integers(2, 6))
    moderated_groups = [data.draw(moderated(one, cq_mod, timed=False)) for one in groups]
    same_with_every_setting(servers, moderated_groups, data.draw(st.sampled_from([16, 64, 1024])))


@SETTINGS
@given(data=st.data())
def test_one_operation_at_a_time_on_shared_servers_gives_one_answer(data):
    """A stream that posts one operation at a time, its own claims queueing behind each other on shared servers
    (a ping-pong's): the event engine's answer, whether the passes guess its waits as its own or not."""
    count = data.draw(st.integers(1, 2))
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=2, max_size=6))
    servers = [Server(f"s{i}") for i in range(count)]
    one = data.draw(group(positions, gate=False, fork=data.draw(st.booleans()), wait=True, detour=True))
    groups = [replace(one, window=1)]
    assert solve_all(servers, groups, 11) == run_events(servers, groups, 11)
    same_with_every_setting(servers, groups, data.draw(st.sampled_from([16, 64])))


@SETTINGS
@given(data=st.data())
def test_parallel_and_saturated_streams_give_one_answer_with_or_without_accelerations(data):
    """Parallel streams on shared servers, and long saturated streams of one server each (where a block's first
    guesses come from the last block's pace and most claims never queue)."""
    count = data.draw(st.integers(1, 3))
    servers = [Server(f"s{i}") for i in range(count)]
    groups = []
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=4, unique=True))
    for k in range(data.draw(st.integers(1, 3))):
        one = data.draw(group(positions, gate=data.draw(st.booleans()), fork=False, wait=False, eager=k == 0))
        groups.append(replace(one, ops=one.ops * 4, parallel=k > 0,
                              draws={name: _repeated(d, one.ops) for name, d in one.draws.items()}))
    try:
        same_with_every_setting(servers, groups, data.draw(st.sampled_from([32, 256])))
    except Unsolvable as exc:
        assume("at once" not in exc.reason and "round's start" not in exc.reason)
        raise


@st.composite
def chained_steps(draw, inner: list[int]) -> tuple:
    """Steps that claim server 0 at two positions, the later one's claim following from the first one's through
    claims of ``inner`` (servers only those claims use), fixed delays and rebases, maybe inside a side chain (a
    SEND's receive completion after its payload); maybe a third claim of server 0 beside them, in a side chain of its
    own before the first (the receive WQE's fetch), with a claim of server 4 after it."""
    path = []
    for server in inner:
        path.append(draw(claim(server, eager=False)))
        path += draw(st.sampled_from([[], [Delay(draw(st.integers(0, 50_000)))],
                                      [Rebase(draw(st.booleans()), draw(st.integers(0, 20_000)))]]))
    later = draw(claim(0, eager=False))
    beside = (Fork((Rebase(False), draw(claim(0, eager=False)), Delay(draw(st.integers(0, 30_000))),
                    draw(claim(4, eager=False)))),)
    return (Delay(draw(st.integers(0, 200_000))), draw(claim(1, eager=False)), *(beside if draw(st.booleans()) else ()),
            draw(claim(0, eager=False)), *path, *((Fork((Rebase(True), later)),) if draw(st.booleans()) else (later,)),
            Rebase(True), Delay(draws="poll"), Wake())


@SETTINGS
@given(data=st.data())
def test_streams_whose_claims_of_a_server_follow_each_other_give_one_answer(data):
    """One stream or several in parallel, each claiming server 0 at two positions (or three) where the later one's
    claim follows from the first one's through steps that claim servers only those steps use, maybe shared by the
    streams (READs into a GPU on several QPs: each response's data and then its completion entry on the NIC's switch
    uplink, the GPU's link between; SENDs whose payload and receive completion cross the responder's PCIe link, the
    receive WQE's fetch beside them; the chains of :mod:`sim.fast.chain`, served together): the event engine's
    answer, with every setting."""
    inner = data.draw(st.lists(st.integers(2, 3), min_size=1, max_size=2, unique=True))
    servers = [Server(f"s{i}") for i in range(5)]
    groups = []
    for k in range(data.draw(st.integers(1, 3))):
        ops = data.draw(st.integers(1, 250))
        polls = data.draw(st.lists(st.integers(0, 40_000), min_size=ops, max_size=ops))
        window = data.draw(st.integers(1, 24))
        groups.append(Group(data.draw(chained_steps(inner)), ops, window, {"poll": series(polls)}, parallel=k > 0))
    same_with_every_setting(servers, groups, data.draw(st.sampled_from([16, 64, 1024])))
    assert solve_all(servers, groups, 11) == run_events(servers, groups, 11)


def test_passes_that_settle_under_one_operation_each_still_reach_the_event_engines_answer(monkeypatch):
    """Ten claims per operation on one server, eager and not, in side chains and detours, window 19 of 22 (a
    thorough hypothesis run's example): without the accelerations, the passes of the first block keep nothing until
    64 of them (more than one per operation) but move their earliest disagreement later each time they are doubled.
    The block is solved, not refused, and the answer is the event engine's."""
    def c(service, head, tail, latency, eager=False):
        return Claim(0, service, head, tail, latency, eager)

    polls = [2271, 289, 86, 2873, 40000, 595, 1397, 3571, 12000, 562, 0, 201, 13604, 98, 4571, 39999, 743, 7329,
             37048, 595, 298, 322]
    steps = (Delay(102), c(1793, 776, 4088, 1350), Fork((Delay(728), c(199, 165, 11837, 44062))),
             c(872, 417, 374, 29770, True), Detour((Delay(911), c(0, 0, 267, 921))), c(500, 500, 340, 2459, True),
             c(1622, 660, 62, 316, True), Detour((Delay(2095), c(349, 26, 20000, 189))), c(2195, 405, 100, 710),
             c(281, 214, 425, 50000, True), Rebase(True), Delay(0, "poll"), Wake())
    servers, groups = [Server("s0")], [Group(steps, 22, 19, {"poll": series(polls)})]
    passes = []
    solve_block = solver_module.solve_block
    monkeypatch.setattr(solver_module, "solve_block", lambda *args: passes.append(args[5]) or solve_block(*args))
    got = answers(servers, groups, NONE, 16)
    assert max(passes) > 22
    assert ([got[0][0]], [got[0][1]]) == run_events(servers, groups, 11)


def _repeated(draws, period: int):
    """``draws`` repeated with period ``period`` (for streams longer than the drawn series)."""
    return lambda lo, hi: np.asarray(draws(0, period))[np.arange(lo, hi) % period]


@SETTINGS
@given(data=st.data())
def test_a_stream_whose_middle_operations_go_again_gives_one_answer_with_or_without_its_tail_apart(data):
    """A stream whose operations in a middle stretch make claims again and again before their own steps (requests
    answered with RNR NAKs), then go on with other steps: the event engine's answer, whether a block stops passing
    once that stretch is settled (``tail_apart``) or not. (No gate: operations that take other steps may reach one
    out of order, which the core leaves to its caller, sim.fast.limits.)"""
    count = data.draw(st.integers(1, 3))
    servers = [Server(f"s{i}") for i in range(count)]
    before, after = (data.draw(group(data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=3)),
                                     gate=False, fork=False, wait=False, drawn=False, eager=False)) for _ in range(2))
    assume(before.ops > 2)
    first = data.draw(st.integers(1, before.ops - 2))
    last = data.draw(st.integers(first + 1, before.ops - 1))
    again = []
    for _ in range(data.draw(st.integers(1, 6))):
        again += [Claim(data.draw(st.integers(0, count - 1)), data.draw(st.integers(1, 5_000))), Rebase(False),
                  Delay(data.draw(st.integers(0, 400_000)))]
    groups = [Group(before.steps, first, before.window, before.draws),
              Group((*again, *before.steps), last, before.window, before.draws, first=first),
              Group(after.steps, before.ops, before.window, before.draws, first=last)]
    block = data.draw(st.sampled_from([16, 64]))
    try:
        reference = answers(servers, groups, ALL, block)
    except Unsolvable as exc:
        assume(False)
        raise AssertionError from exc
    assert answers(servers, groups, replace(ALL, tail_apart=False), block) == reference
    assert ([reference[g][0] for g in range(3)], [reference[g][1] for g in range(3)]) == run_events(servers, groups, 11)


def test_a_window_that_goes_again_twenty_times_is_walked_in_half_the_passes_with_its_tail_apart(monkeypatch):
    """A saturated stream whose middle window of 1 MiB WRITEs is answered with 20 RNR NAKs each (the pipelines
    bench/speedups.py times): with ``tail_apart`` the block stops passing once that window is settled, and the tail
    crawls on in blocks of its own; the answer is the event engine's either way."""
    walked = [0]
    run = block_module.Pass.run

    def counted(self):
        walked[0] += not self.idle and any(piece.group == 1 for piece in self.slices)
        return run(self)

    monkeypatch.setattr(block_module.Pass, "run", counted)
    servers, groups = naked_window()
    passes = {}
    for apart in (True, False):
        walked[0] = 0
        passes[apart] = (answers(servers, groups, replace(ALL, tail_apart=apart), 16384), walked[0])
    assert passes[True][0] == passes[False][0]
    assert ([passes[True][0][g][0] for g in range(3)], [passes[True][0][g][1] for g in range(3)]) == run_events(
        servers, groups, 11)
    assert 2 * passes[True][1] <= passes[False][1]
