"""``DM`` with ``AllocDmAttr`` in pyverbs' shape (pyverbs/device.pyx) over :mod:`models.verbs.dm`: NIC device memory
and its export as a dma-buf for another device."""

from __future__ import annotations

from dataclasses import dataclass

from models.verbs.dm import ibv_alloc_dm, ibv_dm_export_dmabuf_fd, ibv_free_dm
from sim.api.arguments import c_integer
from sim.api.device import Context
from sim.api.resource import Resource
from sim.core import DeadlockError


@dataclass
class AllocDmAttr:
    """``struct ibv_alloc_dm_attr`` (pyverbs' ``AllocDmAttr(length, log_align_req=0, comp_mask=0)``): ``length``
    bytes; the alignment and mask are kept, not modelled."""

    length: int = 0
    log_align_req: int = 0
    comp_mask: int = 0


class DM(Resource):
    """``length`` bytes of the NIC's device memory (``ibv_alloc_dm``, mlx5's MEMIC). The model keeps no bytes in it
    (pyverbs' ``copy_to_dm``/``copy_from_dm`` are not offered). :meth:`close` is ``ibv_free_dm``: it revokes
    every dma-buf exported from the memory and returns once the importers have unmapped it, the clock advanced to
    then, as the kernel blocks.

    :raises InvariantViolation: from :meth:`close`: a revocable importer still maps the memory at the unmap bound
        (the memory is freed all the same).
    :raises VerbsError: ``EOPNOTSUPP`` on a device without device memory; ``EINVAL`` above ``max_dm_size``;
        ``ENOMEM`` when the allocations so far leave too little.
    :raises ArgumentTypeError: a field of ``dm_init_attr`` that is not an integer.
    """

    def __init__(self, context: Context, dm_init_attr: AllocDmAttr) -> None:
        call = "ibv_alloc_dm"
        context._check_open(call)
        c_integer(dm_init_attr.log_align_req, "uint32_t", "log_align_req", call)
        c_integer(dm_init_attr.comp_mask, "uint64_t", "comp_mask", call)
        self.context = context
        self.dm = ibv_alloc_dm(context.ctx, c_integer(dm_init_attr.length, "size_t", "length", call))
        """The verbs layer's allocation (:class:`models.verbs.dm.DeviceMemoryAllocation`)."""
        context._adopt(self)

    @property
    def length(self) -> int:
        """Bytes allocated."""
        return self.dm.length

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
