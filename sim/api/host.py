"""Host memory of the script's own: ``mmap``/``posix_memalign`` of anonymous memory on a node, ``madvise`` and
``munmap``, as they reach the MRs over it (the MMU notifier of an ODP MR; a pinned MR keeps its pages)."""

from __future__ import annotations

import numpy as np

from models.ib.mr_backing import mmu_notifier_invalidate_range, pins_in_range
from sim.api.resource import Resource, process_buffer
from sim.core import ProtocolError
from sim.core.units import format_size


class HostMemory(Resource):
    """``length`` bytes of anonymous memory mapped by the script's process on ``context``'s node (``mmap`` with
    ``MAP_PRIVATE | MAP_ANONYMOUS``; zeroed, page aligned). ``addr`` is what ``MR(pd, length, access,
    address=mem.addr)`` registers; ``write``/``read`` are the CPU's stores and loads (data mode);
    :meth:`madvise_dontneed` and :meth:`close` (``munmap``) tell the MRs over it as the kernel does. No
    simulated time passes for any of them.

    :raises VerbsError: ``ENOMEM`` in data mode when this process cannot hold the bytes.
    """

    def __init__(self, context, length: int) -> None:
        context._check_open("mmap")
        if type(length) is not int or length <= 0:
            raise ProtocolError(f"mmap: length must be a positive int of bytes, got {length!r}")
        self.context = context
        self._buffer = process_buffer(context, length, "mmap", "mmap")
        context._adopt(self)

    @property
    def addr(self) -> int:
        """The mapping's first byte (page aligned)."""
        return self._buffer.addr

    @property
    def size(self) -> int:
        """Bytes mapped (as asked)."""
        return self._buffer.size

    def write(self, data: bytes | str, length: int, offset: int = 0) -> None:
        """Store ``length`` bytes of ``data`` at ``offset``.

        :raises ProtocolError: not in data mode, unmapped, or a range outside the mapping.
        """
        data = data.encode() if isinstance(data, str) else data
        self._bytes("HostMemory.write", offset, length)[:] = np.frombuffer(data[:length], dtype=np.uint8)

    def read(self, length: int, offset: int = 0) -> bytes:
        """``length`` bytes at ``offset`` as the CPU loads them now.

        :raises ProtocolError: as :meth:`write`.
        """
        return self._bytes("HostMemory.read", offset, length).tobytes()

    def madvise_dontneed(self, offset: int = 0, length: int | None = None) -> None:
        """``madvise(addr + offset, length, MADV_DONTNEED)``: the range's pages leave the page table, and the CPU's
        next load of them finds zeros (anonymous private memory). The MMU notifier of every ODP MR over the range
        zaps them, so the NIC faults the new pages in on its next access.

        :raises ProtocolError: a pinned MR of this process covers part of the range: the kernel lets the pin keep
            the old pages while the process gets new ones, so the MR would no longer see what the CPU writes; that
            split is not modelled (deregister the MR first, or register with ``Access.ON_DEMAND``).
        """
        self._check_open("madvise")
        length = self.size - offset if length is None else length
        self._check_range("madvise", offset, length)
        mrs = self._mrs()
        pinned = pins_in_range(mrs, self.addr + offset, length)
        if pinned:
            raise ProtocolError(f"madvise(MADV_DONTNEED): MR lkey {pinned[0].lkey:#x} pins part of the range; the "
                                "pin would keep the old pages while the process gets new zero pages (not modelled: "
                                "deregister it first, or register with Access.ON_DEMAND)")
        mmu_notifier_invalidate_range(mrs, self.addr + offset, length)
        if self.context.testbed.env.data_mode:
            self._bytes("madvise", offset, length)[:] = 0

    def _mrs(self) -> list:
        """The verbs-layer MRs the script registered on this node's host memory and still holds."""
        return [mr.mr for mr in self.context.testbed.registrations
                if not mr.closed and mr.location == "host" and mr.context.name == self.context.name]

    def _check_range(self, call: str, offset: int, length: int) -> None:
        if offset < 0 or length < 0 or offset + length > self.size:
            raise ProtocolError(f"{call}: [{offset}, {offset + length}) is outside the {format_size(self.size)} "
                                "mapping")

    def _bytes(self, call: str, offset: int, length: int) -> np.ndarray:
        self._check_open(call)
        if not self.context.testbed.env.data_mode:
            raise ProtocolError(f"{call}: CPU access to bytes needs data mode (Testbed(data=True))")
        self._check_range(call, offset, length)
        return self.context.ctx.node.host.data[self._buffer.name][offset:offset + length]

    def _destroy(self) -> None:
        """``munmap``: ODP MRs over the mapping lose its pages (their next access fails: nothing is mapped there);
        a pinned MR keeps the pages it pinned until it is deregistered."""
        host = self.context.ctx.node.host
        mmu_notifier_invalidate_range(self._mrs(), self.addr, self.size)
        host.unmap(self._buffer.name)

