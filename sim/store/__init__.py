"""Where results are kept, below the engines that fill them: a run's per-operation table, spooled to Parquet
beyond one row group (:mod:`~sim.store.operations`), the one rule for what rdmasim may write over
(:mod:`~sim.store.outdir`), what a killed rdmasim left behind, named by its pid (:mod:`~sim.store.leftovers`),
and a sweep's table read from its results directory (:mod:`~sim.store.sweep_table`)."""
