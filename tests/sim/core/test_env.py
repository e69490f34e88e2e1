import pytest

from sim.core import Environment, FifoServer, ServerPool, VerbsError
from sim.core.errors import ConfigError, ConfigErrors
from sim.core.env import RandomStreams, UniformDraws
from sim.core.interpreter import CLAIMS, DRAWN, END, MARK, TURN, Operation, compile_steps
from sim.core.servers import claim_chain, claim_cut_through
from sim.core.steps import Check, Claim, Delay, Fork, Mark, Rebase, Wake


def test_streams_depend_on_seed_and_name_not_on_order():
    first = RandomStreams(5)
    a1 = first.stream("a").integers(1 << 40, size=4)
    b1 = first.stream("b").integers(1 << 40, size=4)
    second = RandomStreams(5)
    b2 = second.stream("b").integers(1 << 40, size=4)
    a2 = second.stream("a").integers(1 << 40, size=4)
    assert (a1 == a2).all() and (b1 == b2).all() and not (a1 == b1).all()
    assert not (RandomStreams(6).stream("a").integers(1 << 40, size=4) == a1).all()


def test_uniform_draws_stay_in_range_and_repeat():
    draws = [UniformDraws(RandomStreams(1).stream("x"), 40).next() for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    seq = UniformDraws(RandomStreams(1).stream("x"), 40, block=8)
    values = [seq.next() for _ in range(100)]
    assert min(values) >= 0 and max(values) <= 40 and len(set(values)) > 10
    assert UniformDraws(RandomStreams(1).stream("x"), 0).next() == 0


def test_delays_must_be_integer_picoseconds():
    env = Environment()
    with pytest.raises(TypeError):
        env.delay(1.5)
    env.process((lambda: (yield env.delay(7)))())
    env.run()
    assert env.now == 7


def test_fifo_server_recurrence():
    s = FifoServer("s")
    assert s.claim(0, 10) == (0, 10)
    assert s.claim(5, 10) == (10, 20)
    assert s.claim(30, 1) == (30, 31)
    assert s.busy_ps == 21


def test_cut_through_claim_waits_for_the_tail():
    s = FifoServer("s")
    assert claim_cut_through(s, 0, 10, 25) == (0, 25)
    assert s.free_at == 25


def test_a_claim_chain_is_its_claims_one_after_the_other():
    chained, single = [FifoServer("a"), FifoServer("b")], [FifoServer("a"), FifoServer("b")]
    for s in (*chained, *single):
        s.add_stall(30, 40)
    claims = ((chained[0], 10, 3 + 5, 2, 5), (chained[1], 4, 1 + 0, 7, 0))
    for head, tail in [(0, 6), (1, 1), (25, 60)]:
        start, finish = claim_cut_through(single[0], head, 10, tail + 2)
        start, finish = claim_cut_through(single[1], start + 3 + 5, 4, finish + 5 + 7)
        assert claim_chain(claims, head, tail) == (start + 1, finish)
        assert [(s.free_at, s.busy_ps) for s in chained] == [(s.free_at, s.busy_ps) for s in single]


def test_steps_that_take_no_time_fold_into_the_claims_before_them():
    """Eager claims, delays and a rebase after a claim (one in a turn too) are one instruction; a labelled claim
    ends its group; marks can be left out, every position staying that of the walk order."""
    a, b, c = FifoServer("a"), FifoServer("b"), FifoServer("c")
    steps = (Claim(a, 1, turn="t"), Claim(b, 1, eager=True), Delay(5), Rebase(True, 2), Delay(3),
             Claim(c, 1, label="slot"), Claim(a, 1, eager=True), Mark("landed"), Delay(draws="poll"),
             Fork((Mark("side"), Claim(b, 1))), Wake())
    program = compile_steps(steps)
    assert [(ins[0], ins[1]) for ins in program[:5]] == [(TURN, 0), (CLAIMS, 5), (CLAIMS, 6), (MARK, 7), (DRAWN, 8)]
    assert [claim[0] for claim in program[0][3]] == [a, b] and program[0][4] == (True, 2 + 3)
    quiet = compile_steps(steps, marks=False)
    assert [ins for ins in quiet if ins[0] != MARK] == list(quiet)
    assert [ins[1] for ins in quiet[:-1]] == [0, 5, 6, 8, 9, 12] and [ins[1] for ins in quiet[4][2][:-1]] == [11]
    assert quiet[-1][0] == quiet[4][2][-1][0] == END


def test_server_pool_uses_the_earliest_free_server():
    pool = ServerPool("p", 2)
    assert pool.claim(0, 10) == (0, 10)
    assert pool.claim(0, 4) == (0, 4)
    assert pool.claim(1, 3) == (4, 7)
    assert pool.claim(1, 1) == (7, 8)
    with pytest.raises(ValueError):
        ServerPool("none", 0)


def test_a_stall_delays_only_jobs_that_would_start_inside_it():
    s = FifoServer("port")
    s.add_stall(100, 200)
    s.add_stall(200, 250)  # touching intervals join: a job moved to 200 would be inside the second
    s.add_stall(400, 450)
    assert s.stalls == ((100, 250), (400, 450))
    assert claim_cut_through(s, 0, 150, 0) == (0, 150)  # started before the stall: not interrupted
    assert claim_cut_through(s, 150, 10, 0) == (250, 260)  # free at 150, inside the stall: waits for its end
    assert claim_cut_through(s, 300, 10, 0) == (300, 310)
    assert s.claim(420, 5) == (450, 455)


class _Holder:
    """An operation's owner whose check ``wait`` holds it until 1000 ps, then lets it go; it records when it was
    asked and when the operation ended."""

    def __init__(self) -> None:
        self.asked: list[int] = []
        self.ended: list[int] = []

    def check(self, op, name, now, head, tail):
        self.asked.append(now)
        return 1000 if len(self.asked) == 1 else None

    def mark(self, op, name, head, tail):
        pass

    def wake(self, op, head):
        self.ended.append(head)


@pytest.mark.parametrize("sooner, asked, ended", [(None, [0, 1000], [1005]), (300, [0, 300], [305]),
                                                  (0, [0, 0], [5])])
def test_a_held_check_is_asked_again_sooner_when_told(sooner, asked, ended):
    """``StepRunner.ask_sooner`` ends a check's hold early: it is asked again then, and never at the hold's end."""
    env, owner = Environment(), _Holder()
    op = Operation(compile_steps((Check("wait"), Delay(5), Wake())), 0, owner)
    env.step_runner.start(op)
    if sooner is not None:
        env.timeout(sooner).callbacks.append(lambda _event: env.step_runner.ask_sooner(op, env.now))
    env.run()
    assert owner.asked == asked and owner.ended == ended


class _Ends:
    """An operation's owner that records, by operation number, when each operation ended."""

    def __init__(self) -> None:
        self.ended: dict[int, int] = {}

    def check(self, op, name, now, head, tail):
        return None

    def mark(self, op, name, head, tail):
        pass

    def wake(self, op, head):
        self.ended[op.seq] = head


@pytest.mark.parametrize("posted, first_end, second_end", [(99, 119, 109), (100, 120, 110), (101, 110, 120)])
def test_a_model_event_at_a_claims_picosecond_goes_before_it(posted, first_end, second_end):
    """A model event at the picosecond a waiting claim's head reaches a server goes first (the ordering rule): an
    operation posted then claims the server eagerly before it; one posted a picosecond later, after it."""
    env, owner = Environment(), _Ends()
    link, server = FifoServer("link"), FifoServer("server")
    first = compile_steps((Claim(link, 10, latency_ps=100), Claim(server, 10), Rebase(True), Wake()))
    env.step_runner.start(Operation(first, 0, owner))  # reaches the server at 100
    second = compile_steps((Claim(server, 10, eager=True), Rebase(True), Wake()))
    env.timeout(posted).callbacks.append(lambda _event: env.step_runner.start(Operation(second, 1, owner)))
    env.run()
    assert owner.ended == {0: first_end, 1: second_end}


@pytest.mark.parametrize("waiting_seq, walking_seq", [(0, 1), (1, 0)])
def test_claims_at_one_picosecond_and_position_go_in_operation_order(waiting_seq, walking_seq):
    """Two operations reach one server at the same picosecond and position, one of them waiting there before the
    other's walk reaches it: the lower operation number claims it first either way (the ordering rule)."""
    env, owner = Environment(), _Ends()
    link, other, server = FifoServer("link"), FifoServer("other"), FifoServer("server")
    waiting = compile_steps((Claim(link, 10, latency_ps=100), Claim(server, 10), Rebase(True), Wake()))
    walking = compile_steps((Delay(1), Claim(other, 10, latency_ps=99), Claim(server, 10), Rebase(True), Wake()))
    env.step_runner.start(Operation(waiting, waiting_seq, owner, offset=1))  # at the server at 100, position 2
    env.step_runner.start(Operation(walking, walking_seq, owner))  # walks at 1 to the server at 100, position 2
    env.run()
    assert owner.ended == {min(waiting_seq, walking_seq): 110, max(waiting_seq, walking_seq): 120}


@pytest.mark.parametrize("error", [
    VerbsError("ENOMEM", "receive queue full (512 receives outstanding)", call="ibv_post_recv"),
    VerbsError("EINVAL", "no call named"),
    ConfigError("must be positive", file="s.yaml", line=4, column=7, key="workload[0].iterations"),
    ConfigErrors([ConfigError("a", file="s.yaml", line=1, key="x"), ConfigError("b", file="s.yaml", line=2, key="y")]),
])
def test_an_error_raised_in_a_process_reaches_the_caller_as_itself(error):
    # simpy re-raises a failed process's exception as type(e)(*e.args): every rdmasim error must survive that.
    env = Environment(1)

    def process():
        yield env.timeout(1)
        raise error

    env.process(process())
    with pytest.raises(type(error)) as caught:
        env.run()
    assert str(caught.value) == str(error) and caught.value.__dict__ == error.__dict__


def _racing(env: Environment, log: list) -> object:
    """Processes that wake at draws of one stream and at shared instants, logging (time, who) as they go."""
    draws = env.rng("race")

    def worker(name: str, n: int):
        for _ in range(n):
            yield env.delay(int(draws.integers(0, 3)) * 1000)
            log.append((env.now, name))
        return name

    for name in ("a", "b", "c"):
        env.process(worker(name, 400))
    return env.process(worker("main", 300))


def test_running_with_a_tick_processes_the_events_of_run_in_its_order():
    plain, ticking, ticks = [], [], []
    env = Environment(seed=4)
    assert env.run(until=_racing(env, plain)) == "main"
    env = Environment(seed=4)
    assert env.run_ticking(_racing(env, ticking), lambda: ticks.append(env.now), every=50) == "main"
    assert ticking == plain and len(ticks) >= len(plain) // 50 - 1 and ticks == sorted(ticks)


def test_running_with_a_tick_reports_a_deadlock_as_run_does():
    env = Environment()

    def forever():
        yield env.event()  # never triggered

    waits = env.process(forever())
    with pytest.raises(RuntimeError, match="No scheduled events left"):
        env.run_ticking(waits, lambda: None, every=10)


def test_the_event_engine_tells_progress_within_a_size(monkeypatch):
    import sim.core.env
    from sim.engine.run import run_scenario
    from sim.scenario.schema import Scenario
    from tests.conftest import scenario_dict

    monkeypatch.setattr(sim.core.env, "TICK_EVENTS", 200)
    told = []
    work = [{"kind": "write_bw", "from": "src", "to": "dst", "sizes": ["4KiB", "64KiB"], "iterations": 400}]
    result = run_scenario(Scenario.model_validate(scenario_dict(engine="event", workload=work)),
                          progress=told.append)
    assert sum(told) == 800 == len(result.operations) and len([n for n in told if n]) > 6
