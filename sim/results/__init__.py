"""Results: a run's results directory written (metrics, summary, manifest, figures), checked again (repro) and
turned into a report page."""
