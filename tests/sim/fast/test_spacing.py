"""Claims proven never to queue (:mod:`sim.fast.spacing`): which ones are proven, and pipelines full of them
solved exactly (against the scalar loop), negative latencies included."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from sim.core.steps import Claim, Delay, Fork, Gate, Rebase, Wait
from sim.fast import Group, Server
from sim.fast.solver import Problem
from sim.fast.spacing import never_queue
from scalar_reference import run_pipelines
from test_pipelines import SETTINGS, series, solve_all


def anywhere(server: int) -> bool:
    return True


def test_a_claim_no_slower_than_its_feeder_is_proven():
    steps = (Claim(0, 80, 10), Delay(5), Claim(1, 80, 0, 10), Claim(2, 60, 0, 1), Rebase(True), Claim(3, 60))
    assert never_queue(steps, anywhere) == {2, 5}


def test_slower_servers_tails_draws_and_sharing_are_not_proven():
    assert never_queue((Claim(0, 50), Claim(1, 80)), anywhere) == set()  # slower than its feeder
    assert never_queue((Claim(0, 80), Claim(1, 50, 0, 10)), anywhere) == set()  # its tail may overlap
    assert never_queue((Claim(0, 80, 80), Delay(draws="d"), Claim(1, 50), Claim(2, 40)), anywhere) == set()
    assert never_queue((Claim(0, 80), Claim(1, 50)), lambda server: server != 0) == set()
    assert never_queue((Claim(0, 80), Claim(1, 50)), lambda server: server != 1) == set()


def test_a_gate_forgets_but_a_later_claim_proves_again():
    steps = (Claim(0, 80), Gate(2, "x"), Claim(1, 50, label="x"), Claim(2, 40))
    assert never_queue(steps, anywhere) == {3}


def test_forks_start_from_the_chain_and_wait_is_a_draw():
    steps = (Claim(0, 80), Fork((Claim(1, 70), Delay(draws="d"), Claim(2, 10))), Claim(3, 60), Wait("w"),
             Claim(4, 90), Claim(5, 10))
    assert never_queue(steps, anywhere) == {2, 5}


def test_the_problem_proves_only_lone_single_servers():
    steps = (Claim(0, 80), Claim(1, 50), Claim(2, 40), Claim(3, 30), Claim(3, 20))
    servers = [Server("a"), Server("b", stalls=((0, 5),)), Server("c", count=2), Server("d")]
    assert Problem(servers, [Group(steps, 3, 1)]).calm == [set()]
    assert Problem([Server(s) for s in "abcd"], [Group(steps, 3, 1)]).calm == [{1, 2}]


@st.composite
def chain(draw):
    """Claims on their own servers, mostly no slower than the one before, tails within the head lead or not,
    some with negative latencies (heads then leave that much after the start), separated by fixed delays."""
    count = draw(st.integers(2, 6))
    services = sorted(draw(st.lists(st.integers(0, 40_000), min_size=count, max_size=count)), reverse=True)
    steps = [Delay(draw(st.integers(0, 100_000)))]
    for k, service in enumerate(draw(st.permutations(services)) if draw(st.booleans()) else services):
        latency = draw(st.integers(-20_000, 50_000))
        head = -latency if latency < 0 else draw(st.integers(0, service))
        steps.append(Claim(k, service, head, draw(st.integers(0, 30_000)), latency, draw(st.booleans())))
        steps += draw(st.sampled_from([[], [Delay(draw(st.integers(0, 5_000)))], [Rebase(False, 7)]]))
    return tuple(steps), count


@SETTINGS
@given(chain(), st.integers(1, 300), st.integers(1, 24), st.lists(st.integers(0, 40_000), min_size=300,
                                                                  max_size=300))
def test_pipelines_with_calm_claims_equal_the_scalar_loop(chain, ops, window, polls):
    steps, count = chain
    group = Group((*steps, Rebase(True), Delay(draws="poll")), ops, window, {"poll": series(polls)})
    servers = [Server(f"s{i}") for i in range(count)]
    assume(Problem(servers, [group]).calm[0])
    assert solve_all(servers, [group], 5, block=32) == run_pipelines(servers, [group], 5)
