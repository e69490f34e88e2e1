"""The schema of a scenario's workloads: what each measurement posts, between which buffers, at which sizes."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from models.nic.wqe import ATOMIC_BYTES
from models.verbs.workload_kinds import KINDS, WorkloadKind, measures_between_margins
from models.pcie.server import RAIL_POLICIES
from sim.core.units import format_size
from sim.scenario.fields import Duration, MessageSize, Name, Strict


class SizeRange(Strict):
    """Powers of two from ``from`` to ``to`` inclusive, like perftest's -a."""

    from_: MessageSize = Field(alias="from")
    to: MessageSize

    @field_validator("to")
    @classmethod
    def _ordered(cls, to: int, info):
        start = info.data.get("from_")
        if start is not None and start > to:
            raise ValueError(f"the range ends below its start ('from' is {format_size(start)}, 'to' "
                             f"{format_size(to)})")
        return to

    def sizes(self) -> list[int]:
        """The sizes in the range."""
        out, size = [], self.from_
        while size <= self.to:
            out.append(size)
            size *= 2
        return out


class BufferPair(Strict):
    """A requester buffer and the responder buffer it streams to."""

    from_: Name = Field(alias="from")
    to: Name


class WorkloadSpec(Strict):
    """A perftest-like measurement between two buffers."""

    kind: Literal[tuple(KINDS)]
    """ib_write_bw, ib_read_bw, ib_write_lat, ib_read_lat, ib_send_bw, ib_send_lat, ib_atomic_bw or ib_atomic_lat
    (:data:`models.verbs.workload_kinds.KINDS`)."""
    name: Name | None = None
    """Label in the results (default: the kind)."""
    from_: Name = Field(alias="from")
    """Buffer on the requester (the node that posts)."""
    to: Name
    """Buffer on the responder."""
    sizes: Annotated[list[MessageSize], Field(min_length=1)] | SizeRange
    """Message sizes: a list, or {from: 2B, to: 8MiB} for powers of two (atomics: [8B], their only size)."""
    iterations: Annotated[int, Field(ge=1, le=100_000_000)] = 1000
    """Operations per size (perftest -n)."""
    tx_depth: Annotated[int, Field(ge=1, le=32768)] = 128
    """Outstanding work requests for bandwidth tests (perftest -t); at most both NICs' max_qp_wr."""
    inline: Annotated[int, Field(ge=0, le=1024)] | None = None
    """Largest message sent inline (default: 220 for write_lat and send_lat, else 0)."""
    rx_depth: Annotated[int, Field(ge=1, le=32768)] = 512
    """Receives posted ahead by each receiving side of a SEND test, at most the iterations and both NICs' max_qp_wr
    (perftest -r)."""
    qps: Annotated[int, Field(ge=1, le=1024)] = 1
    """QP pairs streaming at once, each with its own tx_depth window and 'iterations' operations per size
    (perftest -q; bandwidth tests only)."""
    atomic: Literal["FETCH_AND_ADD", "CMP_AND_SWAP"] = "FETCH_AND_ADD"
    """Atomic workloads: the operation (perftest -A), all on the responder buffer's first 8 bytes."""
    duration: Annotated[Duration, Field(gt=0)] | None = None
    """Post for this long per size, as many operations as fit, instead of ``iterations`` (perftest -D, e.g. '1ms').
    Its summary measures what completes within the duration, less ``margin`` at each end, as perftest does."""
    margin: Annotated[Duration, Field(ge=0)] | None = None
    """With a duration: the time at its start and at its end whose completions are not measured (perftest -f; its
    -D takes a quarter of the duration, in whole seconds). Default none."""
    bidirectional: bool = False
    """Bandwidth tests: the responder streams the same work requests back on the same QPs at once (perftest -b);
    the rates are those of both directions together."""
    post_list: Annotated[int, Field(ge=1, le=32768)] = 1
    """Bandwidth tests: work requests handed to each ibv_post_send call, posted once that many send-queue slots are
    free (perftest -l); iterations must be a multiple of it."""
    cq_mod: Annotated[int, Field(ge=1, le=32768)] = 1
    """Bandwidth tests: every cq_mod-th work request is signaled (IBV_SEND_SIGNALED, the QPs without sq_sig_all),
    so the unsignaled ones before it free their slots with its completion (perftest -Q); at most tx_depth."""
    max_rd_atomic: Annotated[int, Field(ge=1, le=255)] | None = None
    """READ and atomic workloads: the QPs' max_rd_atomic and max_dest_rd_atomic (perftest -o; default the NIC's
    max_rd_atomic)."""
    pairs: list[BufferPair] = []
    """Bandwidth tests: more requester-to-responder buffer pairs streaming at the same time as from-to, each with
    its own 'qps' QP pairs (one flow per GPU of a rails node, say)."""
    rails: Literal[RAIL_POLICIES] = "aligned"
    """Which NIC of a rails node each QP uses: 'aligned' (the rail NICs of its buffer's GPU, or of its host
    memory's socket, by PCIe distance), 'cross' (the NIC at the same place on the other socket) or 'all' (QP k
    on NIC k, round the node's NICs). A node with one NIC uses it."""
    qp_timeout: Annotated[int, Field(ge=0, le=31)] = 14
    """The QPs' ACK timeout, IB's encoding: 4.096 us * 2**qp_timeout before a lost frame is sent again, 0 for never
    (perftest -u, default 14: 67 ms)."""
    transport: Literal["rc", "uc", "ud", "xrc"] = "rc"
    """The QPs' service (perftest -c): rc; uc (unacknowledged: write and send workloads); ud (datagrams: send
    workloads, each message one packet of at most the fabric's MTU, each receive 40 bytes more for the GRH); xrc
    (an XRC initiator on the requester, an XRC target and XRC SRQ on the responder: every request packet carries
    the 4-byte XRCETH; one direction only, no ping-pong kinds)."""

    @field_validator("transport")
    @classmethod
    def _transport_carries_the_kind(cls, transport: str, info):
        kind = KINDS.get(info.data.get("kind"))
        if transport == "xrc" and kind is not None and (kind.ping_pong or info.data.get("bidirectional")):
            raise ValueError(f"xrc with {kind.name if kind.ping_pong else 'bidirectional'}: each end would both send "
                             "and answer, and an XRC end is an initiator or a target, not both (rdmasim's workloads "
                             "give each end one QP)")
        if kind is None or transport in kind.transports:
            return transport
        if transport == "uc":
            raise ValueError(f"{kind.name}: UC carries RDMA WRITE and SEND only (perftest: UC connection not possible "
                             "in READ/ATOMIC verbs)")
        raise ValueError(f"{kind.name}: UD carries SEND only (perftest: UD connection only possible in SEND verb)")

    @field_validator("qps")
    @classmethod
    def _qps_stream_bandwidth(cls, qps: int, info):
        kind = KINDS.get(info.data.get("kind"))
        if qps > 1 and kind is not None and not kind.streams:
            raise ValueError(f"{kind.name} measures one QP (perftest's latency tests have no -q); qps must be 1")
        return qps

    @field_validator("sizes")
    @classmethod
    def _atomics_are_8_bytes(cls, sizes, info):
        kind = KINDS.get(info.data.get("kind"))
        got = sizes.sizes() if isinstance(sizes, SizeRange) else list(sizes)
        if kind is not None and kind.verb == "atomic" and got != [ATOMIC_BYTES]:
            raise ValueError(f"{kind.name} moves 8 bytes per atomic; sizes must be [8B], got "
                             f"[{', '.join(format_size(s) for s in got)}]")
        return sizes

    @field_validator("rx_depth")
    @classmethod
    def _rx_depth_for_send_tests(cls, rx_depth: int, info):
        kind = KINDS.get(info.data.get("kind"))
        if kind is not None and not kind.receives:
            raise ValueError(f"{kind.name} posts no receives; rx_depth is for send_bw and send_lat")
        return rx_depth

    @model_validator(mode="after")
    def _perftest_options_fit(self):
        bw, fields = self.rule.streams, self.model_fields_set
        if self.pairs and not bw:
            raise ValueError(f"pairs: {self.kind} is a latency test; pairs stream at once in bandwidth tests")
        listed = self.buffer_pairs()
        for k, pair in enumerate(listed[1:]):
            if pair in listed[:k + 1]:
                raise ValueError(f"pairs: {pair[0]} -> {pair[1]} is listed twice (give more streams with qps)")
        for key in ("bidirectional", "post_list", "cq_mod"):
            if key in fields and not bw and getattr(self, key) != WorkloadSpec.model_fields[key].default:
                raise ValueError(f"{key}: {self.kind} is a latency test; {key} is for bandwidth tests")
        if self.duration is not None and "iterations" in fields:
            raise ValueError("give iterations or duration, not both")
        if self.margin is not None and (self.duration is None
                                        or not measures_between_margins(self.duration, self.margin)):
            raise ValueError("margin: needs a duration longer than twice the margin (perftest: DURATION > 2*MARGIN)")
        if self.duration is None and self.iterations % self.post_list:
            raise ValueError(f"post_list: iterations {self.iterations} must be a multiple of post_list "
                             f"{self.post_list}")
        if self.post_list > 1 and self.post_list % self.cq_mod:
            raise ValueError(f"cq_mod: post_list {self.post_list} must be a multiple of cq_mod {self.cq_mod}")
        if self.cq_mod > self.tx_depth:
            raise ValueError(f"cq_mod: {self.cq_mod} is more than tx_depth {self.tx_depth}")
        if self.post_list > self.tx_depth:
            raise ValueError(f"post_list: {self.post_list} is more than tx_depth {self.tx_depth}")
        if self.max_rd_atomic is not None and not self.rule.reads_remote:
            raise ValueError(f"max_rd_atomic: {self.kind} posts no READs or atomics")
        return self

    @property
    def rule(self) -> WorkloadKind:
        """Its kind's posting rule."""
        return KINDS[self.kind]

    def streams(self) -> int:
        """Work-request streams of each size: one per QP of each buffer pair, twice as many when bidirectional."""
        return self.qps * (1 + len(self.pairs)) * (2 if self.bidirectional else 1)

    def buffer_pairs(self) -> list[tuple[str, str]]:
        """Every (requester buffer, responder buffer) pair: from-to first, then ``pairs``."""
        return [(self.from_, self.to), *((p.from_, p.to) for p in self.pairs)]

    def size_list(self) -> list[int]:
        """The message sizes, in order."""
        return self.sizes.sizes() if isinstance(self.sizes, SizeRange) else list(self.sizes)
