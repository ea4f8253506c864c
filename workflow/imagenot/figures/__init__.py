"""Pipeline stage: figures."""
