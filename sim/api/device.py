"""``Context``, ``PD`` and ``CQ`` in pyverbs' shape over :mod:`models.verbs` (pyverbs/device.pyx, pd.pyx, cq.pyx)."""

from __future__ import annotations

from dataclasses import dataclass

from models.nic.wqe import WorkCompletion
from models.verbs.advise import ibv_advise_mr
from models.verbs.ah import ibv_query_gid
from models.verbs.destroy import ibv_dealloc_pd, ibv_destroy_cq
from models.verbs.dmabuf import mlx5dv_get_data_direct_sysfs_path
from models.verbs.query import ibv_query_device, ibv_query_device_ex, ibv_query_port
from models.verbs.receive_queue import AsyncEventType
from models.verbs.recv import ibv_get_async_event
from models.verbs.cq import NUM_COMP_VECTORS, ibv_create_cq, ibv_poll_cq
from models.verbs.cq_events import ibv_ack_cq_events, ibv_req_notify_cq, ibv_resize_cq
from models.verbs.device import ibv_alloc_pd, ibv_open_device
from sim.api.arguments import c_integer
from sim.api.resource import Resource
from sim.api.sge import SGE, sge_list
from sim.api.testbed import TESTBED, Testbed
from sim.core import ConfigError, DeadlockError

WC = WorkCompletion
"""``struct ibv_wc`` as pyverbs' ``WC``: ``wr_id``, ``status`` (:class:`~models.nic.wqe.WcStatus`), ``opcode``
(:class:`~models.nic.wqe.WcOpcode`: ``RECV`` and ``RECV_RDMA_WITH_IMM`` for receives), ``byte_len``, ``qp_num``,
``wc_flags`` (:class:`~models.nic.wqe.WcFlags`), ``imm_data`` (with ``WcFlags.WITH_IMM``), ``src_qp`` (the sender
of a receive), and the simulated times ``posted_ps`` and ``completed_ps``."""


@dataclass(frozen=True)
class AsyncEvent:
    """``struct ibv_async_event`` as :meth:`Context.get_async_event` returns it: ``event_type``
    (:class:`~models.verbs.receive_queue.AsyncEventType`), ``element`` (the API object it concerns, e.g. the
    :class:`~sim.api.srq.SRQ`) and the simulated time it was raised (ps)."""

    event_type: AsyncEventType
    element: object
    time_ps: int


class Context(Resource):
    """An opened device (``ibv_open_device``): the NIC of node ``name`` of ``testbed``, for a process with
    ``cap_net_raw`` (CAP_NET_RAW, which lets ``QP.modify`` set a controlled Q_Key) or, by default, without.

    Closing it closes every object opened through it, newest first, as closing the device file makes the
    kernel destroy whatever the process left (use counts do not stop that cleanup).

    :raises ConfigError: the testbed has no node ``name``.
    """

    def __init__(self, testbed: Testbed, name: str, *, cap_net_raw: bool = False) -> None:
        if name not in testbed.bed.nodes:
            raise ConfigError(f"no node {name!r}; the testbed has {sorted(testbed.bed.nodes)}", file=TESTBED,
                              key="nodes")
        self.testbed, self.name = testbed, name
        self.ctx = ibv_open_device(testbed.bed.nodes[name], testbed.bed.env, testbed.bed.fabric,
                                   cap_net_raw=cap_net_raw)
        """The verbs layer's context (:class:`models.verbs.device.Context`)."""
        self._objects: list[Resource] = []
        self._closing = False
        """Closing: the kernel's cleanup of the device file, which waits for nothing (no event acknowledgement)."""

    @property
    def num_comp_vectors(self) -> int:
        """``ibv_context.num_comp_vectors``: the completion vectors a CQ may name (0 to this, exclusive)."""
        return NUM_COMP_VECTORS

    @property
    def lid(self) -> int:
        """The LID of the device's port 1 (what a remote QP's ``ah_attr.dlid`` names)."""
        return self.testbed.lids[self.name]

    def query_device(self):
        """``ibv_query_device`` (:class:`~models.verbs.query.IbvDeviceAttr`)."""
        self._check_open("ibv_query_device")
        return ibv_query_device(self.ctx)

    def query_device_ex(self):
        """``ibv_query_device_ex`` (:class:`~models.verbs.query.IbvDeviceAttrEx`: ODP caps, raw-packet caps, CQ
        moderation, ``max_dm_size``, ...)."""
        self._check_open("ibv_query_device_ex")
        return ibv_query_device_ex(self.ctx)

    def get_data_direct_sysfs_path(self, length: int = 512) -> str:
        """``mlx5dv_get_data_direct_sysfs_path`` (pyverbs' ``Mlx5Context`` method): the sysfs path of the
        data-direct function bound to this mlx5 device.

        :raises VerbsError: as :func:`models.verbs.dmabuf.mlx5dv_get_data_direct_sysfs_path` (``ENODEV``: none;
            ``ENOSPC``: ``length`` bytes do not hold it).
        """
        self._check_open("mlx5dv_get_data_direct_sysfs_path")
        return mlx5dv_get_data_direct_sysfs_path(self.ctx, c_integer(length, "size_t", "length",
                                                                     "mlx5dv_get_data_direct_sysfs_path"))

    def query_port(self, port_num: int = 1):
        """``ibv_query_port`` (:class:`~models.verbs.query.IbvPortAttr`).

        :raises VerbsError: ``EINVAL`` for a port other than 1.
        """
        self._check_open("ibv_query_port")
        return ibv_query_port(self.ctx, port_num)

    def query_gid(self, port_num: int = 1, index: int = 0) -> bytes:
        """``ibv_query_gid``: the port's GID (16 bytes; what a remote AH's ``dgid`` names).

        :raises VerbsError: ``EINVAL`` for a port other than 1 or an index other than 0.
        """
        self._check_open("ibv_query_gid")
        return ibv_query_gid(self.ctx, port_num, index)

    def get_async_event(self, timeout: str | int = 0) -> AsyncEvent:
        """``ibv_get_async_event``: the oldest asynchronous event not yet read. With a ``timeout`` (``"1ms"`` or
        int ps) the simulation runs until one is raised or the timeout passes; ``0`` reads without waiting.

        :raises VerbsError: ``EAGAIN`` when none is pending (the async fd opened non-blocking).
        """
        self._check_open("ibv_get_async_event")
        self.testbed._block(lambda: bool(self.ctx.async_events), timeout)
        event = ibv_get_async_event(self.ctx)
        owner = next((obj for obj in self._objects if event.element in (getattr(obj, "srq", None),
                                                                      getattr(obj, "qp", None))), event.element)
        return AsyncEvent(event.event_type, owner, event.time_ps)

    def _adopt(self, obj: Resource) -> None:
        """Remember ``obj`` (opened through this device) for :meth:`close`."""
        self._objects.append(obj)

    def _destroy(self) -> None:
        self._closing = True
        for obj in reversed(self._objects):
            obj.close()
        self._objects.clear()


class PD(Resource):
    """A protection domain (``ibv_alloc_pd``).

    :raises VerbsError: from :meth:`close`: ``EBUSY`` while MRs, MWs, QPs, SRQs or AHs use it (``uverbs_free_pd``).
    """

    def __init__(self, context: Context) -> None:
        context._check_open("ibv_alloc_pd")
        self.context = context
        self.pd = ibv_alloc_pd(context.ctx)
        """The verbs layer's PD (:class:`models.verbs.device.ProtectionDomain`)."""
        context._adopt(self)

    def advise_mr(self, advice: int, flags: int, sg_list: list[SGE]) -> None:
        """``ibv_advise_mr``: prefetch the ranges of ``sg_list`` (SGEs of ODP MRs of this PD) into the NIC's
        translation table (``advice``: :class:`~models.verbs.advise.AdviseMrAdvice`). The clock advances by the
        call's cost: with ``ADVISE_MR_FLAG_FLUSH`` the page faults too, without it only the ioctl (the faults run in
        the background).

        :raises VerbsError: as :func:`models.verbs.advise.ibv_advise_mr` (``EOPNOTSUPP`` without ODP, ``EINVAL``
            for unknown flags or an empty list, ``ENOENT`` for an MR that is not ODP, ``EPERM``, ``EFAULT``).
        """
        call = "ibv_advise_mr"
        self._check_open(call)
        self.context.testbed._advance(ibv_advise_mr(self.pd, advice, flags, sge_list(sg_list, call)))

    def _destroy(self) -> None:
        ibv_dealloc_pd(self.pd)


class CQ(Resource):
    """A completion queue of ``cqe`` entries (``ibv_create_cq``) on completion vector ``comp_vector``, its events
    going to ``channel`` (a :class:`~sim.api.comp_channel.CompChannel`, or None); ``cq_context`` is kept for the
    caller, as pyverbs does.

    :raises VerbsError: ``EINVAL`` for ``cqe`` < 1 or above ``max_cqe``, ``comp_vector`` not below
        ``Context.num_comp_vectors``, or a closed channel; from :meth:`close`: ``EBUSY`` while a QP uses it
        (``ib_destroy_cq_user``).
    :raises ArgumentTypeError: ``cqe`` or ``comp_vector`` is not an integer (``ibv_create_cq`` takes C ``int``s).
    """

    def __init__(self, context: Context, cqe: int, cq_context=None, channel=None, comp_vector: int = 0) -> None:
        call = "ibv_create_cq"
        context._check_open(call)
        if channel is not None:
            channel._check_open(call)
        self.context = context
        self.cq = ibv_create_cq(context.ctx, c_integer(cqe, "int", "cqe", call),
                                None if channel is None else channel.channel,
                                c_integer(comp_vector, "int", "comp_vector", call))
        """The verbs layer's CQ (:class:`models.verbs.cq.CompletionQueue`)."""
        self.cq_context, self.channel, self.comp_vector = cq_context, channel, comp_vector
        context._adopt(self)

    @property
    def cqe(self) -> int:
        """Capacity (completions)."""
        return self.cq.cqe

    def poll(self, num_entries: int = 1, timeout: str | int | None = None) -> tuple[int, list[WC]]:
        """Take up to ``num_entries`` completions, oldest first: ``(npolled, wcs)`` as pyverbs returns them.

        When the CQ is empty the simulation runs until a completion arrives: at most ``timeout`` of simulated
        time (``"10us"`` or int ps; ``0`` polls once without waiting, as ``ibv_poll_cq`` does), or with no
        timeout as long as anything in flight can still complete.

        :raises DeadlockError: no timeout, an empty CQ and nothing left to simulate (no completion can come).
        """
        self._check_open("ibv_poll_cq")
        testbed = self.context.testbed
        if not testbed._block(lambda: bool(self.cq.entries), timeout):
            raise DeadlockError(f"CQ.poll on {self.context.name}: the CQ is empty and nothing left to simulate "
                                "can complete into it (post a work request first)")
        wcs = ibv_poll_cq(self.cq, num_entries)
        testbed._record(self.context, wcs)
        return len(wcs), wcs

    def req_notify(self, solicited_only: bool = False) -> None:
        """``ibv_req_notify_cq``: raise one completion event on the channel for the next completion (with
        ``solicited_only``, the next solicited or unsuccessful one)."""
        self._check_open("ibv_req_notify_cq")
        ibv_req_notify_cq(self.cq, int(solicited_only))

    def ack_events(self, num_events: int) -> None:
        """``ibv_ack_cq_events``: acknowledge ``num_events`` events read from the channel; :meth:`close` needs
        every event read acknowledged."""
        self._check_open("ibv_ack_cq_events")
        ibv_ack_cq_events(self.cq, num_events)

    def resize(self, cqe: int) -> None:
        """``ibv_resize_cq``: room for ``cqe`` completions, keeping those in it.

        :raises VerbsError: ``EINVAL`` for ``cqe`` < 1, above ``max_cqe`` or below the completions it holds.
        """
        self._check_open("ibv_resize_cq")
        ibv_resize_cq(self.cq, cqe)

    @property
    def _uses(self) -> tuple:
        return (self.channel,)

    def _destroy(self) -> None:
        if self.context._closing:  # the ucontext cleanup frees the CQ; only ibv_destroy_cq waits for the acks
            ibv_ack_cq_events(self.cq, self.cq.events_reported - self.cq.events_acked)
        ibv_destroy_cq(self.cq)
