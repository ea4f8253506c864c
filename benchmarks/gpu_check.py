"""One GPU check for the next lent GPU (docs/gpu.md, "One GPU check"): within six minutes,
one table of what the first GPU hour must tell a researcher, each figure beside what it is judged
against, measured in the same run on the same GPU, and one PASS/FAIL line per goal. Over 500
lines because the steps' runner, the table and the goals read the same results, in the one
file a bare python runs before anything of the project is known to import.

    PYTHONPATH=workflow python3 benchmarks/gpu_check.py [--out DIR]   # a GPU node
    bash benchmarks/gpu_check.sh [OUT_DIR]                            # the same, python found
    bash benchmarks/gpu_check.sh --cpu [OUT_DIR]                      # smoke run on the CPU

Runs where python has only torch, torchvision (with pillow) and numpy plus the few wheels
``gpu_check_steps.WHEELS`` names (the project from source: ``PYTHONPATH=workflow``; no venv, no
``imagenot`` script): the first step lists what is missing, with the pip line. Each step is a
process of its own, in a process group of its own, under its own time limit, within
``--budget`` seconds for the whole (default 345): a step that hangs costs its limit, the others
still run, the table says which did not finish, and when a step ends (finished or killed at
its limit) every process left in its group is killed before the next starts: no step measures
beside another's leftovers. Steps, in order:

1. ``env``: the GPU, its driver, torch, CUDA, cores, glibc; the wheels missing;
2. ``preflight``, ``preflight_large``: ``imagenot preflight`` for the seven paper models
   (config/paper.yaml, ImageNot ST; the two largest in a call of their own), each model's
   checks written as they finish (``--progress``): a time-out loses the model it was measuring,
   not the ones before: memory at the per-GPU batch, the feed decoding in the CPU workers and
   on the GPU against the same images held on the device, read where the jobs would read them,
   bf16 against float32;
3. ``plain``: the reference plain loop (``benchmarks/gpu_plain_loop.py``: torch and
   torchvision only, nothing of the project) at the first GPU run's batches;
4. ``step``: the project's training step at the same batches, and the loop's own
   ``train_one_epoch``, judged against the plain loop, with the parts that differ
   (preprocess on the device, a pinned batch's copy);
5. ``decode``: nvJPEG against libjpeg-turbo pixel for pixel, its rate, and decoding ahead of a
   training step over many batches (corruption, device memory);
6. ``eval``: the costliest evaluation, the published EfficientNet-V2-L at 480 px in float32,
   and the same batch in bf16;
7. ``caption``: caption embedding, fp16 against float32;
8. ``embed``: image embedding with a CLIP ViT-L/14-shaped encoder.

Writes ``gpu_check.md`` (the table, the goals, each step's status) and ``gpu_check.json``
(every step's figures and the goals) in ``--out`` (default ``results/gpu_check``), the steps'
own JSON and logs beside them, and prints the table and the goals: one line per goal
(:func:`goals`), ``PASS``, ``FAIL`` or, where the run had no GPU, ``not measured: no GPU``.

Exit status: 0 when every step finished and every goal passed (``--cpu``: every step finished
and no goal failed; the goals need a GPU, so a smoke run measures none); 1 otherwise, a goal not
measured on a run without ``--cpu`` included.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STEPS = REPO / "benchmarks" / "gpu_check_steps.py"
# seconds each step may take on a GPU (the budget cuts the later ones when earlier ones ran long)
LIMITS = {
    "env": 40,
    "preflight": 110,  # the five faster models
    "preflight_large": 100,  # ConvNeXt-L and EfficientNet-V2-L in a call of their own
    "plain": 75,
    "step": 70,
    "decode": 45,
    "eval": 40,
    "caption": 35,
    "embed": 30,
}
LARGE = ("convnext_large", "efficientnet_v2_l")
FEED_RATIO, STEP_RATIO = 0.9, 0.95  # the goals (docs/gpu.md)
DECODE_MEAN_ABS, DECODE_GROWTH_MIB = 1.5, 64
PASS, FAIL, NOT_MEASURED = "PASS", "FAIL", "not measured: no GPU"


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
            "embed",
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
            "--progress", str(out / f"{name}.checks.jsonl"),  # each check as it finishes
        ]  # fmt: skip
    return step


def group_members(pgid: int) -> list[int]:
    """The live processes (not zombies) of process group ``pgid``, from ``/proc``."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


def end_group(pgid: int, wait: float = 10.0) -> int:
    """Kill every process left in the step's group ``pgid`` (SIGKILL) and wait until none is
    alive; the number killed."""
    left = group_members(pgid)
    if left:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        until = time.monotonic() + wait
        while group_members(pgid) and time.monotonic() < until:
            time.sleep(0.05)
    return len(left)


def run_step(cmd: list[str], limit: float, log: Path, env: dict) -> tuple[int | None, int]:
    """``cmd`` in a session (and process group) of its own, its output to ``log``, for at most
    ``limit`` seconds: (its exit status, None when killed at the limit; the processes left in
    its group when it ended, killed). Interrupted (Ctrl-C, SIGTERM), the step's group goes too."""
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
        code = None
        try:
            code = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            pass
        finally:
            left = end_group(proc.pid)
            proc.wait()
    return code, left - (code is None)  # (a step killed at its limit is not a leftover)


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def read_progress(path: Path) -> list[dict]:
    """The checks a preflight's ``--progress`` file holds, in the order they finished (a line
    cut short by a kill is left out)."""
    checks = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            checks.append(json.loads(line))
        except ValueError:
            continue
    return checks


def run_steps(
    args, out: Path, plain: Path, steps: dict[str, list[str]] | None = None, limits=None
) -> dict:
    """Every step (``steps``: name -> command; default :func:`commands`) under its limit
    (``limits``, default :data:`LIMITS`, x3 on the CPU) within the budget: {step: status,
    seconds, result, left}. A preflight that did not finish keeps the checks its
    ``--progress`` file holds."""
    deadline = time.monotonic() + args.budget
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep + path if path else ''}"}
    ran = {}
    signal.signal(signal.SIGTERM, _on_sigterm)
    for name, cmd in (steps or commands(args, out, plain)).items():
        left = deadline - time.monotonic()
        limit = min((limits or LIMITS)[name] * (3 if args.cpu else 1), left)
        if left < 5:
            ran[name] = {"status": "not run", "why": "the check's time budget was spent"}
            print(f"[gpu_check] {name}: not run (budget spent)", flush=True)
            continue
        print(f"[gpu_check] {name} (limit {limit:.0f} s) ...", flush=True)
        for stale in (f"{name}.json", f"{name}.failed.json", f"{name}.checks.jsonl"):
            (out / stale).unlink(missing_ok=True)  # an earlier run's, in the same folder
        start = time.monotonic()
        log = out / f"{name}.log"
        code, leftovers = run_step(cmd, limit, log, env)
        seconds = round(time.monotonic() - start, 1)
        result_file = out / f"{name}.json"
        if name.startswith("preflight") and not result_file.exists():
            result_file = out / f"{name}.failed.json"  # a failed check's report
        result = json.loads(result_file.read_text()) if result_file.exists() else None
        if result is None and name.startswith("preflight"):
            finished = read_progress(out / f"{name}.checks.jsonl")
            if finished:  # what it finished before it was stopped
                result = {"checks": finished, "partial": True}
        if code is None:
            status = f"timed out after {seconds:.0f} s"
        elif result is None or result.get("partial"):
            tail = log.read_text()[-600:].strip().splitlines()
            status = f"error (exit {code}): {tail[-1] if tail else ''}"
        else:
            status = "ran" if code == 0 else f"ran, exit {code}"
        ran[name] = {"status": status, "seconds": seconds, "result": result, "left": leftovers}
        extra = f"; {leftovers} processes left behind, killed" if leftovers else ""
        print(f"[gpu_check] {name}: {status} in {seconds} s{extra}", flush=True)
    return ran


def _fmt(value, digits: int = 0) -> str:
    if value is None:
        return "-"
    if isinstance(value, float | int):
        return f"{value:,.{digits}f}"
    return str(value)


def _judge(ratio: float | None, goal: float, gpu: bool = True) -> str:
    if ratio is None:
        return "-"
    if not gpu:
        return "not judged (no GPU)"
    return "pass" if ratio >= goal else f"below {goal}"


def rows(ran: dict[str, dict]) -> list[list[str]]:
    """The table's rows: check, subject, measured, against, ratio, verdict (the ratios judged
    where the run had a GPU)."""
    out = []
    res = {k: (v.get("result") or {}) for k, v in ran.items()}
    env = res.get("env", {})
    gpu = bool(env.get("gpu"))
    if env:
        missing = env.get("missing_wheels") or []
        out.append([
            "environment", env.get("gpu", "CPU"),
            f"driver {env.get('driver', '-')}, torch {env.get('torch')} (CUDA "
            f"{env.get('torch_cuda')}), torchvision {env.get('torchvision')}, python "
            f"{env.get('python')}, {env.get('cpus')} cores",
            "", "", "missing: " + " ".join(missing) if missing else "ok",
        ])  # fmt: skip
        if env.get("pip_download"):
            out.append(["wheels to install", " ".join(missing), env["pip_download"], "", "",
                        "missing"])  # fmt: skip
        for wheel, why in (env.get("glibc_short") or {}).items():
            out.append(["wheels to install", wheel, why, "", "", "error"])
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
                        _fmt(ratio, 2), _judge(ratio, FEED_RATIO, gpu)])  # fmt: skip
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
                        _fmt(ratio, 2), _judge(ratio, STEP_RATIO, gpu)])  # fmt: skip
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
        fp, bf = ev.get("float32_img_per_s"), ev.get("bf16_img_per_s")
        out.append([
            "robustness eval, costliest", ev.get("model", "-"),
            f"published path (float32, TF32 off) {_fmt(fp)} / bf16 {_fmt(bf)} images x "
            f"transformations per s at {ev.get('crop_size')} px ({ev.get('interpolation')}), "
            f"{ev.get('images')} images x {ev.get('transforms')}, peak "
            f"{_fmt(ev.get('float32_peak_gib'), 2)} GiB; the reference's 50,000 images: "
            f"{_fmt(ev.get('reference_gpu_hours_est'), 2)} GPU-hours (estimate from this rate)",
            "bf16 (prediction agreement)", _fmt(ev.get("prediction_agreement"), 3), "info",
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
    emb = res.get("embed", {})
    if emb:
        out.append([
            "image embedding", emb.get("model", "-"),
            f"{_fmt(emb.get('img_per_s'))} img/s float32 at batch {emb.get('batch')} "
            f"({emb.get('images')} images, {emb.get('dim')}-d), peak "
            f"{_fmt(emb.get('peak_gib'), 2)} GiB", "", "", "info",
        ])  # fmt: skip
    for name, step in ran.items():
        if step["status"] not in ("ran", "ran, exit 2"):
            out.append(["step " + name, "-", step.get("why") or step["status"], "", "", "error"])
    return out


def _preflight_checks(ran: dict[str, dict], kind: str) -> dict[str, dict]:
    """model -> its first ``kind`` check (memory, feed, precision) of both preflight calls."""
    found: dict[str, dict] = {}
    for name in ("preflight", "preflight_large"):
        for c in ((ran.get(name) or {}).get("result") or {}).get("checks", []):
            head, _, rest = c["name"].partition(" ")
            if head == kind and not rest.startswith("source"):
                found.setdefault(rest.split(" ")[0], c)
    return found


def _gate(models, checks: dict[str, dict], judge) -> tuple[str, str]:
    """(verdict, detail) over ``models``: a model without its check fails (not measured: its
    step stopped first); ``judge(check)`` says (ok, what) for one that has it."""
    bad, notes = [], []
    for model in models:
        check = checks.get(model)
        if check is None:
            bad.append(f"{model} not measured (its preflight stopped first)")
            continue
        ok, what = judge(check)
        (notes if ok else bad).append(f"{model} {what}")
    return (FAIL, "; ".join(bad)) if bad else (PASS, "; ".join(notes))


def goals(ran: dict[str, dict], models: list[str], gpu: bool) -> list[dict]:
    """One verdict per goal of the check (docs/gpu.md, "One GPU check"), each ``PASS``,
    ``FAIL`` or, on a run without a GPU, ``not measured: no GPU``:

    * precision gate: every model's bf16-against-float32 check passes the preflight's gate;
    * memory at the paper batch: every model trains its per-GPU batch whole on this card;
    * feed: each model fed the way ``train.decode_on_gpu`` selects keeps up with it fed from
      device memory (ratio >= :data:`FEED_RATIO`);
    * step: the project's step reaches :data:`STEP_RATIO` of the plain loop's images/s."""
    names = {
        "precision": "precision gate (bf16 against float32)",
        "memory": "memory at the paper batch (whole, per GPU)",
        "feed": f"feed >= {FEED_RATIO} of device-resident (the way train.decode_on_gpu selects)",
        "step": f"step >= {STEP_RATIO} of the plain loop",
    }
    if not gpu:
        return [{"goal": k, "name": n, "verdict": NOT_MEASURED, "detail": ""}
                for k, n in names.items()]  # fmt: skip
    out = []

    def precision(c):
        what = c["status"] if c["status"] == "pass" else f"{c['status']}: {c['detail'][:160]}"
        return c["status"] != "fail", what

    def memory(c):
        v = c.get("values", {})
        if c["status"] == "pass":
            return True, f"{v.get('per_gpu')} fits ({_fmt(v.get('peak_gib'), 1)} GiB)"
        return False, (f"{v.get('per_gpu')} per GPU does not fit whole (largest "
                       f"{v.get('largest_fit')}, {v.get('micro_batches')} micro-batches)")  # fmt: skip

    def feed(c):
        ratio = c.get("values", {}).get("ratio")
        if ratio is None:
            return False, f"{c['status']}: {c['detail'][:120]}"
        return ratio >= FEED_RATIO, f"{ratio:.2f}"

    for key, judge in (("precision", precision), ("memory", memory), ("feed", feed)):
        verdict, detail = _gate(models, _preflight_checks(ran, key), judge)
        out.append({"goal": key, "name": names[key], "verdict": verdict, "detail": detail})
    res = {k: (v.get("result") or {}) for k, v in ran.items()}
    plain, step = res.get("plain", {}).get("models", {}), res.get("step", {}).get("models", {})
    bad, notes = [], []
    for model in models:
        base = (plain.get(model) or {}).get("img_per_s")
        mine = (step.get(model) or {}).get("step_img_per_s")
        if not base or mine is None:
            bad.append(f"{model} not measured")
            continue
        ratio = mine / base
        (notes if ratio >= STEP_RATIO else bad).append(f"{model} {ratio:.2f}")
    out.append({"goal": "step", "name": names["step"], "verdict": FAIL if bad else PASS,
                "detail": "; ".join(bad or notes)})  # fmt: skip
    return out


def goal_lines(found: list[dict]) -> str:
    """The goals, one line each: ``GOAL <name>: <verdict>`` and what it rests on."""
    return "".join(
        f"GOAL {g['name']}: {g['verdict']}" + (f" ({g['detail']})" if g["detail"] else "") + "\n"
        for g in found
    )


def exit_status(ran: dict[str, dict], found: list[dict], cpu: bool) -> int:
    """0: every step finished and every goal passed (``cpu``, the smoke run: no goal failed,
    none needing a GPU being measured); else 1."""
    finished = all(v["status"].startswith("ran") for v in ran.values())
    allowed = (PASS, NOT_MEASURED) if cpu else (PASS,)
    return 0 if finished and all(g["verdict"] in allowed for g in found) else 1


def table(ran: dict[str, dict]) -> str:
    lines = ["| check | subject | measured | against | ratio | verdict |",
             "|---|---|---|---|---:|---|"]  # fmt: skip
    for row in rows(ran):
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in row) + " |")
    return "\n".join(lines) + "\n"


def wheels_only(threads: int) -> int:
    """``--wheels``: the env step alone, its wheels printed (docs/gpu.md, "What to run first on
    a GPU"); 0 when nothing is missing."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        out = Path(tmp)
        cmd = [*python(), str(STEPS), "env", "--out", str(out / "env.json"),
               "--threads", str(threads)]  # fmt: skip
        path = os.environ.get("PYTHONPATH")
        env = {
            **os.environ,
            "PYTHONPATH": f"{REPO / 'workflow'}{os.pathsep + path if path else ''}",
        }
        code, _ = run_step(cmd, LIMITS["env"], out / "env.log", env)
        if code != 0 or not (out / "env.json").is_file():
            print((out / "env.log").read_text()[-2000:], file=sys.stderr)
            return 1
        found = json.loads((out / "env.json").read_text())
    missing, short = found["missing_wheels"], found.get("glibc_short") or {}
    print(f"python {found['python']} ({found['executable']}), torch {found['torch']}, "
          f"torchvision {found['torchvision']}, glibc {found.get('glibc')}")  # fmt: skip
    print("missing wheels: " + (" ".join(missing) if missing else "none"))
    if missing:
        print(found["pip_download"])
    for why in short.values():
        print(f"cannot install here: {why}")
    broken = found.get("project_imports")
    if broken != "ok":
        print("project modules that do not import yet: " + ", ".join(broken))
    return 1 if missing or short else 0


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
    p.add_argument(
        "--wheels",
        action="store_true",
        help="only the env step: the wheels this python lacks and the pip line that fetches\n"
        "them for this node (exit 1 when one is missing or cannot install here)",
    )
    args = p.parse_args()
    if args.wheels:
        return wheels_only(args.threads)
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
    models = [m for m in f"{args.models_fast},{args.models_large}".split(",") if m]
    found = goals(ran, models, gpu=bool(env.get("gpu")) and not args.cpu)
    code = exit_status(ran, found, args.cpu)
    head = (
        f"# GPU check: {env.get('gpu', 'CPU smoke run')}\n\n"
        f"`benchmarks/gpu_check.py{' --cpu' if args.cpu else ''}`, "
        f"{time.monotonic() - start:.0f} s; plain loop {plain} (sha256 "
        f"{hashlib.sha256(plain.read_bytes()).hexdigest()[:12]}); goals: feed ratio >= "
        f"{FEED_RATIO}, step against the plain loop >= {STEP_RATIO} (docs/gpu.md)\n\n"
    )
    steps = "\n".join(
        f"- {k}: {v['status']}"
        + (f", {v['seconds']} s" if "seconds" in v else "")
        + (f", {v['left']} processes left behind (killed)" if v.get("left") else "")
        for k, v in ran.items()
    )
    verdict = "FAIL" if code else "PASS"
    if args.cpu and not code:
        verdict = "smoke run finished, no goal measured (no GPU)"
    tail = f"\n{goal_lines(found)}CHECK: {verdict} (exit {code})\n"
    (out / "gpu_check.md").write_text(head + text + "\nSteps:\n" + steps + "\n" + tail)
    summary = {"rows": rows(ran), "steps": ran, "goals": found, "exit": code,
               "plain_loop": str(plain), "seconds": round(time.monotonic() - start, 1)}  # fmt: skip
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=1, default=str))
    print("\n" + head + text + "\nSteps:\n" + steps + "\n" + tail, end="")
    return code


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
