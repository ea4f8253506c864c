"""Pipeline stage: diagnostics."""
