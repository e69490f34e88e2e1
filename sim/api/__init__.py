"""rdmasim's public Python API: verbs objects named and shaped like rdma-core's pyverbs, on a simulated testbed.

>>> from sim.api import CQ, MR, PD, QP, SGE, Access, Context, Opcode, QPAttr, QPCap, QPInitAttr, SendWR, Testbed
>>> from sim.api import SRQ, RecvWR, SrqAttr, SrqInitAttr
>>> bed = Testbed(["a", "b"])
>>> ctx = Context(bed, "a")

Every object has ``close()`` and works as a context manager; closing one closes the objects that use it first, as
pyverbs does (the ``ibv_*`` destroy verbs underneath keep the kernel's ``EBUSY``); failures raise
:class:`VerbsError` with the errno's name (``err.errno``) and number (``err.errno_value``, pyverbs' ``error_code``);
an argument of a type its C field cannot take raises :class:`ArgumentTypeError` (a ``TypeError``), as pyverbs'
Cython conversions do, before any call runs; an integer too wide for its field is the verbs layer's ``EINVAL``.
The reference is docs/api.md; "from pyverbs to rdmasim"
(docs/from_pyverbs.md) ports one of rdma-core's own tests.

The layer underneath is :mod:`models.verbs` (``ibv_*`` free functions with rdma-core's checks); this package
adds objects, their lifetimes and the clock (:mod:`sim.api.testbed`).
"""

from models.dmabuf.gpu_export import CudaError
from models.gpu.device_memory import GpuOutOfMemory
from models.libs.cuda_vmm import VmmHandle
from models.nic.memory_window import MwType
from models.nic.wqe import Access, Opcode, QpState, SendFlags, WcFlags, WcOpcode, WcStatus
from models.verbs.advise import IBV_ADVISE_MR_FLAG_FLUSH as ADVISE_MR_FLAG_FLUSH
from models.verbs.advise import AdviseMrAdvice
from models.verbs.data_in_order import DataInOrderCaps, QueryDataInOrderFlags
from models.verbs.qp_state import AhAttr as AHAttr
from models.verbs.qp_ex import QpInitAttrMask, SendOps
from models.verbs.qp_state import PathMtu, QpAttrMask, QpType
from models.verbs.receive_queue import AsyncEventType
from models.verbs.xrc import O_CREAT, O_EXCL, SrqInitAttrMask, SrqType, XrcdInitAttrMask
from models.verbs.recv import SRQ_LIMIT, SRQ_MAX_WR
from models.verbs.mr import REREG_CHANGE_ACCESS, REREG_CHANGE_PD, REREG_CHANGE_TRANSLATION
from sim.api.ah import AH
from sim.api.comp_channel import CompChannel
from sim.api.arguments import ArgumentTypeError
from sim.api.device import CQ, PD, WC, AsyncEvent, Context
from sim.api.dm import DM, DMMR, AllocDmAttr
from sim.api.gpu import GPU, DmaBuf, GpuBuffer, MappedRange
from sim.api.host import HostMemory
from sim.api.mr import MR, DmaBufMR, Mlx5DmaBufMR
from sim.api.mr_ex import DMAHandle, DmaHandleInitAttr, MREx
from sim.api.mw import MW, MWBind, MWBindInfo
from sim.api.qp import QP, QPAttr, QPCap, QPInitAttr, RecvWR, SendWR
from sim.api.qp_ex import DataBuffer, QPEx, QPInitAttrEx
from sim.api.sge import SGE
from sim.api.srq import SRQ, SrqAttr, SrqInitAttr, SrqInitAttrEx
from sim.api.testbed import Testbed
from sim.api.xrc import XRCD, XRCDInitAttr
from sim.core import ConfigError, DeadlockError, ProtocolError, SimError, VerbsError

__all__ = [
    "Testbed", "Context", "PD", "MR", "DmaBufMR", "Mlx5DmaBufMR", "MREx", "DMAHandle", "DmaHandleInitAttr",
    "MW", "MWBind", "MWBindInfo", "MwType", "CQ", "CompChannel", "WC",
    "QP", "QPCap", "QPInitAttr", "QPAttr", "QPEx", "QPInitAttrEx", "DataBuffer", "QpInitAttrMask", "SendOps",
    "AH", "AHAttr",
    "SGE", "SendWR", "SendFlags", "RecvWR", "SRQ", "SrqInitAttr", "SrqInitAttrEx", "SrqAttr", "SRQ_MAX_WR",
    "SRQ_LIMIT", "SrqType", "SrqInitAttrMask", "XRCD", "XRCDInitAttr", "XrcdInitAttrMask", "O_CREAT", "O_EXCL",
    "AsyncEvent", "AsyncEventType", "DM", "DMMR", "AllocDmAttr", "GPU", "GpuBuffer", "DmaBuf", "HostMemory",
    "MappedRange", "VmmHandle",
    "Access", "Opcode", "QpState", "QpType", "QpAttrMask", "PathMtu", "WcStatus", "WcOpcode", "WcFlags",
    "AdviseMrAdvice", "ADVISE_MR_FLAG_FLUSH", "QueryDataInOrderFlags", "DataInOrderCaps",
    "REREG_CHANGE_TRANSLATION", "REREG_CHANGE_PD", "REREG_CHANGE_ACCESS",
    "SimError", "VerbsError", "ConfigError", "ProtocolError", "DeadlockError", "ArgumentTypeError", "GpuOutOfMemory",
    "CudaError",
]
