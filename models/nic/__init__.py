"""The RDMA NIC: :mod:`~models.nic.nic` (engines, ports, key table), :mod:`~models.nic.mtt_cache` (MPT/MTT
translation caches), :mod:`~models.nic.stages` (the stages a message streams through), :mod:`~models.nic.datapath`
(the step list of one work request), :mod:`~models.nic.refusal` (what refuses one), :mod:`~models.nic.work_request`
and :mod:`~models.nic.retransmit` (its run in the event engine), :mod:`~models.nic.completion` (its completion),
:mod:`~models.nic.wqe` (work requests, completions and their enums), :mod:`~models.nic.translation` (what an access
through an MR reaches), :mod:`~models.nic.device` (the identity, limits and capability bits a device reports)."""
