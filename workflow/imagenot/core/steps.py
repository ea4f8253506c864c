"""One declaration per workflow step: its command, its files, its settings and its handler.

A step is what a rule runs: ``imagenot NAME`` with the step's files by role (an
:class:`imagenot.core.files.Files` class), its settings as one ``--settings`` JSON object (an
:class:`imagenot.core.settings.FromConfig` class, or the function that builds a plain JSON object)
and any further values (:class:`Option`). Everything else is derived from the :class:`Step`:
the command's parser (:func:`add_parser`, which ``imagenot.cli`` calls for every entry of
:data:`STEPS`), the rule's shell line (:func:`command`, ``step()`` in rules/common.smk) and the
call of the handler, ``handler(files, settings, **options)`` (:func:`call`). So a role is
written where the rule names its file and where the files class declares it, nowhere else.

Classes and handlers are ``"module:attribute"`` references, imported where they are used
(:func:`imagenot.core.registries.resolve`): this module sits below every stage, and a command imports
the code of its own step only. ``tests/test_rule_files.py`` checks every rule, as Snakemake
holds it, against its step.

Over 500 lines because every step is declared here, in the one registry that the parser, the
rules' lines and the tests read.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagenot.core.files import flag
from imagenot.core.registries import Registry, resolve


@dataclasses.dataclass(frozen=True)
class Option:
    """A command-line value of a step beside its files and settings: ``--NAME`` (``_`` read
    ``-``; ``flag``: another spelling), handed to the handler as the keyword ``NAME``. ``help``:
    what ``--help`` says (empty: the schema's ``description`` of the key ``default`` names, the
    one text of the key and its flag). ``rule``:
    what the rule's line hands (``"{threads}"``; for a ``switch``, a field holding the flag or
    nothing: ``"{params.gpu_job}"``); None: the option is typed by hand only. ``type``: what
    reads its text (or its ``"module:attribute"``); ``default``: the schema key whose default it
    takes (dotted; a number or a word: the value itself, for a command's own knob that is no
    config key);
    ``metavar``: its value's name in ``--help``; ``nargs``, ``choices``: argparse's (``nargs="?"``:
    the rule may hand the flag alone, none; ``choices`` a schema key: the values its enum lists);
    ``positional``: typed without a flag (``imagenot validate-config FILE``); ``group``: the
    title of the ``--help`` section it is listed in."""

    name: str
    help: str = ""
    rule: str | None = None
    type: Callable[[str], Any] | str | None = None
    required: bool = False
    default: str | float | None = None
    switch: bool = False
    metavar: str | None = None
    nargs: str | None = None
    choices: tuple[str, ...] | str | None = None
    positional: bool = False
    flag: str | None = None
    group: str | None = None

    @property
    def spelled(self) -> str:
        return self.flag or flag(self.name)

    def add_to(self, parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
        from imagenot.core.config import schema_default, schema_node

        if self.switch:
            parser.add_argument(self.spelled, action="store_true", help=self.help, dest=self.name)
            return
        default, help = self.default, self.help
        if isinstance(default, str) and "." in default:
            help = help or schema_node(default)["description"].replace("%", "%%")
            default = schema_default(default)
        choices = self.choices
        if isinstance(choices, str):
            choices = schema_node(choices)["enum"]
        name = self.name if self.positional else self.spelled
        more = {} if self.positional else {"required": self.required, "dest": self.name}
        parser.add_argument(
            name, type=resolve(self.type), default=default, metavar=self.metavar, help=help,
            nargs=self.nargs, choices=choices, **more,
        )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Step:
    """A command (module docstring). ``help``: one line for ``imagenot --help``;
    ``description``: more for ``imagenot NAME --help``. ``run``: the handler's reference, called
    with the files object (when ``files``), the settings object (when ``settings``) and each
    option by name. ``hand_settings``: the command typed by hand may leave ``--settings`` out
    (the handler gets None and builds them from its options). ``launch``: the rule's field
    holding the start of its line (``{params.launch}``: a training job's launcher, torchrun or
    srun, before the job prefix; ``job()`` in rules/common.smk); None: the job prefix."""

    name: str
    help: str
    run: str
    files: str | None = None
    settings: str | None = None
    options: tuple[Option, ...] | str = ()
    description: str | None = None
    hand_settings: bool = False
    launch: str | None = None

    def all_options(self) -> tuple[Option, ...]:
        return resolve(self.options)() if isinstance(self.options, str) else self.options


def add_parser(subparsers: argparse._SubParsersAction, step: Step) -> argparse.ArgumentParser:
    """``step``'s subcommand: its files' arguments, ``--settings`` and its options."""
    raw = "\n" in (step.description or "")
    p = subparsers.add_parser(
        step.name, help=step.help, description=step.description,
        formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
    )  # fmt: skip
    files = resolve(step.files) if step.files else None
    p.set_defaults(func=functools.partial(call, step), files_class=files)
    if files is not None:
        files.add_arguments(p)
    if step.settings is not None:
        p.add_argument(
            "--settings",
            required=not step.hand_settings,
            metavar="JSON",
            help=f"the rule's settings, one JSON object ({step.settings.replace(':', '.')}; "
            "@FILE reads it from a file)",
        )
    groups: dict[str, argparse._ArgumentGroup] = {}
    for option in step.all_options():
        if option.group and option.group not in groups:
            groups[option.group] = p.add_argument_group(option.group)
        option.add_to(groups[option.group] if option.group else p)
    return p


def call(step: Step, args: argparse.Namespace) -> int | None:
    """Run ``step``'s handler on a parsed command line: a settings object that does not match
    its class exits with one line naming the key (:func:`imagenot.core.settings.parse_or_exit`); a
    function's plain JSON object is read as it is. An ``int`` the handler returns is the exit
    status; any other value (a library function's table or path) is not."""
    from imagenot.core.settings import load, parse_or_exit

    given: list[Any] = []
    if step.files:
        given.append(resolve(step.files).from_args(args))
    if step.settings:
        kind, text = resolve(step.settings), args.settings
        if text is not None:
            text = parse_or_exit(kind, text, step.name) if isinstance(kind, type) else load(text)
        given.append(text)
    options = {o.name: getattr(args, o.name) for o in step.all_options()}
    result = resolve(step.run)(*given, **options)
    return result if type(result) is int else None  # a library function's value: no exit status


def command(name: str) -> str:
    """The command line of step ``name`` as a rule runs it, in Snakemake's format: every role of
    its files under its flag (``--per-image {output.per_image}``; a positional role bare), its
    settings (``{params.settings}``), the options a rule hands, the log. rules/common.smk's
    ``step()`` quotes its fields and makes it the rule's line (``job()``)."""
    step = STEPS.entry(name)
    words = ["imagenot", name]
    files = resolve(step.files) if step.files else None
    for role in files.roles() if files else ():
        declared = files.role(role)
        field = "{" + f"{declared['side']}.{role}" + "}"
        words += [field] if declared["positional"] else [flag(role), field]
    if step.settings:
        words += ["--settings", "{params.settings}"]
    for option in step.all_options():
        if option.rule is not None:
            words += [option.rule] if option.switch else [option.spelled, option.rule]
    return " ".join(words) + " > {log} 2>&1"


STEPS = Registry("step")
"""Every command of ``imagenot``, by name."""

_GPU_JOB = Option("gpu_job", "planned for a GPU: stop without one", "{params.gpu_job}", switch=True)
_THREADS = Option("threads", "the job's cores (rule threads)", "{threads}", int, True)
_RUNTIME = Option(
    "runtime_min",
    "the job's time limit: checkpoint and exit 75 train.deadline_margin_minutes before its end "
    "(SLURM's end time when known)",
    "{resources.runtime}",
    float,
)
_PREFLIGHT = Option(
    "preflight",
    "the model's preflight report (the flag alone: none): its largest batch measured to fit "
    "the GPU caps the job's micro-batches",
    "{params.preflight}",
    Path,
    nargs="?",
    metavar="PATH",
)
_RECORD = Option(
    "record",
    "preregistration.json, read and amended by each draw under a lock (no rule's input or "
    "output: imagenot.train.files)",
    "{params.record}",
    Path,
    True,
    metavar="PATH",
)


def _staged(stage: str, name: str, help: str, kind: str, *options: Option, settings=True, **more):
    """A step of ``stage``: its files and settings classes are ``<kind>Files``,
    ``<kind>Settings`` of the stage's ``files`` and ``settings`` modules, its handler
    ``imagenot.<stage>.cli``'s function ``handler``, by default the name after ``<stage>-``
    (``-`` read ``_``), or ``handler`` itself where it is a ``"module:attribute"`` reference (a
    library function that takes the files and settings)."""
    files, settings_class = (
        f"imagenot.{stage}.{m}:{kind}{m.title()}" for m in ("files", "settings")
    )
    handler = more.pop("handler", None) or name.removeprefix(stage + "-").replace("-", "_")
    run = handler if ":" in handler else f"imagenot.{stage}.cli:{handler}"
    return Step(name, help, run, files, settings_class if settings else None, options, **more)


_train, _curate, _diagnostics, _audit, _acquire, _figures = (
    functools.partial(_staged, s)
    for s in ("train", "curate", "diagnostics", "audit", "acquire", "figures")
)


def _run(*wildcards: str) -> Option:
    """``--run``: the job's place, its wildcards joined by ``/`` (``dataset/protocol``)."""
    fields = ("{wildcards." + w + "}" for w in wildcards)
    return Option("run", "/".join(wildcards), rule="/".join(fields), required=True)


_RUNG = Option("rung", "the rung decided: 0, 1, ...", "{wildcards.rung}", int, True)
_STAGE = Option("stage", "0, 1, ...: rungs, then the end", "{wildcards.stage}", int, True)
_SLOT = Option("slot", "stage 0: the trial id", "{wildcards.slot}", int, True)
_LAUNCH = "{params.launch}"  # the rule's launcher before the command (torchrun, srun)
_TRAINING = (_PREFLIGHT, _THREADS, _RUNTIME)  # a training job's: its batch cap, cores, deadline
_AXIS, _BOOT, _FIGURE = "analyse.axis", "analyse.bootstrap", "analyse.figure_options"


def _group(title: str, *options: Option) -> tuple[Option, ...]:
    """``options`` listed under ``title`` in ``--help``."""
    return tuple(dataclasses.replace(o, group=title) for o in options)


def _command(name: str, help: str, run: str, *options: Option, **more) -> Step:
    """A step with ``options`` whose handler is ``run`` (a ``"module:attribute"`` reference)."""
    return Step(name, help, run, options=options, **more)


RANKINGS_DESCRIPTION = """\
Do rankings transfer? Statistics of any results table with columns model, dataset, accuracy
(percent) and optional n (test-set size), seed, ci_low, ci_high; or a wide table (--format wide)
with one column per dataset, or paired columns per dataset (<dataset>_accuracy and optional
<dataset>_n, _ci_low, _ci_high) and at most one group column (such as benchmark) prefixing the
dataset. Several tables are read as one: a table without a dataset column is one test set, named
NAME=FILE or after its file (timm's results-<dataset>.csv; --accuracy-column top1).

Per dataset against the reference: ranks (1 = best, ties averaged), delta rank (rank on the
reference - rank on the dataset: positive = the model climbs, as in Recht et al. and Ozbulak et
al.), Kendall tau-b, Spearman rho and Pearson r (exact or permutation p-values up to 30 models),
the OLS fit on reference accuracy (optionally above a cut), rank agreement up to error bars,
bootstrap intervals (over models, seeds or images). Across datasets: size-weighted and geometric
means and their ranks, correlations averaged over datasets and each dataset's with the mean of
the others, Spearman rho of errors. Tables with protocol/transform columns (accuracy.csv) are
reduced with --variant.
"""
_ON_GPU = (Option("device", "torch device (default: cuda if available)"), _GPU_JOB)
_WORKERS = Option("workers", "DataLoader worker processes", "{threads}", int, True)
_OUT = Option("out", "the dataset's folder", "{params.out}", required=True, metavar="DIR")
_LABELS = Option(
    "labels",
    "the subjects or datasets the figure compares, in the order of its files",
    "{params.labels}",
    required=True,
    metavar="LABEL",
    nargs="+",
)
_CONFIG = (
    "workflow config file(s): a base, then overlays (merged in order, later files winning, as "
    "snakemake's --configfile)"
)

for _step in (
    _train("train-draw-trials", "pre-register and draw an experiment's trials", "Draw", _RECORD),
    _train(
        "train-preregistration-table",
        "the preregistration record as CSV: experiments, hashes, models, amendments",
        "PreregistrationTable",
        _RECORD,
        settings=False,
    ),
    _train(
        "train-trial",
        "train the trial in one slot of a stage (to a halving rung or the end)",
        "Trial",
        *(_STAGE, _SLOT, *_TRAINING),
        launch=_LAUNCH,
    ),
    _train(
        "train-features",
        "a TL backbone's features of the train and val splits, computed once for every head fit",
        "Features",
        _THREADS,
    ),
    _train(
        "train-published",
        "torchvision's published ImageNet weights as a final run (nothing trained)",
        "Published",
        _run("dataset", "protocol"),
    ),
    _train("train-halve", "successive halving: promote the best trials", "Halve", _RUNG),
    _train("train-select", "pick the best trial by validation accuracy", "Select", settings=False),
    _train(
        "train-final",
        "the selected trial with one seed: trained again, or a space's first seed taking its "
        "trial's weights",
        "Final",
        *(_run("dataset", "protocol", "model", "seed"), *_TRAINING),
        launch=_LAUNCH,
    ),
    _train(
        "preflight",
        "check one GPU against the config's training jobs before submitting them",
        "Preflight",
        Option("config", f"{_CONFIG}, instead of the rule's --settings", nargs="+", metavar="FILE"),
        Option("models", "comma-separated: only these of the config's models (default: all)"),
        Option("spaces", "comma-separated: only these train.spaces (default: all)"),
        Option(
            "device", "the device to check (default: train.device)", choices=("auto", "cpu", "cuda")
        ),
        Option("workers", "loader workers (default: the config's)", type=int),
        Option("feed_steps", "timed feed steps per side", type=int, default=20),
        Option(
            "feed_seconds",
            "each side's timed window lasts at least this long",
            type=float,
            default=2.0,
        ),
        Option("feed_warmup", "untimed steps before them", type=int, default=5),
        Option("feed_images", "JPEGs written per stored size", type=int, default=512),
        Option("threads", "torch threads (the job's cores)", "{threads}", int, default=1),
        Option("both_decoders", "on the CPU too (CUDA: always), time both decoders", switch=True),
        Option(
            "datasets_root", "the jobs' datasets, sampled by the feed check (default: the config's)"
        ),
        Option("progress", "append each finished check to FILE as a JSON line", metavar="FILE"),
        Option("table", "print one row per model instead of the whole report", switch=True),
        handler="imagenot.train.preflight_cli:run",
        hand_settings=True,
        description="Checks on this GPU what the training jobs need: CUDA, each model's memory "
        "at its per-GPU batch, the feed's speed, bf16 against float32, the node's shared memory. "
        "Writes the report (Markdown, and JSON for `imagenot plan --throughput` when all passed; "
        "else <name>.failed.md/.json, each failed check naming the key that fixes it). The rule "
        "`preflight` runs it before any GPU job (docs/gpu.md).",
    ),
    _curate(
        "match",
        "match every WordNet noun lemma against the TEXT column of a parquet file",
        "Match",
        Option(
            "nltk_data",
            "without --lemmas: NLTK_DATA dir with WordNet 3.0 (default: results/wordnet/nltk_data)",
            metavar="NLTK_DATA",
        ),
        Option("batch_rows", "rows per batch (default: laion.batch_rows)", type=int),
        Option(
            "max_caption_bytes", "skip longer captions (default: laion.max_caption_bytes)", type=int
        ),
        Option("require_url", "also require a URL string column (LAION shards)", switch=True),
        hand_settings=True,
        description="Writes (row, wnid), one row per match: case-insensitive, whole words, "
        "after lowercasing and turning every non-letter/digit run into one space. A flag "
        "replaces its key of --settings.",
    ),
    _curate(
        "lemmas",
        "write every (lemma, wnid) pair of WordNet's nouns to parquet (the match lexicon)",
        "Lemmas",
        settings=False,
        description="Loading WordNet takes seconds; matching jobs read this table instead.",
    ),
    _curate("curate-candidates", "class selection steps 1-5 with audit trail", "Candidates"),
    _curate("curate-captions", "step 6 for one shard: single-class captions", "Caption"),
    _curate("curate-queries", "step 7: embed the class queries", "Queries"),
    _curate(
        "curate-embed",
        "step 7 for one part: each caption's similarity to its class query",
        "Embed",
        Option("work_dir", "resumable chunk files", "{params.work}", None, True, metavar="DIR"),
        _GPU_JOB,
    ),
    _curate("curate-select", "steps 7b-8: score classes, select captions", "Select"),
    _curate("curate-audit", "audit trail and funnel of a curated dataset", "Audit", settings=False),
    _curate(
        "curate-calibration",
        "step 7 check: classes passing each similarity threshold, score distribution",
        "Calibration",
        description="Per threshold of a grid, the classes whose score reaches it; a summary of "
        "the scores; a figure marking the configured threshold and n_classes.",
    ),
    _curate(
        "prepare-wordnet",
        "build an nltk-readable WordNet 3.0 corpus",
        "Wordnet",
        Option("dict_dir", default="wordnet.dict_dir", metavar="DIR"),
        hand_settings=True,
    ),
    _staged(
        "evaluate",
        "evaluate-robustness",
        "evaluate a final checkpoint under every registered test-time transformation",
        "Robustness",
        Option("threads", "CPU threads (evaluate.threads)", "{threads}", int, True),
        _GPU_JOB,
        handler="evaluate_robustness",
    ),
    _command(
        "ci",
        "Clopper-Pearson and Wilson intervals of one accuracy on n test images",
        "imagenot.analyse.cli:ci",
        Option("accuracy", "top-1 accuracy in percent", type=float, required=True),
        Option("n", "test-set size", type=int, required=True),
        Option("confidence", "strictly in (0, 1)", type=float, default="analyse.confidence"),
        Option("json", "print the intervals as JSON", switch=True),
    ),
    _staged(
        "analyse",
        "accuracy-table",
        "collect evaluation results and published ImageNet accuracies into accuracy.csv",
        "Accuracy",
        Option(
            "published",
            "published accuracies (default: resources/published_weights.csv)",
            metavar="PATH",
        ),
        handler="write_accuracy_table",
    ),
    _figures("figure", "draw one figure (PDF + PNG) from accuracy.csv", "Figure"),
    _figures("table", "write one table (CSV + Markdown)", "Table"),
    _command(
        "run-summary",
        "whether rankings transfer, per comparison; what a run built, per dataset images per "
        "split and download success, per model the best validation/test accuracy, and every "
        "problem",
        "imagenot.run.run_summary_cli:run_summary",
        Option("strict", "exit 1 when there is an error", switch=True),
        Option(
            "configfiles",
            "the run's config files as a JSON list, named by the report command the summary "
            "ends with (default: the demo's)",
            "{params.configfiles}",
            metavar="JSON",
        ),
        files="imagenot.run.run_summary_cli:SummaryFiles",
        settings="imagenot.run.summary_plan:layout",
        description="Reads the working directory's results. Errors (unusable results) come "
        "first; the exit status is 0 unless --strict (the workflow's end exits 1 on errors).",
    ),
    _diagnostics(
        "wordnet-stats",
        "WordNet subtree statistics of a class list against a reference list",
        "WordnetStats",
        Option("json", "print the JSON document on stdout", switch=True),
        settings=False,
        description="Statistics of the union of the classes' hypernym paths (docs/method.md "
        "section 3). Bad ids are reported with their line numbers (exit status 2).",
    ),
    _diagnostics(
        "caption-similarity-stats",
        "caption-gloss similarity summary of a curation",
        "CaptionStats",
        settings=False,
    ),
    _diagnostics(
        "embed-images",
        "embed every image of one split of a dataset with the diagnostics encoder",
        "Embed",
        _WORKERS,
        *_ON_GPU,
    ),
    _diagnostics(
        "image-similarity",
        "intra- and inter-class similarity of image embeddings (at most max_images_per_class "
        "per class, first in manifest order)",
        "ImageSimilarity",
    ),
    _diagnostics("diagnostics-table", "contrast vs reference table with ratios", "Table"),
    _diagnostics("diagnostics-figure", "one diagnostics figure (PDF and PNG)", "Figure", _LABELS),
    _audit(
        "audit-calibrate",
        "calibrate the near-duplicate threshold on held-apart images and their edited copies",
        "Calibrate",
        *_ON_GPU,
    ),
    _audit(
        "audit-thumbnails",
        "make the colour-normalised thumbnails of one split of a dataset (the search's pixel "
        "candidates), in its embeddings' key order",
        "Thumbnails",
        _WORKERS,
    ),
    _audit(
        "audit-search",
        "find each image's closest image in every target set (exact FAISS search)",
        "Search",
        Option("threads", "FAISS's threads (the job's cores)", "{threads}", int, True),
    ),
    _audit(
        "audit-pool",
        "flag a download pool's images before its splits are built (the exclusion list)",
        "Pool",
        *_ON_GPU,
    ),
    _audit(
        "audit-table", "tabulate the near-duplicates found at the calibrated threshold", "Table"
    ),
    _audit("audit-figure", "draw the closest pairs side by side (PDF and PNG)", "Figure"),
    _command(
        "validate-config",
        "check config files exactly as the workflow does (schema and cross-key checks)",
        "imagenot.run.validate_cli:validate_config",
        Option(
            "config", "YAML config file(s), read from where you are", nargs="+", positional=True
        ),
        Option(
            "directory",
            "the working directory the workflow will run in (snakemake's --directory; "
            "created if missing), where relative paths and results/ are read (default: the "
            "current folder)",
            metavar="DIR",
        ),
        Option(
            "allow_templates",
            "render YTE-templated config files (top-level __use_yte__), running their Python "
            "code, as Snakemake does; without it such a file is refused unread",
            switch=True,
        ),
        description="Later files override earlier ones key by key, as Snakemake's --configfile; "
        "a key ending in + adds to a list (`models+: [convnext_mini]`). Every problem is listed "
        "at once. Run it where the workflow runs (or --directory): the config is also checked "
        "against the results there (another study's are refused; a changed search or model "
        "setting against the preregistration record); what it could not check is printed last.",
    ),
    _command(
        "plan",
        "what a config will cost, and what to ask for, before launch (no data needed)",
        "imagenot.plan.plan_cli:plan",
        Option("config", _CONFIG, type=Path, required=True, metavar="FILE", nargs="+"),
        Option("gpus", "GPUs at once, for the schedule", type=int, default=8),
        Option(
            "cores",
            "CPU cores at once for the data stages (default: the config's resources.plan_cores)",
            type=int,
            metavar="N",
        ),
        Option(
            "deadline_hours",
            "also say how many GPUs (and per job) end training within H hours at the least "
            "GPU-hours",
            type=float,
            metavar="H",
        ),
        Option(
            "directory",
            "the run's working directory, whose finished trials and final runs re-estimate "
            "what is left (default: the current one)",
            metavar="DIR",
        ),
        Option(
            "throughput",
            "your GPU's measured speed: the JSON report(s) of `imagenot preflight` run on it "
            "(or of `benchmarks/bench_feed_models.py --json`; a later file replaces the "
            "models it measured): its images/s and GPU memory replace the estimate's for "
            "those models (default: the config's train.throughput, an H200's)",
            type=Path,
            metavar="FILE",
            nargs="+",
        ),
        Option("json", "print one JSON object (default: text)", switch=True),
        description="Plans the config's `all` with Snakemake's dry run on empty placeholder "
        "inputs (no data is read), sums per rule group and says what to request: GPU-hours "
        "(expected with early stopping, the low figure and the bound beside it), the longest job "
        "(the partition), GPU memory, node-local disk, storage (each with the rules that read "
        "it), training's schedule on the GPUs. Requests are upper bounds; estimates say their "
        "source. Finished trials and final runs in --directory re-estimate what is left.",
    ),
    _figures(
        "rankings",
        "do rankings transfer? statistics, figures and tables of any results table",
        "Rankings",
        *_group(
            "input",
            Option("format", "table layout", choices=("long", "wide"), default="long"),
            Option(
                "accuracy_column",
                "a long table's accuracy column, in percent, any case (timm's results CSVs: top1) "
                "(default: accuracy)",
                metavar="COLUMN",
            ),
            Option(
                "n",
                "test-set size per dataset (wide tables, or long ones without an n column)",
                nargs="+",
                metavar="DATASET=N",
            ),
            Option("fractions", "accuracies are fractions in 0-1 (--scale fraction)", switch=True),
            Option(
                "scale",
                "how accuracies are written, for all datasets or one: percent, fraction (0-1, "
                "multiplied by 100) or auto (default: percent, and a dataset whose accuracies are "
                "all at most 1 is refused until its scale is said)",
                nargs="+",
                metavar="[DATASET=]SCALE",
            ),
            Option(
                "key",
                "column(s) telling apart rows of one model on one dataset (img_size: a model at "
                "two image sizes becomes two, model@img_size)",
                nargs="+",
                metavar="COLUMN",
            ),
            Option("variant", choices=("standard", "robust"), default="standard"),
            Option("standard_transform", default="analyse.standard_transform"),
        ),
        *_group(
            "analyses",
            Option("reference", "dataset to compare against (default: the first one)"),
            Option("baseline", "model for relative progress (accuracy / baseline's)"),
            Option("axis", choices=_AXIS, default=_AXIS),
            Option(
                "confidence",
                type="imagenot.analyse.cli:confidence_level",
                default="analyse.confidence",
            ),
            Option(
                "min_reference_accuracy",
                "also fit OLS on the models with reference accuracy >= X percent (Fang et al.: 70)",
                type=float,
                metavar="X",
            ),
            Option(
                "aggregate",
                "datasets of the across-dataset means and their ranks (default: all)",
                nargs="+",
                metavar="DATASET",
            ),
            Option(
                "floor",
                "raise accuracies below X percent (0 < X <= 100) to X before the geometric mean "
                "(all datasets, or one); without it a model with 0%% somewhere is left out of "
                "the geometric mean",
                nargs="+",
                metavar="[DATASET=]X",
            ),
            Option("bootstrap_reps", type=int, default=f"{_BOOT}.reps"),
            Option("bootstrap_over", choices=f"{_BOOT}.over", default=f"{_BOOT}.over"),
            Option("interval", choices=f"{_BOOT}.interval", default=f"{_BOOT}.interval"),
            Option("seed", type=int, default=f"{_BOOT}.seed"),
            Option(
                "settings",
                "the workflow rule's flags above (--variant to --seed; its table in percent) as "
                "one JSON object (keys named as the config's), replacing them",
                "{params.settings}",
                metavar="JSON",
            ),
        ),
        *_group(
            "output",
            Option("json", "print the full report as JSON", switch=True),
            Option(
                "models",
                "models listed per dataset in the text summary (default: a compact digest)",
                metavar="K|all",
            ),
            Option("report", "write figures (PDF, PNG) and tables here", metavar="DIR"),
            Option("dpi", type=int, default=f"{_FIGURE}.dpi"),
            Option(
                "top",
                "models drawn per panel of the rankings figure: the best K (default: %(default)s)",
                type=int,
                default=f"{_FIGURE}.top",
                metavar="K",
            ),
            Option(
                "highlight",
                "models named in colour in every figure, wherever they rank (default: none)",
                nargs="+",
                default=f"{_FIGURE}.highlight",
                metavar="MODEL",
            ),
        ),
        settings=False,
        handler="imagenot.figures.rankings_cli:rankings",
        description=RANKINGS_DESCRIPTION,
    ),
    Step(
        "slurm-profile",
        "write the SLURM site profile (then: snakemake --profile slurm all)",
        run="imagenot.plan.slurm_profile:main",
        description="Write the global Snakemake profile `slurm` for this cluster: config.yaml, "
        "partitions.yaml and site.yaml in --dir. Afterwards `snakemake --profile slurm all` "
        "runs the workflow on SLURM from the root of a clone. Defaults: "
        "workflow/schemas/site.schema.yaml; every key: docs/cluster.md.",
        options="imagenot.plan.slurm_profile:options",
    ),
    _command(
        "restamp",
        "set a run copied without its file times (cp -r) back to the times Snakemake recorded, "
        "so that the copy plans what the original plans (nothing, for a finished run)",
        "imagenot.run.restamp:main",
        Option("directory", "the copied run's working directory (default: here)", metavar="DIR"),
    ),
    _acquire(
        "acquire-download",
        "download and validate one part of a caption selection",
        "Download",
        Option("part", "the part's number", "{wildcards.part}", int, True),
        Option("work_dir", "img2dataset work folder (kept to resume)", "{params.work}", None, True),
        Option("processes", "download processes (the job's threads)", "{threads}", int, True),
        handler="imagenot.acquire.download:download_part",
    ),
    _acquire(
        "acquire-topup",
        "select the next top-up round: reserve captions of short classes",
        "Topup",
        handler="imagenot.acquire.build:select_topup",
    ),
    Step(
        "acquire-plan",
        "fill and split a LAION-built dataset from every download round",
        "imagenot.acquire.build:plan_build",
        "imagenot.acquire.files:PlanFiles",
        "imagenot.acquire.settings:FillSettings",
        (Option("name", "dataset name (for messages)", "{wildcards.dataset}", required=True),),
    ),
    _acquire(
        "acquire-write",
        "store one download part's kept images",
        "Write",
        Option("job", "download part, e.g. part-00003", "part-{wildcards.part}", required=True),
        _OUT,
        handler="imagenot.acquire.build:write_build_part",
    ),
    _acquire(
        "acquire-gather",
        "write manifest, classes and fingerprint from part manifests",
        "Gather",
        handler="imagenot.acquire.dataset:gather",
    ),
    Step(
        "materialise-range",
        "write one class range of a dataset on disk (parallel jobs)",
        "imagenot.acquire.materialise:materialise_range",
        "imagenot.acquire.files:RangeFiles",
        "imagenot.acquire.settings:MaterialiseSettings",
        (_OUT, Option("job", "the class range's number", "{wildcards.job}", int, True)),
    ),
    Step(
        "demo-world",
        "build the demo world: LAION-style shards, their images, ground truth",
        "imagenot.demo.cli:world",
        "imagenot.demo.files:WorldFiles",
        "imagenot.demo.cli:demo_settings",
        (
            Option("out", "output directory (results/demo_world)", "{params.out}", None, True),
            Option("seed", "override demo_world.seed", type=int),
            Option("threads", "image-rendering processes (rule threads)", "{threads}", int, True),
        ),
        hand_settings=True,
    ),
    Step(
        "scale-world-shard",
        "write one paper-shaped LAION metadata shard of the scale world",
        "imagenot.demo.scale_cli:shard",
        "imagenot.demo.files:ScaleShardFiles",
        "imagenot.demo.scale_cli:scale_settings",
        (Option("index", "shard index (seeds the shard)", "{wildcards.shard}", int, True),),
        hand_settings=True,
    ),
):
    STEPS.register(_step.name, _step)
