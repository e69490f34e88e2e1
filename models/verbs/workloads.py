"""perftest-like workloads as simpy processes over verbs objects.

Each returns per-operation records (numpy arrays of integer ps) that ``sim.core.metrics`` summarises the
way perftest prints them:

* ``write_bw`` / ``read_bw``: keep ``tx_depth`` work requests in flight (READs are further capped by the
  QP's max_rd_atomic), repost as completions are polled; times are post and completion of each request.
  Several QPs stream at once with :func:`concurrent` (perftest -q).
* ``write_lat``: ping-pong like ib_write_lat: the requester writes, the responder's CPU sees the last byte
  land and writes back; one iteration is one round trip and its latency is half of it.
* ``read_lat``: one READ at a time like ib_read_lat; latency is post to polled completion.
* ``atomic_bw`` / ``atomic_lat``: ib_atomic_bw and ib_atomic_lat, the READ loops with 8-byte atomics on the
  responder buffer's first 8 bytes (perftest runs atomics through its READ test loops), each original value
  landing at the start of the requester's buffer.
* ``send_bw``: ib_send_bw: the server posts ``rx_depth`` receives ahead and reposts one for each receive
  completion it polls; the client keeps ``tx_depth`` SENDs in flight as ``write_bw`` does.
* ``send_lat``: ping-pong like ib_send_lat: each side keeps ``rx_depth`` receives posted; the client sends, the
  server polls the receive completion, reposts the receive and sends back; latency is half the round trip.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generator

import numpy as np
import simpy

from models.nic.datapath import work_request_path
from models.nic.wqe import FETCH_AND_ADD, SEND_SIGNALED, WC_SUCCESS, Opcode, RecvWR, SendWR, Sge, WcStatus
from models.verbs.receive_queue import ReceiveQueue, SharedReceiveQueue
from models.verbs.recv import ibv_post_recv, ibv_post_srq_recv
from models.verbs.ah import data_path_qp
from models.verbs.cq import ibv_poll_cq
from models.verbs.mr import MemoryRegion
from models.verbs.ping_pong import ping_pong_offset
from models.verbs.qp import QueuePair, ibv_post_send
from models.verbs.workload_kinds import half_round_trip_ps
from models.verbs.xrc_path import xrc_sender

PERFTEST_WRITE_LAT_INLINE = 220
"""perftest's default inline size for ib_write_lat on mlx5."""


@dataclass(frozen=True)
class Endpoint:
    """One side of a measurement: its QP and the registered buffer it uses."""

    qp: QueuePair
    mr: MemoryRegion
    addr: int | None = None
    """The buffer's first byte in the MR's iova space; None: the MR's iova (an MR of its own). An implicit ODP
    MR's iova space is the address space, so its buffers give their virtual address."""
    datagram: tuple | None = None
    """UD: where this end's datagrams go, ``(AH, remote QPN, remote Q_Key)`` (:attr:`SendWR.ah
    <models.nic.wqe.SendWR.ah>` and the rest); None on connected QPs."""
    srqn: int | None = None
    """XRC initiator: the number of the XRC SRQ at the target its requests name."""
    srq: SharedReceiveQueue | None = None
    """XRC target: the XRC SRQ its receives are posted to (and complete from, in the SRQ's CQ)."""

    @property
    def iova(self) -> int:
        """Where the work requests address the buffer."""
        return self.mr.iova if self.addr is None else self.addr

    @property
    def receive_queue(self) -> ReceiveQueue:
        """The queue this end's receives are posted to: its QP's own, or its XRC SRQ."""
        return self.qp.rq if self.srq is None else self.srq

    @property
    def recv_cq(self):
        """The CQ this end's receives complete in: its QP's receive CQ, or its XRC SRQ's CQ."""
        return self.qp.recv_cq if self.srq is None else self.srq.cq

    def path_qp(self, peer: Endpoint):
        """What the data path takes as this end's QP for its requests to ``peer``: a UD end's view towards
        ``peer``'s QP, an XRC initiator's towards the SRQ it names (:mod:`models.verbs.xrc_path`), else its QP."""
        if self.srqn is not None:
            return xrc_sender(self.qp, self.srqn)
        return data_path_qp(self.qp, peer.qp)

    def post_receive(self, wr: RecvWR) -> None:
        """Post ``wr`` to :attr:`receive_queue` (``ibv_post_recv``, or ``ibv_post_srq_recv`` on an XRC SRQ)."""
        if self.srq is None:
            ibv_post_recv(self.qp, wr)
        else:
            ibv_post_srq_recv(self.srq, wr)


SUCCESS = WcStatus.SUCCESS.value
"""IBV_WC_SUCCESS's value, as the status arrays hold it."""


@dataclass
class OpRecords:
    """Per-operation results of one (workload, size) run."""

    posted_ps: np.ndarray
    completed_ps: np.ndarray
    latency_ps: np.ndarray
    status: np.ndarray
    """Each work completion's ``ibv_wc_status`` value (:class:`~models.nic.wqe.WcStatus`, uint8)."""
    qp: np.ndarray | None = None
    """Which of several concurrent QPs posted each one (None: a single QP)."""

    @property
    def ok(self) -> np.ndarray:
        """True where the work request completed with IBV_WC_SUCCESS."""
        return self.status == SUCCESS


def succeeded(iterations: int) -> np.ndarray:
    """A status array of ``iterations`` IBV_WC_SUCCESS values (each kept until its completion says otherwise)."""
    return np.full(iterations, SUCCESS, dtype=np.uint8)


ATOMIC_ADD = 1
"""What each FETCH_AND_ADD adds, and each CMP_AND_SWAP swaps in when the target is 0 (perftest's operands)."""


def posts_inline(opcode: Opcode, size: int, inline: int) -> bool:
    """Whether a workload posts a message of ``size`` bytes inline under the threshold ``inline``: only SENDs and
    WRITEs carry inline data."""
    return not opcode.reads_remote and size <= inline


def work_request(wr_id: int, opcode: Opcode, src: Endpoint, dst: Endpoint, size: int, inline: bool,
                 landed: simpy.Event | None = None, order: tuple[int, int] | None = None,
                 send_flags: int = 0) -> SendWR:
    """Work request ``wr_id`` of a workload: ``size`` bytes of ``opcode`` from ``src``'s buffer to ``dst``'s (a
    UD one to ``src``'s datagram address), inline or not; ``landed`` and ``order`` as :class:`SendWR` takes them."""
    wr = SendWR(wr_id, opcode, src.iova, size, src.mr.lkey, dst.iova, dst.mr.rkey, inline, landed, order,
                send_flags=send_flags, compare_add=ATOMIC_ADD if opcode is FETCH_AND_ADD else 0,
                swap=ATOMIC_ADD)
    if src.datagram is not None:
        wr.ah, wr.remote_qpn, wr.remote_qkey = src.datagram
    if src.srqn is not None:
        wr.remote_srqn = src.srqn
    return wr


@dataclass(frozen=True)
class Posting:
    """How a bandwidth loop posts (perftest's -l, -Q and -D); the defaults post one signaled work request per
    call for a fixed count."""

    post_list: int = 1
    """Work requests per ibv_post_send call, posted once that many slots of the send queue are free."""
    cq_mod: int = 1
    """Every cq_mod-th work request is IBV_SEND_SIGNALED (the QP has no sq_sig_all when this is above 1)."""
    duration_ps: int | None = None
    """Stop posting this long after the loop starts (ps); None: post ``iterations`` work requests."""


POLL_BATCH = 64
"""Completions a bandwidth loop takes from its QP's CQ in one poll: when more are there, it posts for these and
polls the rest once the other processes woken at that time have run."""


def moderated_signal(k, cq_mod: int, last: int | None):
    """Whether a bandwidth loop signals its work request ``k`` (an int, or an array of them) with CQ moderation
    ``cq_mod`` (perftest -Q): every cq_mod-th, and the ``last`` (None: a timed loop's, which is not known)."""
    every = (k + 1) % cq_mod == 0
    return every if last is None else every | (k == last)


def still_posting(now_ps, start_ps: int, duration_ps: int):
    """Whether a timed loop (perftest -D) that started at ``start_ps`` posts at ``now_ps`` (ps; an array of
    times gives one answer each): while the clock is less than ``duration_ps`` after the start. The event engine's
    loops ask it as they go; the vectorized core asks it of each solved post, and a stream ends at the first it
    refuses."""
    return now_ps < start_ps + duration_ps


class _Grown:
    """Post and completion times and statuses of a loop whose count is not known in advance (doubling lists: the
    loops set one item per operation, which costs a list less than an array)."""

    def __init__(self, n: int) -> None:
        self.posted, self.completed, self.status = [0] * n, [0] * n, [SUCCESS] * n

    def room(self, n: int) -> None:
        """Make room for operation ``n - 1``."""
        if n > len(self.posted):
            grow = max(n, 2 * len(self.posted)) - len(self.posted)
            self.posted += [0] * grow
            self.completed += [0] * grow
            self.status += [SUCCESS] * grow

    def records(self, n: int, round_trip: bool = False) -> OpRecords:
        """The first ``n`` operations' records; a ``round_trip``'s latency is half of it (ping-pong)."""
        posted, completed = np.array(self.posted[:n], dtype=np.int64), np.array(self.completed[:n], dtype=np.int64)
        return OpRecords(posted, completed, half_round_trip_ps(posted, completed) if round_trip else completed - posted,
                         np.array(self.status[:n], dtype=np.uint8))


def _turns(env, log: _Grown, iterations: int, duration_ps: int | None):
    """Iteration numbers of a one-at-a-time loop: ``iterations`` of them, or (``duration_ps``) as long as the clock
    is less than that long after the first; makes room in ``log`` for each."""
    start, i = env.now, 0
    while still_posting(env.now, start, duration_ps) if duration_ps is not None else i < iterations:
        log.room(i + 1)
        yield i
        i += 1


def bandwidth(env, opcode: Opcode, src: Endpoint, dst: Endpoint, size: int, iterations: int,
              tx_depth: int, inline: int = 0, posting: Posting = Posting()) -> Generator:
    """simpy process of ib_write_bw / ib_read_bw for one message size; returns :class:`OpRecords`.

    Work requests go ``posting.post_list`` at a time, one ibv_post_send per list, whenever that many fit under
    ``tx_depth`` posted and not yet polled (perftest's ``scnt - ccnt``); with ``posting.cq_mod`` above 1 only every
    cq_mod-th (and the last) is signaled, and the unsignaled ones before a completion take its time and status.
    With ``posting.duration_ps`` posting stops that long after the start; unsignaled work requests posted after the
    last signaled one are left out of the records."""
    timed, start = posting.duration_ps is not None, env.now
    log = _Grown(iterations if not timed else 1024)
    use_inline = posts_inline(opcode, size, inline)
    qp, cq, batch, every = src.qp, src.qp.send_cq, posting.post_list, posting.cq_mod
    next_id = done = 0

    def flags(k: int) -> int:
        return SEND_SIGNALED if moderated_signal(k, every, None if timed else iterations - 1) else 0

    while True:
        while (still_posting(env.now, start, posting.duration_ps) if timed else next_id < iterations) \
                and next_id - done + batch <= tx_depth:
            log.room(next_id + batch)
            log.posted[next_id:next_id + batch] = [env.now] * batch
            wrs = [work_request(k, opcode, src, dst, size, use_inline, send_flags=flags(k))
                   for k in range(next_id, next_id + batch)]
            ibv_post_send(qp, wrs[0] if batch == 1 else wrs)
            next_id += batch
        if done == next_id or (timed and not still_posting(env.now, start, posting.duration_ps)
                               and done >= next_id - next_id % every):
            break
        yield cq.wait()
        for wc in ibv_poll_cq(cq, POLL_BATCH):
            lo, hi = done if every > 1 else wc.wr_id, wc.wr_id + 1
            log.completed[lo:hi] = [wc.completed_ps] * (hi - lo)
            if wc.status is not WC_SUCCESS:  # (each is set once: success is already there)
                log.status[lo:hi] = [wc.status.value] * (hi - lo)
            done = max(done, hi) if every > 1 else done + 1
    return log.records(done if timed else iterations)


def concurrent(env, streams: list[Generator]) -> Generator:
    """simpy process running one bandwidth process per QP at once (perftest -q); returns their
    :class:`OpRecords` one after the other, each operation tagged with its QP's index."""
    processes = [env.process(stream) for stream in streams]
    yield env.all_of(processes)
    return tagged([p.value for p in processes])


def tagged(parts: list[OpRecords]) -> OpRecords:
    """The records of several QPs' streams one after the other, each operation tagged with its QP's index."""
    return OpRecords(*(np.concatenate([getattr(r, f) for r in parts]) for f in ("posted_ps", "completed_ps",
                                                                                "latency_ps", "status")),
                     np.repeat(np.arange(len(parts)), [len(r.status) for r in parts]))


def write_latency(env, src: Endpoint, dst: Endpoint, size: int, iterations: int, inline: int,
                  duration_ps: int | None = None) -> Generator:
    """simpy process of ib_write_lat (ping-pong) for one size; latency is half the round trip. Each
    iteration's two WRITEs are one operation of :func:`~models.verbs.ping_pong.ping_pong`'s chain under the
    ordering rule. With ``duration_ps`` iterations start until that long has passed (perftest -D)."""
    log = _Grown(iterations if duration_ps is None else 1024)
    i = -1
    use_inline = size <= inline
    for i in _turns(env, log, iterations, duration_ps):
        posted, completed, status = log.posted, log.completed, log.status
        posted[i] = env.now
        seq, offset = env.step_runner.number(), 0
        for a, b in ((src, dst), (dst, src)):
            landed = simpy.Event(env)
            wr = work_request(i, Opcode.RDMA_WRITE, a, b, size, use_inline, landed, (seq, offset))
            if a is src:
                offset = ping_pong_offset(work_request_path(a.qp, wr, env.now).steps)
            ibv_post_send(a.qp, wr)
            if (yield landed) is None:
                yield a.qp.send_cq.wait()
            yield env.timeout(b.qp.poll_delays.next())
            failed = _drain(a.qp)
            if status[i] == SUCCESS:
                status[i] = failed
        completed[i] = env.now
    return log.records(i + 1, round_trip=True)


def read_latency(env, src: Endpoint, dst: Endpoint, size: int, iterations: int,
                 opcode: Opcode = Opcode.RDMA_READ, duration_ps: int | None = None) -> Generator:
    """simpy process of ib_read_lat (or, with an atomic ``opcode``, ib_atomic_lat) for one size; with
    ``duration_ps`` READs are posted until that long has passed (perftest -D)."""
    log = _Grown(iterations if duration_ps is None else 1024)
    cq, i = src.qp.send_cq, -1
    for i in _turns(env, log, iterations, duration_ps):
        log.posted[i] = env.now
        ibv_post_send(src.qp, work_request(i, opcode, src, dst, size, False))
        yield cq.wait()
        (wc,) = ibv_poll_cq(cq, 1)
        log.completed[i] = wc.completed_ps
        log.status[i] = wc.status.value
    return log.records(i + 1)


def _drain(qp: QueuePair) -> int:
    """Poll whatever completions the ping-pong produced; the first error's status value, else success's."""
    failed = [wc.status.value for wc in ibv_poll_cq(qp.send_cq, qp.send_cq.cqe) if wc.status is not WcStatus.SUCCESS]
    return failed[0] if failed else SUCCESS


PERFTEST_RX_DEPTH = 512
"""perftest's ``DEF_RX_SEND``: receives ib_send_bw and ib_send_lat post ahead (-r), at most the iterations."""


def whole_buffer_receive(wr_id: int, end: Endpoint) -> RecvWR:
    """One receive of ``end``'s whole buffer (perftest's single-SGE receive into its message buffer), so that a
    receive left posted after one message size takes the next."""
    return RecvWR(wr_id, (Sge(end.mr.iova, end.mr.length, end.mr.lkey),))


def post_receives_ahead(end: Endpoint, count: int) -> int:
    """Top ``end``'s receive queue up to ``count`` receives (perftest's ``ctx_set_recv_wqes``): slots still held by
    receives consumed before but not yet completed count; returns how many were posted."""
    missing = max(count - end.receive_queue.held, 0)
    for k in range(missing):
        end.post_receive(whole_buffer_receive(k, end))
    return missing


def send_bandwidth(env, src: Endpoint, dst: Endpoint, size: int, iterations: int, tx_depth: int, rx_depth: int,
                   inline: int = 0, posting: Posting = Posting()) -> Generator:
    """simpy process of ib_send_bw for one size: the server's receives ``rx_depth`` ahead (reposted by
    :func:`_serve_receives`), the client's SENDs as :func:`bandwidth` posts them; returns the client's
    :class:`OpRecords`."""
    ahead = min(rx_depth, iterations)
    posted = post_receives_ahead(dst, ahead)
    reposts = None if posting.duration_ps is not None else iterations - posted
    server = env.process(_serve_receives(env, dst, reposts))
    records = yield from bandwidth(env, Opcode.SEND, src, dst, size, iterations, tx_depth, inline, posting)
    if server.is_alive:  # receives left over after an error: nothing more will arrive
        server.interrupt()
    ibv_poll_cq(dst.recv_cq, dst.recv_cq.cqe)
    return records


def _serve_receives(env, end: Endpoint, reposts: int | None) -> Generator:
    """The ib_send_bw server: poll the receive CQ (a poll delay after a completion arrives) and post one receive
    for each completion, ``reposts`` in all (None: until interrupted)."""
    cq = end.recv_cq
    try:
        while reposts is None or reposts > 0:
            yield cq.wait()
            yield env.timeout(end.qp.poll_delays.next())
            for wc in ibv_poll_cq(cq, cq.cqe):
                if reposts is None or reposts > 0:
                    end.post_receive(whole_buffer_receive(wc.wr_id, end))
                    reposts = None if reposts is None else reposts - 1
    except simpy.Interrupt:
        return


def send_latency(env, src: Endpoint, dst: Endpoint, size: int, iterations: int, rx_depth: int,
                 inline: int, duration_ps: int | None = None) -> Generator:
    """simpy process of ib_send_lat (ping-pong) for one size: each side sees the other's SEND on its receive CQ
    (a poll delay after the CQE lands), reposts that receive and sends back; latency is half the round trip.
    Each iteration's two SENDs are one operation of :func:`~models.verbs.ping_pong.ping_pong`'s chain under the
    ordering rule. With ``duration_ps`` iterations start until that long has passed (perftest -D)."""
    log = _Grown(iterations if duration_ps is None else 1024)
    i = -1
    use_inline = size <= inline
    for end in (src, dst):
        post_receives_ahead(end, rx_depth if duration_ps is not None else min(rx_depth, iterations))
    for i in _turns(env, log, iterations, duration_ps):
        posted, completed, status = log.posted, log.completed, log.status
        posted[i] = env.now
        seq, offset = env.step_runner.number(), 0
        for a, b in ((src, dst), (dst, src)):
            wr = work_request(i, Opcode.SEND, a, b, size, use_inline, order=(seq, offset))
            if a is src:
                offset = ping_pong_offset(work_request_path(a.path_qp(b), wr, env.now).steps)
            ibv_post_send(a.qp, wr)
            failed = yield from _await_receive(env, a, b)
            if status[i] == SUCCESS:
                status[i] = failed
            if failed != SUCCESS:
                break
        completed[i] = env.now
    for end in (src, dst):
        yield from _quiesce(env, end)
    return log.records(i + 1, round_trip=True)


def _await_receive(env, sender: Endpoint, receiver: Endpoint) -> Generator:
    """Wait until ``receiver`` polls the receive completion of ``sender``'s SEND (a poll delay after it arrives)
    and reposts the receive, or ``sender``'s SEND completes in error; returns the first error's status value, else
    success's."""
    rcq, scq = receiver.recv_cq, sender.qp.send_cq
    while True:
        yield env.any_of([rcq.wait(), scq.wait()])
        failed = _drain(sender.qp)
        if failed != SUCCESS:
            return failed
        if rcq.entries:
            yield env.timeout(receiver.qp.poll_delays.next())
            (wc,) = ibv_poll_cq(rcq, 1)
            receiver.post_receive(whole_buffer_receive(wc.wr_id, receiver))
            if wc.status is not WcStatus.SUCCESS:  # flushed: the SEND's own completion is still to come
                yield from _quiesce(env, sender)
            return wc.status.value


def _quiesce(env, end: Endpoint) -> Generator:
    """Wait for ``end``'s SENDs still in flight and poll their completions (perftest's send_lat leaves none)."""
    while end.qp.outstanding:
        yield end.qp.send_cq.wait()
        _drain(end.qp)
