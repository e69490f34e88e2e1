"""``DM`` with ``AllocDmAttr`` in pyverbs' shape (pyverbs/device.pyx) over :mod:`models.verbs.dm`: NIC device memory,
the process's copies into and out of it, and its export as a dma-buf for another device; ``DMMR`` (pyverbs/mr.pyx)
registers it over :mod:`models.verbs.dm_mr`."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.nic.wqe import Access
from models.verbs.dm import (ibv_alloc_dm, ibv_dm_export_dmabuf_fd, ibv_free_dm, ibv_memcpy_from_dm,
                             ibv_memcpy_to_dm)
from models.verbs.dm_mr import ibv_reg_dm_mr
from sim.api.arguments import c_integer
from sim.api.device import PD, Context
from sim.api.mr import MR
from sim.api.resource import Resource
from sim.core import DeadlockError, ProtocolError


@dataclass
class AllocDmAttr:
    """``struct ibv_alloc_dm_attr`` (pyverbs' ``AllocDmAttr(length, log_align_req=0, comp_mask=0)``): ``length``
    bytes aligned to ``2**log_align_req``; mlx5 knows no ``comp_mask`` bit."""

    length: int = 0
    log_align_req: int = 0
    comp_mask: int = 0


class DM(Resource):
    """``length`` bytes of the NIC's device memory (``ibv_alloc_dm``, mlx5's MEMIC), zeroed; :meth:`copy_to_dm` and
    :meth:`copy_from_dm` reach its bytes, a :class:`DMMR` registers it for the NIC. :meth:`close` is
    ``ibv_free_dm`` (its DMMRs closed first, as pyverbs does): it revokes every dma-buf exported from the memory and
    returns once the importers have unmapped it, the clock advanced to then, as the kernel blocks.

    :raises InvariantViolation: from :meth:`close`: a revocable importer still maps the memory at the unmap bound
        (the memory is freed all the same).
    :raises VerbsError: as :func:`models.verbs.dm.ibv_alloc_dm` (``EOPNOTSUPP`` on a device without device memory;
        ``EINVAL`` above ``max_dm_size``, for length 0 or a ``comp_mask``; ``ENOMEM`` when no free run of its pages
        holds the length).
    :raises ArgumentTypeError: a field of ``dm_init_attr`` that is not an integer.
    """

    def __init__(self, context: Context, dm_init_attr: AllocDmAttr) -> None:
        call = "ibv_alloc_dm"
        context._check_open(call)
        align = c_integer(dm_init_attr.log_align_req, "uint32_t", "log_align_req", call)
        mask = c_integer(dm_init_attr.comp_mask, "uint32_t", "comp_mask", call)
        self.context = context
        self.dm = ibv_alloc_dm(context.ctx, c_integer(dm_init_attr.length, "size_t", "length", call), align, mask)
        """The verbs layer's allocation (:class:`models.verbs.dm.DeviceMemoryAllocation`)."""
        context._adopt(self)

    @property
    def length(self) -> int:
        """Bytes allocated."""
        return self.dm.length

    def copy_to_dm(self, dm_offset: int, data: bytes | str, length: int) -> None:
        """``ibv_memcpy_to_dm``: copy the first ``length`` bytes of ``data`` into the memory at ``dm_offset`` (the
        CPU's stores; no simulated time).

        :raises VerbsError: ``EFAULT`` past the memory's end, ``EINVAL`` for an offset or length not a multiple of
            4 bytes (:func:`models.verbs.dm.mlx5_access_dm`).
        :raises ProtocolError: ``data`` holds fewer than ``length`` bytes.
        """
        call = "ibv_memcpy_to_dm"
        self._check_open(call)
        data = data.encode() if isinstance(data, str) else bytes(data)
        if len(data) < c_integer(length, "size_t", "length", call):
            raise ProtocolError(f"{call}: data holds {len(data)} bytes, fewer than length {length}")
        ibv_memcpy_to_dm(self.dm, c_integer(dm_offset, "uint64_t", "dm_offset", call),
                         np.frombuffer(data[:length], np.uint8))

    def copy_from_dm(self, dm_offset: int, length: int) -> bytes:
        """``ibv_memcpy_from_dm``: ``length`` bytes of the memory from ``dm_offset``.

        :raises VerbsError: as :meth:`copy_to_dm`.
        """
        call = "ibv_memcpy_from_dm"
        self._check_open(call)
        return ibv_memcpy_from_dm(self.dm, c_integer(dm_offset, "uint64_t", "dm_offset", call),
                                  c_integer(length, "size_t", "length", call)).tobytes()

    def export_dmabuf_fd(self) -> int:
        """``ibv_dm_export_dmabuf_fd``: a dma-buf of the memory, as a file descriptor of the process (what
        another device imports; only peer-to-peer importers may attach).

        :raises VerbsError: ``EOPNOTSUPP`` before rdma-core v62, ``EPROTONOSUPPORT`` before kernel 7.0, ``EMFILE``.
        """
        self._check_open("ibv_dm_export_dmabuf_fd")
        return ibv_dm_export_dmabuf_fd(self.dm)

    def _destroy(self) -> None:
        started = {id(revocation) for revocation in ibv_free_dm(self.dm)}
        self._closed = True  # freed: whatever the waits below raise, the memory is gone
        testbed, env = self.context.testbed, self.context.testbed.env
        for exporter in self.dm.exports:
            for revocation in exporter.revocations:
                if id(revocation) in started:
                    waiting = env.process(exporter.wait_unmapped(revocation))
                    if not testbed._run_until(lambda waiting=waiting: waiting.triggered, None):
                        raise DeadlockError(f"ibv_free_dm: {exporter.name}'s dma-buf is still mapped by "
                                            f"{revocation.waited_for} and nothing left to simulate unmaps it")
                    if not waiting.ok:  # the wait broke a rule (InvariantViolation): raise it here, not later
                        waiting.defused = True
                        raise waiting.value


class DMMR(MR):
    """pyverbs' ``DMMR(pd, length, access, dm, offset)``: ``ibv_reg_dm_mr`` of ``length`` bytes of ``dm`` from
    ``offset``, a zero-based MR (``buf`` 0; ``access`` must hold ``IBV_ACCESS_ZERO_BASED``) whose accesses the NIC
    serves from its own memory, not across PCIe. :meth:`write` and :meth:`read` copy through the DM at the offset
    given, as pyverbs does (``dm.copy_to_dm(offset, ...)``). The clock advances by the registration's cost.

    :raises VerbsError: as :func:`models.verbs.dm_mr.ibv_reg_dm_mr` (``EINVAL`` without ZERO_BASED, for access bits
        mlx5 does not allow, or a range past the memory; ``EOPNOTSUPP`` on a device without device memory).
    """

    def __init__(self, pd: PD, length: int, access: int, dm: DM, offset: int) -> None:
        call = "ibv_reg_dm_mr"
        pd._check_open(call)
        dm._check_open(call)
        self.pd, self.context, self.dm, self.offset, self._buffer, self._buf = pd, pd.context, dm, offset, None, 0
        self.mr = ibv_reg_dm_mr(pd.pd, dm.dm, c_integer(offset, "uint64_t", "offset", call),
                                c_integer(length, "size_t", "length", call),
                                Access(c_integer(access, "unsigned int", "access", call)))
        self._made()

    @property
    def location(self) -> str:
        """``device memory``: the NIC's own."""
        return "device memory"

    @property
    def _uses(self) -> tuple:
        return (self.pd, self.dm)

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        """``dm.copy_to_dm(offset, data, length)``.

        :raises VerbsError: as :meth:`DM.copy_to_dm`.
        """
        self._check_open("ibv_memcpy_to_dm")
        self.dm.copy_to_dm(offset, data, length)

    def read(self, length: int, offset: int) -> bytes:
        """``dm.copy_from_dm(offset, length)``.

        :raises VerbsError: as :meth:`DM.copy_from_dm`.
        """
        self._check_open("ibv_memcpy_from_dm")
        return self.dm.copy_from_dm(offset, length)
