import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from models.libs.policies import POLICIES
from models.libs.rcache import RcacheParams, RegistrationCache
from models.nic.wqe import Opcode, SendWR
from models.verbs.cq import ibv_create_cq, ibv_poll_cq
from models.verbs.qp import ibv_create_qp, ibv_post_send
from tests.models.libs.stacks import make_stack
from tests.properties import examples

MiB = 1 << 20


def cache_on(stack, policy="nccl", **params):
    return RegistrationCache(stack, POLICIES[policy], RcacheParams(**params))


def reuse_after_free(cache):
    """Register a buffer, free it, allocate the same size again (same address): the second lookup."""
    process = cache.stack.process
    old = process.malloc(8 * MiB)
    cache.put(cache.get(old.addr, 4096).region)
    process.free(old)
    new = process.malloc(8 * MiB)
    assert new.addr == old.addr
    return old, new, cache.get(new.addr, 4096)


def test_a_second_lookup_of_a_live_buffer_hits_and_costs_only_the_lookup():
    cache = cache_on(make_stack())
    buf = cache.stack.process.malloc(4 * MiB)
    first = cache.get(buf.addr, 4096)
    cache.put(first.region)
    second = cache.get(buf.addr + 4096, 4096)
    assert (first.outcome, second.outcome) == ("miss", "hit") and second.region is first.region
    assert second.cost_ps == cache.params.lookup_ps < first.cost_ps


def test_memory_hooks_invalidate_on_free_so_the_recycled_address_misses():
    cache = cache_on(make_stack(), memory_hooks=True)
    _, new, lookup = reuse_after_free(cache)
    assert lookup.outcome == "miss" and cache.stats.invalidations == 1 and cache.stats.deregistrations == 1
    assert cache.write(lookup.region, new.addr, np.full(4096, 7, np.uint8)).landed == "buffer"
    assert np.all(new.alloc.data[:4096] == 7)


def test_without_hooks_a_dmabuf_stale_hit_writes_into_the_freed_allocation_whose_vram_stays_held():
    stack = make_stack()
    cache = cache_on(stack, memory_hooks=False)
    old, new, lookup = reuse_after_free(cache)
    assert lookup.outcome == "stale-hit" and cache.stats.stale_hits == 1
    outcome = cache.write(lookup.region, new.addr, np.full(4096, 7, np.uint8))
    assert (outcome.ok, outcome.landed, outcome.bytes_in_buffer) == (True, "freed allocation", 0)
    assert np.all(old.alloc.data[:4096] == 7) and not np.any(new.alloc.data[:4096] == 7)
    held = stack.gpu.memory.used
    cache.put(lookup.region)
    cache.flush()
    assert stack.gpu.memory.used == held - old.alloc.vram.size


def test_without_hooks_a_peermem_stale_hit_fails_because_the_free_callback_tore_the_mr_down():
    cache = cache_on(make_stack(dmabuf_enabled=False), memory_hooks=False)
    _, new, lookup = reuse_after_free(cache)
    assert lookup.region.chain.method == "peermem" and lookup.outcome == "stale-hit"
    outcome = cache.write(lookup.region, new.addr, np.full(4096, 7, np.uint8))
    assert (outcome.ok, outcome.status) == (False, "REM_ACCESS_ERR")


@pytest.mark.parametrize("dmabuf", [True, False], ids=["dmabuf", "peermem"])
def test_the_data_path_delivers_a_stale_hits_write_where_the_cache_says_it_goes(dmabuf):
    stack = make_stack(dmabuf_enabled=dmabuf)
    bed = stack.bed
    cache = cache_on(stack, memory_hooks=False)
    old, new, lookup = reuse_after_free(cache)
    predicted = cache.write(lookup.region, new.addr, np.full(4096, 7, np.uint8))
    old.alloc.data[:] = 0
    source = bed.registrations["dst"].mr  # a host buffer on node b sends the write
    bed.nodes["b"].host.data["dst"][:] = 9
    ends = []
    for node in ("a", "b"):
        cq = ibv_create_cq(bed.contexts[node], 4)
        ends.append((ibv_create_qp(bed.pds[node], cq, 4), cq))
    ends[1][0].connect(ends[0][0])
    ibv_post_send(ends[1][0], SendWR(1, Opcode.RDMA_WRITE, source.addr, 4096, source.lkey, new.addr,
                                     lookup.region.mr.rkey))
    bed.env.run()
    (wc,) = ibv_poll_cq(ends[1][1], 1)
    assert wc.status.name == ("SUCCESS" if predicted.ok else predicted.status)
    assert bool((old.alloc.data[:4096] == 9).all()) == (predicted.landed == "freed allocation") == dmabuf
    assert not (new.alloc.data[:4096] == 9).any()


def test_buffer_id_validation_turns_the_stale_hit_into_a_new_registration():
    cache = cache_on(make_stack(), memory_hooks=False, validate_buffer_id=True)
    _, new, lookup = reuse_after_free(cache)
    assert lookup.outcome == "rejected-stale" and cache.stats.stale_hits == 0 and cache.stats.registrations == 2
    assert cache.write(lookup.region, new.addr, np.full(4096, 7, np.uint8)).landed == "buffer"


def test_lazy_deregistration_keeps_unused_regions_up_to_the_limit_then_evicts_the_oldest():
    cache = cache_on(make_stack(), max_unreleased=1)
    bufs = [cache.stack.process.malloc(2 * MiB) for _ in range(3)]
    regions = [cache.get(b.addr, 4096).region for b in bufs]
    for region in regions[:2]:
        cache.put(region)
    assert (cache.stats.evictions, cache.regions) == (1, 2) and not regions[0].mr.registered
    assert regions[1].mr.registered and regions[2].mr.registered


def test_an_invalidated_region_in_use_is_deregistered_when_its_last_user_puts_it_back():
    cache = cache_on(make_stack(), memory_hooks=True)
    buf = cache.stack.process.malloc(2 * MiB)
    region = cache.get(buf.addr, 4096).region
    cache.stack.process.free(buf)
    assert region.mr.registered and cache.regions == 0
    cache.put(region)
    assert not region.mr.registered


def test_explicit_dmabuf_registrations_bypass_the_cache():
    stack = make_stack()
    cache = cache_on(stack)
    buf = stack.process.malloc(4 * MiB)
    fd = stack.gpu.export(buf.alloc, stack.node.fds)
    open_before = set(stack.node.fds.files)
    mrs = [cache.register_dmabuf(fd, 0, 4096, buf.addr) for _ in range(2)]
    assert mrs[0] is not mrs[1] and cache.stats.bypassed == 2 and cache.stats.lookups == 0 and cache.regions == 0
    assert set(stack.node.fds.files) == open_before  # the library's duplicates are closed, the caller's fd stays
    assert mrs[0].backing.umem.attach.dmabuf is mrs[1].backing.umem.attach.dmabuf


OPS = st.lists(st.tuples(st.sampled_from(["alloc", "free", "access"]), st.integers(0, 5)), max_size=30)


@settings(max_examples=examples(40), deadline=None)
@given(ops=OPS, hooks=st.booleans(), validate=st.booleans(), peermem=st.booleans(), limit=st.integers(0, 3))
def test_no_sequence_of_alloc_free_register_access_lets_a_stale_hit_go_unreported(ops, hooks, validate, peermem,
                                                                                  limit):
    stack = make_stack(dmabuf_enabled=not peermem)
    cache = cache_on(stack, memory_hooks=hooks, validate_buffer_id=validate, max_unreleased=limit)
    live, stamp = [], 0
    for op, n in ops:
        if op == "alloc":
            live.append(stack.process.malloc((1 + n % 3) * MiB))
        elif op == "free" and live:
            stack.process.free(live.pop(n % len(live)))
        elif op == "access" and live:
            buf = live[n % len(live)]
            stamp = stamp % 250 + 1
            lookup = cache.get(buf.addr, 4096)
            outcome = cache.write(lookup.region, buf.addr, np.full(4096, stamp, np.uint8))
            reached_buffer = outcome.ok and bool(np.all(buf.alloc.data[:4096] == stamp))
            # the bytes tell: whatever did not reach the live buffer came from a reported stale hit
            assert reached_buffer or lookup.outcome == "stale-hit"
            assert lookup.outcome != "stale-hit" or not reached_buffer
            cache.put(lookup.region)
