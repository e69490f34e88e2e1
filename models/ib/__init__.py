"""The kernel RDMA core: :mod:`~models.ib.mr_backing` (the MR backings for ODP and peer memory),
:mod:`~models.ib.umem_dmabuf` (``ib_umem_dmabuf``), :mod:`~models.ib.dmabuf_mr` (the dma-buf MR backing and its
registration), :mod:`~models.ib.memory_data` (the bytes behind an MR)."""
