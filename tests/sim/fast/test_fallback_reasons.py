"""The reasons the vectorized core gives for handing a run to the event engine read in words and human units:
no raw picoseconds, no Python reprs."""

from __future__ import annotations

import re

import pytest

from models.nic.wqe import WcStatus
from sim.core.steps import Claim, Rebase, Wake
from sim.fast import Group, Server, solve
from sim.fast.limits import Unsolvable
from sim.engine.planner.events import _not_refaulted

RAW = re.compile(r"\d ?ps\b|WcStatus\.|None\b")


@pytest.mark.parametrize("answer", [WcStatus.LOC_PROT_ERR, None])
def test_an_access_that_did_not_refault_is_said_in_words(answer):
    said = _not_refaulted(answer)
    assert not RAW.search(said), said
    assert ("IBV_WC_LOC_PROT_ERR" in said) == (answer is not None)


def test_parallel_streams_tied_on_a_server_name_the_times_in_their_units():
    one = Group((Claim(0, 1_500_000), Claim(2, 0), Rebase(True), Wake()), 3, 1)
    other = Group((Claim(1, 1_500_000), Claim(2, 0), Rebase(True), Wake()), 3, 1, parallel=True)
    with pytest.raises(Unsolvable) as caught:
        list(solve([Server("a"), Server("b"), Server("s")], [one, other]))
    reason = caught.value.reason
    assert "claim s at 1.5us with operations posted at 1.5us" in reason and not RAW.search(reason)
