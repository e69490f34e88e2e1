"""The kernel RDMA core: :mod:`~models.ib.mr_backing` (the MR backings for ODP and peer memory),
:mod:`~models.ib.umem_dmabuf` (``ib_umem_dmabuf``), :mod:`~models.ib.dmabuf_mr` (the dma-buf MR backing and its
registration). The interface the NIC calls on a backing is :class:`~models.nic.translation.MrBacking`."""
