"""The RDMA NIC: :mod:`~models.nic.nic` (engines, ports, key table), :mod:`~models.nic.mtt_cache` (MPT/MTT
translation caches), :mod:`~models.nic.datapath` (the path of one work request)."""
