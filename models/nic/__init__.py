"""The RDMA NIC: :mod:`~models.nic.nic` (engines, ports, key table), :mod:`~models.nic.mtt_cache` (MPT/MTT
translation caches), :mod:`~models.nic.datapath` (the path of one work request), :mod:`~models.nic.wqe` (work
requests, completions and their enums), :mod:`~models.nic.translation` (what an access through an MR reaches),
:mod:`~models.nic.device` (the identity, limits and capability bits a device reports)."""
