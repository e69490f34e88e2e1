"""Every acceleration of the vectorized core switched off, alone or all together, gives the same answer to the
picosecond: the solver's passes reach the one consistent solution whatever their first guesses, and a server's
jobs are the same whichever way its solve finds them (:mod:`sim.fast.speedups`)."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from sim.fast import ALL, NONE, Server, Speedups, Unsolvable, solve
from test_pipelines import group, run_events, shared_pipelines, solve_all
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


def _repeated(draws, period: int):
    """``draws`` repeated with period ``period`` (for streams longer than the drawn series)."""
    return lambda lo, hi: np.asarray(draws(0, period))[np.arange(lo, hi) % period]
