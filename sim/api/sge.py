"""``SGE``: one buffer of a work request's gather or scatter list, or of ``PD.advise_mr``'s list (pyverbs/wr.pyx)."""

from __future__ import annotations

from dataclasses import dataclass

from models.nic.wqe import Sge
from sim.api.resource import Resource


@dataclass(eq=False)
class SGE(Resource):
    """``struct ibv_sge``: ``length`` bytes at ``addr`` of the MR whose local key is ``lkey`` (``close()`` as
    pyverbs has it; a closed SGE is not posted)."""

    addr: int
    length: int
    lkey: int


def sge_list(sg: list[SGE], call: str) -> tuple[Sge, ...]:
    """The verbs layer's SGEs of ``sg``.

    :raises ProtocolError: one of them was closed.
    """
    for sge in sg:
        sge._check_open(call)
    return tuple(Sge(sge.addr, sge.length, sge.lkey) for sge in sg)
