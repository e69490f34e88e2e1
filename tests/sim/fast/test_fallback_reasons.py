"""The reasons the vectorized core gives for handing a run to the event engine read in words and human units:
no raw picoseconds, no Python reprs."""

from __future__ import annotations

import re

import numpy as np
import pytest

from models.nic.wqe import WcStatus
from sim.fast.limits import ParallelPosts, Unsolvable
from sim.engine.planner.events import _not_refaulted

RAW = re.compile(r"\d ?ps\b|WcStatus\.|None\b")


@pytest.mark.parametrize("answer", [WcStatus.LOC_PROT_ERR, None])
def test_an_access_that_did_not_refault_is_said_in_words(answer):
    said = _not_refaulted(answer)
    assert not RAW.search(said), said
    assert ("IBV_WC_LOC_PROT_ERR" in said) == (answer is not None)


def test_parallel_streams_posting_at_once_name_the_time_in_its_unit():
    parallel = ParallelPosts()
    parallel.parts = [(0, np.array([1_500_000], dtype=np.int64)), (1, np.array([1_500_000], dtype=np.int64))]
    with pytest.raises(Unsolvable) as caught:
        parallel.check(None)
    assert "at 1.5us at once" in caught.value.reason and not RAW.search(caught.value.reason)
