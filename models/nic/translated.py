"""What the translating checks of a work request's path translate: which NIC, which pieces of which MRs, and
whether it writes through them. The event engine's run (:mod:`models.nic.work_request`) asks the NIC's caches at
each of these checks as it reaches them; the vectorized core's planner asks the same of a stream's work request
ahead of the solve (every operation of a perftest stream translates the same pieces)."""

from __future__ import annotations

from typing import NamedTuple

from models.nic.datapath import local_sges
from models.nic.memory_window import remote_region
from models.nic.receive import landing_buffer
from models.nic.remote_access import remote_right
from models.nic.translation import lookup_mr
from models.nic.wqe import Opcode, RecvWR, SendWR

SOURCE, RESPONDER, RESPONSE = "source", "responder", "response"
"""The checks after which a NIC translates: the requester's payload read, the responder's access, a READ's or
atomic's response landing at the requester."""


def translation_writes(check: str, opcode: Opcode) -> bool:
    """Whether the NIC writes through the translation made at ``check`` of an ``opcode`` work request's path: a
    response landing and whatever the responder takes in (a WRITE's or SEND's payload, an atomic's
    read-modify-write) are writes; the source's payload read and a READ's response read are reads."""
    if check == RESPONDER:
        return opcode.writes_remote or opcode.is_atomic or opcode.consumes_receive
    return check == RESPONSE


class Translated(NamedTuple):
    """The pieces ``(mr, addr, length)`` one check translates on ``node``'s NIC, and whether it writes."""

    node: object
    pieces: tuple[tuple, ...]
    write: bool


def translated(qp, wr: SendWR, check: str, recv: RecvWR | None = None) -> Translated:
    """What ``wr``, posted on ``qp`` and succeeding, translates at ``check`` (``recv``: the receive a request that
    consumes one takes): the local SGEs' MRs at the requester (none when inline), the rkey's region or the
    receive's landing buffer at the responder."""
    write = translation_writes(check, wr.opcode)
    if check != RESPONDER:
        pieces = () if wr.is_inline else tuple((lookup_mr(qp, s.lkey), s.addr, s.length) for s in local_sges(wr))
        return Translated(qp.node, pieces, write)
    responder = qp.remote
    if wr.opcode.consumes_receive:
        return Translated(responder.node, (landing_buffer(responder, recv, wr),), write)
    mr, addr = remote_region(responder, wr.rkey, wr.remote_addr, wr.message_bytes, remote_right(wr.opcode))
    return Translated(responder.node, ((mr, addr, wr.message_bytes),), write)
