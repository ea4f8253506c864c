"""Pipeline stage: curate."""
