"""``AH`` in pyverbs' shape (pyverbs/addr.pyx) over :mod:`models.verbs.ah`: the address of a UD work request's
destination port, given to :meth:`SendWR.set_wr_ud <sim.api.qp.SendWR.set_wr_ud>`."""

from __future__ import annotations

from models.verbs.ah import ibv_create_ah, ibv_destroy_ah
from models.verbs.qp_state import AhAttr
from sim.api.device import PD
from sim.api.resource import Resource


class AH(Resource):
    """An address handle (``ibv_create_ah``) on ``pd`` for the port ``attr`` names: by ``dlid`` (the remote
    :attr:`Context.lid <sim.api.device.Context.lid>`) on InfiniBand, by ``dgid`` with ``is_global`` (the remote
    :meth:`Context.query_gid <sim.api.device.Context.query_gid>`), which RoCE requires. It holds its PD.

    :raises VerbsError: as :func:`models.verbs.ah.ibv_create_ah` (``EINVAL`` for a port other than 1, or no GRH on
        a RoCE fabric).
    """

    def __init__(self, pd: PD, attr: AhAttr) -> None:
        pd._check_open("ibv_create_ah")
        self.pd, self.context = pd, pd.context
        self.ah = ibv_create_ah(pd.pd, attr)
        """The verbs layer's AH (:class:`models.verbs.ah.AddressHandle`)."""
        self.context._adopt(self)

    @property
    def _uses(self) -> tuple:
        return (self.pd,)

    def _destroy(self) -> None:
        ibv_destroy_ah(self.ah)
