"""Pipeline stage: evaluate."""
