"""Scenario files: line-aware YAML loading, the schema, reference checks and resolution into parameters."""
