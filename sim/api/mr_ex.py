"""``MREx``, ``DMAHandle`` and ``DmaHandleInitAttr`` in pyverbs' shape (pyverbs/mr.pyx) over ``ibv_reg_mr_ex``,
``ibv_alloc_dmah`` and ``ibv_dealloc_dmah`` (:mod:`models.verbs.mr_ex`, :mod:`models.verbs.dmah`)."""

from __future__ import annotations

from dataclasses import dataclass

from models.ib.implicit_odp import SIZE_MAX
from models.nic.wqe import Access
from models.verbs.dmah import ibv_alloc_dmah, ibv_dealloc_dmah
from models.verbs.mr_ex import ibv_reg_mr_ex
from sim.api.arguments import c_integer
from sim.api.device import PD
from sim.api.gpu import DmaBuf
from sim.api.mr import MR
from sim.api.resource import Resource, process_buffer


@dataclass
class DmaHandleInitAttr:
    """``struct ibv_dmah_init_attr``: ``comp_mask`` (``IBV_DMAH_INIT_ATTR_MASK_CPU_ID`` 1, ``_PH`` 2,
    ``_TPH_MEM_TYPE`` 4) names the fields given; ``tph_mem_type`` is ``IBV_TPH_MEM_TYPE_VM`` (0) or ``_PM`` (1)."""

    comp_mask: int = 0
    cpu_id: int = 0
    ph: int = 0
    tph_mem_type: int = 0


class DMAHandle(Resource):
    """A DMA handle (``ibv_alloc_dmah``) of ``context``'s device; :meth:`close` (``ibv_dealloc_dmah``) closes the
    MRs registered with it first, as pyverbs does.

    :raises VerbsError: as :func:`models.verbs.dmah.ibv_alloc_dmah`.
    """

    def __init__(self, context, init_attr: DmaHandleInitAttr) -> None:
        call = "ibv_alloc_dmah"
        context._check_open(call)
        self.context = context
        self.dmah = ibv_alloc_dmah(context.ctx, c_integer(init_attr.comp_mask, "uint32_t", "comp_mask", call),
                                   c_integer(init_attr.cpu_id, "uint32_t", "cpu_id", call),
                                   c_integer(init_attr.ph, "uint8_t", "ph", call),
                                   c_integer(init_attr.tph_mem_type, "uint8_t", "tph_mem_type", call))
        """The verbs layer's handle (:class:`models.verbs.dmah.DmaHandle`)."""
        context._adopt(self)

    def _destroy(self) -> None:
        ibv_dealloc_dmah(self.dmah)


class MREx(MR):
    """A memory region registered with ``ibv_reg_mr_ex``: host memory at ``address`` (allocated, zeroed, when
    neither ``address`` nor ``fd`` is given and ``length`` is positive), or the dma-buf ``fd`` (an int, or a
    :class:`~sim.api.gpu.DmaBuf`) from ``fd_offset``; keyed at ``iova`` when given; with ``dmah``'s hints;
    ``implicit=True`` an implicit ODP MR. ``buf`` is the memory's address, ``read``/``write`` reach host bytes.

    :raises VerbsError: as :func:`models.verbs.mr_ex.ibv_reg_mr_ex`.
    """

    def __init__(self, pd: PD, length: int = 0, access: int = 0, address: int | None = None,
                 iova: int | None = None, fd: int | DmaBuf | None = None, fd_offset: int = 0,
                 dmah: DMAHandle | None = None, implicit: bool = False) -> None:
        call = "ibv_reg_mr_ex"
        pd._check_open(call)
        length, access = c_integer(length, "size_t", "length", call), c_integer(access, "int", "access", call)
        self.pd, self.context, self.dmah, self._fd = pd, pd.context, dmah, fd
        self._buffer = None
        if fd is None and not address and length > 0 and not implicit:
            self._buffer = process_buffer(pd.context, length, call, "mr")
            address = self._buffer.addr
        self._buf, self._implicit = address or 0, implicit
        descriptor = fd.fd if isinstance(fd, DmaBuf) else fd
        self.mr = ibv_reg_mr_ex(pd.pd, SIZE_MAX if implicit else length, Access(access),
                                addr=None if fd is not None else (0 if implicit else self._buf), iova=iova,
                                fd=descriptor, fd_offset=None if fd is None else fd_offset,
                                dmah=None if dmah is None else dmah.dmah)
        """The verbs layer's MR (:class:`models.verbs.mr.MemoryRegion`)."""
        self._made()

    @property
    def buf(self) -> int:
        """The registered memory's address (a dma-buf MR: its offset in the dma-buf)."""
        return self._buf if self._fd is None else self.mr.addr

    @property
    def location(self) -> str:
        """``host``, the GPU of a :class:`~sim.api.gpu.DmaBuf`'s buffer, or ``dma-buf fd``."""
        if self._fd is None:
            return "host"
        return self._fd.buffer.gpu.name if isinstance(self._fd, DmaBuf) else "dma-buf fd"

    @property
    def _uses(self) -> tuple:
        return (self.pd,) if self.dmah is None else (self.pd, self.dmah)
