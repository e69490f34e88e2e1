"""Draw the guide's sequence diagrams (``docs/diagrams/*.svg``) from traced runs of its scenarios.

Run from anywhere: ``python docs/make_diagrams.py``. ``tests/test_diagrams.py`` draws them again and checks the
committed files are current (same scenario, same seed, same bytes).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.inspect.diagram import draw, write_diagram  # noqa: E402 - after making the checkout importable
from sim.engine.run import run_scenario  # noqa: E402
from sim.scenario.scenario_file import load_scenario_variants  # noqa: E402
from sim.inspect.timeline import sections  # noqa: E402

HERE = ROOT / "docs" / "diagrams"


@dataclass(frozen=True)
class Diagram:
    """One figure of the guide: which run, which of its timeline's sections (``"run"`` or a buffer's name)."""

    name: str
    scenario: str
    variant: str
    parts: tuple[str, ...]
    title: str


DIAGRAMS = [
    Diagram("registration_modes.svg", "docs/examples/registration_modes.yaml", "base",
            ("host", "lazy", "gpu", "run"), "ibv_reg_mr three ways: pinned host memory, ODP, peer memory"),
    Diagram("dmabuf_registration.svg", "scenarios/pin_vs_dmabuf.yaml", "dmabuf", ("src",),
            "ibv_reg_dmabuf_mr: export, attach, map under the reservation lock"),
    Diagram("pin_on_map.svg", "scenarios/pin_vs_dmabuf.yaml", "dmabuf-no-move-notify", ("src", "run"),
            "Without CONFIG_DMABUF_MOVE_NOTIFY the map pins into GTT: the buffer leaves VRAM and the allocation fits"),
    Diagram("move_notify.svg", "scenarios/pin_vs_dmabuf.yaml", "dmabuf", ("run",),
            "An eviction: move_notify, zap, copy, re-fault, fence wait, re-map"),
    Diagram("peermem_pressure.svg", "scenarios/pin_vs_dmabuf.yaml", "peermem", ("src", "run"),
            "Peer memory under the same pressure: the pin makes the allocation fail"),
]
"""Every diagram the guide and the notebooks show."""


def draw_all(directory: Path = HERE, *, force: bool = True) -> list[Path]:
    """Draw every diagram of :data:`DIAGRAMS` into ``directory``; returns the paths written."""
    runs: dict[tuple[str, str], object] = {}
    written = []
    for diagram in DIAGRAMS:
        key = (diagram.scenario, diagram.variant)
        if key not in runs:
            _, _, variants = load_scenario_variants(ROOT / diagram.scenario)
            runs[key] = run_scenario(dict(variants)[diagram.variant], trace=True, variant=diagram.variant)
        bed = runs[key].testbed
        chosen = [s for s in sections(bed)
                  if (s.registration.buffer if s.registration else "run") in diagram.parts]
        written.append(write_diagram(draw(bed, chosen, diagram.title), directory / diagram.name, force=force))
    return written


if __name__ == "__main__":
    HERE.mkdir(exist_ok=True)
    for path in draw_all():
        print(f"wrote {path.relative_to(ROOT)}")
