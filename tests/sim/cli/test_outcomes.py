"""run says why an allocation found nothing to evict when the GPU's exporter never moves memory or a peer-memory
client pinned the buffer."""

from __future__ import annotations

from typer.testing import CliRunner

from sim.cli.app import app

EVICTION = """schema: 1
name: eviction
seed: 2
nodes:
  - {name: a, gpus: [{preset: h200, memory: 8GiB}]}
  - {name: b}
buffers:
  - {name: src, on: a.gpu0, size: 6GiB, register: dmabuf}
  - {name: dst, on: b.host, size: 6GiB}
workload:
  - {kind: write_bw, from: src, to: dst, sizes: [64KiB], iterations: 100}
events:
  - {at: 1us, kind: gpu-memory-pressure, on: a.gpu0, allocate: 4GiB}
variants:
  - {name: nvidia, set: {nodes.a.gpus.0.exporter: nvidia}}
  - {name: amd, set: {nodes.a.gpus.0.exporter: amd}}
"""


def test_a_static_exporter_is_named_as_why_nothing_was_evicted(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(EVICTION)
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    nvidia, amd = sorted((line for line in result.stdout.splitlines() if "gpu-memory-pressure on" in line),
                       key=lambda line: "[amd]" in line)
    assert nvidia.endswith("[nvidia] gpu-memory-pressure on a.gpu0: failed: no evictable memory: a.gpu0's exporter, "
                           "nvidia, is static (nv_dma_buf): it never moves memory, so src's dynamic dma-buf MR keeps "
                           "it in VRAM (a GPU with exporter amd would evict it)")
    assert amd.endswith("[amd] gpu-memory-pressure on a.gpu0: allocated")


def test_a_peer_memory_pin_is_named_as_why_nothing_was_evicted_not_the_exporter(tmp_path):
    """nvidia-peermem pins through nvidia_p2p_get_pages for the MR's life, whatever the exporter profile: the reason
    is the pin, not a dma-buf MR there is none of."""
    path = tmp_path / "s.yaml"
    path.write_text(EVICTION.replace("register: dmabuf", "register: peermem").split("variants:")[0])
    result = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stdout.splitlines() if "gpu-memory-pressure on" in line]
    assert len(lines) == 1 and lines[0].endswith(
        " gpu-memory-pressure on a.gpu0: failed: no evictable memory: src is pinned in VRAM by the peer-memory client "
        "(nvidia_p2p_get_pages) for its MR's life")
