"""The command line: ``rdmasim`` and its commands (:mod:`~sim.cli.app`, its help and errors in
:mod:`~sim.cli.group`) and the perftest front end (:mod:`~sim.cli.perftest`, its options in
:mod:`~sim.cli.perftest_args`, its standard output in :mod:`~sim.cli.perftest_output`, its tables in
:mod:`~sim.cli.perftest_report`)."""
