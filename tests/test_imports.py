"""Jobs that need no torch stay torch-free: importing torch costs about 2 CPU-seconds
and torchvision (with the torch._dynamo its ops package pulls in) about 3.5 per process, paid by
every Snakemake job that imports them. Only the modules that train, evaluate or fetch images
(img2dataset imports torch through webdataset when it can) may import torch when imported; a
download's own processes cannot (imagenot.acquire.fetch.WITHOUT_TORCH)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import imagenot

# Modules whose import may pull in torch: their jobs run torch anyway.
TORCH_MODULES = {
    "imagenot.acquire.guarded",  # img2dataset's downloader (webdataset imports torch)
    "imagenot.evaluate.kernels",
    "imagenot.evaluate.metrics",
    "imagenot.evaluate.reference",
    "imagenot.evaluate.robustness",
    "imagenot.evaluate.transforms",
    "imagenot.train.checkpoints",
    "imagenot.train.decode",  # JPEG decoding on the training device
    "imagenot.train.device",
    "imagenot.train.features",
    "imagenot.train.feed",
    "imagenot.train.feed_bench",  # the preflight's and bench_feed_models' timed steps
    "imagenot.train.jobs",
    "imagenot.train.loop",
    "imagenot.train.preflight",  # one forward+backward per model on the device
    "imagenot.train.preflight_feed",  # the preflight's feed, on the device
    "imagenot.train.preflight_precision",  # bf16 against float32 on the device
    "imagenot.train.schedules",
}
HEAVY = ("torch", "torchvision", "timm")

CHECK = """
import importlib, sys
heavy = {heavy!r}
for name in sys.argv[1:]:
    importlib.import_module(name)
    pulled = [m for m in heavy if m in sys.modules]
    if pulled:
        print(name, *pulled)
        break
"""


def all_modules() -> list[str]:
    """Every module of the package but ``imagenot.__main__`` (``python -m imagenot``: importing
    it runs a command)."""
    walked = pkgutil.walk_packages(imagenot.__path__, "imagenot.")
    return sorted(m.name for m in walked if not m.name.endswith(".__main__"))


def test_the_allowlist_names_existing_modules():
    assert set(all_modules()) >= TORCH_MODULES


def test_modules_outside_training_and_evaluation_import_no_torch():
    light = [name for name in all_modules() if name not in TORCH_MODULES]
    assert {"imagenot.cli", "imagenot.core.dataset", "imagenot.acquire.dataset"} <= set(light)
    run = subprocess.run(
        [sys.executable, "-c", CHECK.format(heavy=HEAVY), *light],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # the first module (in this order) after whose import torch, torchvision or timm is loaded
    assert run.stdout.strip() == "", f"imports a heavy module: {run.stdout.strip()}"


SPAWNED = """
import multiprocessing, sys


def child(queue):
    import img2dataset.logger  # what img2dataset's logger process imports first

    queue.put("torch" in sys.modules)


if __name__ == "__main__":
    sys.path[:0] = sys.argv[1:]
    import imagenot.acquire.guarded, webdataset.pytorch as p

    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    ctx.Process(target=child, args=(queue,)).start()
    print("torch" in sys.modules, p.IterableDataset.__module__, queue.get(timeout=300))
"""


def _download_path_imports(tmp_path, *path: str) -> list[str]:
    """Whether torch was loaded, where webdataset's IterableDataset came from, and whether a
    spawned child (as img2dataset spawns its workers and logger) loaded torch: in a process with
    ``path`` first on ``sys.path`` that imports the download's modules."""
    script = tmp_path / "spawned.py"
    script.write_text(SPAWNED)
    run = subprocess.run(
        [sys.executable, str(script), *path], capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return run.stdout.split()


def test_a_download_and_the_processes_it_spawns_import_no_torch(tmp_path):
    """With the download's path (imagenot.acquire.fetch._fetch_here puts WITHOUT_TORCH first),
    img2dataset and webdataset import without torch, in the download's process and in a spawned
    child that takes its path; without it (the planted case), both load torch."""
    from imagenot.acquire.fetch import WITHOUT_TORCH

    assert _download_path_imports(tmp_path, WITHOUT_TORCH) == [
        "False",
        "webdataset.pytorch",
        "False",
    ]
    assert _download_path_imports(tmp_path) == ["True", "torch.utils.data.dataset", "True"]


# The stages in the order data flows through them. A module may import the package's base
# modules (those of the shared rooms imagenot.core, .plan and .run) and the stages before its own, never one after it: "no upward
# arrow" keeps each stage testable and reusable without the ones built on it. The demo
# and scale worlds come last: they are data sources that build on curation's normaliser, and
# nothing below them knows they exist. Entry points (the CLI, the config check that imports every
# stage's plan) sit above all stages.
STAGE_ORDER = (
    "curate",
    "acquire",
    "train",
    "evaluate",
    "analyse",
    "figures",
    "diagnostics",
    "audit",
    "demo",
)
# The shared rooms: the base modules every stage may import, and the entry points below.
ROOMS = {"core", "plan", "run"}
# Entry points, which may import any stage: validate-config, and the modules that span every
# stage: `imagenot plan` (plan_cli, planning, costs) and the end of a run (summary_plan,
# run_summary, run_summary_cli).
ENTRY_POINTS = {
    "validate_cli",
    "plan_cli",
    "planning",
    "costs",
    # the data stages' schedule of imagenot plan (every stage's data jobs)
    "data_stages",
    "summary_plan",
    "run_summary",
    "run_summary_cli",
    # which rules read each dataset split (every stage's plan), what the acquire rule stores
    "split_readers",
}


def _imported_modules(path) -> set[str]:
    """Every imagenot module ``path`` imports, at module level or inside functions (``from
    imagenot.train import plan`` names ``imagenot.train`` and ``imagenot.train.plan``; a name
    that is no module, ``imagenot.core.config.ConfigError``, is in the set too)."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("imagenot"):
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("imagenot")}
    return found


def test_no_import_goes_up_the_stages():
    from pathlib import Path

    root = Path(imagenot.__file__).parent
    stages = {p.name for p in root.iterdir() if (p / "__init__.py").is_file()} - ROOMS
    assert stages == set(STAGE_ORDER), "a new stage package needs its place in STAGE_ORDER"
    rank = {stage: i for i, stage in enumerate(STAGE_ORDER)}
    upward = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts
        base = len(parts) == 1 or parts[0] in ROOMS
        if (base and path.stem in ENTRY_POINTS) or parts[0] == "resources":
            continue  # resources/: files the package ships (a stand-in module), no stage's code
        own = -1 if base else rank[parts[0]]  # base modules: below every stage
        for module in _imported_modules(path):
            target = module.split(".")[1] if "." in module else ""
            same = target == (None if base else parts[0])
            if target in rank and not same and rank[target] > own:
                upward.append(f"{path.relative_to(root)} imports {module}")
    assert not upward, "imports up the stages:\n" + "\n".join(upward)


def _step_reference_problems(steps) -> list[str]:
    """Where a step's ``"module:attribute"`` references (its handler, files, settings, launcher,
    options and the types of its options), which :mod:`imagenot.core.steps` holds as text and
    the import scan above cannot see, do not resolve, or reach up the stages: a step is the
    command of its handler's stage (or of a shared room), and a reference of a later stage would
    be a link up the stages that no import shows (an earlier stage's, as an import, is fine)."""
    from imagenot.core.registries import resolve

    problems = []
    for name, step in steps.items():
        options = step.options if isinstance(step.options, tuple) else ()
        refs = [step.run, step.files, step.settings, step.launch, step.options]
        refs += [option.type for option in options]
        refs = [r for r in refs if isinstance(r, str) and ":" in r]
        for ref in refs:
            try:
                resolve(ref)
            except (ImportError, AttributeError) as exc:
                problems.append(f"{name}: {ref} does not resolve ({exc})")
        rank = {stage: i for i, stage in enumerate(STAGE_ORDER)}
        own = rank.get(step.run.split(".")[1], -1)  # a shared room's: below every stage
        up = sorted({r for r in refs if rank.get(r.split(".")[1], -1) > own})
        if up:
            problems.append(f"{name}: reaches up the stages: {', '.join(up)}")
    return problems


def test_every_step_reference_resolves_within_its_own_stage():
    import dataclasses

    from imagenot.core.steps import STEPS

    assert _step_reference_problems(STEPS) == []
    # planted: a curate step handed the diagnostics' files, and a handler that is not there
    match = STEPS["match"]
    planted = {
        "match": dataclasses.replace(match, files="imagenot.diagnostics.files:EmbedFiles"),
        "gone": dataclasses.replace(match, run="imagenot.curate.cli:no_such_handler"),
    }
    problems = _step_reference_problems(planted)
    assert problems[0] == "match: reaches up the stages: imagenot.diagnostics.files:EmbedFiles"
    assert problems[1].startswith("gone: imagenot.curate.cli:no_such_handler does not resolve")


def test_the_dataset_format_is_read_from_its_own_module():
    """Training, evaluation and the diagnostics read the on-disk format from ``imagenot.core.dataset``,
    not from the producer's room: ``imagenot.acquire.dataset`` holds the writer, and
    the reader names it imports from ``imagenot.core.dataset`` are no second way in."""
    import ast
    from pathlib import Path

    import imagenot.core.dataset as fmt

    root = Path(imagenot.__file__).parent
    # its constants and what it defines (not what it imports)
    readers = {
        name
        for name, value in vars(fmt).items()
        if name.isupper() or getattr(value, "__module__", None) == fmt.__name__
    }
    assert {"ManifestDataset", "SPLITS", "read_classes"} <= readers
    through_writer = []
    for path in sorted(root.rglob("*.py")):
        if path.relative_to(root).parts[0] == "acquire":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "imagenot.acquire.dataset":
                through_writer += [
                    f"{path.relative_to(root)}: {a.name}" for a in node.names if a.name in readers
                ]
    assert not through_writer, "reader names imported from imagenot.acquire.dataset:\n" + (
        "\n".join(through_writer)
    )


# Import circles not yet opened, each with its issue; a circle leaving this list must be deleted
# from it (the test fails on a stale entry), and no new one may appear.
KNOWN_CIRCLES: set[frozenset[str]] = set()


def _circles() -> set[frozenset[str]]:
    """The package's import circles (strongly connected groups of modules, imports inside
    functions and under TYPE_CHECKING counted: a reader follows those too)."""
    from pathlib import Path

    import networkx as nx

    root = Path(imagenot.__file__).parent
    graph = nx.DiGraph()
    modules = set(all_modules())
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        graph.add_node(name)
        for module in _imported_modules(path):
            if module in modules and module != name:
                graph.add_edge(name, module)
    return {frozenset(c) for c in nx.strongly_connected_components(graph) if len(c) > 1}


def test_no_new_import_circle():
    """Two modules importing each other (directly or around a ring) cannot be read, tested or
    moved one at a time: shared facts live in a module both import (the experiment facts in
    ``train.experiments``, the feed's parts in ``train.feed``)."""
    found = _circles()
    new = [sorted(c) for c in found - KNOWN_CIRCLES]
    assert not new, f"new import circle(s): {new}"
    gone = [sorted(c) for c in KNOWN_CIRCLES - found]
    assert not gone, f"opened, delete from KNOWN_CIRCLES: {gone}"


# A module this long holds several things a reader looks for apart: split it,
# or say in its docstring why not, with these words.
MAX_MODULE_LINES = 500
LONG_MODULE_REASON = "Over 500 lines because"


def test_no_module_over_500_lines_without_a_reason():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1] / "workflow" / "imagenot"
    long = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_MODULE_LINES and LONG_MODULE_REASON not in text.split('"""')[1]:
            long.append(f"{path.relative_to(root)}: {text.count(chr(10))} lines")
    assert not long, "modules over 500 lines, no reason in the docstring:\n" + "\n".join(long)
