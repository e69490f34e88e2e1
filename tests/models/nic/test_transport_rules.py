"""The transport rules of :mod:`models.nic.transport` as tables: 24-bit PSN order, one NAK PSN sequence error per
gap, and what an acknowledgement or that NAK does to a request waiting for its ACK timer (rxe_resp.c ``check_psn``,
rxe_comp.c ``check_psn``/``check_ack``/``COMPST_ERROR_RETRY``)."""

from __future__ import annotations

import pytest

from models.nic.transport import (PSN_MASK, Outcome, Waiting, after_acknowledgement, after_gap_closed, psn_before,
                                  sequence_nak)


@pytest.mark.parametrize("psn, other, before", [
    (0, 1, True), (1, 0, False), (5, 5, False), (PSN_MASK, 0, True), (0, PSN_MASK, False),
    (0, 1 << 23, True), (0, (1 << 23) + 1, False)])
def test_psn_order_wraps_at_24_bits(psn, other, before):
    assert psn_before(psn, other) is before


@pytest.mark.parametrize("nak_sent, naks", [(False, True), (True, False)])
def test_one_nak_per_gap(nak_sent, naks):
    assert sequence_nak(nak_sent) is naks


@pytest.mark.parametrize("psn, waiting, reads, ack_psn, nak, outcome", [
    # an acknowledgement covers the PSNs before its own
    (3, Waiting.REPLY, False, 5, False, Outcome.COMPLETE),
    (3, Waiting.REPLY, True, 5, False, Outcome.AGAIN),  # a READ's data comes only in its response
    (5, Waiting.REPLY, False, 5, False, None),
    (7, Waiting.REQUEST, False, 5, False, None),
    (7, Waiting.BEHIND, False, 5, False, None),
    (3, Waiting.REQUEST, False, 5, False, None),
    # a NAK PSN sequence error also sends its PSN and every later one again; the NAK'd one spends a retry
    (3, Waiting.REPLY, False, 5, True, Outcome.COMPLETE),
    (5, Waiting.REQUEST, False, 5, True, Outcome.RETRY),
    (6, Waiting.REQUEST, False, 5, True, Outcome.AGAIN),
    (6, Waiting.BEHIND, True, 5, True, Outcome.AGAIN),
    (PSN_MASK, Waiting.REPLY, False, 1, True, Outcome.COMPLETE),  # across the wrap
    (1, Waiting.BEHIND, False, PSN_MASK, True, Outcome.AGAIN)])
def test_what_an_acknowledgement_or_nak_does_to_a_waiting_request(psn, waiting, reads, ack_psn, nak, outcome):
    assert after_acknowledgement(psn, waiting, reads, ack_psn, nak) is outcome


@pytest.mark.parametrize("waiting, outcome", [(Waiting.BEHIND, Outcome.AGAIN), (Waiting.REQUEST, None),
                                              (Waiting.REPLY, None)])
def test_the_gap_closing_sends_the_requests_dropped_behind_it_again(waiting, outcome):
    assert after_gap_closed(waiting) is outcome
