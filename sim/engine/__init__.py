"""The engines: a validated scenario wired into one testbed (:mod:`~sim.engine.build`), its events and library
studies, the set-up and finish both engines share (:mod:`~sim.engine.harness`), the event engine's run
(:mod:`~sim.engine.run`), the tables a run returns (:mod:`~sim.engine.tables`) and the memory a run needs
(:mod:`~sim.engine.budget`), and the vectorized core's planner (:mod:`sim.engine.planner`)."""
