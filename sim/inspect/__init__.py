"""What a run's tables and trace say, for a reader: latency aggregates (:mod:`~sim.inspect.binned`), the
comparison of variants (:mod:`~sim.inspect.compare`), the protocol timeline as text and as a sequence diagram
(:mod:`~sim.inspect.timeline`, :mod:`~sim.inspect.explain`, :mod:`~sim.inspect.diagram`), per-rail bandwidth
(:mod:`~sim.inspect.rails`) and the calibration report (:mod:`~sim.inspect.calibrate`)."""
