"""``SGE``: one buffer of a work request's gather or scatter list, or of ``PD.advise_mr``'s list (pyverbs/wr.pyx)."""

from __future__ import annotations

from dataclasses import dataclass

from models.nic.wqe import Sge
from sim.api.arguments import ArgumentTypeError, c_integer
from sim.api.resource import Resource


@dataclass(eq=False)
class SGE(Resource):
    """``struct ibv_sge``: ``length`` bytes at ``addr`` of the MR whose local key is ``lkey`` (``close()`` as
    pyverbs has it; a closed SGE is not posted).

    :raises ArgumentTypeError: a field that is not an integer (one too wide for its C type, a negative length
        among them, is ``EINVAL`` when the work request is posted).
    """

    addr: int
    length: int
    lkey: int

    def __post_init__(self) -> None:
        self._checked("SGE")

    def _checked(self, call: str) -> Sge:
        """The verbs layer's SGE, each field checked against ``struct ibv_sge``'s C type."""
        return Sge(c_integer(self.addr, "uint64_t", "addr", call), c_integer(self.length, "uint32_t", "length", call),
                   c_integer(self.lkey, "uint32_t", "lkey", call))


def sge_list(sg: list[SGE], call: str) -> tuple[Sge, ...]:
    """The verbs layer's SGEs of ``sg``.

    :raises ProtocolError: one of them was closed.
    :raises ArgumentTypeError: an element that is not an SGE, or a field changed since to a value of another type.
    """
    for sge in sg:
        if not isinstance(sge, SGE):
            raise ArgumentTypeError(f"{call}: the SGE list holds {type(sge).__name__} {sge!r:.40}, not an SGE")
        sge._check_open(call)
    return tuple(sge._checked(call) for sge in sg)
