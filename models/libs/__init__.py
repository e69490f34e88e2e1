"""What communication libraries (UCX, NCCL, libfabric, Mooncake) put between an application and the verbs: the
process's view of GPU allocations (:mod:`~models.libs.cuda_process`: cudaMalloc/cudaFree with recycled virtual
addresses, buffer IDs, memory hooks), a registration cache (:mod:`~models.libs.rcache`), registration
fallback chains (:mod:`~models.libs.fallback`) and registration cost at scale (:mod:`~models.libs.regcost`).

This package sits above :mod:`models.verbs` and calls its free functions (``ibv_reg_mr``, ``ibv_reg_dmabuf_mr``,
peer-memory registration) as a library would; nothing below imports it."""
