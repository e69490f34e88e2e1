"""``rdmasim report``: one self-contained page holding a run's tables, figures, protocol timelines and manifest,
written by the output rules (never over a file rdmasim did not write), the same bytes every time."""

from __future__ import annotations

import base64
import html
import json
import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sim.cli.app import app
from sim.core.units import format_duration
from sim.inspect.tables import cell
from tests.conftest import ROOT

SCENARIO = ROOT / "scenarios" / "pin_vs_dmabuf.yaml"
runner = CliRunner()
SAW = "Comparison of the variants, per workload and message size: what the workload saw"


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A results directory of the four-variant pinned-vs-dma-buf run, with its figures."""
    out = tmp_path_factory.mktemp("report") / "pvd"
    ran = runner.invoke(app, ["run", str(SCENARIO), "--out", str(out), "--quiet"])
    assert ran.exit_code == 0, ran.output
    return out


@pytest.fixture(scope="module")
def page(results) -> str:
    made = runner.invoke(app, ["report", str(results)])
    assert made.exit_code == 0, made.output
    assert made.stderr.strip() == f"wrote {results / 'report.html'}"
    return (results / "report.html").read_text()


def _cells(page: str, title: str) -> list[str]:
    """The cells of the table headed ``title``, as text."""
    section = page.split(f"<h3>{title}</h3>", 1)[1].split("</table>", 1)[0]
    return [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", section)]


def _element(page: str, element_id: str) -> str:
    match = re.search(rf'<pre id="{re.escape(element_id)}">(.*?)</pre>', page, re.S)
    assert match, f"no <pre id={element_id}>"
    return html.unescape(match[1])


def test_every_figure_the_run_drew_is_embedded(results, page):
    pngs = sorted((results / "figures").glob("*.png"))
    assert [p.stem for p in pngs] == ["bw_over_time", "latency_cdf"]
    for png in pngs:
        assert f'src="data:image/png;base64,{base64.b64encode(png.read_bytes()).decode()}"' in page, png.name


def test_the_tables_hold_the_summary(results, page):
    summary = json.loads((results / "summary.json").read_text())
    for title in ("Results (perftest rows)", "Registrations", "Events", SAW,
                  "Comparison of the variants: what registration cost, what the protocol did", "Protocol counters",
                  "Engines"):
        assert f"<h3>{title}</h3>" in page
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", page)]
    for row in summary["comparison"]:
        assert cell("bw_avg_Gbps", row["bw_avg_Gbps"]) in cells and row["modes"] in cells
    failed = [e["outcome"] for e in summary["events"] if e["outcome"].startswith("failed")]
    events = _cells(page, "Events")
    assert failed and all(events.count(outcome) == failed.count(outcome) for outcome in failed)
    assert "workloads-start" not in cells  # bookkeeping rows stay out, as `rdmasim run` prints the events


@pytest.mark.parametrize("variant", ["peermem", "dmabuf", "dmabuf-pinned", "dmabuf-no-move-notify"])
def test_each_variant_has_the_timeline_explain_prints_and_its_diagram(page, variant):
    explained = runner.invoke(app, ["explain", str(SCENARIO), "--variant", variant])
    assert explained.exit_code == 0, explained.output
    timeline = explained.stdout.split("\n", 2)[2].rstrip("\n")  # without the "Variant 'x' (2 of 4 ...)" header
    assert _element(page, f"timeline-{variant}") == timeline
    diagram = re.search(rf'<figure id="diagram-{re.escape(variant)}" class="scroll"><img class="diagram" '
                        r'src="data:image/svg\+xml;base64,([^"]+)"\s+width="(\d+)"', page)
    assert diagram, variant
    svg = base64.b64decode(diagram[1]).decode()
    assert "rdmasim sequence diagram" in svg and f"variant '{variant}'" in svg
    # drawn no smaller than its own size (CSS px are 3/4 pt), in a frame that scrolls: labels stay legible
    points = float(re.search(r'<svg[^>]*\swidth="([0-9.]+)pt"', svg)[1])
    assert int(diagram[2]) >= points * 96 / 72


def test_every_table_says_its_times_and_sizes_in_human_units_under_headers_in_words(results, page):
    summary = json.loads((results / "summary.json").read_text())
    tables = page.split('<h2 id="figures">')[0]
    cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", tables)]
    headers = [html.unescape(c) for c in re.findall(r"<th>(.*?)</th>", tables)]
    assert headers and not [h for h in headers if "_" in h]
    raw = ({str(e["time_ps"]) for e in summary["events"]} | {str(e["bytes"]) for e in summary["events"]} | {
        str(r[k]) for r in summary["registrations"] for k in ("bytes", "pinned_bytes")}) - {"0"}
    assert not raw & set(cells), raw & set(cells)  # the picoseconds and byte counts summary.json holds
    assert not [c for c in cells if re.fullmatch(r"-?\d{7,}(\.\d+)?|.*\de[+-]\d.*", c)]
    pressure = next(e for e in summary["events"] if e["kind"] == "gpu-memory-pressure")
    assert "7.5GiB" in cells and format_duration(round(pressure["time_ms"] * 1e9)) in cells
    registration = summary["registrations"][0]
    assert format_duration(round(registration["register_us"] * 1e6)) in cells


def test_the_page_says_which_engine_ran_each_variant(results, page):
    manifest = json.loads((results / "manifest.json").read_text())
    engines = _cells(page, "Engines")
    for variant, record in manifest["engines"].items():
        ran = {"fast": "vectorized core", "event": "event engine"}[record["workloads"][0]["engine"]]
        at = engines.index(variant)
        assert engines[at + 1:at + 3] == [record["requested"], ran]


def test_the_comparison_in_the_page_has_the_stall_and_the_allocations_outcome(page):
    cells = _cells(page, SAW)
    assert "allocated" in cells and "failed: no evictable memory" in cells
    at = next(i for i, c in enumerate(cells) if re.fullmatch(r"[0-9.]+\.\.[0-9.]+ms", c))  # from..to, in one unit
    assert re.fullmatch(r"[0-9.]+(ns|us|ms)", cells[at - 1])  # after the stall's length


def test_the_manifest_is_in_the_page(results, page):
    manifest = json.loads((results / "manifest.json").read_text())
    assert _element(page, "scenario-text") == manifest["scenario_text"]
    for digest in (manifest["scenario_sha256"], *manifest["outputs_sha256"].values()):
        assert f"<code>{digest}</code>" in page
    assert f"<dt>seed</dt><dd>{manifest['seed']}</dd>" in page


def test_the_page_fetches_nothing(page):
    references = re.findall(r'\b(?:src|href)="([^"]*)"', page)
    assert references and all(r.startswith(("data:", "#")) for r in references), \
        [r[:40] for r in references if not r.startswith(("data:", "#"))]
    assert "<script" not in page and "<link" not in page and "@import" not in page


def test_the_same_results_give_the_same_bytes(results, page, tmp_path):
    again = runner.invoke(app, ["report", str(results), "--out", str(tmp_path / "again.html")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again.html").read_text() == page


def test_a_page_drawn_before_is_replaced_only_with_force(results, page):
    path = results / "report.html"
    refused = runner.invoke(app, ["report", str(results)])
    assert refused.exit_code == 2 and "exists (rdmasim wrote it before); add --force" in refused.stderr
    replaced = runner.invoke(app, ["report", str(results), "--force"])
    assert replaced.exit_code == 0 and path.read_text() == page


def test_it_never_writes_over_a_file_rdmasim_did_not_write(results, tmp_path):
    mine = tmp_path / "mine.html"
    mine.write_text("<p>my notes</p>")
    refused = runner.invoke(app, ["report", str(results), "--out", str(mine), "--force"])
    assert refused.exit_code == 2 and "rdmasim did not write it" in refused.stderr
    assert mine.read_text() == "<p>my notes</p>" and os.listdir(tmp_path) == ["mine.html"]


@pytest.mark.parametrize("make, reason", [
    (lambda d: None, "has no manifest.json"),
    (lambda d: (d / "sweep.json").write_text('{"rdmasim_sweep": 1, "name": "s"}'), "holds sweep output"),
    (lambda d: d.rmdir(), "not a directory"),
])
def test_it_reads_only_a_run_s_results_directory(tmp_path, make, reason):
    directory = tmp_path / "d"
    directory.mkdir()
    make(directory)
    before = sorted(os.listdir(tmp_path))
    refused = runner.invoke(app, ["report", str(directory)])
    assert refused.exit_code == 2 and reason in refused.stderr and len(refused.stderr.splitlines()) == 1
    assert sorted(os.listdir(tmp_path)) == before and "Traceback" not in refused.output


def test_a_malformed_manifest_is_located(results, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("summary.json", "manifest.json"):
        (broken / name).write_bytes((results / name).read_bytes())
    record = json.loads((broken / "manifest.json").read_text())
    record["seed"] = "seven"
    (broken / "manifest.json").write_text(json.dumps(record, indent=1))
    refused = runner.invoke(app, ["report", str(broken)])
    assert refused.exit_code == 2 and re.match(rf"{re.escape(str(broken / 'manifest.json'))}:\d+:\d+ seed: ",
                                               refused.stderr), refused.stderr
    assert not (broken / "report.html").exists()


def test_a_new_run_with_force_replaces_the_page_with_the_results(results, tmp_path):
    out = tmp_path / "r"
    tiny = ROOT / "docs" / "examples" / "registration_modes.yaml"
    assert runner.invoke(app, ["run", str(tiny), "--out", str(out), "--quiet"]).exit_code == 0
    assert runner.invoke(app, ["report", str(out)]).exit_code == 0
    again = runner.invoke(app, ["run", str(tiny), "--out", str(out), "--quiet", "--force"])
    assert again.exit_code == 0, again.output  # the page is rdmasim's: --force may replace it
    assert not (out / "report.html").exists()


def test_the_help_names_the_command_and_what_it_writes():
    listed = runner.invoke(app, ["--help"])
    assert listed.exit_code == 0 and "report" in listed.stdout
    helped = runner.invoke(app, ["report", "--help"])
    assert helped.exit_code == 0 and "RESULTS_DIR" in helped.stdout and "self-contained HTML" in helped.stdout


def test_a_re_run_that_would_not_fit_in_memory_is_refused_before_it_runs(results, tmp_path, monkeypatch):
    from sim.engine import budget

    monkeypatch.setattr(budget, "available_memory", lambda: 1 << 20)
    out = tmp_path / "page.html"
    refused = runner.invoke(app, ["report", str(results), "--out", str(out)])
    assert refused.exit_code == 2 and "run again for its timeline: run needs about" in refused.stderr
    assert not out.exists() and len(refused.stderr.splitlines()) == 1
