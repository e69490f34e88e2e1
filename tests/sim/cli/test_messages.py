"""What users read, swept over every shipped scenario: ``rdmasim run``'s tables, event outcomes and stderr lines,
and ``rdmasim explain``'s timeline say times and sizes in human units and carry no Python reprs (issue: messages
in human units). The detector is checked on lines that leak, so that a sweep that finds nothing means something."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from tests.conftest import ROOT

SCENARIOS = sorted(p.name for p in (ROOT / "scenarios").glob("*.yaml"))
PERFTEST_ROW = re.compile(r"^\s*\d+\s+\d+(\s+[\d.]+)+\s*$")
"""A data row of perftest's own report (``#bytes #iterations ...``), which prints bytes as perftest does."""
COUNTED = re.compile(r"(pages|entries|faults|mtt_entries|lkey|rkey|handle)=$|^\s*(pages|translation entries|entries)\b")
"""Words around a large number that make it a count, not a quantity with a unit."""
UNIT_AFTER = re.compile(r"(\.\d+)? ?(µs|us|ms|ns|s)\b")
"""A unit right after a number (``1189987.347 µs``, a time past a second in explain's timeline)."""
REPRS = [
    (re.compile(r"\b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\.[A-Z][A-Z0-9_]+\b"), "an enum member with its class"),
    (re.compile(r"object at 0x|\bnp\.\w+\(|\bPosixPath\(|\bdtype\b|\bDataFrame\b"), "a Python object's repr"),
    (re.compile(r"(?:[=:] ?)(?:True|False|None)\b|\bnan\b"), "a Python value's repr"),
    (re.compile(r"\b\d+ ps\b|\d{4,}ps\b"), "raw picoseconds"),
]


def leaks(text: str) -> list[str]:
    """Each line of ``text`` that shows a raw picosecond or byte count where a unit belongs, or a Python repr,
    with what it shows."""
    found = []
    for line in text.splitlines():
        if PERFTEST_ROW.match(line):
            continue
        for match in re.finditer(r"(?<![0-9a-fA-Fx])\d{7,}", line):  # not within an address such as 0x7000006
            if UNIT_AFTER.match(line, match.end()):  # a time in explain's one µs column: it has its unit
                continue
            if not (COUNTED.search(line[:match.start()]) or COUNTED.search(line[match.end():])):
                found.append(f"a raw count of 7+ digits (picoseconds or bytes): {line.strip()}")
        found += [f"{what}: {line.strip()}" for pattern, what in REPRS if pattern.search(line)]
    return found


@pytest.mark.parametrize("line", [
    "the access at 2591678979 ps", "completed in error (WcStatus.LOC_PROT_ERR)", "revocable: True",
    "dma_buf_dynamic_attach(dmabuf=dmabuf1, dynamic=True)", "allocated 8053063680 of VRAM", "p99 nan",
    "managed_memory_pressure(range=managed-job@34174674405, bytes=2MiB)", "fences signal at 5000 ps",
])
def test_the_detector_finds_what_leaks(line):
    assert leaks(line)


@pytest.mark.parametrize("line", [
    " 1048576    3000           397.46             397.46               0.047380",
    "It has 1572864 translation entries of 4KiB.", "pin_user_pages(pages=1572864)  [132536.658 µs]",
    "1189987.347 µs  b.nic     MkeyCreated (lkey=256, mtt_entries=1572864)",
    "the access at 2.59168ms after its move completes in error (IBV_WC_LOC_PROT_ERR)",
    "warning: stale hit at 0x700000600000: the cached MR maps a.gpu0.lib.alloc0",
])
def test_the_detector_leaves_counts_and_perftest_rows_alone(line):
    assert not leaks(line)


@pytest.mark.parametrize("name", SCENARIOS)
def test_a_shipped_scenarios_output_is_in_human_units(name, tmp_path):
    runner = CliRunner()
    ran = runner.invoke(app, ["run", str(ROOT / "scenarios" / name), "--seed", "7", "--out", str(tmp_path / "r")])
    assert ran.exit_code == 0, ran.output
    explained = runner.invoke(app, ["explain", str(ROOT / "scenarios" / name)])
    assert explained.exit_code == 0, explained.output
    assert not leaks(ran.stdout + "\n" + ran.stderr + "\n" + explained.stdout + "\n" + explained.stderr)
