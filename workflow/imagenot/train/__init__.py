"""Pipeline stage: train."""
