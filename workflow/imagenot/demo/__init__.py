"""Pipeline stage: demo."""
