"""rdmasim's public Python API: verbs objects named and shaped like rdma-core's pyverbs, on a simulated testbed.

>>> from sim.api import CQ, MR, PD, QP, SGE, Access, Context, Opcode, QPAttr, QPCap, QPInitAttr, SendWR, Testbed
>>> bed = Testbed(["a", "b"])
>>> ctx = Context(bed, "a")

Every object has ``close()`` and works as a context manager; the kernel's destroy rules hold (a PD with MRs
or QPs, a CQ with QPs: ``EBUSY``); failures raise :class:`VerbsError` with the errno's name (``err.errno``) and
number (``err.errno_value``, pyverbs' ``error_code``). The reference is docs/api.md; "from pyverbs to rdmasim"
(docs/from_pyverbs.md) ports one of rdma-core's own tests.

The layer underneath is :mod:`models.verbs` (``ibv_*`` free functions with rdma-core's checks); this package
adds objects, their lifetimes and the clock (:mod:`sim.api.testbed`).
"""

from models.nic.wqe import Access, Opcode, QpState, WcStatus
from models.verbs.qp_state import AhAttr as AHAttr
from models.verbs.qp_state import PathMtu, QpAttrMask, QpType
from models.verbs.verbs import REREG_CHANGE_ACCESS, REREG_CHANGE_PD, REREG_CHANGE_TRANSLATION
from sim.api.device import CQ, PD, WC, Context
from sim.api.gpu import GPU, DmaBuf, GpuBuffer
from sim.api.mr import MR, DmaBufMR
from sim.api.qp import QP, SGE, QPAttr, QPCap, QPInitAttr, SendFlags, SendWR
from sim.api.testbed import Testbed
from sim.core import ConfigError, DeadlockError, ProtocolError, SimError, VerbsError

__all__ = [
    "Testbed", "Context", "PD", "MR", "DmaBufMR", "CQ", "WC", "QP", "QPCap", "QPInitAttr", "QPAttr", "AHAttr",
    "SGE", "SendWR", "SendFlags", "GPU", "GpuBuffer", "DmaBuf",
    "Access", "Opcode", "QpState", "QpType", "QpAttrMask", "PathMtu", "WcStatus",
    "REREG_CHANGE_TRANSLATION", "REREG_CHANGE_PD", "REREG_CHANGE_ACCESS",
    "SimError", "VerbsError", "ConfigError", "ProtocolError", "DeadlockError",
]
