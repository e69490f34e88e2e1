"""Benchmark of runs for a duration, one command: ``python bench/duration.py``.

Runs ``rdmasim perftest ib_write_bw -D 5`` on the default engine, then ``-n N`` with the N WRITEs that run
posted, side by side, and prints both wall times, their ratio against the target (a duration at most twice the
time of the same operations counted) and their peak RSS; then the same pair for ``--event-duration`` seconds
(default 1) on the event engine beside the default one, whose tables must agree. Each run is the command line
in its own process (``os.wait4`` gives its peak RSS).
"""

from __future__ import annotations

import argparse
import re

from measured import rdmasim

TARGET_RATIO = 2.0
"""``-D``'s wall time over ``-n``'s with the same WRITEs that the default engine is to stay within."""


def perftest(*flags: str) -> tuple[float, int, str]:
    """Wall time (s), peak RSS (bytes) and report line of ``rdmasim perftest ib_write_bw FLAGS``."""
    wall, rss, out = rdmasim("perftest", "ib_write_bw", *flags)
    line = next(line for line in out.splitlines() if re.match(r"\s*\d+\s+\d+\s", line))
    return wall, rss, line.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5", help="-D of the default engine's pair (s)")
    parser.add_argument("--event-duration", default="1", help="-D of the event engine's pair (s); '' skips it")
    args = parser.parse_args()
    timed = perftest("-D", args.duration)
    count = int(timed[2].split()[1])
    counted = perftest("-n", str(count))
    print(f"{'run':<34} {'wall s':>8} {'peak RSS':>10}  report")
    for name, (wall, rss, line) in ((f"-D {args.duration} (default engine)", timed),
                                        (f"-n {count} (default engine)", counted)):
        print(f"{name:<34} {wall:8.2f} {rss / 2**20:8.0f}Mi  {line}")
    ratio = timed[0] / counted[0]
    print(f"-D / -n: {ratio:.2f} (target at most {TARGET_RATIO}): {'met' if ratio <= TARGET_RATIO else 'MISSED'}")
    if timed[2] != counted[2]:
        print("the two reports differ")
    if args.event_duration:
        event = perftest("-D", args.event_duration, "--engine", "event")
        fast = perftest("-D", args.event_duration)
        for name, (wall, rss, line) in ((f"-D {args.event_duration} --engine event", event),
                                            (f"-D {args.event_duration} (default engine)", fast)):
            print(f"{name:<34} {wall:8.2f} {rss / 2**20:8.0f}Mi  {line}")
        print(f"event / default at -D {args.event_duration}: {event[0] / fast[0]:.1f}"
              + ("" if event[2] == fast[2] else " (the reports differ)"))


if __name__ == "__main__":
    main()
