"""A ping-pong iteration as one chain (ib_write_lat, ib_send_lat): every claim keeps the position the event engine
gives it in its own message (the message back's from :func:`ping_pong_offset` on), the chain goes on where the
receiver sees the message (a WRITE's last byte, a SEND's receive completion), and each message's completion,
polled by its sender, ends a side chain."""

from __future__ import annotations

import pytest

from models.nic.datapath import RECEIVED, work_request_path
from models.nic.wqe import Opcode
from models.verbs.ping_pong import ACKED, NoSingleChain, ping_pong, ping_pong_offset
from models.verbs.workloads import work_request
from sim.core.steps import Check, Claim, Delay, Fork, Mark, Wait, walk_order
from sim.engine.harness import endpoints, setup_run
from sim.fast.steps import claim_wpos
from sim.scenario.schema import Scenario
from tests.conftest import scenario_dict


def message_paths(kind: str, size: str, transport: str = "rc"):
    """The steps of a ping-pong's message there and back on a built testbed."""
    work = {"kind": kind, "from": "src", "to": "dst", "sizes": [size], "iterations": 1, "transport": transport}
    scenario = Scenario.model_validate(scenario_dict(workload=[work]))
    bed, _, _ = setup_run(scenario, 1)
    ((src, dst),) = endpoints(bed, scenario.workload[0])
    opcode = Opcode.SEND if kind == "send_lat" else Opcode.RDMA_WRITE
    there, back = (work_request_path(a.path_qp(b), work_request(0, opcode, a, b, int(size[:-1]), False), 0).steps
                   for a, b in ((src, dst), (dst, src)))
    return there, back


def claims_by_server(steps, offset: int = 0) -> dict:
    """Each server's claims' ordering positions (:func:`sim.fast.steps.claim_wpos`), in walk order."""
    walk, wpos = walk_order(steps), claim_wpos(steps)
    out: dict = {}
    for k, step in enumerate(walk):
        if isinstance(step, Claim):
            out.setdefault(id(step.server), []).append(wpos[k] + (offset if wpos[k] >= 0 else 0))
    return out


@pytest.mark.parametrize("kind, transport", [("write_lat", "rc"), ("send_lat", "rc"), ("write_lat", "uc"),
                                             ("send_lat", "uc"), ("send_lat", "ud")])
@pytest.mark.parametrize("size", ["64B", "2048B"])
def test_every_claim_keeps_the_event_engines_position(kind, transport, size):
    there, back = message_paths(kind, size, transport)
    chain, offset = ping_pong(there, back)
    assert offset == ping_pong_offset(there)  # the event engine numbers the message back from here
    expected: dict = {}
    for server, positions in [*claims_by_server(there).items(), *claims_by_server(back, offset).items()]:
        expected.setdefault(server, []).extend(positions)
    got = claims_by_server(chain)
    assert {s: sorted(p) for s, p in got.items()} == {s: sorted(p) for s, p in expected.items()}
    assert offset > max(p for positions in claims_by_server(there).values() for p in positions)


def test_a_send_goes_on_from_its_receive_completion_and_forks_its_acknowledgement():
    there, back = message_paths("send_lat", "64B")
    chain, offset = ping_pong(there, back)
    main = [step for step in chain if not isinstance(step, Fork)]
    received = [k for k, step in enumerate(main) if isinstance(step, Check) and step.name == RECEIVED]
    waits = [k for k, step in enumerate(main) if isinstance(step, Wait)]
    assert len(received) == 2 and [w.draws for w in (main[k] for k in waits)] == ["peer_poll", "poll"]
    assert received[0] < waits[0] < received[1] < waits[1]  # each CPU polls after the CQE is in memory
    sides = [step.steps for step in chain if isinstance(step, Fork)
             and isinstance(step.steps[-1], Check) and step.steps[-1].label in ACKED]
    assert [side[-1].label for side in sides] == list(ACKED)
    assert [side[-2].draws for side in sides] == [f"{label}_poll" for label in ACKED]
    assert all(isinstance(side[-2], Delay) for side in sides)


@pytest.mark.parametrize("kind, transport", [("write_lat", "uc"), ("send_lat", "ud")])
def test_an_unacknowledged_message_goes_on_from_its_side_chain(kind, transport):
    """UC and UD deliver in a side chain while the sender completes at once: the chain goes on from the delivery,
    and the sender's completion forks where the delivery did, the steps after it keeping their positions."""
    there, back = message_paths(kind, "64B", transport)
    assert Mark("landed") not in there  # (datapath._unacknowledged)
    chain, _ = ping_pong(there, back)
    sides = [step for step in chain if isinstance(step, Fork) and step.steps[-1] == Check(ACKED[0], 0, label=ACKED[0])]
    assert len(sides) == 1 and sides[0].renumber is not None
    main = [step for step in chain if not isinstance(step, Fork)]
    first_wait = next(k for k, step in enumerate(main) if isinstance(step, Wait))
    seen = main[first_wait - 3]  # (then the rebase to the next positions, the wake and the wait)
    assert (isinstance(seen, Check) and seen.name == RECEIVED) if kind == "send_lat" else \
        isinstance(seen, Claim)  # a SEND is seen at its receive completion, a WRITE after its payload's last write


def test_a_message_that_lands_nowhere_makes_no_chain():
    with pytest.raises(NoSingleChain, match="lands nowhere"):
        ping_pong((Delay(1),), (Delay(1),))
