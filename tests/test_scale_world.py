"""The scale world (paper-shaped laion2B-en shards), its generated images, and bench_scale's
parsing and projection (pure functions; the one end-to-end run is marked slow)."""

from __future__ import annotations

import io
import json
import shutil
import urllib.request

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import load_benchmark

from imagenot.acquire import generated
from imagenot.core.config import validate_config
from imagenot.demo import scale_plan

LAION2B_EN_PATTERN = "part-{i:05d}-5114fd87-297e-42b0-9d11-50f1df323dfa-c000.snappy.parquet"


def _config(**laion) -> dict:
    config = {
        "scale_world": {"enabled": True},
        "laion": {"dir": "results/scale_world/laion", "shard_pattern": LAION2B_EN_PATTERN},
    }
    config["laion"].update(laion)
    return validate_config(config)


@pytest.fixture(scope="module")
def lemma_table(wn):
    from imagenot.core.wordnet import noun_lemma_table

    return noun_lemma_table(wn)


@pytest.fixture(scope="module")
def web(web_captions):
    from imagenot.demo.scale_world import read_web_captions

    return read_web_captions(web_captions)


def _settings(**overrides):
    from imagenot.demo.scale_cli import scale_settings

    return scale_settings(json.dumps(overrides))


def _write(index: int, cfg, web, lemma_table, path) -> dict:
    from imagenot.demo import scale_world as sw

    vocab = sw.vocabulary(lemma_table, cfg)
    return sw.write_shard(index, cfg, web, sw.filler_words(web, lemma_table), vocab, path)


# --- plan -----------------------------------------------------------------------------------


def test_shard_files_carry_the_real_laion2b_en_names():
    config = _config(n_shards=128)
    files = scale_plan.shard_files(config)
    assert len(files) == 128
    assert files[0] == (
        "results/scale_world/laion/"
        "part-00000-5114fd87-297e-42b0-9d11-50f1df323dfa-c000.snappy.parquet"
    )
    assert files[127].endswith(
        "/part-00127-5114fd87-297e-42b0-9d11-50f1df323dfa-c000.snappy.parquet"
    )
    # the rule's output pattern, filled with the index wildcard, is exactly those paths
    pattern = scale_plan.output_pattern(config)
    assert pattern.replace("{shard}", "00042") == files[42]
    assert scale_plan.shard_constraint(config) == "[0-9]+"
    assert scale_plan.shard_index("00042") == 42
    assert scale_plan.captions_path(config) == "resources/captions/web_captions_1000.parquet"
    assert scale_plan.targets(config) == files
    assert scale_plan.targets(validate_config({})) == []


def test_check_names_the_key_that_does_not_fit():
    scale_plan.check(_config(n_shards=2))
    with pytest.raises(scale_plan.ScaleConfigError, match=r"laion\.dir"):
        scale_plan.check(_config(dir="/data/laion2B-en"))
    with pytest.raises(scale_plan.ScaleConfigError, match=r"laion\.shards"):
        scale_plan.check(_config(shards=["a.parquet"]))
    with pytest.raises(scale_plan.ScaleConfigError, match="shard_pattern"):
        scale_plan.check(_config(shard_pattern="part-{i}-{j}.parquet"))
    both = _config()
    both["demo_world"]["enabled"] = True
    with pytest.raises(scale_plan.ScaleConfigError, match=r"demo_world\.enabled"):
        scale_plan.check(both)
    shares = _config()
    shares["scale_world"].update(web_fraction=0.9, two_class_fraction=0.2)
    with pytest.raises(scale_plan.ScaleConfigError, match="sum above 1"):
        scale_plan.check(shares)


def test_the_shipped_captions_are_read_from_the_clone_in_any_working_directory(
    tmp_path, monkeypatch
):
    """config/scale.yaml names resources/captions/...: from a working directory of its own
    (``--directory``, a module's host folder) it is the clone's file; a file the working
    directory holds is its own; a relative path the clone does not ship is refused, naming the
    key."""
    from imagenot.core.paths import CLONE

    shipped = "resources/captions/web_captions_1000.parquet"
    monkeypatch.chdir(tmp_path)
    config = _config(n_shards=2)
    assert config["scale_world"]["captions"] == shipped and not (tmp_path / shipped).exists()
    assert scale_plan.captions_path(config) == str(CLONE / shipped)
    scale_plan.check(config)
    config["scale_world"]["captions"] = "resources/captions/absent.parquet"
    with pytest.raises(
        scale_plan.ScaleConfigError,
        match=r"^config key scale_world\.captions: no file resources/captions/absent\.parquet$",
    ):
        scale_plan.check(config)
    (tmp_path / shipped).parent.mkdir(parents=True)
    shutil.copy(CLONE / shipped, tmp_path / shipped)
    config["scale_world"]["captions"] = shipped
    assert scale_plan.captions_path(config) == shipped
    scale_plan.check(config)


def test_run_targets_stop_at_the_selection_in_captions_only_mode():
    config = _config()
    config["datasets"] = {"scale": {"kind": "laion"}, "other": {"kind": "cifar10", "path": "x"}}
    assert scale_plan.run_targets(config) == ["results/datasets/scale/manifest.parquet"]
    config["scale_world"]["captions_only"] = True
    assert scale_plan.run_targets(config) == ["results/curate/scale/selection.parquet"]


def test_the_scale_config_is_valid_and_points_the_laion_section_at_the_world(repo_root):
    from imagenot.core.config import load_config
    from imagenot.core.stages import check_workflow_config

    # the config alone, not against a clone's own results/ (a finished demo there is another study)
    config = check_workflow_config(
        load_config(repo_root / "config" / "scale.yaml"), against_results=False
    )
    assert config["laion"]["shard_pattern"] == LAION2B_EN_PATTERN
    assert [n for n, s in config["datasets"].items() if s["kind"] == "laion"]
    url_map = config["acquire"]["url_map"]
    assert any(generated.is_generated(v) for v in url_map.values())
    assert url_map.get(config["scale_world"]["url_base"].rstrip("/") + "/")


# --- generator ------------------------------------------------------------------------------


def test_shards_have_the_laion2b_en_schema_row_groups_and_are_seeded(tmp_path, web, lemma_table):
    cfg = _settings(seed=5, rows_per_shard=3000, row_group_rows=1000)
    a, b, c = tmp_path / "a.parquet", tmp_path / "b.parquet", tmp_path / "c.parquet"
    summary = _write(3, cfg, web, lemma_table, a)
    _write(3, cfg, web, lemma_table, b)
    _write(4, cfg, web, lemma_table, c)
    assert a.read_bytes() == b.read_bytes()  # same seed and index: the same bytes
    meta = pq.ParquetFile(a).metadata
    assert (meta.num_rows, meta.num_row_groups) == (3000, 3)
    assert meta.row_group(0).column(0).compression == "SNAPPY"
    table = pq.read_table(a)
    assert [(f.name, str(f.type)) for f in table.schema] == [
        ("URL", "string"),
        ("TEXT", "string"),
        ("WIDTH", "int64"),
        ("HEIGHT", "int64"),
        ("similarity", "double"),
        ("hash", "int64"),
        ("punsafe", "float"),
        ("pwatermark", "float"),
    ]
    assert table["URL"][0].as_py() == "http://scale-world.invalid/00003/000000000.jpg"
    assert table["URL"][2999].as_py() == "http://scale-world.invalid/00003/000002999.jpg"
    assert table["TEXT"].null_count == 0
    assert min(table["similarity"].to_pylist()) >= 0.28
    assert len(set(table["hash"].to_pylist())) == 3000
    other = pq.read_table(c)
    assert table["TEXT"].to_pylist() != other["TEXT"].to_pylist()  # shards differ by index
    assert sum(summary["caption_kinds"].values()) == 3000
    assert all(n > 0 for n in summary["caption_kinds"].values())


def test_the_lemma_mix_gives_curation_work_at_every_step(tmp_path, web, lemma_table):
    """Matching a shard finds thousands of synsets, Zipf-like counts, ImageNet classes,
    captions naming exactly one synset and captions naming two vocabulary synsets."""
    from imagenot.curate.match import LemmaIndex, Matcher, match_shard
    from imagenot.curate.settings import MatchSettings
    from imagenot.demo.scale_world import vocabulary

    cfg = _settings(rows_per_shard=8000, row_group_rows=4000)
    path = tmp_path / LAION2B_EN_PATTERN.format(i=0)
    _write(0, cfg, web, lemma_table, path)
    match_settings = MatchSettings.from_config(validate_config({}))
    matcher = Matcher(LemmaIndex.from_lemma_table(lemma_table))
    matches, stats = match_shard(path, matcher, match_settings)
    assert stats["captions"] == 8000
    rows = matches["row"].to_numpy()
    wnids = np.asarray(matches["wnid"].to_pylist())
    counts = dict(zip(*np.unique(wnids, return_counts=True), strict=True))
    assert len(counts) > 2000
    vocab = vocabulary(lemma_table, cfg)
    vocab_ids = vocab.wnids.to_pylist()
    imagenet = {w for w, flag in zip(vocab_ids, vocab.imagenet, strict=True) if flag}
    assert len(imagenet) == cfg.n_imagenet_classes
    assert imagenet & set(counts)
    # Zipf: the ten top-ranked vocabulary synsets are matched far more than the median ones
    top = np.mean([counts.get(w, 0) for w in vocab_ids[:10]])
    middle = np.mean([counts.get(w, 0) for w in vocab_ids[1000:1100]])
    assert top > 10 * max(middle, 0.1)
    per_row = np.bincount(rows, minlength=8000)
    assert (per_row == 1).sum() > 500
    in_vocab = np.isin(wnids, vocab_ids)
    vocab_per_row = np.bincount(rows[in_vocab], minlength=8000)
    assert (vocab_per_row >= 2).sum() > 100


def test_bad_web_captions_name_the_file(tmp_path):
    from imagenot.demo.scale_world import read_web_captions

    path = tmp_path / "captions.parquet"
    pq.write_table(pa.table({"TEXT": ["", "  "]}), path)
    with pytest.raises(ValueError, match=r"captions\.parquet"):
        read_web_captions(path)
    pq.write_table(pa.table({"caption": ["a"]}), path)
    with pytest.raises(ValueError, match=r"captions\.parquet"):
        read_web_captions(path)


# --- generated images -----------------------------------------------------------------------


def test_generated_images_are_served_for_any_path():
    from PIL import Image

    from imagenot.acquire.fetch import serve_directories

    url_map = {"http://scale-world.invalid/": "generate:3"}
    with serve_directories(url_map) as mapping:
        base = mapping["http://scale-world.invalid/"]

        def get(path):
            with urllib.request.urlopen(base + path, timeout=10) as response:
                assert response.headers["Content-Type"] == "image/jpeg"
                return response.read()

        first = get("00001/000000042.jpg")
        assert get("00001/000000042.jpg") == first
        assert get("any/other/path.jpg") != first
    image = Image.open(io.BytesIO(first))
    assert image.format == "JPEG"
    assert image.size == (64, 64)
    image.load()


def test_generated_url_map_values_are_not_rule_inputs():
    from imagenot.acquire import plan as acquire_plan

    config = validate_config(
        {"acquire": {"url_map": {"http://a/": "generate:0:32", "http://b/": "some/dir"}}}
    )
    assert acquire_plan.url_map_dirs(config) == ["some/dir"]
    assert generated.parse_generated("generate:0:32") == (0, 32)
    assert generated.parse_generated("generate:7") == (7, generated.GENERATED_IMAGE_SIZE)
    for bad in ("generate:x", "generate:1:2:3", "generate:1:4"):
        with pytest.raises(generated.UrlMapError, match="url_map"):
            generated.parse_generated(bad)


# --- bench_scale: parsing and projection (pure) ---------------------------------------------


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_benchmark("bench_scale")


DRY_RUN = """
[Mon Nov 23 15:24:43 2026]
rule curate_match:
    input: results/scale_world/laion/part-00000-x.parquet, results/wordnet/noun_lemmas.parquet
    output: results/curate/matches/00000.parquet
    log: results/logs/curate_match/00000.log
    jobid: 3
    benchmark: results/benchmarks/curate_match/00000.tsv
    reason: Forced execution
    wildcards: shard=00000
    priority: 10
    resources: tmpdir=<TBD>, mem_mb=8000, mem_mib=7630, runtime=240
[Mon Nov 23 15:24:43 2026]
rule curate_select:
    input: results/curate/scale/captions/00000.parquet
    output: results/curate/scale/selection.parquet
    jobid: 5
    benchmark: results/benchmarks/curate_select/scale.tsv
    reason: Forced execution
    wildcards: dataset=scale
    threads: 2
    resources: tmpdir=<TBD>, runtime=<TBD>, gpu=0, mem_mb=<TBD>, mem=32 GB
"""

RUN_LOG = """
localrule curate_select:
    input: results/curate/scale/captions/00000.parquet
    output: results/curate/scale/selection.parquet
    jobid: 5
    benchmark: results/benchmarks/curate_select/scale.tsv
    wildcards: dataset=scale
    threads: 2
    resources: tmpdir=/tmp, runtime=1440, gpu=0, mem_mb=32000, mem=32 GB
"""


def test_jobs_are_parsed_from_a_dry_run_and_tbd_resources_from_the_run_log(bench, tmp_path):
    jobs = bench.parse_jobs(DRY_RUN)
    assert [j["rule"] for j in jobs] == ["curate_match", "curate_select"]
    assert jobs[0]["wildcards"] == {"shard": "00000"}
    assert jobs[0]["resources"]["mem_mb"] == "8000"
    assert jobs[1]["threads"] == 2 and jobs[1]["resources"]["runtime"] == "<TBD>"
    header = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"
    for path, row in (
        ("curate_match/00000.tsv", "6.1\t0:00:06\t236.4\t1\t1\t1\t0\t0\t50\t5.5\n"),
        ("curate_select/scale.tsv", "2.0\t0:00:02\t512.0\t1\t1\tNA\t0\t0\t50\t3.0\n"),
    ):
        (tmp_path / "results/benchmarks" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "results/benchmarks" / path).write_text(header + row)
    measured = bench.measured_jobs(DRY_RUN, RUN_LOG, tmp_path)
    assert [(m["rule"], m["max_rss"], m["cpu_time"], m["rss_source"]) for m in measured] == [
        ("curate_match", 236.4, 5.5, bench.SOURCE_SAMPLED),
        ("curate_select", 512.0, 3.0, bench.SOURCE_SAMPLED),
    ]
    # the job's own usage line (imagenot.core.job_usage), the last in its log, replaces the sample
    log = tmp_path / "results/logs/curate_match/00000.log"
    log.parent.mkdir(parents=True)
    line = 'imagenot job-usage: {"peak_rss_mb": %s, "cpu_s": %s}\n'
    log.write_text("started\n" + line % (100.0, 1.0) + "Traceback ...\n" + line % (250.5, 7.25))
    measured = bench.measured_jobs(DRY_RUN, RUN_LOG, tmp_path)
    assert [(m["max_rss"], m["cpu_time"], m["rss_source"]) for m in measured] == [
        (250.5, 7.25, bench.SOURCE_JOB),
        (512.0, 3.0, bench.SOURCE_SAMPLED),
    ]
    assert measured[0]["sampled_max_rss"] == 236.4
    assert (measured[0]["mem_mb"], measured[0]["runtime"]) == (8000.0, 240.0)
    assert (measured[1]["mem_mb"], measured[1]["runtime"]) == (32000.0, 1440.0)


def _job(rule, wildcards, rss, cpu, s=None, mem=8000, runtime=240, inputs=(), outputs=()):
    return {
        "input_mb": 1.0 * len(inputs),
        "rule": rule,
        "wildcards": wildcards,
        "input": list(inputs),
        "output": list(outputs),
        "s": s if s is not None else cpu,
        "cpu_time": cpu,
        "max_rss": rss,
        "mem_mb": mem,
        "runtime": runtime,
    }


def _jobs(n_parts: int, candidates_rss: float, embed_rule: str = "curate_embed") -> list[dict]:
    """A DAG like today's: world -> captions per part -> gathers -> downloads -> build."""
    shards = [f"results/scale_world/laion/{i}.parquet" for i in range(n_parts)]
    captions = [f"results/curate/d/captions/{i}.parquet" for i in range(n_parts)]
    jobs = [_job("prepare_wordnet", {}, 400.0, 20.0, outputs=["results/wordnet/nltk_data"])]
    jobs += [
        _job("scale_world", {"shard": f"{i:05d}"}, 200.0, 1e6, outputs=[shards[i]])
        for i in range(n_parts)
    ]
    jobs += [
        _job(
            "curate_captions",
            {"dataset": "d", "shard": f"{i:05d}"},
            300.0 + i,
            10.0,
            inputs=[shards[i]],
            outputs=[captions[i]],
        )
        for i in range(n_parts)
    ]
    jobs.append(
        _job(
            "curate_candidates",
            {"dataset": "d"},
            candidates_rss,
            4.0 * n_parts,
            inputs=shards,
            outputs=["results/curate/d/candidates.parquet"],
        )
    )
    jobs.append(
        _job(
            embed_rule,
            {"dataset": "d"},
            900.0,
            50.0,
            mem=32000,
            runtime=2880,
            inputs=captions,
            outputs=["results/curate/d/selection.parquet"],
        )
    )
    parts = [f"results/acquire/d/parts/part-{p:05d}.parquet" for p in range(2)]
    jobs += [
        _job(
            "acquire_download",
            {"dataset": "d", "part": f"{p:05d}"},
            150.0,
            1.0,
            s=4.0,
            mem=2000,
            runtime=30,
            inputs=["results/curate/d/selection.parquet"],
            outputs=[parts[p]],
        )
        for p in range(2)
    ]
    jobs.append(
        _job(
            "acquire_build",
            {"dataset": "d"},
            200.0 + 25 * n_parts,
            2.0,
            mem=2000,
            runtime=30,
            inputs=parts,
            outputs=["results/datasets/d/manifest.parquet"],
        )
    )
    return jobs


def test_projection_follows_the_documented_rules(bench):
    result = bench.project(
        _jobs(2, 500.0),
        _jobs(4, 700.0),
        (2, 4),
        1000,
        max_runtime_min=1440,
        selected=(50, 100),
        paper_selected=2_000_000,
        paper_download_parts=64,
        work_request=lambda rule, mb: (
            (1000 + round(mb), 5 + mb) if rule == "curate_captions" else None
        ),
    )
    assert result["projection_target"] == {"captions": 2_320_000_000, "parts": 128}
    rules = {r["rule"]: r for r in result["rules"]}
    rows_per_part = 2.32e9 / 128
    # per-part, bounded: 128 jobs per dataset, measured peak, CPU s per row x rows per part
    cap = rules["curate_captions"]
    assert cap["class"] == "per_part" and cap["jobs"] == [2, 4]
    assert cap["projected"]["jobs"] == 128
    assert cap["projected"]["peak_rss_mb"] == 303.0
    assert cap["cpu_s_per_item"] == pytest.approx(10.0 / 1000)
    assert cap["projected"]["runtime_min"] == pytest.approx(0.01 * rows_per_part / 60, abs=0.01)
    assert cap["fits"] is False  # 3021 min > 240 requested
    # a work-sized rule's request on laion2B-en follows its projected input (1 MB per 1000 rows)
    assert cap["input_mb"] == [1.0, 1.0]
    assert cap["projected"]["input_mb"] == pytest.approx(rows_per_part / 1000, abs=0.01)
    assert cap["requested_at_target"]["mem_mb"] == 1000 + round(rows_per_part / 1000)
    assert any("exceeds the site maximum" in n for n in cap["notes"])
    assert rules["curate_candidates"]["requested_at_target"] is None
    assert result["all_within_requests"] is False
    # the world generator does not fit, but it is the scale model's own job
    world = rules["scale_world"]
    assert world["scale_model_only"] is True and world["fits"] is False
    assert cap["scale_model_only"] is False
    # gather: memory linear in parts (500 at 2, 700 at 4 -> 700 + 100 * 124), runtime in rows
    cand = rules["curate_candidates"]
    assert cand["class"] == "gather"
    assert cand["projected"]["peak_rss_mb"] == pytest.approx(700 + 100 * 124)
    assert cand["projected"]["runtime_min"] == pytest.approx(
        (16 + (16 - 8) / 2000 * (2.32e9 - 4000)) / 60, abs=0.01
    )
    assert cand["fits"] is False
    # embedding: runtime from the published RoBERTa-large rate, every caption of the dataset
    embed = rules["curate_embed"]
    assert embed["projected"]["runtime_min"] == pytest.approx(2.32e9 / 800 / 60, abs=0.01)
    assert result["embedding_rate"]["sentences_per_s"] == 800
    assert "V100" in result["embedding_rate"]["gpu"]
    # download parts: the paper's parts and selected images; wall time (s) counts, not CPU
    down = rules["acquire_download"]
    assert down["class"] == "download_part"
    assert down["projected"]["jobs"] == 64
    assert down["cpu_s_per_item"] == pytest.approx(4.0 / 50)
    assert down["projected"]["runtime_min"] == pytest.approx(
        4.0 / 50 * 2_000_000 / 64 / 60, abs=0.01
    )
    assert down["projected"]["peak_rss_mb"] == 150.0
    # the build reads download parts: above the floor (150, the downloads' peak), its peak
    # scales with the selected images (100 at the larger size, 2 M in the paper)
    build = rules["acquire_build"]
    assert build["class"] == "selection_gather"
    assert build["projected"]["peak_rss_mb"] == pytest.approx(150 + 150 * 2_000_000 / 100)
    assert build["projected"]["memory_rule"].startswith("proportional above the floor")
    assert build["projected"]["runtime_min"] == pytest.approx(2.0 / 100 * 2_000_000 / 60, abs=0.01)
    # WordNet preparation reads no LAION output: measured as it is
    wordnet = rules["prepare_wordnet"]
    assert wordnet["class"] == "fixed"
    assert (wordnet["projected"]["peak_rss_mb"], wordnet["projected"]["runtime_min"]) == (
        400.0,
        pytest.approx(20 / 60, abs=0.01),
    )
    assert result["interpreter_floor_mb"] == 150.0
    # _job rows carry no source: they count as sampled, and the JSON says so per rule
    assert result["peak_rss_sources"] == {bench.SOURCE_SAMPLED: len(_jobs(2, 0)) + len(_jobs(4, 0))}
    assert wordnet["peak_rss_source"] == [bench.SOURCE_SAMPLED]


def test_busy_seconds_are_exact_cpu_seconds_unless_the_job_waits(bench):
    own = {"cpu_time": 2.0, "s": 9.0, "cpu_source": bench.SOURCE_JOB}
    assert bench._busy(own) == 2.0  # a loaded machine's wall time is not the job's
    assert bench._busy(own, waits=True) == 9.0  # a download waits on the network
    assert bench._busy({**own, "cpu_source": bench.SOURCE_SAMPLED}) == 9.0


def test_a_streamed_selection_gather_is_projected_by_the_rows_it_holds(bench):
    def jobs(n_parts):
        out = _jobs(n_parts, 500.0)
        for j in out:
            if j["rule"] == "acquire_build":
                j["rows_held"] = 1000  # its usage line: at most 1000 rows at once
        return out

    result = bench.project(
        jobs(2), jobs(4), (2, 4), 1000, max_runtime_min=1440, selected=(50, 100),
        paper_selected=2_000_000, paper_download_parts=64,
    )  # fmt: skip
    build = {r["rule"]: r for r in result["rules"]}["acquire_build"]
    # 300 MB at 100 images, floor 150: x min(2 M, 1000) / min(100, 1000) above the floor
    assert build["projected"]["peak_rss_mb"] == pytest.approx(150 + 150 * 10)
    assert "holds at most 1000 rows" in build["projected"]["memory_rule"]


def test_a_gather_that_declares_rows_held_scales_its_arrow_data_by_them(bench):
    """The caption selection's memory follows classes x kept captions (its ``rows_held``), not
    the number of parts: its Arrow data is extrapolated in rows held to the paper's, the rest
    of its peak (interpreter, allocator slack: jitter) is kept as measured, not scaled."""

    def jobs(n_parts, arrow, held):
        out = _jobs(n_parts, 500.0)
        for j in out:
            if j["rule"] == "curate_candidates":
                j.update(arrow_peak=arrow, rows_held=held)
        return out

    result = bench.project(
        jobs(2, 200.0, 1000), jobs(4, 220.0, 2000), (2, 4), 1000, max_runtime_min=1440,
        selected=(50, 100), paper_selected=2_000_000, paper_download_parts=64,
        paper_held=101_000,
    )  # fmt: skip
    cand = {r["rule"]: r for r in result["rules"]}["curate_candidates"]
    # rest: max(500 - 200, 500 - 220) = 300; Arrow: 220 + 20 MB per 1000 rows x 99 000 more
    assert cand["projected"]["peak_rss_mb"] == pytest.approx(300 + 220 + 20 * 99)
    assert "linear in rows held" in cand["projected"]["memory_rule"]
    # without the paper's rows held the rule falls back to linear in parts (Arrow data only)
    parts = bench.project(
        jobs(2, 200.0, 1000), jobs(4, 220.0, 2000), (2, 4), 1000, max_runtime_min=1440,
    )  # fmt: skip
    cand = {r["rule"]: r for r in parts["rules"]}["curate_candidates"]
    assert cand["projected"]["peak_rss_mb"] == pytest.approx(300 + 220 + 10 * 124)
    assert "linear in parts" in cand["projected"]["memory_rule"]


def test_projection_of_per_part_jobs_whose_memory_grows_and_of_fitting_jobs(bench):
    small = [
        _job("curate_x", {"shard": f"{i}"}, 300.0, 0.001, mem=100_000, runtime=1440)
        for i in range(2)
    ]
    large = [
        _job("curate_x", {"shard": f"{i}"}, 600.0, 0.001, mem=100_000, runtime=1440)
        for i in range(4)
    ]
    result = bench.project(small, large, (2, 4), 1000, max_runtime_min=1440)
    rule = result["rules"][0]
    assert rule["projected"]["memory_rule"].startswith("grew")
    assert rule["projected"]["peak_rss_mb"] == pytest.approx(600 + 150 * 124)
    assert rule["fits"] is True and result["all_within_requests"] is True
    tight = bench.project(small, large, (2, 4), 1000, max_runtime_min=0.001)
    assert tight["all_within_requests"] is False


def test_two_runs_are_compared_rule_by_rule(bench, tmp_path, capsys):
    def result(peak, runtime):
        rules = [
            {"rule": "a", "projected": {"peak_rss_mb": peak, "runtime_min": runtime}},
            {"rule": "b", "projected": {"peak_rss_mb": 100.0, "runtime_min": 0.0}},
        ]
        return {"rules": rules}

    rows = bench.agreement(result(1000.0, 2.0), result(1100.0, 1.0))
    assert [r["rule"] for r in rows] == ["a", "b"]
    assert rows[0]["peak_rss_mb"] == [1000.0, 1100.0] and rows[0]["peak_ratio"] == 1.1
    assert rows[0]["runtime_ratio"] == 2.0
    assert (rows[1]["peak_ratio"], rows[1]["runtime_ratio"]) == (1.0, 1.0)
    one, two = tmp_path / "1.json", tmp_path / "2.json"
    one.write_text(json.dumps(result(1000.0, 2.0)))
    two.write_text(json.dumps(result(900.0, 2.0)))
    assert bench.main(["--compare", str(one), str(two)]) == 0
    assert "| a | 1000, 900 | 1.111 |" in capsys.readouterr().out


def _measured(jobs: list[dict], bench) -> list[dict]:
    """``_jobs`` rows as ``measured_jobs`` gives them for jobs that wrote their usage line."""
    return [{**j, "rss_source": bench.SOURCE_JOB} for j in jobs]


def test_check_classes_rules_and_finds_jobs_that_do_not_scale_with_parts(bench):
    plans = (_jobs(1, 500.0), _jobs(2, 500.0))
    result = bench.check(_measured(_jobs(1, 500.0), bench), plans, (1, 2))
    rules = {r["rule"]: r for r in result["rules"]}
    assert {name: (r["class"], r["jobs"]) for name, r in rules.items()} == {
        "prepare_wordnet": ("fixed", [1, 1]),
        "scale_world": ("per_part", [1, 2]),
        "curate_captions": ("per_part", [1, 2]),
        "curate_candidates": ("gather", [1, 1]),
        "curate_embed": ("gather", [1, 1]),
        "acquire_download": ("download_part", [2, 2]),
        "acquire_build": ("selection_gather", [1, 1]),
    }
    assert result["jobs_scale_with_parts"] is True and result["not_run"] == []
    assert all(r["jobs_run"] == r["jobs"][0] for r in result["rules"])
    assert (
        rules["curate_embed"]["requested_mem_mb"],
        rules["curate_embed"]["requested_runtime_min"],
    ) == (32000, 2880)
    assert rules["acquire_build"]["peak_rss_mb"] == 225.0
    assert result["peak_rss_sources"] == {bench.SOURCE_JOB: len(_jobs(1, 0))}
    assert "jobs scale with parts: True" in bench.check_lines(result)
    # planted: a per-part rule that does not grow, a gather that does
    flat = [
        j for j in plans[1] if j["wildcards"].get("shard") != "00001" or j["rule"] != "scale_world"
    ]
    result = bench.check(_measured(_jobs(1, 500.0), bench), (plans[0], flat), (1, 2))
    assert {r["rule"] for r in result["rules"] if not r["scales_with_parts"]} == {"scale_world"}
    assert result["jobs_scale_with_parts"] is False
    assert "jobs scale with parts: False" in bench.check_lines(result)
    gather = next(j for j in plans[1] if j["rule"] == "curate_candidates")
    result = bench.check(_measured(_jobs(1, 500.0), bench), (plans[0], [*plans[1], gather]), (1, 2))
    assert {r["rule"] for r in result["rules"] if not r["scales_with_parts"]} == {
        "curate_candidates"
    }
    # planted: a job without its usage line, one without a request, a rule that did not run
    measured = _measured(_jobs(1, 500.0), bench)
    measured[1]["rss_source"] = None  # scale_world: Snakemake's sample only
    measured[-1]["mem_mb"] = None  # acquire_build
    measured = [j for j in measured if j["rule"] != "prepare_wordnet"]
    result = bench.check(measured, plans, (1, 2))
    rules = {r["rule"]: r for r in result["rules"]}
    assert rules["scale_world"]["peak_rss_source"] == [bench.SOURCE_SAMPLED]
    assert result["peak_rss_sources"][bench.SOURCE_SAMPLED] == 1
    assert rules["acquire_build"]["requested_mem_mb"] is None
    assert result["not_run"] == ["prepare_wordnet"]
    assert rules["prepare_wordnet"]["jobs_run"] == 0
    assert rules["prepare_wordnet"]["requested_mem_mb"] is None
    with pytest.raises(SystemExit):
        bench.main(["--check", "--markdown"])


# --- end to end -----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_scale_check_builds_the_dataset_from_laion2b_en_named_shards(
    bench, repo_root, tmp_path, capsys, nltk_data, lemma_table
):
    """``bench_scale --check --quick``: the curation and dataset-building DAG of the scale world
    run on one part of 20,000 rows, and planned at one and two parts (the projection, which
    runs both sizes, is tested on its own above; docs/scale.md reports the full benchmark).

    Two cuts keep this to one short run: one download part (img2dataset's start-up is most of a
    download job here), and WordNet's two jobs, which read nothing of LAION, start from this
    session's prepared WordNet and this module's lemma table, so the run leaves them out."""
    from imagenot.core.io import write_parquet
    from imagenot.core.paths import NLTK_DATA, NOUN_LEMMAS

    config = yaml.safe_load((repo_root / "config" / "scale.yaml").read_text())
    config["acquire"]["download_parts"] = 1
    config_path = tmp_path / "scale.yaml"
    config_path.write_text(yaml.safe_dump(config))
    work = tmp_path / "parts-1"
    shutil.copytree(nltk_data, work / NLTK_DATA)
    write_parquet(lemma_table, work / NOUN_LEMMAS)
    argv = [
        "--check",
        "--quick",
        "--json",
        "--workdir",
        str(tmp_path),
        "--config",
        str(config_path),
    ]
    assert bench.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["sizes"] == [1, 2] and result["rows_per_part"] == 20_000
    manifest = work / "results/datasets/scale/manifest.parquet"
    assert pq.ParquetFile(manifest).metadata.num_rows > 0
    assert result["selected_images"] > 0
    assert (work / "results/scale_world/laion" / LAION2B_EN_PATTERN.format(i=0)).is_file()
    # the plan at two parts names the second part as laion2B-en does
    plan = bench.parse_jobs((tmp_path / "parts-2" / "bench_dry_run.log").read_text())
    assert sorted(f for j in plan if j["rule"] == "scale_world" for f in j["output"]) == [
        f"results/scale_world/laion/{LAION2B_EN_PATTERN.format(i=i)}" for i in (0, 1)
    ]
    rules = {r["rule"]: r for r in result["rules"]}
    expected = {
        "prepare_wordnet": ("fixed", [1, 1]),
        "scale_world": ("per_part", [1, 2]),
        "curate_match": ("per_part", [1, 2]),
        "curate_candidates": ("gather", [1, 1]),
        "acquire_download": ("download_part", [1, 1]),
        "acquire_build": ("selection_gather", [1, 1]),
    }
    assert {name: (rules[name]["class"], rules[name]["jobs"]) for name in expected} == expected
    assert result["jobs_scale_with_parts"] is True
    # every job ran but WordNet's two, whose outputs were there
    assert sorted(result["not_run"]) == ["noun_lemmas", "prepare_wordnet"]
    ran = [r for r in result["rules"] if r["rule"] not in result["not_run"]]
    assert all(r["jobs_run"] == r["jobs"][0] for r in ran)
    assert all(r["requested_mem_mb"] and r["requested_runtime_min"] for r in ran)
    # every job recorded its own peak (imagenot.core.job_usage): no figure is Snakemake's sample
    assert result["peak_rss_sources"] == {bench.SOURCE_JOB: sum(r["jobs_run"] for r in ran)}
    assert all(r["peak_rss_source"] == [bench.SOURCE_JOB] for r in ran)
