"""One GPU check for the next lent GPU (docs/gpu.md, "One GPU check"): in about five minutes,
one table of what the first GPU hour must tell a researcher, each figure beside what it is judged
against, measured in the same run on the same GPU.

    PYTHONPATH=workflow python3 benchmarks/gpu_check.py [--out DIR]   # a GPU node
    bash benchmarks/gpu_check.sh [OUT_DIR]                            # the same, python found
    bash benchmarks/gpu_check.sh --cpu [OUT_DIR]                      # smoke run on the CPU

Runs where python has only torch, torchvision (with pillow) and numpy plus the few wheels
``gpu_check_steps.WHEELS`` names (the project from source: ``PYTHONPATH=workflow``; no venv, no
``imagenot`` script): the first step lists what is missing, with the pip line. Each step is a
process of its own under its own time limit, within ``--budget`` seconds for the whole
(default 345): a step that hangs costs its limit, the others still run, and the table says
which did not finish. Steps, in order:

1. ``env``: the GPU, its driver, torch, CUDA, cores; the wheels missing;
2. ``preflight``, ``preflight_large``: ``imagenot preflight`` for the seven paper models
   (config/paper.yaml, ImageNot ST; the two largest in a call of their own, so that a time-out
   loses only them): memory at the per-GPU batch, the feed decoding in the CPU workers and on
   the GPU against the same images held on the device, read where the jobs would read them,
   bf16 against float32;
3. ``plain``: the reference plain loop (``benchmarks/gpu_plain_loop.py``: torch and
   torchvision only, nothing of the project) at the first GPU run's batches;
4. ``step``: the project's training step at the same batches, and the loop's own
   ``train_one_epoch``, judged against the plain loop (goal: 0.95), with the parts that differ
   (preprocess on the device, a pinned batch's copy);
5. ``decode``: nvJPEG against libjpeg-turbo pixel for pixel, its rate, and decoding ahead of a
   training step over many batches (corruption, device memory);
6. ``eval``: a robustness evaluation batch (17 transformations) in bf16 and float32;
7. ``caption``: caption embedding, fp16 against float32.

Writes ``gpu_check.md`` (the table, then each step's status) and ``gpu_check.json`` (every
step's figures) in ``--out`` (default ``results/gpu_check``), the steps' own JSON and logs
beside them, and prints the table. Exit status 1 when a step did not finish.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = REPO / "benchmarks" / "gpu_check_steps.py"
# seconds each step may take on a GPU (the budget cuts the later ones when earlier ones ran long)
LIMITS = {
    "env": 45,
    "preflight": 110,  # the five faster models
    "preflight_large": 100,  # ConvNeXt-L and EfficientNet-V2-L: a time-out loses only them
    "plain": 75,
    "step": 70,
    "decode": 45,
    "eval": 35,
    "caption": 45,
}
LARGE = ("convnext_large", "efficientnet_v2_l")
FEED_RATIO, STEP_RATIO = 0.9, 0.95  # the goals (docs/gpu.md)
DECODE_MEAN_ABS, DECODE_GROWTH_MIB = 1.5, 64


def plain_loop_path(given: str | None) -> Path:
    """The reference plain loop: ``--plain-loop`` (a file with the same command line), else the
    project's ``benchmarks/gpu_plain_loop.py``."""
    path = Path(given) if given else REPO / "benchmarks" / "gpu_plain_loop.py"
    if not path.is_file():
        raise SystemExit(f"gpu_check: --plain-loop {path}: no such file")
    return path


def python() -> list[str]:
    return [sys.executable, *(["-S"] if sys.flags.no_site else [])]


def commands(args, out: Path, plain: Path) -> dict[str, list[str]]:
    """Each step's command line."""
    cpu = ["--cpu"] if args.cpu else []
    threads = ["--threads", str(1 if args.cpu else args.threads)]
    step = {
        name: [*python(), str(STEPS), name, "--out", str(out / f"{name}.json"), *cpu, *threads]
        for name in (
            "env",
            "preflight",
            "preflight_large",
            "plain",
            "step",
            "decode",
            "eval",
            "caption",
        )
    }  # (the order they run in; the preflights' and the plain loop's lines follow)
    step["plain"] = [*python(), str(STEPS), "plain", "--out", str(out / "plain.json"), *cpu,
                     "--plain-loop", str(plain)]  # fmt: skip
    if args.cpu:
        config = ["--config", "config/config.yaml", "--spaces", "st", "--device", "cpu", "--workers", "1", "--threads", "1",
                  "--feed-steps", "2", "--feed-warmup", "1", "--feed-seconds", "0",
                  "--feed-images", "16", "--both-decoders"]  # fmt: skip
    else:
        config = ["--config", "config/paper.yaml", "--spaces", "imagenot_st",
                  "--threads", str(args.threads), "--feed-steps", "4", "--feed-warmup", "2",
                  "--feed-seconds", "1.5", "--feed-images", "384"]  # fmt: skip
    for name, models in (("preflight", args.models_fast), ("preflight_large", args.models_large)):
        if not models:
            step.pop(name)
            continue
        step[name] = [
            *python(), "-m", "imagenot.cli", "preflight", *config, "--models", models,
            "--datasets-root", str(out / "datasets"),  # the feed's sample: the check's folder
            "--json", str(out / f"{name}.json"), "--md", str(out / f"{name}.md"), "--table",
        ]  # fmt: skip
    return step


def run_steps(args, out: Path, plain: Path) -> dict[str, dict]:
    """Every step under its limit within the budget: {step: status, seconds, result}."""
    deadline = time.monotonic() + args.budget
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep + path if path else ''}"}
    ran = {}
    for name, cmd in commands(args, out, plain).items():
        left = deadline - time.monotonic()
        limit = min(LIMITS[name] * (3 if args.cpu else 1), left)
        if limit < 5:
            ran[name] = {"status": "not run", "why": "the check's time budget was spent"}
            print(f"[gpu_check] {name}: not run (budget spent)", flush=True)
            continue
        print(f"[gpu_check] {name} (limit {limit:.0f} s) ...", flush=True)
        start = time.monotonic()
        log = out / f"{name}.log"
        with log.open("w") as f:
            try:
                done = subprocess.run(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                                      timeout=limit, check=False)  # fmt: skip
                code = done.returncode
            except subprocess.TimeoutExpired:
                code = None
        seconds = round(time.monotonic() - start, 1)
        result_file = out / f"{name}.json"
        if name.startswith("preflight") and not result_file.exists():
            result_file = out / f"{name}.failed.json"  # a failed check's report
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if code is None:
            status = f"timed out after {seconds:.0f} s"
        elif result is None:
            tail = log.read_text()[-600:].strip().splitlines()
            status = f"error (exit {code}): {tail[-1] if tail else ''}"
        else:
            status = "ran" if code == 0 else f"ran, exit {code}"
        ran[name] = {"status": status, "seconds": seconds, "result": result}
        print(f"[gpu_check] {name}: {status} in {seconds} s", flush=True)
    return ran


def _fmt(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def _judge(ratio: float | None, goal: float) -> str:
    if ratio is None:
        return "-"
    return "pass" if ratio >= goal else f"below {goal}"


def rows(ran: dict[str, dict]) -> list[list[str]]:
    """The table's rows: check, subject, measured, against, ratio, verdict."""
    out = []
    res = {k: (v.get("result") or {}) for k, v in ran.items()}
    env = res.get("env", {})
    if env:
        missing = env.get("missing_wheels") or []
        out.append([
            "environment", env.get("gpu", "CPU"),
            f"driver {env.get('driver', '-')}, torch {env.get('torch')} (CUDA "
            f"{env.get('torch_cuda')}), torchvision {env.get('torchvision')}, python "
            f"{env.get('python')}, {env.get('cpus')} cores",
            "", "", "missing: " + " ".join(missing) if missing else "ok",
        ])  # fmt: skip
    # the preflight, per model: memory and precision; the feed both ways
    checks = [c for name in ("preflight", "preflight_large")
              for c in res.get(name, {}).get("checks", [])]  # fmt: skip
    by_model: dict[str, dict] = {}
    for c in checks:
        kind, _, rest = c["name"].partition(" ")
        if kind in ("memory", "feed", "precision") and not rest.startswith("source"):
            by_model.setdefault(rest.split(" ")[0], {}).setdefault(kind, c)
    for model, by in by_model.items():
        mem = by.get("memory", {}).get("values", {})
        prec = by.get("precision", {}).get("values", {})
        worst = {c["status"] for c in by.values()}
        verdict = next((s for s in ("fail", "warn", "pass", "info", "skip") if s in worst), "")
        out.append([
            "preflight", model,
            f"batch {_fmt(mem.get('per_gpu'))}/GPU, peak {_fmt(mem.get('peak_gib'), 1)} GiB of "
            f"{_fmt(mem.get('device_gib'), 1)}; bf16 grad cosine {_fmt(prec.get('grad_cosine'), 3)}",
            "", "", verdict,
        ])  # fmt: skip
        feed = by.get("feed", {}).get("values", {})
        for way, label in (
            ("cpu_decode", "feed, CPU workers"),
            ("gpu_decode", "feed, GPU decoding"),
        ):
            if f"{way}_img_per_s" not in feed:
                continue
            ratio = feed.get(f"{way}_ratio")
            extra = ""
            if way == "cpu_decode" and feed.get("workers"):
                extra = (f" ({feed['workers']} workers, "
                         f"{_fmt(feed.get('cpu_img_per_s_per_worker'))} each)")  # fmt: skip
            out.append([label, model, f"{_fmt(feed[f'{way}_img_per_s'])} img/s{extra}",
                        f"{_fmt(feed.get('device_img_per_s'))} img/s from device memory",
                        _fmt(ratio, 2), _judge(ratio, FEED_RATIO)])  # fmt: skip
    for c in {c["name"]: c for c in checks}.values():  # (both preflights measure the source)
        if c["name"].startswith("feed source"):
            out.append(["feed source", c["name"].split("(")[-1].rstrip(")"),
                        c["detail"][:160], "", "", c["status"]])  # fmt: skip
    # the training step against the plain loop
    plain = res.get("plain", {}).get("models", {})
    for model, row in res.get("step", {}).get("models", {}).items():
        base = (plain.get(model) or {}).get("img_per_s")
        for key, label in (("step_img_per_s", "step vs plain loop"),
                           ("loop_img_per_s", "loop vs plain loop")):  # fmt: skip
            ratio = row[key] / base if base else None
            measured = f"{_fmt(row[key])} img/s at {row['batch']}"
            if key == "step_img_per_s":
                measured += (
                    f" ({row['step_ms']} ms: preprocess {row['preprocess_ms']} ms, resized "
                    f"first {row.get('preprocess_resize_first_ms', '-')} ms; a pinned batch's "
                    f"copy {row['h2d_ms']} ms)"
                )
            out.append([label, model, measured,
                        f"{_fmt(base)} img/s plain" if base else "plain loop: -",
                        _fmt(ratio, 2), _judge(ratio, STEP_RATIO)])  # fmt: skip
    dec = res.get("decode", {})
    if dec:
        for kind, px in dec.get("pixels", {}).items():
            if "error" in px:
                out.append(["GPU decode pixels", kind, px["error"], "libjpeg-turbo", "", "error"])
                continue
            ok = px["mean_abs"] <= DECODE_MEAN_ABS or kind != "as stored"
            out.append([
                "GPU decode pixels", f"{kind} ({px['images']} images)",
                f"max |diff| {px['max_abs']}, mean {px['mean_abs']}, {px['over_2']:.2%} of values "
                f"> 2, {px['identical']} identical", "libjpeg-turbo (CPU)", "",
                ("pass" if ok else "differs") if kind == "as stored" else "info",
            ])  # fmt: skip
        growth = dec.get("device_used_growth_mib")
        bad = dec.get("corrupted_batches", [])
        ok = not bad and (growth is None or growth <= DECODE_GROWTH_MIB)
        out.append([
            "GPU decode ahead, under load", f"{dec.get('batches')} batches of {dec.get('batch')}",
            f"{len(bad)} corrupted; device memory {dec.get('device_used_mib_first_last', '-')} MiB "
            f"(+{_fmt(growth, 1)}), allocator +{_fmt(dec.get('allocated_growth_mib'), 1)} MiB; "
            f"{_fmt(dec.get('decode_img_per_s'))} img/s decoding alone",
            "a quiet decode's checksums", "", "pass" if ok else "FAIL",
        ])  # fmt: skip
    ev = res.get("eval", {})
    if ev:
        bf, fp = ev.get("bf16_img_per_s"), ev.get("float32_img_per_s")
        out.append([
            "robustness eval batch", ev.get("model", "-"),
            f"bf16 {_fmt(bf)} / float32 {_fmt(fp)} images x transformations per s; "
            f"{ev.get('images')} images x {ev.get('transforms')}",
            "float32", _fmt(ev.get("prediction_agreement"), 3), "info",
        ])  # fmt: skip
    cap = res.get("caption", {})
    if cap:
        cos = cap.get("cosine_min")
        out.append([
            "caption embedding", cap.get("model", "-"),
            f"fp16 {_fmt(cap.get('float16_captions_per_s'))} / float32 "
            f"{_fmt(cap.get('float32_captions_per_s'))} captions/s, peak "
            f"{_fmt(cap.get('peak_gib'), 2)} GiB", "float32", f"cos >= {_fmt(cos, 4)}",
            "pass" if cos is not None and cos >= 0.99 else "differs",
        ])  # fmt: skip
    for name, step in ran.items():
        if step["status"] not in ("ran", "ran, exit 2"):
            out.append(["step " + name, "-", step.get("why") or step["status"], "", "", "error"])
    return out


def table(ran: dict[str, dict]) -> str:
    lines = ["| check | subject | measured | against | ratio | verdict |",
             "|---|---|---|---|---:|---|"]  # fmt: skip
    for row in rows(ran):
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out_dir", nargs="?", help="where the report goes (or --out)")
    p.add_argument("--out", help="where the report goes (default results/gpu_check)")
    p.add_argument("--cpu", action="store_true", help="smoke run on the CPU, tiny sizes")
    p.add_argument(
        "--budget", type=float, help="seconds for every step together (default 345; --cpu: 900)"
    )
    p.add_argument("--threads", type=int, default=8, help="torch threads (a job's cores)")
    p.add_argument(
        "--plain-loop", help="the reference plain loop (default: benchmarks/gpu_plain_loop.py)"
    )
    args = p.parse_args()
    if args.budget is None:
        args.budget = 900.0 if args.cpu else 345.0
    if args.cpu:  # the demo's tiny models, in one preflight
        args.models_fast, args.models_large = "alexnet_mini,resnet_mini", ""
    else:
        sys.path.insert(0, str(STEPS.parent))
        from gpu_check_steps import BATCHES

        args.models_fast = ",".join(m for m in BATCHES if m not in LARGE)
        args.models_large = ",".join(LARGE)
    out = Path(args.out or args.out_dir or REPO / "results" / "gpu_check").resolve()
    out.mkdir(parents=True, exist_ok=True)
    plain = plain_loop_path(args.plain_loop)
    start = time.monotonic()
    ran = run_steps(args, out, plain)
    text = table(ran)
    env = ran.get("env", {}).get("result") or {}
    head = (
        f"# GPU check: {env.get('gpu', 'CPU smoke run')}\n\n"
        f"`benchmarks/gpu_check.py{' --cpu' if args.cpu else ''}`, "
        f"{time.monotonic() - start:.0f} s; plain loop {plain} (sha256 "
        f"{hashlib.sha256(plain.read_bytes()).hexdigest()[:12]}); goals: feed ratio >= "
        f"{FEED_RATIO}, step against the plain loop >= {STEP_RATIO} (docs/gpu.md)\n\n"
    )
    steps = "\n".join(f"- {k}: {v['status']}" + (f", {v['seconds']} s" if "seconds" in v else "")
                      for k, v in ran.items())  # fmt: skip
    (out / "gpu_check.md").write_text(head + text + "\nSteps:\n" + steps + "\n")
    summary = {"rows": rows(ran), "steps": ran, "plain_loop": str(plain),
               "seconds": round(time.monotonic() - start, 1)}  # fmt: skip
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1, default=str))
    print("\n" + head + text + "\nSteps:\n" + steps)
    finished = all(v["status"].startswith("ran") for v in ran.values())
    return 0 if finished else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
