"""``MR`` and ``DmaBufMR`` in pyverbs' shape (pyverbs/mr.pyx) over ``ibv_reg_mr``/``ibv_reg_dmabuf_mr``.

Registration is a blocking control-path call: the clock advances by the registration's simulated cost before
the constructor returns, and :meth:`MR.close` (``ibv_dereg_mr``) by the deregistration's.
"""

from __future__ import annotations

import numpy as np

from models.ib.implicit_odp import SIZE_MAX
from models.nic.wqe import Access
from models.verbs.dmabuf import ibv_reg_dmabuf_mr, mlx5dv_reg_dmabuf_mr
from models.verbs.mr import ibv_dereg_mr, ibv_reg_mr, ibv_rereg_mr
from sim.api.arguments import c_integer
from sim.api.device import PD
from sim.api.gpu import DmaBuf
from sim.api.resource import Resource, process_buffer
from sim.core import ProtocolError, VerbsError


class MR(Resource):
    """A memory region (``ibv_reg_mr``) of ``length`` bytes with ``access`` rights
    (:class:`~models.nic.wqe.Access`). Without ``address`` it allocates the host buffer itself, zeroed, as
    pyverbs does; with ``address`` it registers memory the script already has. ``implicit=True`` (with
    ``Access.ON_DEMAND``) registers an implicit ODP MR over the whole address space,
    ``ibv_reg_mr(pd, NULL, SIZE_MAX, access)``, as pyverbs' ``MR.__init__`` does: ``buf`` is still ``address``,
    or the ``length`` bytes it allocated (0 when neither is given), and :meth:`write` and :meth:`read` reach them.

    :raises VerbsError: as :func:`models.verbs.mr.ibv_reg_mr` (``EINVAL`` for REMOTE_WRITE without
        LOCAL_WRITE, ``EFAULT`` for an unmapped range, ``ENOMEM`` past RLIMIT_MEMLOCK, ...); ``ENOMEM`` in data mode
        when this process cannot hold the buffer's bytes (:func:`~sim.api.resource.zeroed`).
    :raises ArgumentTypeError: ``length``, ``access`` or ``address`` is not an integer.
    """

    _implicit = False

    def __init__(self, pd: PD, length: int = 0, access: int = 0, address: int | None = None,
                 implicit: bool = False) -> None:
        call = "ibv_reg_mr"
        pd._check_open(call)
        length, access = c_integer(length, "size_t", "length", call), c_integer(access, "int", "access", call)
        if address is not None:
            c_integer(address, "uint64_t", "address", call)
        self.pd, self.context = pd, pd.context
        self._buffer = None
        if not address and length > 0:
            self._buffer = process_buffer(pd.context, length, call, "mr")
            address = self._buffer.addr
        self._buf, self._implicit = address or 0, implicit
        self.mr = ibv_reg_mr(pd.pd, 0, SIZE_MAX, Access(access)) if implicit else \
            ibv_reg_mr(pd.pd, self._buf, length, Access(access))
        """The verbs layer's MR (:class:`models.verbs.mr.MemoryRegion`)."""
        self._made()

    def _made(self) -> None:
        """The registration returned: the clock moves past its cost, the context keeps the MR, the testbed's
        results list it."""
        self.context.testbed._advance(self.mr.reg_ps)
        self.context._adopt(self)
        self.context.testbed.registrations.append(self)

    @property
    def location(self) -> str:
        """Where its memory is: ``host``, or the GPU (``a.gpu0``) of a dma-buf MR's buffer."""
        return "host"

    @property
    def buf(self) -> int:
        """Address of the memory the MR was made with: the registered range's start (its iova), or for an implicit
        MR the address given or allocated."""
        return self._buf if self._implicit else self.mr.iova

    @property
    def _uses(self) -> tuple:
        return (self.pd,)

    @property
    def lkey(self) -> int:
        """Local key."""
        return self.mr.lkey

    @property
    def rkey(self) -> int:
        """Remote key."""
        return self.mr.rkey

    @property
    def length(self) -> int:
        """Registered length (bytes)."""
        return self.mr.length

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the buffer at ``offset`` (the CPU's store; no simulated time).

        :raises ProtocolError: the testbed is not in data mode, or the MR did not allocate its buffer.
        """
        data = data.encode() if isinstance(data, str) else data
        self._bytes("MR.write", offset, length)[:] = np.frombuffer(data[:length], dtype=np.uint8)

    def read(self, length: int, offset: int) -> bytes:
        """``length`` bytes of the buffer at ``offset``, as the CPU reads them now.

        :raises ProtocolError: as :meth:`write`.
        """
        return self._bytes("MR.read", offset, length).tobytes()

    def rereg(self, flags: int, pd: PD | None = None, addr: int = 0, length: int = 0, access: int = 0) -> None:
        """``ibv_rereg_mr``: change the MR's translation, PD or access (``IBV_REREG_MR_CHANGE_*`` in ``flags``);
        the clock advances by its cost.

        :raises VerbsError: as :func:`models.verbs.mr.ibv_rereg_mr`.
        """
        self._check_open("ibv_rereg_mr")
        cost = ibv_rereg_mr(self.mr, flags, pd.pd if pd is not None else None, addr, length, Access(access))
        if pd is not None and self.mr.pd is pd.pd:
            self.pd = pd
        self.context.testbed._advance(cost)

    def _bytes(self, call: str, offset: int, length: int) -> np.ndarray:
        """The process's bytes ``[buf+offset, buf+offset+length)`` (pyverbs' memcpy at ``self.buf + offset``):
        the MR's own buffer or memory the script allocated, as long as one host buffer holds the range."""
        self._check_open(call)
        if not self.context.testbed.env.data_mode:
            raise ProtocolError(f"{call}: CPU access to bytes needs data mode (Testbed(data=True))")
        if offset < 0 or length < 0:
            raise ProtocolError(f"{call}: offset {offset} and length {length} must not be negative")
        host, start = self.context.ctx.node.host, self.buf + offset
        held = next((b for b in host.buffers.values() if b.name not in host.unmapped
                     and b.addr <= start and start + length <= b.addr + b.size), None)
        if held is None or held.name not in host.data:
            raise ProtocolError(f"{call}: [{offset}, {offset + length}) from the MR's buf is not inside one buffer "
                                "of the process's memory")
        return host.data[held.name][start - held.addr:start - held.addr + length]

    def _destroy(self) -> None:
        self.context.testbed._advance(ibv_dereg_mr(self.mr))


class DmaBufMR(MR):
    """A dma-buf memory region (``ibv_reg_dmabuf_mr``): ``length`` bytes at ``offset`` of ``dmabuf`` (a
    :class:`~sim.api.gpu.DmaBuf` or a file descriptor of the process), registered with iova ``offset`` as
    pyverbs does. Without ``dmabuf`` one of ``length + offset`` bytes is allocated on the node's GPU number
    ``gpu`` and closed with the MR (``gtt``, allocating from GTT instead of VRAM, is not modelled).

    :raises VerbsError: as :func:`models.verbs.dmabuf.ibv_reg_dmabuf_mr` (``EOPNOTSUPP`` without dma-buf
        support, ``EBADF`` for a bad fd, ``EINVAL`` for a range past the dma-buf, ...).
    """

    def __init__(self, pd: PD, length: int, access: int, dmabuf: DmaBuf | int | None = None, offset: int = 0,
                 gpu: int = 0, gtt: int = 0) -> None:
        pd._check_open("ibv_reg_dmabuf_mr")
        self.pd, self.context, self.offset = pd, pd.context, offset
        self._internal = dmabuf is None
        self.dmabuf = DmaBuf(pd.context, length + offset, gpu=gpu, gtt=gtt) if dmabuf is None else dmabuf
        fd = self.dmabuf.fd if isinstance(self.dmabuf, DmaBuf) else self.dmabuf
        try:
            self.mr = ibv_reg_dmabuf_mr(pd.pd, offset, length, offset, fd, Access(access))
        except VerbsError:
            if self._internal:
                self.dmabuf.close()
            raise
        self._made()

    @property
    def location(self) -> str:
        """The GPU of its buffer (``a.gpu0``); ``dma-buf fd`` when it was registered from a bare fd."""
        return self.dmabuf.buffer.gpu.name if isinstance(self.dmabuf, DmaBuf) else "dma-buf fd"

    def _bytes(self, call: str, offset: int, length: int) -> np.ndarray:
        self._check_open(call)
        if not isinstance(self.dmabuf, DmaBuf):
            raise ProtocolError(f"{call}: the MR was registered from a bare fd; read its DmaBuf's buffer instead")
        return self.dmabuf.buffer.bytes(call, self.dmabuf.offset + self.offset + offset, length)

    def _destroy(self) -> None:
        super()._destroy()
        if self._internal:
            self.dmabuf.close()


class Mlx5DmaBufMR(DmaBufMR):
    """pyverbs' ``Mlx5DmaBufMR(pd, offset, length, iova=0, fd=None, access=0, mlx5_access=0)``:
    ``mlx5dv_reg_dmabuf_mr`` of ``length`` bytes of the dma-buf ``fd`` (an int, or a :class:`~sim.api.gpu.DmaBuf`)
    from ``offset``, keyed at ``iova``; ``mlx5_access`` 1 (``MLX5DV_REG_DMABUF_ACCESS_DATA_DIRECT``) registers
    through the NIC's data-direct function (a ConnectX-8's; a pinned registration).

    :raises VerbsError: as :func:`models.verbs.dmabuf.mlx5dv_reg_dmabuf_mr`.
    """

    def __init__(self, pd: PD, offset: int, length: int, iova: int = 0, fd: int | DmaBuf | None = None,
                 access: int = 0, mlx5_access: int = 0) -> None:
        call = "mlx5dv_reg_dmabuf_mr"
        pd._check_open(call)
        self.pd, self.context, self.offset, self._internal, self.dmabuf = pd, pd.context, offset, False, fd
        descriptor = fd.fd if isinstance(fd, DmaBuf) else fd
        self.mr = mlx5dv_reg_dmabuf_mr(pd.pd, c_integer(offset, "uint64_t", "offset", call),
                                       c_integer(length, "size_t", "length", call),
                                       c_integer(iova, "uint64_t", "iova", call),
                                       c_integer(descriptor, "int", "fd", call), Access(access),
                                       c_integer(mlx5_access, "int", "mlx5_access", call))
        self._made()
