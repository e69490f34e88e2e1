"""Benchmark of runs for a duration, one command: ``python bench/duration.py``.

Runs ``rdmasim perftest ib_write_bw -D 5`` on the default engine, then ``-n N`` with the N WRITEs that run
posted (its #iterations counts the measured seconds alone: :func:`operations_run`), side by side, and prints both wall times, their ratio against the target (a duration at most twice the
time of the same operations counted) and their peak RSS; then ``-D`` for ``--event-duration`` seconds (default 1)
on the event engine beside the default one, whose reports must agree, and the same for ``ib_send_bw -r 16 -n``
``--send-iterations`` (default 100,000: 16 receives posted ahead, each reposted before its SEND arrives, which the
default engine checks as it solves). Beside them, ``-q 4 -D`` with the same duration: four QPs whose results
stream as one QP's do, so its peak RSS stays near the single QP's whatever the duration. Each run is the command
line in its own process (``os.wait4`` gives its peak RSS).
"""

from __future__ import annotations

import argparse
import re

from measured import rdmasim

TARGET_RATIO = 2.0
"""``-D``'s wall time over ``-n``'s with the same WRITEs that the default engine is to stay within."""


def operations_run(seconds: str, line: str) -> int:
    """The WRITEs a ``-D seconds`` run posted, from its report ``line``: perftest measures what completes between
    its margins (a quarter of -D at each end, in whole seconds), so #iterations counts that part alone."""
    duration = int(seconds)
    return round(int(line.split()[1]) * duration / (duration - 2 * (duration // 4)))


def perftest(*flags: str, test: str = "ib_write_bw") -> tuple[float, int, str]:
    """Wall time (s), peak RSS (bytes) and report line of ``rdmasim perftest TEST FLAGS``."""
    wall, rss, out = rdmasim("perftest", test, *flags)
    line = next(line for line in out.splitlines() if re.match(r"\s*\d+\s+\d+\s", line))
    return wall, rss, line.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", default="5", help="-D of the default engine's pair (s)")
    parser.add_argument("--event-duration", default="1", help="-D of the event engine's pair (s); '' skips it")
    parser.add_argument("--send-iterations", default="100000", help="-n of ib_send_bw -r 16's pair; '' skips it")
    args = parser.parse_args()
    timed = perftest("-D", args.duration)
    count = operations_run(args.duration, timed[2])
    counted = perftest("-n", str(count))
    qps = perftest("-q", "4", "-D", args.duration)
    print(f"{'run':<44} {'wall s':>8} {'peak RSS':>10}  report")
    for name, (wall, rss, line) in ((f"-D {args.duration} (default engine)", timed),
                                        (f"-n {count} (default engine)", counted),
                                        (f"-q 4 -D {args.duration} (default engine)", qps)):
        print(f"{name:<44} {wall:8.2f} {rss / 2**20:8.0f}Mi  {line}")
    ratio = timed[0] / counted[0]
    print(f"-D / -n: {ratio:.2f} (target at most {TARGET_RATIO}): {'met' if ratio <= TARGET_RATIO else 'MISSED'}")
    if args.event_duration:
        against_event("ib_write_bw", "-D", args.event_duration)
    if args.send_iterations:
        against_event("ib_send_bw", "-r", "16", "-n", args.send_iterations)


def against_event(test: str, *flags: str) -> None:
    """Print ``rdmasim perftest TEST FLAGS`` on the event engine and on the default one, with the ratio of their
    wall times."""
    event = perftest(*flags, "--engine", "event", test=test)
    fast = perftest(*flags, test=test)
    said = " ".join((test, *flags))
    for name, (wall, rss, line) in ((f"{said} --engine event", event), (f"{said} (default engine)", fast)):
        print(f"{name:<44} {wall:8.2f} {rss / 2**20:8.0f}Mi  {line}")
    differ = "" if event[2] == fast[2] else " (the reports differ)"
    print(f"event / default, {said}: {event[0] / fast[0]:.1f}{differ}")


if __name__ == "__main__":
    main()
