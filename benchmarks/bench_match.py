"""Benchmark step 1 (lemma matching): end-to-end captions per second per core.

Generates a shard of >= 1M captions (the 1,000 real web captions of resources/captions/, each
with one random WordNet noun lemma appended so every caption has matches), then times
read + match all ~117k noun lemmas + write (exactly what `imagenot match` does: the streamed
``write_shard_matches``), in one process pinned to one core and in two processes pinned to two
cores (fork, one half-shard each); best of ``--repeat`` runs. The LAIONet-style baseline
(`' ' + lemma + ' ' in caption` over the same lemma keys) is timed on a sample in the same run.

``--compare-to REV`` instead measures this checkout against an earlier commit in one run, on the
same shard and lemma table: the commit is checked out in a temporary git worktree, one worker
process per tree (each imports its own ``imagenot``, builds its matcher once, then matches the
shard end to end as that tree's ``imagenot match`` does, once per request), and the runs
alternate between the two trees, the order swapped every round (earlier, this, this, earlier,
...) so that a drift of the machine's load falls on both alike. Pin it from outside, e.g.
``taskset -c 1 nice python benchmarks/bench_match.py --json --compare-to 11fcb8f``.

On a shared machine, other jobs take turns on the same core, which inflates wall-clock times;
``captions_per_cpu_s`` (the process's own CPU time) is the steadier per-core figure there.

    python benchmarks/bench_match.py --json [--rows 1000000] [--repeat 3] [--nltk-data DIR]
    python benchmarks/bench_match.py --json --compare-to REV [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
WEB = REPO / "resources" / "captions" / "web_captions_1000.parquet"


def make_shard(path: Path, rows: int, lemma_keys: list[str], seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    base = pq.read_table(WEB, columns=["TEXT"]).column("TEXT").combine_chunks()
    texts = base.take(pa.array(rng.integers(0, len(base), rows)))
    extra = pa.array(lemma_keys).take(pa.array(rng.integers(0, len(lemma_keys), rows)))
    text = pc.binary_join_element_wise(texts, extra, " ")
    urls = pc.binary_join_element_wise(
        "http://example.invalid/", pc.cast(pa.array(np.arange(rows)), pa.string()), ""
    )
    pq.write_table(pa.table({"URL": urls, "TEXT": text}), path, compression="zstd")


def run_match(matcher, shard: Path, out: Path) -> dict:
    """Match ``shard`` into ``out`` as the imported tree's ``imagenot match`` does: streamed
    (``write_shard_matches``), or, in trees from before streaming, ``match_shard`` then
    ``write_matches``."""
    import inspect

    from imagenot.curate import match

    writer = getattr(match, "write_shard_matches", None)
    settings = None
    if writer is not None and "settings" in inspect.signature(writer).parameters:
        # trees with settings objects: the schema's defaults, as the rule passes them
        from imagenot.core.config import validate_config
        from imagenot.curate.settings import MatchSettings

        settings = MatchSettings.from_config(validate_config({}))
    cpu0, start = time.process_time(), time.perf_counter()
    if settings is not None:
        stats = match.write_shard_matches(shard, matcher, out, settings, progress=False)
    elif writer is not None:
        stats = match.write_shard_matches(shard, matcher, out, progress=False)
    else:
        table, stats = match.match_shard(shard, matcher, progress=False)
        match.write_matches(table, out)
    return {
        "wall_s": time.perf_counter() - start,
        "cpu_s": time.process_time() - cpu0,
        "matches": stats["matches"],
    }


_MATCHER = None


def _pin(cpus) -> None:
    if hasattr(os, "sched_setaffinity"):  # Linux
        os.sched_setaffinity(0, set(cpus))


def _child(args: tuple[str, str, int]) -> dict:
    _pin([args[2]])
    return run_match(_MATCHER, Path(args[0]), Path(args[1]))


def substring_baseline(captions: list[str], keys: list[str]) -> float:
    """Seconds per caption of LAIONet's per-lemma substring loop over the same keys."""
    padded = [f" {k} " for k in keys]
    start = time.perf_counter()
    for caption in captions:
        text = f" {caption} "
        _ = [k for k in padded if k in text]
    return (time.perf_counter() - start) / len(captions)


def match_process() -> None:
    """Set this process up as the imported tree's ``imagenot match`` does: Arrow on one thread,
    and glibc's malloc keeping freed memory where that tree's command does."""
    import inspect

    from imagenot.curate import cli

    pa.set_cpu_count(1)
    pa.set_io_thread_count(1)
    if "keep_freed_memory()" in inspect.getsource(cli._match):
        from imagenot.core.io import keep_freed_memory

        keep_freed_memory()


def worker(lemmas: str, shard: str, out: str) -> None:
    """One tree's side of ``--compare-to``: build the matcher, then one end-to-end match per
    line read from stdin, answered by one JSON line on stdout."""
    match_process()
    from imagenot.curate.match import LemmaIndex, Matcher, read_lemma_table

    matcher = Matcher(LemmaIndex.from_lemma_table(read_lemma_table(lemmas)))
    print(json.dumps({"ready": True}), flush=True)
    for _ in sys.stdin:
        print(json.dumps(run_match(matcher, Path(shard), Path(out))), flush=True)


def _summary(runs: list[dict], rows: int) -> dict:
    rate = sorted(rows / r["wall_s"] for r in runs)
    per_cpu = sorted(rows / r["cpu_s"] for r in runs)
    return {
        "captions_per_s_per_core_median": round(statistics.median(rate)),
        "captions_per_s_per_core_range": [round(rate[0]), round(rate[-1])],
        "captions_per_cpu_s_median": round(statistics.median(per_cpu)),
        "captions_per_cpu_s_range": [round(per_cpu[0]), round(per_cpu[-1])],
        "runs_wall_s": [round(r["wall_s"], 3) for r in runs],
        "runs_cpu_s": [round(r["cpu_s"], 3) for r in runs],
        "matches": runs[0]["matches"],
    }


def compare(rev: str, rows: int, rounds: int, nltk_data: str) -> dict:
    """This checkout against ``rev``, interleaved in one run (see the module docstring)."""
    from imagenot.core.wordnet import load_wordnet, noun_lemma_table
    from imagenot.curate.match import LemmaIndex

    load_before = os.getloadavg()[0]
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        lemmas = tmp / "lemmas.parquet"
        table = noun_lemma_table(load_wordnet(nltk_data))
        pq.write_table(table, lemmas)
        shard = tmp / "shard.parquet"
        make_shard(shard, rows, LemmaIndex.from_lemma_table(table).keys)
        earlier = tmp / "earlier"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(earlier), commit],
            check=True,
            capture_output=True,
        )
        trees = {"earlier": earlier, "this": REPO}
        procs = {}
        try:
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree / "workflow")}
                argv = [sys.executable, __file__, "--worker", str(lemmas), str(shard)]
                procs[name] = subprocess.Popen(
                    [*argv, str(tmp / f"{name}.parquet")],
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            for proc in procs.values():
                json.loads(proc.stdout.readline())  # matcher built
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for i in range(rounds):
                for name in ("earlier", "this") if i % 2 == 0 else ("this", "earlier"):
                    procs[name].stdin.write("run\n")
                    procs[name].stdin.flush()
                    runs[name].append(json.loads(procs[name].stdout.readline()))
        finally:
            for proc in procs.values():
                proc.stdin.close()
                proc.wait()
            subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(earlier)],
                check=False,
                capture_output=True,
            )
    ratios = [e["wall_s"] / t["wall_s"] for e, t in zip(runs["earlier"], runs["this"], strict=True)]
    cpu_ratios = [
        e["cpu_s"] / t["cpu_s"] for e, t in zip(runs["earlier"], runs["this"], strict=True)
    ]
    result = {"rows": rows, "rounds": rounds, "earlier_commit": commit}
    result["earlier"] = _summary(runs["earlier"], rows)
    result["this"] = _summary(runs["this"], rows)
    result["speed_ratio_this_over_earlier_median"] = round(statistics.median(ratios), 3)
    result["speed_ratio_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    result["cpu_speed_ratio_median"] = round(statistics.median(cpu_ratios), 3)
    result["cpu_speed_ratio_range"] = [round(min(cpu_ratios), 3), round(max(cpu_ratios), 3)]
    result["cpus_allowed"] = sorted(os.sched_getaffinity(0))
    result["cpu_count"] = os.cpu_count()
    result["load_average_before"] = round(load_before, 2)
    result["load_average"] = round(os.getloadavg()[0], 2)
    return result


def main() -> None:
    global _MATCHER
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(*sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3, help="runs of each timing; best kept")
    parser.add_argument("--baseline-sample", type=int, default=200)
    parser.add_argument("--nltk-data", default=str(REPO / "results" / "wordnet" / "nltk_data"))
    parser.add_argument(
        "--compare-to",
        metavar="REV",
        help="measure against this earlier commit instead, interleaved in one run",
    )
    parser.add_argument("--rounds", type=int, default=5, help="--compare-to: runs of each tree")
    args = parser.parse_args()
    if args.compare_to:
        result = compare(args.compare_to, args.rows, args.rounds, args.nltk_data)
        print(json.dumps(result) if args.json else json.dumps(result, indent=2))
        return
    match_process()
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else [0, 1]
    load_before = os.getloadavg()[0]

    from imagenot.curate.match import LemmaIndex, Matcher
    from imagenot.curate.text import normalise

    t0 = time.perf_counter()
    index = LemmaIndex.from_wordnet(args.nltk_data)
    matcher = Matcher(index)
    build_s = time.perf_counter() - t0
    _MATCHER = matcher

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        shard = tmp / "shard.parquet"
        make_shard(shard, args.rows, index.keys)
        _pin(cpus[:1])
        runs = [run_match(matcher, shard, tmp / "out.parquet") for _ in range(args.repeat)]
        _pin(cpus)
        one = min(runs, key=lambda r: r["wall_s"])
        matches = pq.read_metadata(tmp / "out.parquet").num_rows

        table = pq.read_table(shard)
        half = args.rows // 2
        halves = []
        for i, part in enumerate([table.slice(0, half), table.slice(half)]):
            pq.write_table(part, tmp / f"half{i}.parquet", compression="zstd")
            out = tmp / f"half{i}.out.parquet"
            halves.append((str(tmp / f"half{i}.parquet"), str(out), cpus[i % len(cpus)]))
        ctx = mp.get_context("fork")
        two_runs, child_runs = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            with ctx.Pool(2) as pool:
                child_runs.append(pool.map(_child, halves))
            two_runs.append(time.perf_counter() - start)
        two_s = min(two_runs)
        children = child_runs[two_runs.index(two_s)]

        sample = normalise(table.column("TEXT").slice(0, args.baseline_sample)).to_pylist()
    baseline_per_caption = substring_baseline(sample, index.keys)
    ours_per_caption = one["wall_s"] / args.rows
    result = {
        "rows": args.rows,
        "lemma_keys": len(index.keys),
        "synsets": len(index.wnids),
        "matches": matches,
        "index_build_s": round(build_s, 2),
        "one_process_s": round(one["wall_s"], 2),
        "one_process_cpu_s": round(one["cpu_s"], 2),
        "one_process_runs_s": [round(r["wall_s"], 2) for r in runs],
        "captions_per_s_per_core": round(args.rows / one["wall_s"]),
        "captions_per_cpu_s": round(args.rows / min(r["cpu_s"] for r in runs)),
        "two_processes_s": round(two_s, 2),
        "two_processes_runs_s": [round(t, 2) for t in two_runs],
        "two_processes_child_wall_s": [round(c["wall_s"], 2) for c in children],
        "two_processes_child_cpu_s": [round(c["cpu_s"], 2) for c in children],
        "two_process_speedup": round(one["wall_s"] / two_s, 2),
        "baseline_sample": args.baseline_sample,
        "baseline_captions_per_s": round(1 / baseline_per_caption, 1),
        "speedup_vs_substring_baseline": round(baseline_per_caption / ours_per_caption),
        "cpu_count": os.cpu_count(),
        "cpus_used": cpus[:2],
        "load_average_before": round(load_before, 2),
        "load_average": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result) if args.json else json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
