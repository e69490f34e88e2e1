from tests.models.libs.stacks import make_stack


def test_freed_range_comes_back_at_the_same_address_with_a_new_buffer_id():
    stack = make_stack()
    process = stack.process
    first = process.malloc(8 << 20)
    other = process.malloc(4 << 20)
    process.free(first)
    again = process.malloc(8 << 20)
    assert again.addr == first.addr and again.buffer_id not in (first.buffer_id, other.buffer_id)
    assert process.buffer_id_at(again.addr + 100) == again.buffer_id
    assert process.buffer_id_at(first.addr + (8 << 20) + (1 << 30)) is None


def test_a_smaller_allocation_takes_the_front_of_a_freed_range_and_leaves_the_rest():
    process = make_stack().process
    big = process.malloc(8 << 20)
    process.free(big)
    small = process.malloc(2 << 20)
    rest = process.malloc(6 << 20)
    assert (small.addr, rest.addr) == (big.addr, big.addr + (2 << 20))


def test_hooks_run_before_the_driver_frees():
    stack = make_stack()
    seen = []
    buf = stack.process.malloc(4 << 20)
    stack.process.install_free_hook(lambda addr, size: seen.append((addr, size, stack.process.buffer_at(addr))))
    outcome = stack.process.free(buf)
    assert seen == [(buf.addr, buf.size, buf)] and outcome.hooks_called == 1


def test_exported_memory_keeps_its_vram_after_the_free_until_the_dmabuf_is_released():
    stack = make_stack()
    memory = stack.gpu.memory
    buf = stack.process.malloc(4 << 20)
    fd = stack.gpu.export(buf.alloc, stack.node.fds)
    used = memory.used
    assert stack.process.free(buf).vram_held and memory.used == used
    stack.node.fds.close(fd)
    assert memory.used == used - buf.alloc.vram.size
