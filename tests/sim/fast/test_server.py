"""The array solvers against job-by-job loops of :mod:`sim.core.servers`' rules, and the draw series
against :class:`sim.core.env.UniformDraws`."""

from __future__ import annotations

import heapq

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.core.env import DRAW_BLOCK, UniformDraws
from sim.core.servers import FifoServer, ServerPool, claim_cut_through
from sim.fast import UniformSeries, cut_through, pool
from tests.properties import examples


@st.composite
def jobs(draw):
    n = draw(st.integers(1, 300))
    gaps = draw(st.lists(st.integers(0, 200), min_size=n, max_size=n))
    head = np.cumsum(gaps).astype(np.int64)
    service = draw(st.one_of(st.integers(0, 150), st.lists(st.integers(0, 150), min_size=n, max_size=n)))
    not_before = head + np.asarray(draw(st.lists(st.integers(0, 300), min_size=n, max_size=n)), np.int64)
    return head, service if isinstance(service, int) else np.asarray(service, np.int64), not_before


@settings(max_examples=examples(200), deadline=None)
@given(jobs(), st.integers(0, 500), st.lists(st.tuples(st.integers(0, 40_000), st.integers(1, 3_000)), max_size=5))
def test_cut_through_with_stalls_equals_the_claim_loop(work, free_at, stalls):
    head, service, not_before = work
    rows = np.array(sorted((a, a + length) for a, length in stalls), np.int64).reshape(-1, 2)
    server = FifoServer("s")
    server.free_at = free_at
    for a, b in rows.tolist():  # the event engine's servers know their stalls in advance
        server.add_stall(a, b)
    expected = []
    for i, h in enumerate(head.tolist()):
        s = service if np.ndim(service) == 0 else int(service[i])
        expected.append(claim_cut_through(server, h, s, int(not_before[i])))
    start, finish = cut_through(head, service, not_before, free_at, rows)
    assert list(zip(start.tolist(), finish.tolist())) == expected


@settings(max_examples=examples(200), deadline=None)
@given(jobs(), st.lists(st.integers(0, 500), min_size=1, max_size=5))
def test_pool_equals_the_server_pool(work, free):
    head, service, not_before = work
    heap = sorted(free)
    expected = []
    for i, h in enumerate(head.tolist()):
        s = service if np.ndim(service) == 0 else int(service[i])
        begin = max(h, heap[0])
        finish = max(begin + s, int(not_before[i]))
        heapq.heapreplace(heap, finish)
        expected.append((begin, finish))
    start, finish, state = pool(head, service, not_before, free)
    assert list(zip(start.tolist(), finish.tolist())) == expected and state == sorted(heap)


def test_pool_without_cut_through_matches_sim_core_server_pool():
    rng = np.random.default_rng(2)
    head = np.cumsum(rng.integers(0, 30, 2000))
    service = rng.integers(1, 200, 2000)
    reference = ServerPool("p", 3)
    expected = [reference.claim(int(h), int(s)) for h, s in zip(head, service)]
    start, finish, _ = pool(head, service, head, [0, 0, 0])
    assert list(zip(start.tolist(), finish.tolist())) == expected


@pytest.mark.parametrize("high", [0, 1, 40_000, 1 << 40])
def test_uniform_series_replays_uniform_draws(high):
    one = UniformDraws(np.random.default_rng(9), high, block=64)
    reference = np.array([one.next() for _ in range(1000)])
    source = UniformDraws(np.random.default_rng(9), high, block=64)
    series = UniformSeries.following(source)
    assert series.take(0, 300).tolist() == reference[:300].tolist()
    assert [source.next() for _ in range(5)] == reference[:5].tolist()  # the source is left as it was
    series.release(250)
    assert series.take(251, 1000, 2).tolist() == reference[251::2].tolist()
    with pytest.raises(IndexError, match="released"):
        series.take(10, 20)


def test_uniform_series_replays_uniform_draws_in_default_blocks():
    n = 2 * DRAW_BLOCK + 3  # across two refills of the draws' buffer
    one = UniformDraws(np.random.default_rng(4), 40)
    assert UniformSeries(np.random.default_rng(4), 40).take(0, n).tolist() == [one.next() for _ in range(n)]


def test_uniform_draws_say_whether_they_started():
    draws = UniformDraws(np.random.default_rng(1), 40)
    assert not draws.started
    draws.next()
    assert draws.started


def test_uniform_series_refuses_a_stream_already_drawn_from():
    draws = UniformDraws(np.random.default_rng(1), 40)
    draws.next()
    with pytest.raises(ValueError, match="already drawn"):
        UniformSeries.following(draws)
