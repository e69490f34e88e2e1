"""``rdmasim calibrate``: every calibration experiment simulated against its measurement, printed as one table,
with a spinner naming the experiment under way, and optionally the calibration figures."""

from __future__ import annotations

from pathlib import Path

import typer

from sim.cli.progress import phase, stderr


def calibrate_command(figures: Path | None, force: bool, quiet: bool) -> int:
    """Print the calibration table (:func:`sim.inspect.calibrate.calibrate`) and, into ``figures`` (claimed
    first, replacing earlier figures only with ``force``), draw the calibration figures, each path printed; a
    spinner shows on a terminal unless ``quiet``. Returns the exit code: 1 if a required row is out of tolerance.

    :raises sim.store.outdir.OutputError: ``figures`` is not a directory rdmasim may write.
    """
    from sim.inspect.calibrate import EXPERIMENTS, calibrate, format_calibration
    from sim.store.outdir import FIGURES, claim, staged

    if figures is not None:
        claim(figures, FIGURES, force=force)
    with phase(stderr(), "calibrating", quiet) as status:
        table = calibrate(status and (lambda name, index: status.update(
            f"calibrating: {name} ({index + 1}/{len(EXPERIMENTS)})")))
    typer.echo(format_calibration(table))
    if figures is not None:
        from sim.plot.calibration import calibration_figures
        from sim.plot.pcie import pcie_efficiency_figures

        with (staged(figures, FIGURES, force=force) as (staging, target),
              phase(stderr(), f"drawing the calibration figures into {figures}", quiet)):
            drawn = pcie_efficiency_figures(staging) + calibration_figures(staging)
        for path in drawn:
            typer.echo(str(target.path / path.name))
    return int(not table.loc[table.required, "passed"].all())
