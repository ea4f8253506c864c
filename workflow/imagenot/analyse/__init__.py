"""Pipeline stage: analyse (rankings statistics on accuracy tables)."""

PUBLISHED_DATASET = "imagenet_published"
"""Dataset label of the published torchvision ImageNet accuracies in accuracy.csv."""
PUBLISHED_PROTOCOL = "published"
