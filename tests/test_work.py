"""Resources from the work (imagenot.plan.work): sized from input, grown per attempt, capped."""

from __future__ import annotations

import copy

import pytest

from imagenot.core.config import load_config
from imagenot.plan import work


@pytest.fixture(scope="module")
def paper(repo_root):
    return load_config(repo_root / "config" / "paper.yaml")


def test_memory_and_runtime_grow_with_input_and_attempt(paper):
    config = copy.deepcopy(paper)
    config["resources"]["work"]["curate_embed"] = {
        "floor_mb": 1000,
        "mb_per_gb": 2000,
        "floor_min": 10,
        "min_per_gb": 60,
    }
    config["resources"]["attempt_growth"] = 2
    assert work.mem_mb(config, "curate_embed", 512) == 2000
    assert work.mem_mb(config, "curate_embed", 512, attempt=2) == 4000
    assert work.runtime_min(config, "curate_embed", 1024) == 70
    assert work.runtime_min(config, "curate_embed", 1024, attempt=3) == 280


def test_runtime_never_exceeds_the_site_maximum(paper):
    config = copy.deepcopy(paper)
    config["resources"]["max_runtime_min"] = 100
    config["resources"]["work"]["curate_match"] = {
        "floor_mb": 1,
        "mb_per_gb": 0,
        "floor_min": 60,
        "min_per_gb": 30,
    }
    assert work.runtime_min(config, "curate_match", 1024, attempt=1) == 90
    assert work.runtime_min(config, "curate_match", 1024, attempt=2) == 100  # capped, not 135
    with pytest.raises(work.WorkTooLarge, match=r"curate_match.*resources\.max_runtime_min = 100"):
        work.runtime_min(config, "curate_match", 2048)


def test_streaming_rules_ask_the_same_memory_for_any_part(paper):
    for rule in ("curate_match", "curate_captions", "curate_select"):
        assert work.mem_mb(paper, rule, 100) == work.mem_mb(paper, rule, 100_000)


def test_dataset_wide_acquisition_rules_ask_memory_for_their_input(paper):
    """The top-up selection and the split hold every status row of a dataset: their request
    grows with their input (the 2 M-image projection of docs/scale.md sits inside it)."""
    for rule in ("acquire_topup_select", "acquire_split"):
        small, large = work.mem_mb(paper, rule, 10), work.mem_mb(paper, rule, 1000)
        assert large > small >= paper["resources"]["work"][rule]["floor_mb"]
