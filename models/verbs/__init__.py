"""The verbs API (libibverbs names and errno semantics): :mod:`~models.verbs.device` (context, PD),
:mod:`~models.verbs.mr` (``ibv_reg_mr`` and its kin), :mod:`~models.verbs.cq` (CQ, poll), :mod:`~models.verbs.qp` (QP,
its state changes, post), :mod:`~models.verbs.dmabuf` (``ibv_reg_dmabuf_mr``), :mod:`~models.verbs.peermem`
(``ibv_reg_mr`` on GPU memory through the peer-memory client), :mod:`~models.verbs.query` (``ibv_query_device``,
``ibv_query_port``), :mod:`~models.verbs.workloads` (perftest-like loops)."""
