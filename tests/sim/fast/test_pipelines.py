"""Random pipelines: the array solver against a scalar loop of the same recurrences and against the event
engine's step interpreter.

Both comparisons are exact (integer picoseconds). Pipelines whose servers each serve one position run
against :mod:`scalar_reference` (pools and stall intervals included); pipelines that share servers between
positions run against :mod:`event_reference`, which claims real FifoServers in the ordering rule's order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from sim.core.steps import Check, Claim, Delay, Detour, Fork, Gate, Rebase, Wait, Wake, walk_order
from sim.fast import ALL, Group, Server, Unsolvable, solve
from sim.fast.merge import Claims, key_order
from scalar_reference import run_pipelines
from event_reference import run_events
from tests.properties import examples

SETTINGS = settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def solved(servers, groups, start_ps=0, block=64, speedups=ALL) -> list:
    """The pieces of the solve (with the accelerations ``speedups``); an example whose order the core refuses to settle (a claim reached at the
    picosecond a completion posts its operation, ``Unsolvable``) is discarded: the property is that whenever the
    core answers, the answer is the event engine's (test_a_claim_at_its_posting_picosecond_is_refused...)."""
    try:
        return list(solve(servers, groups, start_ps, block=block, speedups=speedups))
    except Unsolvable as exc:
        assume(not exc.reason.startswith("passes over"))
        raise


def solve_all(servers, groups, start_ps=0, block=64, speedups=ALL):
    """Posts and completions per group, from small blocks (so block boundaries are exercised)."""
    posts, dones = [[] for _ in groups], [[] for _ in groups]
    for piece in solved(servers, groups, start_ps, block=block, speedups=speedups):
        posts[piece.group] += piece.post.tolist()
        dones[piece.group] += piece.done.tolist()
    return posts, dones


def series(values):
    return lambda lo, hi: np.asarray(values[lo:hi], np.int64)


@st.composite
def claim(draw, server: int, label: str | None = None, eager: bool = True):
    service = draw(st.integers(0, 40_000))
    return Claim(server, service, draw(st.integers(0, service)), draw(st.integers(0, 20_000)),
                 draw(st.integers(0, 50_000)), eager and draw(st.booleans()), label)


@st.composite
def holds(draw):
    """Sorted, disjoint hold intervals within the first few simulated milliseconds."""
    out, end = [], -1
    for begin in sorted(draw(st.lists(st.integers(0, 3_000_000), max_size=3))):
        if begin > end:
            end = begin + draw(st.sampled_from([1, 30_000, 500_000]))
            out.append((begin, end))
    return tuple(out)


@st.composite
def group(draw, servers: list[int], gate: bool, fork: bool, wait: bool, drawn: bool = True, held: bool = False,
          eager: bool = True, slots: int | None = None, detour: bool = False):
    """A window-posted group: claims on ``servers`` (drawn with repetition when servers repeat), delays
    (``drawn``: some per operation), maybe a gate, a fork and a wait, ending as a bandwidth workload ends;
    ``held``: sleeps with hold intervals, one right after the first claim; ``eager``: some claims eager; a fork
    may renumber the steps after it;
    ``detour``: maybe detours that claim the server of the claim before them again (a shared server)."""
    ops = draw(st.integers(1, 250))
    draws = {"poll": draw(st.lists(st.integers(0, 40_000), min_size=ops, max_size=ops)),
             "sleep": draw(st.lists(st.integers(0, 30_000), min_size=ops, max_size=ops))}
    steps = [Delay(draw(st.integers(0, 200_000)))]
    order = draw(st.permutations(servers))
    slots = draw(st.integers(1, 8)) if slots is None else slots
    for k, server in enumerate(order):
        if gate and k == 0:
            steps += [Rebase(False), Gate(slots, "release"), Delay(draw(st.integers(1, 20_000)))]
        steps.append(draw(claim(server, "release" if gate and k == len(order) - 1 else None, eager and not
                                (gate and k == 0))))
        varied = drawn and (not gate or k == len(order) - 1)  # a gate's release may not follow a drawn delay
        extras = ["none", "delay", "rebase", "sleep"] + ["draw"] * varied + ["detour"] * detour
        extra = draw(st.sampled_from(extras))
        steps += {"none": [], "delay": [Delay(draw(st.integers(0, 100_000)))], "draw": [Delay(5, "poll")],
                  "rebase": [Rebase(draw(st.booleans()), draw(st.integers(0, 10_000)))],
                  "sleep": [Check(f"c{k}", draw(st.integers(0, 5_000)), draw(holds()) if held else ())],
                  "detour": [Detour((Delay(draw(st.integers(0, 30_000))), draw(claim(server, eager=False))))]
                  }[extra]
        if held and k == 0:
            steps.append(Check("held", draw(st.integers(0, 5_000)), draw(holds()), "held"))
        if fork and k == 0:  # the steps after it maybe renumbered (both engines order them from that number)
            steps.append(Fork((Delay(draw(st.integers(0, 50_000))), draw(claim(order[-1], eager=eager))),
                              draw(st.one_of(st.none(), st.integers(0, 12)))))
    if wait and drawn:
        steps += [Rebase(True), Wake(), Wait("sleep")]
    steps += [Rebase(True), Delay(draws="poll"), Wake()]
    return Group(tuple(steps), ops, draw(st.integers(1, 24)), {k: series(v) for k, v in draws.items()})


@SETTINGS
@given(data=st.data())
def test_unshared_pipelines_equal_the_scalar_loop(data):
    count = data.draw(st.integers(1, 6))
    servers = []
    for i in range(count):
        starts = data.draw(st.lists(st.integers(0, 3_000_000), max_size=4))
        stalls = tuple(sorted((a, a + data.draw(st.sampled_from([1, 50_000, 400_000]))) for a in starts))
        pool = data.draw(st.sampled_from([1, 1, 1, 2, 3]))
        servers.append(Server(f"s{i}", pool, () if pool > 1 else stalls))
    groups = [data.draw(group(list(range(count)), gate=data.draw(st.booleans()), fork=False, wait=False,
                              drawn=False))]
    assert solve_all(servers, groups, 7) == run_pipelines(servers, groups, 7)


@SETTINGS
@given(data=st.data())
def test_unshared_groups_one_after_the_other(data):
    servers = [Server(f"s{i}") for i in range(4)]
    groups = [data.draw(group([0, 1], gate=False, fork=False, wait=False, drawn=False)),
              data.draw(group([2, 3], gate=True, fork=False, wait=False, drawn=False))]
    assert solve_all(servers, groups) == run_pipelines(servers, groups)


@SETTINGS
@given(data=st.data())
def test_holds_equal_the_scalar_loop(data):
    """Accesses held while a translation is rebuilt: operations waking inside a hold go on at its end."""
    servers = [Server(f"s{i}") for i in range(6)]
    groups = [data.draw(group(mine, gate=data.draw(st.booleans()), fork=False, wait=False, drawn=False, held=True))
              for mine in ([0, 1, 2], [3, 4, 5])[:data.draw(st.integers(1, 2))]]
    assert solve_all(servers, groups) == run_pipelines(servers, groups)


@pytest.mark.xfail(strict=True, raises=AssertionError, reason="known defect, found by the thorough profile of the "
                   "property below: the core serves two of these zero-time claims at one picosecond in another order "
                   "than the event engine")
def test_zero_time_claims_renumbered_after_a_waiting_check_equal_the_event_engine():
    """Claims of no time on one server, a check that waits (``back_ps`` 0), a side chain after which the claims take
    their ordering positions from 0 again, and a claim whose tail adds 1 ps: six operations, three in flight, from
    11 ps. The event engine completes the third at 13 ps, the core at 14 ps (and the sixth at 15 against 16).

    Why: the first operation's renumbered claims (positions 0 to 2) are reached at 11 ps only once its check
    (position 2) is taken, after the second's and third's first claims (position 1). The event engine's heap takes a
    step reached at a picosecond after those it took already; the core orders by the step's own key and puts them
    first. Ordering such a step right behind the one that reached it mends this case but breaks a NAK PSN sequence
    error (test_link_losses): there the requests the NAK wakes and the one that carried it all go on behind the NAK's
    check at their own keys, and the core's holds do not say which step ended them."""
    def free(tail: int = 0) -> Claim:
        return Claim(0, 0, 0, tail, 0)

    steps = (Delay(0), free(), Check("held", back_ps=0, label="held"), Fork((Delay(0), free()), renumber=0), free(),
             free(1), free(), Rebase(True), Delay(0, "poll"), Wake())
    servers, groups = [Server("s0")], [Group(steps, 6, 3, {"poll": series([0] * 6)})]
    assert solve_all(servers, groups, 11) == run_events(servers, groups, 11)


@SETTINGS
@given(data=st.data())
def test_a_stream_that_changes_its_steps_equals_the_event_engine(data):
    """A stream whose operations from some number on take other steps (a route that changes) on shared
    servers: the window, gates and in-order completion carry across, and the two step lists' claims interleave
    in the ordering rule's order. (Claims are not eager: an eager claim needs a single feeder, which shared
    servers lack.)"""
    count = data.draw(st.integers(1, 3))
    servers = [Server(f"s{i}") for i in range(count)]
    gate, fork, held, slots = (data.draw(st.booleans()), data.draw(st.booleans()), data.draw(st.booleans()),
                               data.draw(st.integers(1, 8)))
    before, after = (data.draw(group(data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=4)),
                                     gate, fork, wait=False, drawn=False, held=held, eager=False, slots=slots,
                                     detour=True))
                     for _ in range(2))
    assume(before.ops > 1)
    switch = data.draw(st.integers(1, before.ops - 1))
    groups = [Group(before.steps, switch, before.window, before.draws),
              Group(after.steps, before.ops, before.window, before.draws, first=switch)]
    if data.draw(st.booleans()):
        groups.append(after)
    pieces = solved(servers, groups, 11, block=64)
    if gate:  # the gate's answer is the FIFO semaphore's while the stream's releases come in order
        released = np.concatenate([p.marks["release"] for p in pieces if p.group < 2])
        assume((np.diff(released) >= 0).all())
    fast = ([[] for _ in groups], [[] for _ in groups])
    for piece in pieces:
        fast[0][piece.group] += piece.post.tolist()
        fast[1][piece.group] += piece.done.tolist()
    assert fast == run_events(servers, groups, 11)


@SETTINGS
@given(data=st.data())
def test_a_stream_that_changes_its_steps_keeps_its_turn(data):
    """From some operation on, a stream reaches the claim it makes in a turn sooner or later (a payload read that
    got shorter or a translation that missed): an operation that gets there before the one ahead of it waits for
    that one's claim, as a send queue's requests reach the transmit port in posting order, and is ordered right
    behind it (sim.fast.turns)."""
    servers = [Server("read"), Server("port"), Server("wire")]

    def steps(read_ps: int, detour: bool):
        extra = (Detour((Delay(data.draw(st.integers(0, 3_000))), Claim(0, data.draw(st.integers(1, 5_000))))),)
        return (Delay(data.draw(st.integers(0, 2_000))), Claim(0, read_ps, data.draw(st.integers(0, read_ps))),
                *(extra if detour else ()), Claim(1, data.draw(st.integers(1, 4_000)), turn="tx"),
                Claim(2, data.draw(st.integers(0, 4_000)), eager=data.draw(st.booleans())),
                Rebase(True), Delay(draws="poll"), Wake())

    ops, window = data.draw(st.integers(2, 120)), data.draw(st.integers(1, 16))
    poll = series(data.draw(st.lists(st.integers(0, 3_000), min_size=ops, max_size=ops)))
    switch = data.draw(st.integers(1, ops - 1))
    first = steps(data.draw(st.integers(1, 20_000)), data.draw(st.booleans()))
    then = steps(data.draw(st.integers(1, 20_000)), data.draw(st.booleans()))
    groups = [Group(first, switch, window, {"poll": poll}), Group(then, ops, window, {"poll": poll}, first=switch)]
    assert solve_all(servers, groups, 11, block=data.draw(st.sampled_from([8, 64]))) == run_events(servers, groups, 11)


@SETTINGS
@given(data=st.data())
def test_an_operation_that_ends_without_its_turns_claim_passes_its_turn_at_its_end(data):
    """A few operations of a stream take other steps that make no claim in the stream's turn (a work request that
    fails before the transmit port): each one's turn passes when its main chain ends, where the event engine's
    interpreter passes the tickets of the turns an operation made no claim in, and the operations behind it that
    reach the turn sooner wait for that (sim.fast.turns)."""
    servers = [Server("read"), Server("port"), Server("wire"), Server("cqe")]

    def steps(read_ps: int, turn: bool):
        sent = (Claim(1, data.draw(st.integers(1, 4_000)), turn="tx"),
                Claim(2, data.draw(st.integers(0, 4_000)), eager=data.draw(st.booleans())))
        failed = (Delay(data.draw(st.integers(0, 30_000))), Claim(3, data.draw(st.integers(0, 2_000))))
        return (Delay(data.draw(st.integers(0, 2_000))), Claim(0, read_ps, data.draw(st.integers(0, read_ps))),
                *(sent if turn else failed), Rebase(True), Delay(draws="poll"), Wake())

    ops, window = data.draw(st.integers(4, 120)), data.draw(st.integers(1, 16))
    poll = series(data.draw(st.lists(st.integers(0, 3_000), min_size=ops, max_size=ops)))
    switch = data.draw(st.integers(1, ops - 3))
    back = data.draw(st.integers(switch + 1, min(ops - 1, switch + 3)))
    groups = [Group(steps(data.draw(st.integers(1, 20_000)), True), switch, window, {"poll": poll}),
              Group(steps(data.draw(st.integers(1, 20_000)), False), back, window, {"poll": poll}, first=switch),
              Group(steps(data.draw(st.integers(1, 20_000)), True), ops, window, {"poll": poll}, first=back)]
    assert solve_all(servers, groups, 11, block=data.draw(st.sampled_from([8, 64]))) == run_events(servers, groups, 11)


def test_a_continuation_claims_a_shared_server_before_the_stream_it_continues():
    """Operations queue on ``a`` (100 ps each) and pass ``b`` at once: operation i completes at 100 (i + 1).
    Operation 7 takes other steps: posted by operation 4's completion at 500, it holds ``b`` until 650, so
    operation 5, out of ``a`` at 600, waits for it there, whatever blocks the stream is solved in."""
    servers = [Server("a"), Server("b")]
    groups = [Group((Claim(0, 100), Claim(1, 0), Rebase(True), Wake()), 7, 3),
              Group((Claim(1, 150), Rebase(True), Wake()), 8, 3, first=7)]
    events = run_events(servers, groups)
    assert events[1][0][4:6] == [500, 650]
    for block in (1, 4, 64):
        assert solve_all(servers, groups, block=block) == events


def test_marks_report_the_wake_before_a_hold():
    steps = (Claim(0, 100), Check("translate", 30, ((150, 1000),), "translate"), Rebase(False), Claim(1, 10),
             Rebase(True))
    group = Group(steps, 4, 4)
    (piece,) = solve([Server("a"), Server("b")], [group])
    assert piece.marks["translate"].tolist() == [0, 70, 170, 270]  # each claim's start less 30
    assert piece.done.tolist() == [10, 110, 1010, 1020]


def test_a_continuation_must_follow_its_stream():
    steps = (Claim(0, 100), Rebase(True))
    gated = (Gate(1, "x"), Delay(1), Claim(0, 100, label="x"), Rebase(True))
    for groups in ([Group(steps, 5, 2, first=3)], [Group(steps, 3, 2), Group(steps, 5, 4, first=3)],
                   [Group(steps, 3, 2), Group(steps, 3, 2, first=3)],
                   [Group(steps, 3, 2), Group(gated, 5, 2, first=3)]):
        with pytest.raises(ValueError, match="continues from operation 3"):
            list(solve([Server("a")], groups))


def shared_pipelines(data) -> tuple[list[Server], list[Group]]:
    """One to three servers claimed from two to six positions of one or two groups (gates, side chains, drawn
    delays)."""
    count = data.draw(st.integers(1, 3))
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=2, max_size=6))
    servers = [Server(f"s{i}") for i in range(count)]
    groups = [data.draw(group(positions, gate=data.draw(st.booleans()), fork=data.draw(st.booleans()), wait=False,
                              detour=True)) for _ in range(data.draw(st.integers(1, 2)))]
    return servers, groups


@SETTINGS
@given(data=st.data())
def test_shared_servers_equal_the_event_engine(data):
    servers, groups = shared_pipelines(data)
    note([{name: d(0, g.ops).tolist() for name, d in g.draws.items()} for g in groups])
    assert solve_all(servers, groups, 11) == run_events(servers, groups, 11)


@SETTINGS
@given(data=st.data())
def test_parallel_streams_on_shared_servers_equal_the_event_engine(data):
    """Several streams start at one instant and share servers, each with its own window, gates and draws; the
    next round starts once all have ended. An example whose streams' claims tie on a server with operations posted
    at one picosecond after their start (an order the deliveries of their completions decide) is refused, and
    discarded here."""
    count = data.draw(st.integers(1, 3))
    servers = [Server(f"s{i}") for i in range(count)]
    groups = []
    for r in range(data.draw(st.integers(1, 2))):
        positions = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=5))
        gate, fork = data.draw(st.booleans()), data.draw(st.booleans())
        for k in range(data.draw(st.integers(2, 4))):
            one = data.draw(group(positions, gate=gate, fork=fork, wait=False, eager=False, detour=True))
            groups.append(replace(one, parallel=k > 0))
    try:
        fast = solve_all(servers, groups, 11, block=data.draw(st.sampled_from([16, 64, 1024])))
    except Unsolvable as exc:
        assume("deliveries tie" not in exc.reason and "round's start" not in exc.reason)
        raise
    assert fast == run_events(servers, groups, 11)


@settings(SETTINGS, max_examples=examples(15))
@given(data=st.data())
def test_streams_that_post_for_a_while_end_where_the_event_engine_stops_posting(data):
    """Streams posting while the clock is less than a duration after their start (perftest -D) on shared servers,
    one after the other or side by side: each ends before its first operation posted at or after that time, and
    the operations before it are solved without the ones never posted, which would have delayed them."""
    count = data.draw(st.integers(1, 3))
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=2, max_size=6))
    servers = [Server(f"s{i}") for i in range(count)]
    told, side = {}, data.draw(st.booleans())
    groups = []
    for k in range(data.draw(st.integers(1, 3))):
        one = data.draw(group(positions, gate=data.draw(st.booleans()), fork=data.draw(st.booleans()), wait=False,
                              eager=not side))
        duration = data.draw(st.integers(1, 3_000_000))
        groups.append(replace(one, parallel=side and k > 0, ended=lambda n, k=k: told.__setitem__(k, n),
                              posts_while=lambda post, start, d=duration: post < start + d))
    try:
        fast = solve_all(servers, groups, 11, block=data.draw(st.sampled_from([8, 64])))
    except Unsolvable as exc:
        assume("deliveries tie" not in exc.reason and "round's start" not in exc.reason)
        raise
    assert fast == run_events(servers, groups, 11)
    assert [told.get(k, g.ops) for k, g in enumerate(groups)] == [len(posts) for posts in fast[0]]


def test_parallel_streams_share_a_server_in_posting_order():
    """Two streams of one claim each on ``a`` (100 ps), windows 1: both post at 0, the first stream's operation
    goes first; then each posts on its completion, so the streams alternate and the next round starts after
    both have ended."""
    one = Group((Claim(0, 100), Rebase(True), Wake()), 3, 1)
    groups = [one, replace(one, parallel=True), one]
    events = run_events([Server("a")], groups)
    assert events == ([[0, 100, 300], [0, 200, 400], [600, 700, 800]],
                      [[100, 300, 500], [200, 400, 600], [700, 800, 900]])
    for block in (1, 4, 64):
        assert solve_all([Server("a")], groups, block=block) == events


def test_parallel_streams_posting_at_one_picosecond_on_servers_of_their_own_equal_the_event_engine():
    """Both streams complete every 100 ps and post their next operations at the same picoseconds; no server is
    claimed by both, so the order in which the event engine numbers those posts decides nothing."""
    one = Group((Claim(0, 100), Rebase(True), Wake()), 3, 1)
    other = Group((Claim(1, 100), Rebase(True), Wake()), 3, 1, parallel=True)
    servers = [Server("a"), Server("b")]
    assert solve_all(servers, [one, other]) == run_events(servers, [one, other]) == (
        [[0, 100, 200], [0, 100, 200]], [[100, 200, 300], [100, 200, 300]])


def test_parallel_streams_tied_on_a_shared_server_after_their_start_are_refused():
    """Both streams claim server ``s`` at the same picoseconds with operations posted at the same picoseconds:
    at the start they are numbered stream by stream, as the event engine numbers them; after it the event engine
    numbers them in the order their completions' deliveries were made, here by walks at one picosecond and step,
    in an order their own numbers decide, so the core refuses rather than guess."""
    one = Group((Claim(0, 1_000_000), Claim(2, 0), Rebase(True), Wake()), 3, 1)
    other = Group((Claim(1, 1_000_000), Claim(2, 0), Rebase(True), Wake()), 3, 1, parallel=True)
    with pytest.raises(Unsolvable, match="deliveries tie") as caught:
        list(solve([Server("a"), Server("b"), Server("s")], [one, other]))
    assert "claim s at 1us with operations posted at 1us" in caught.value.reason
    two = Group((Claim(0, 1_000_000), Claim(2, 0), Rebase(True), Wake()), 1, 1)  # one operation each: the start's
    assert solve_all([Server("a"), Server("b"), Server("s")], [two, replace(two, parallel=True)]) == run_events(
        [Server("a"), Server("b"), Server("s")], [two, replace(two, parallel=True)])


def test_operations_posted_at_one_picosecond_go_in_the_order_their_completions_were_delivered():
    """Both streams complete at 1400 ps and post then, and both new operations claim ``s`` at 1400 ps from the
    same step. The second stream's completion was delivered first: its wake was walked at 200 ps (its last wait,
    on ``b``), the first stream's at 400 ps (on ``a``, after a delay). So its operation is numbered first and is
    served first (1400-1500), as simpy fires the deliveries in the order they were made; stream by stream, both
    would complete at 2800 ps."""
    one = Group((Claim(2, 100, 100), Delay(300), Claim(0, 1000, 1000), Wake()), 2, 1)
    other = Group((Claim(2, 100, 100), Claim(1, 1200, 1200), Wake()), 2, 1, parallel=True)
    servers = [Server("a"), Server("b"), Server("s")]
    assert solve_all(servers, [one, other]) == run_events(servers, [one, other]) == (
        [[0, 1400], [0, 1400]], [[1400, 2900], [1400, 2700]])


@SETTINGS
@given(data=st.data())
def test_streams_posting_at_one_picosecond_are_numbered_as_their_completions_were_delivered(data):
    """Parallel streams whose times are whole multiples of 100 ps, so that completions of several streams come at
    one picosecond and the operations they post claim a shared server at one picosecond from one step: the core
    numbers them by their deliveries, as the event engine does, a stream's loop taking at most ``polls`` of one
    time's completions at once. One whose deliveries were made by walks at one picosecond and step (an order their
    own numbers decide), or taken by a later wake, is refused, and discarded here."""
    unit = st.integers(0, 6).map(lambda k: 100 * k)
    servers = [Server("shared"), *(Server(f"own{i}") for i in range(4))]
    groups = []
    for k in range(data.draw(st.integers(2, 4))):
        first, own, last = data.draw(unit), data.draw(unit), data.draw(unit)
        steps = (Claim(0, first, first), Delay(data.draw(unit)), Claim(1 + k, own, own), Delay(data.draw(unit)),
                 *((Claim(0, last, last),) if data.draw(st.booleans()) else ()), Rebase(True), Wake())
        groups.append(Group(steps, data.draw(st.integers(1, 40)), data.draw(st.integers(1, 3)), parallel=k > 0,
                            polls=data.draw(st.sampled_from([None, 1, 2]))))
    try:
        fast = solve_all(servers, groups, block=data.draw(st.sampled_from([4, 64])))
    except Unsolvable as exc:
        assume("deliveries tie" not in exc.reason and "round's start" not in exc.reason)
        raise
    assert fast == run_events(servers, groups)


def test_claims_at_one_picosecond_follow_the_ordering_rule():
    """A side chain and the main chain reach server ``a`` at 10 ps from positions 2 and 4: position 2 goes
    first, so the main chain waits for it (the other order would complete at 15 ps)."""
    steps = (Fork((Delay(10), Claim(0, 5))), Claim(1, 10, 10), Claim(0, 5), Rebase(True), Wake())
    servers, group = [Server("a"), Server("b")], Group(steps, 1, 1)
    assert solve_all(servers, [group]) == run_events(servers, [group]) == ([[0]], [[20]])


def test_the_key_order_is_time_then_waiting_position_then_operation_then_position():
    """The operation's number is its post time, then its rank (whose completion was delivered first), then its
    number stream by stream."""
    def claims(wake, wpos, seq, pos, post, rank=None):
        n = len(wake)
        return Claims(np.array(wake), np.array(wpos), np.zeros(n, np.int64), np.zeros(n, np.int64),
                      np.ones(n, np.int64), np.array(pos), np.array(seq), np.array(post),
                      np.zeros(n, np.int64) if rank is None else np.array(rank))
    order, tied = key_order(claims([50, 50, 50, 40, 50], [3, 1, 1, 9, 1], [0, 2, 1, 5, 1], [3, 1, 1, 9, 2], [0] * 5))
    assert order.tolist() == [3, 2, 4, 1, 0] and tied
    order, tied = key_order(claims([50, 50, 50], [1, 1, 1], [0, 7, 3], [1, 2, 3], [20, 10, 10]))
    assert order.tolist() == [2, 1, 0] and tied
    order, tied = key_order(claims([50, 50, 50], [1, 1, 1], [0, 7, 3], [1, 2, 3], [10, 10, 10], [5, 2, 5]))
    assert order.tolist() == [1, 0, 2] and tied


def test_a_gate_must_let_its_operations_through_after_a_positive_delay_and_a_wait():
    for steps in ((Gate(1, "x"), Claim(0, 100, label="x"), Rebase(True)),
                  (Gate(1, "x"), Delay(0), Check("translate", 0), Claim(0, 100, label="x"), Rebase(True)),
                  (Gate(1, "x"), Delay(5), Claim(0, 10, eager=True), Claim(0, 100, label="x"), Rebase(True))):
        with pytest.raises(Unsolvable, match="positive delay"):
            list(solve([Server("a")], [Group(steps, 3, 1)]))


def test_large_windows_and_small_blocks_agree_with_one_block():
    rng = np.random.default_rng(4)
    steps = (Delay(1000), Claim(0, 300, eager=True), Claim(1, 900, 100, 100, 2000), Claim(2, 500, 500),
             Claim(1, 50, latency_ps=700), Rebase(True), Delay(draws="poll"), Wake())
    polls = rng.integers(0, 40_000, 5000)
    group = Group(steps, 5000, 300, {"poll": series(polls)})
    servers = [Server("a"), Server("b"), Server("c")]
    assert solve_all(servers, [group], block=1) == solve_all(servers, [group], block=1 << 20)
    assert solve_all(servers, [group], block=700) == run_events(servers, [group])


def test_a_saturated_group_with_no_drawn_delay_keeps_its_pace_from_block_to_block():
    """Every operation queues on ``a``, so each block after the first starts from the group's pace, here with
    no drawn delay after the claim to take off it."""
    servers, group = [Server("a")], Group((Claim(0, 100), Rebase(True), Wake()), 300, 2)
    assert solve_all(servers, [group], block=8) == run_pipelines(servers, [group])


def test_a_group_without_claims_completes_after_its_delays():
    group = Group((Delay(5), Delay(draws="poll")), ops=6, window=2, draws={"poll": series([9, 0, 0, 30, 0, 0])})
    assert solve_all([], [group], block=4) == ([[0, 0, 14, 14, 19, 49]], [[14, 14, 19, 49, 49, 54]])


def test_a_claim_at_its_posting_picosecond_is_refused_rather_than_solved_forever():
    """Operation i's second claim completes it at the picosecond operation i + 1 is posted and claims the same
    server first in position: by (time, position) the later operation's claim would go first, but then operation
    i finishes later and the next is posted later, so passes flip between two answers. The event engine makes the
    caused claim right after the claim that caused it (posts 0, 10, 20); the core says it cannot settle it."""
    group = Group((Claim(0, 2, head_ps=2), Rebase(False, 8), Claim(0, 0), Rebase(True), Wake()), ops=3, window=1)
    assert run_events([Server("a")], [group], 0) == ([[0, 10, 20]], [[10, 20, 30]])
    with pytest.raises(Unsolvable, match="passes over .* do not agree"):
        list(solve([Server("a")], [group]))



def test_a_guess_that_differs_late_in_operation_order_but_early_in_time_is_not_kept():
    """After a drawn delay a position's claims are not in time order, so a later operation's wrong guess on the
    shared server can come earlier in time than the first operation's whose guess is wrong: the block keeps
    nothing that server serves after the earlier of the two."""
    polls = np.zeros(126, np.int64)
    for i, ps in {1: 14269, 20: 15923, 41: 110, 43: 16384, 48: 23514, 66: 629, 78: 1574, 81: 617, 85: 23587,
                  88: 692, 89: 1815, 90: 40000, 92: 1456, 93: 18146, 94: 642, 95: 7640, 96: 26485, 97: 4203,
                  98: 4907, 103: 3753, 112: 34436, 117: 5869, 120: 7910, 124: 29510, 125: 32471}.items():
        polls[i] = ps
    steps = (Claim(0, 42, tail_ps=6492), Delay(5, "poll"), Claim(0, 2138), Claim(0, 0, eager=True), Claim(0, 0),
             Delay(draws="poll"), Wake())
    servers, groups = [Server("s0")], [Group(steps, 126, 19, {"poll": series(polls)})]
    assert solve_all(servers, groups, 11) == run_events(servers, groups, 11)



@st.composite
def moderated(draw, one: Group, cq_mod: int, timed: bool) -> Group:
    """``one`` posted as perftest posts with CQ moderation: every ``cq_mod``-th operation (and, unless ``timed``,
    the last) signaled, at most ``window + cq_mod - 1`` outstanding; one or two claims at its end (on servers its
    other steps claim) made by the signaled ones only, as a CQE is written."""
    signaled = [(k + 1) % cq_mod == 0 or (not timed and k == one.ops - 1) for k in range(one.ops)]
    servers = sorted({s.server for s in walk_order(one.steps) if isinstance(s, Claim)})
    cqe = [replace(draw(claim(draw(st.sampled_from(servers)), eager=False)), skipped_by="unsignaled")
           for _ in range(draw(st.integers(1, 2)))]
    steps = (*one.steps[:-3], *cqe, *one.steps[-3:])  # (before the completion: its rebase, poll delay and wake)
    draws = dict(one.draws, unsignaled=series([int(not s) for s in signaled]))
    return replace(one, steps=steps, draws=draws, unsignaled="unsignaled")


@SETTINGS
@given(data=st.data())
def test_moderated_completions_on_shared_servers_equal_the_event_engine(data):
    """perftest -Q: an operation is posted once the completions delivered cover all but ``window + cq_mod - 1``
    of those before it; the unsignaled ones deliver none and skip the claims only a signaled one makes (its CQE),
    on servers other positions share. Streams one after the other, the last maybe posting for a while."""
    count = data.draw(st.integers(1, 3))
    positions = data.draw(st.lists(st.integers(0, count - 1), min_size=1, max_size=5))
    servers = [Server(f"s{i}") for i in range(count)]
    groups, cq_mod, rounds = [], data.draw(st.integers(2, 6)), data.draw(st.integers(1, 2))
    for r in range(rounds):
        timed = r == rounds - 1 and data.draw(st.booleans())
        one = data.draw(group(positions, gate=data.draw(st.booleans()), fork=data.draw(st.booleans()), wait=False,
                              detour=True))
        if timed:
            duration = data.draw(st.integers(1, 3_000_000))
            one = replace(one, posts_while=lambda post, start, d=duration: post < start + d)
        groups.append(data.draw(moderated(one, cq_mod, timed)))
    fast = solve_all(servers, groups, 11, block=data.draw(st.sampled_from([8, 64, 1024])))
    assert fast == run_events(servers, groups, 11, cq_mod)
