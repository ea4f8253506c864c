"""Pipeline stage: acquire."""
