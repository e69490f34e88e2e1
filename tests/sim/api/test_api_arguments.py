"""The API's edge and the C widths of its arguments.

* A value of another Python type is a TypeError (:class:`ArgumentTypeError`) naming the call, the argument and its
  C type, before any verbs call runs, as pyverbs' Cython conversions refuse it (pyverbs/wr.pyx fills
  ``struct ibv_sge`` and ``struct ibv_send_wr``, pyverbs/cq.pyx passes ``int cqe`` to ``ibv_create_cq``).
* An integer too wide for its C field (libibverbs/verbs.h: ``uint64_t wr_id``, ``struct ibv_sge``'s ``uint64_t
  addr``, ``uint32_t length``, ``uint32_t lkey``; ``struct ibv_alloc_dm_attr``'s ``size_t length``) is the verbs
  layer's EINVAL (models/verbs/send_checks.py ``check_c_widths``, models/verbs/dm.py ``ibv_alloc_dm``), as the
  model already refuses an ``imm_data`` wider than ``__be32``: no completion reports a negative ``byte_len``.
* The clock stays inside its int64 picoseconds; data mode's bytes that this process cannot hold are ``ENOMEM``, as
  pyverbs' ``posix_memalign`` failing is.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from models.verbs.recv import ibv_post_recv
from sim.api import (CQ, DM, MR, PD, SGE, Access, AllocDmAttr, ArgumentTypeError, Context, Opcode, RecvWR, SendWR,
                     SimError, Testbed, VerbsError)
from sim.core.units import MAX_CLOCK_PS, MAX_DURATION_PS, BoundError
from tests.properties import examples
from tests.sim.api.test_api import rc_pair

RANGES = {"uint32_t": 2**32, "uint64_t": 2**64}


def outside(c_type: str):
    """Integers just or far outside ``[0, 2**bits)``."""
    return st.one_of(st.integers(max_value=-1), st.integers(min_value=RANGES[c_type]))


NOT_INTEGERS = st.one_of(st.text(max_size=4), st.floats(allow_nan=False), st.none(),
                         st.lists(st.integers(), max_size=2))

WIDE = [  # (the field, its C type, a work request's fields with it set to v)
    ("wr_id", "uint64_t", lambda src, v: dict(wr_id=v, sge=(src.buf, 64, src.lkey))),
    ("length", "uint32_t", lambda src, v: dict(wr_id=1, sge=(src.buf, v, src.lkey))),
    ("addr", "uint64_t", lambda src, v: dict(wr_id=1, sge=(v, 64, src.lkey))),
    ("lkey", "uint32_t", lambda src, v: dict(wr_id=1, sge=(src.buf, 64, v))),
]


@pytest.mark.parametrize("opcode", [Opcode.RDMA_WRITE, Opcode.RDMA_READ, Opcode.SEND])
@pytest.mark.parametrize("field, c_type, fields", WIDE)
@hsettings(max_examples=examples(10))
@given(data=st.data())
def test_a_field_wider_than_its_c_type_is_einval_and_posts_nothing(opcode, field, c_type, fields, data):
    bed = Testbed()
    (_, _, cq, src, qp), (_, _, _, dst, peer) = rc_pair(bed)
    wr_fields = fields(src, data.draw(outside(c_type)))
    wr = SendWR(wr_id=wr_fields["wr_id"], opcode=opcode, num_sge=1, sg=[SGE(*wr_fields["sge"])])
    wr.set_wr_rdma(dst.rkey, dst.buf)
    with pytest.raises(VerbsError, match=f"ibv_post_send: EINVAL: .*{c_type} {field}" if field == "wr_id" else
                       f"ibv_post_send: EINVAL: SGE .* does not fit struct ibv_sge .*{c_type} {field}") as info:
        qp.post_send(wr)
    assert info.value.errno_value == 22
    assert qp.qp.sq_used == 0 and cq.poll(timeout="100us") == (0, [])
    receive = RecvWR(wr_id=wr_fields["wr_id"], num_sge=1, sg=[SGE(*wr_fields["sge"])])
    with pytest.raises(VerbsError, match="ibv_post_recv: EINVAL"):
        ibv_post_recv(peer.qp, receive._request("ibv_post_recv"))


@pytest.mark.parametrize("c_type, edge", [("uint64_t", 0), ("uint64_t", 2**64 - 1)])
def test_the_edges_of_wr_id_complete_with_their_value(c_type, edge):
    bed = Testbed()
    (_, _, cq, src, qp), (_, _, _, dst, _) = rc_pair(bed)
    wr = SendWR(wr_id=edge, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[SGE(src.buf, 64, src.lkey)])
    wr.set_wr_rdma(dst.rkey, dst.buf)
    qp.post_send(wr)
    assert cq.poll()[1][0].wr_id == edge


BUILDERS = [  # (a call building one object from one argument, the argument's name, its C type)
    (lambda v: SGE(0x1000, v, 1), "length", "uint32_t"),
    (lambda v: SGE(v, 64, 1), "addr", "uint64_t"),
    (lambda v: SendWR(wr_id=v, num_sge=1, sg=[SGE(0x1000, 8, 1)]), "wr_id", "uint64_t"),
    (lambda v: SendWR(imm_data=v, num_sge=1, sg=[SGE(0x1000, 8, 1)]), "imm_data", "uint32_t"),
    (lambda v: RecvWR(wr_id=v, num_sge=1, sg=[SGE(0x1000, 8, 1)]), "wr_id", "uint64_t"),
    (lambda v: SendWR(num_sge=1, sg=[SGE(0x1000, 8, 1)]).set_wr_rdma(v, 0x1000), "rkey", "uint32_t"),
    (lambda v: SendWR(num_sge=1, sg=[SGE(0x1000, 8, 1)]).set_wr_atomic(1, 0x1000, v), "compare_add", "uint64_t"),
    (lambda v: CQ(Context(Testbed(), "a"), v), "cqe", "int"),
    (lambda v: MR(PD(Context(Testbed(), "a")), v, Access.LOCAL_WRITE), "length", "size_t"),
]


@pytest.mark.parametrize("build, name, c_type", BUILDERS)
@hsettings(max_examples=examples(10))
@given(value=NOT_INTEGERS)
def test_a_value_of_another_type_is_a_type_error_naming_it(build, name, c_type, value):
    with pytest.raises(ArgumentTypeError, match=rf": {name} must be an integer \(a C {c_type}\)") as info:
        build(value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, SimError)


def test_an_opcode_is_an_integer_of_enum_ibv_wr_opcode():
    """pyverbs' opcodes are ints (``e.IBV_WR_RDMA_WRITE``): a name is refused as Cython refuses it."""
    with pytest.raises(ArgumentTypeError, match=r"SendWR: opcode must be an integer \(a C enum ibv_wr_opcode\)"):
        SendWR(opcode="RDMA_WRITE", num_sge=1, sg=[SGE(0x1000, 8, 1)])


def test_an_sge_list_holds_sges():
    with pytest.raises(ArgumentTypeError, match="ibv_post_send: the SGE list holds tuple"):
        SendWR(num_sge=1, sg=[(0x1000, 8, 1)])._request("ibv_post_send")


@given(length=st.integers(max_value=-1))
@hsettings(max_examples=examples(10))
def test_dm_length_is_a_size_t(length):
    """A negative ``size_t`` wraps above ``max_dm_size``: mlx5_alloc_dm's EINVAL; nothing is allocated."""
    ctx = Context(Testbed({"a": {}, "b": {}}), "a")
    with pytest.raises(VerbsError, match=f"ibv_alloc_dm: EINVAL: length {length} is outside 0..max_dm_size"):
        DM(ctx, AllocDmAttr(length))
    assert ctx.ctx.node.nic.device_memory == []


def test_the_clock_stays_inside_int64_picoseconds():
    bed = Testbed()
    for too_long in (2**70, MAX_DURATION_PS + 1):
        with pytest.raises(BoundError, match="above the maximum of 86400s"):
            bed.run(too_long)
    assert bed.now_ps == 0
    bed.bed.env.run(until=MAX_CLOCK_PS - MAX_DURATION_PS // 2)
    with pytest.raises(BoundError, match="past its end"):
        bed.run(MAX_DURATION_PS)
    bed.run(MAX_CLOCK_PS - bed.now_ps)
    assert bed.now_ps == MAX_CLOCK_PS


def test_data_mode_bytes_this_process_cannot_hold_are_enomem(monkeypatch):
    """pyverbs allocates an MR's buffer with posix_memalign, which returns ENOMEM; numpy says MemoryError (made to
    say it here: whether 1 TiB is refused depends on the machine's overcommit)."""
    import sim.api.resource as resource

    def no_memory(size, dtype):
        raise MemoryError(f"Unable to allocate {size} bytes")

    pd = PD(Context(Testbed(), "a"))
    host = pd.context.ctx.node.host
    monkeypatch.setattr(resource.np, "zeros", no_memory)
    with pytest.raises(VerbsError, match="ibv_reg_mr: ENOMEM: data mode keeps a buffer's bytes") as info:
        MR(pd, 1 << 40, Access.LOCAL_WRITE)
    assert info.value.errno_value == 12 and "1TiB" in str(info.value)
    assert host.buffers == {} and host.resident == set()
