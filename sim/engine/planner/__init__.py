"""The vectorized core's planner: a scenario's perftest workloads as streams for :func:`sim.fast.solve`.

:mod:`~sim.engine.planner.plan` decides the domain once before solving (:func:`~sim.engine.planner.plan.decide`)
and runs a scenario on the core (:func:`~sim.engine.planner.plan.run_fast`); :mod:`~sim.engine.planner.domain` says
what the scenario alone rules out; :mod:`~sim.engine.planner.events` follows scenario events on the solved clock,
:mod:`~sim.engine.planner.faults` a stream's own ODP page faults, :mod:`~sim.engine.planner.translations` the
translation caches' hits and misses, and :mod:`~sim.engine.planner.receives` checks that a send_bw's receives are
posted before its SENDs arrive."""
