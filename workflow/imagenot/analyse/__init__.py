"""Pipeline stage: analyse."""
