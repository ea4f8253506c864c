"""Stage audit: near-duplicates of a contrast dataset's images (docs/audit.md)."""
