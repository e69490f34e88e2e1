"""``MR`` as pyverbs' ``MR.__init__`` (pyverbs/mr.pyx) makes it: an implicit ODP MR keeps the address it was given
or allocates ``length`` bytes, and registers ``NULL``/``SIZE_MAX``; ``write`` and ``read`` copy at ``buf + offset``,
whoever allocated the memory."""

from __future__ import annotations

import pytest

from sim.api import MR, Access, Opcode, ProtocolError, SendWR, Testbed, WcStatus
from tests.sim.api.test_api_recv import RW, Side, pair, poll_n

SIZE_MAX = 2**64 - 1
ODP = RW | Access.ON_DEMAND


def test_an_implicit_mr_allocates_length_bytes_and_reports_their_address():
    """pyverbs allocates a buffer whenever no address is given and ``length > 0`` (posix_memalign, memset 0),
    implicit or not, then registers ``ibv_reg_mr(pd, NULL, SIZE_MAX, access)``; ``buf`` is that buffer."""
    bed = Testbed(data=True)
    a = Side(bed, "a")
    implicit = MR(a.pd, 8192, ODP, implicit=True)
    assert implicit.buf != 0 and implicit.buf != a.mr.buf
    assert (implicit.mr.addr, implicit.mr.length) == (0, SIZE_MAX)
    assert implicit.read(8192, 0) == bytes(8192)
    implicit.write(b"odp", 3, 10)
    assert implicit.read(3, 10) == b"odp"


def test_an_implicit_mr_keeps_the_address_it_was_given():
    """With ``address`` pyverbs allocates nothing and ``buf`` is that address."""
    bed = Testbed(data=True)
    a = Side(bed, "a")
    implicit = MR(a.pd, 4096, ODP, address=a.mr.buf + 4096, implicit=True)
    assert implicit.buf == a.mr.buf + 4096 and implicit.mr.length == SIZE_MAX
    implicit.write(b"shared", 6)
    assert a.mr.read(6, 4096) == b"shared"                      # the same bytes, through either MR


def test_rdma_through_an_implicit_mr_lands_in_its_buffer():
    """The implicit key covers the buffer ``buf`` names: a WRITE to ``buf`` through its rkey lands there."""
    bed = Testbed(data=True)
    a, qa, b, _ = pair(bed)
    implicit = MR(b.pd, 4096, ODP, implicit=True)
    a.mr.write(b"landed", 6)
    wr = SendWR(wr_id=1, opcode=Opcode.RDMA_WRITE, num_sge=1, sg=[a.sge(0, 6)])
    wr.set_wr_rdma(implicit.rkey, implicit.buf + 100)
    qa.post_send(wr)
    (wc,) = poll_n(a.scq, 1)
    assert wc.status is WcStatus.SUCCESS and implicit.read(6, 100) == b"landed"


def test_write_and_read_work_on_memory_the_mr_did_not_allocate_but_not_past_it():
    """pyverbs' ``write``/``read`` memcpy at ``self.buf + offset``; the simulated process has no memory past its
    buffers, so a range leaving them is refused by name (pyverbs: PyverbsUserError for a negative offset)."""
    bed = Testbed(data=True)
    a = Side(bed, "a")
    user = MR(a.pd, 4096, RW, address=a.mr.buf + 8192)
    user.write(b"mine", 4)
    assert a.mr.read(4, 8192) == b"mine"
    for offset, length in ((-1, 4), ((1 << 16) - 8192 - 2, 4)):
        with pytest.raises(ProtocolError, match="MR.read"):
            user.read(length, offset)
