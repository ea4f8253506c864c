"""Pipeline stage: analyse (rankings statistics on accuracy tables)."""

from imagenot.core.names import PUBLISHED_DATASET  # noqa: F401 (the analyse stage's label)

PUBLISHED_PROTOCOL = "published"
