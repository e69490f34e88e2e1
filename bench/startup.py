"""Benchmark of start-up, one command: ``python bench/startup.py [--against REV ...]``.

Prints the wall time, from process start to exit, of ``rdmasim --version``, of command lines rdmasim refuses (one
refused as it is parsed, two perftest refuses, ``validate`` of a file that is not YAML and of one with an unknown
key), of a short perftest run and of the bare interpreter, for this checkout and, measured side by side in the same run, for each commit
``--against`` names (default ``main``), with the ratio to each. A commit is checked out in a temporary git worktree
and run as ``python -m sim`` from it. Machines are shared and noisy: each figure is the best (and the median) of
``--rounds`` processes, the rounds taking the trees in turn, after one untimed run of each that caches the
bytecode as an installed rdmasim has it (in a temporary ``PYTHONPYCACHEPREFIX``; ``--no-bytecode`` compiles every
module in every run instead, as under ``PYTHONDONTWRITEBYTECODE``). The target is 0.5 s for each rdmasim line, the
unknown key's and the unknown node's too: a file the scenario schema refuses is refused before the models its
references' checks need are imported, and a name that does not resolve before the checks that ask the models.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from worktrees import checked_out

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "main"
TARGET_S = 0.5
"""Start-up of --version, of a refused command line and of validating a bad file on the issue's machine (seconds)."""

NOT_YAML = "name: x\nnodes: [\n"
UNKNOWN_KEY = "schema: 1\nnme: x\n"
UNKNOWN_NODE = ("schema: 1\nname: x\nnodes: [{name: a}, {name: b}]\n"
                "buffers: [{name: s, on: a.host, size: 1MiB}, {name: d, on: c.host, size: 1MiB}]\n"
                "workload: [{kind: write_bw, from: s, to: d, sizes: [4KiB], iterations: 10}]\n")
COMMANDS = {
    "python -c pass": None,
    "--version": ["--version"],
    "run --no-such-option": ["run", "--no-such-option", "s.yaml"],
    "perftest --run_infinitely": ["perftest", "ib_write_bw", "--run_infinitely"],
    "perftest ib_read_bw -I 64": ["perftest", "ib_read_bw", "-I", "64"],
    "validate (not YAML)": ["validate", "{not_yaml}"],
    "validate (unknown key)": ["validate", "{unknown_key}"],
    "validate (unknown node)": ["validate", "{unknown_node}"],
    "perftest ib_write_bw -n 1000": ["perftest", "ib_write_bw", "-n", "1000"],
}
"""What is timed: rdmasim's arguments (None: the interpreter alone)."""
UNTARGETED = {"python -c pass", "perftest ib_write_bw -n 1000"}
"""Lines with no start-up target: the interpreter, and a short perftest run (start-up and the engine's imports, a
run of a thousand WRITEs, the report)."""


def started_in(tree: Path, argv: list[str] | None, env: dict[str, str]) -> float:
    """Wall seconds of one ``python -m sim argv`` run from ``tree`` (``python -c pass`` for None)."""
    command = [sys.executable, "-c", "pass"] if argv is None else [sys.executable, "-m", "sim", *argv]
    env = {**env, "PYTHONPATH": str(tree)}  # ahead of the editable install, whichever checkout it names
    began = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    took = time.perf_counter() - began
    if argv is not None and done.returncode not in (0, 2):
        raise RuntimeError(f"{tree}: rdmasim {' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", action="append", metavar="REV",
                        help=f"a commit to measure beside this checkout (repeatable; default {BASELINE})")
    parser.add_argument("--rounds", type=int, default=7, help="processes per command and tree, trees in turn")
    parser.add_argument("--no-bytecode", action="store_true", help="compile every module in every run")
    args = parser.parse_args()
    revs = args.against or [BASELINE]
    with tempfile.TemporaryDirectory(prefix="rdmasim-bench-") as scratch:
        texts = {"not_yaml": NOT_YAML, "unknown_key": UNKNOWN_KEY, "unknown_node": UNKNOWN_NODE}
        files = {name: Path(scratch) / f"{name}.yaml" for name in texts}
        for name, text in texts.items():
            files[name].write_text(text)
        commands = {label: None if argv is None else [a.format(**files) for a in argv]
                    for label, argv in COMMANDS.items()}
        env = dict(os.environ)
        if args.no_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(Path(scratch) / "pycache")
        with checked_out(revs, scratch) as trees:
            times = {(name, label): [] for name in trees for label in commands}
            for round in range(args.rounds + (not args.no_bytecode)):
                for label, argv in commands.items():
                    for name, tree in trees.items():
                        took = started_in(tree, argv, env)
                        if round or args.no_bytecode:  # the first round of a cached run writes the bytecode
                            times[name, label].append(took)
    bytecode = "compiled in every run" if args.no_bytecode else "cached"
    print(f"start-up wall time, best / median of {args.rounds} processes (s); bytecode {bytecode}")
    print(f"  {'':<28}" + "".join(f"{name:>22}" for name in trees))
    for label in commands:
        cells = "".join(f"{min(times[name, label]):>12.2f} / {statistics.median(times[name, label]):<7.2f}"
                        for name in trees)
        mine = min(times["this checkout", label])
        ratios = "".join(f"  {rev} / this = {min(times[rev, label]) / mine:.1f}" for rev in revs)
        verdict = "" if label in UNTARGETED else ("  within" if mine <= TARGET_S else "  ABOVE") + f" {TARGET_S} s"
        print(f"  {label:<28}{cells}{ratios}{verdict}")


if __name__ == "__main__":
    main()
