"""One verdict, one line: `imagenot validate-config` refuses the optimizer
and schedule values no training job can use (in the schema: every value a search-space
hyperparameter may take), reads YTE templates and non-UTF-8 files as Snakemake reads them, and
every error class the project raises on purpose ends in one line at the CLI. (Ctrl-C during
training: tests/test_train_preempt.py.)"""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import imagenot
from imagenot.cli import main

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "config" / "config.yaml"


@pytest.fixture(autouse=True)
def _keep_working_directory(monkeypatch):
    """`validate-config --directory` changes the process's working directory, as the command
    run by hand does; the tests run it in-process, so each gets its own back at teardown."""
    monkeypatch.chdir(Path.cwd())


def _validate(tmp_path, overlay: str | dict | bytes, capsys, name="overlay.yaml", *flags: str):
    """`imagenot validate-config config/config.yaml OVERLAY [FLAGS]` in a working directory
    without results: (exit status, error lines)."""
    path = tmp_path / name
    if isinstance(overlay, dict):
        overlay = yaml.safe_dump(overlay)
    path.write_bytes(overlay if isinstance(overlay, bytes) else overlay.encode())
    workdir = tmp_path / "run"  # a fresh working directory: no results of the clone's own run
    workdir.mkdir(exist_ok=True)
    code = main(["validate-config", str(DEMO), str(path), "--directory", str(workdir), *flags])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, [line for line in out.err.splitlines() if "error:" in line]


def _space(**fields) -> tuple[dict, str]:
    """An overlay adding a search space of its own (a new name: nothing of the demo's spaces
    merges into it); every space is checked, used or not."""
    return {"train": {"spaces": {"odd_values": fields}}}, "odd_values"


@pytest.mark.parametrize(
    ("hp", "spec", "words"),
    [
        ("weight_decay", {"value": -0.1}, "weight_decay.value: -0.1 is less than the minimum of 0"),
        ("momentum", {"value": 5}, "momentum.value: 5 is greater than or equal to the maximum"),
        ("momentum", {"value": 1.0}, "momentum.value: 1.0 is greater than or equal to the maximum"),
        ("momentum", {"uniform": [-0.2, 0.9]}, "momentum.uniform.0: -0.2 is less than"),
        ("momentum", {"choice": [0.9, 1.5]}, "momentum.choice.1: 1.5 is greater than or equal"),
        ("lr", {"value": 0}, "lr.value: 0 is less than or equal to the minimum of 0"),
        ("lr", {"grid": [0.1, -0.01]}, "lr.grid.1: -0.01 is less than or equal to the minimum"),
        ("lr", {"value": "0.1"}, "lr.value: '0.1' is not of type 'number'"),
        ("warmup_steps", {"value": -5}, "warmup_steps.value: -5 is less than the minimum of 0"),
        ("warmup_decay", {"value": 2}, "warmup_decay.value: 2 is greater than the maximum of 1"),
        ("min_lr_factor", {"value": -0.5}, "min_lr_factor.value: -0.5 is less than the minimum"),
        ("restart_epochs", {"value": 0}, "restart_epochs.value: 0 is less than the minimum of 1"),
        ("step_epochs", {"choice": [10, 0]}, "step_epochs.choice.1: 0 is less than the minimum"),
        ("step_gamma", {"value": 0}, "step_gamma.value: 0 is less than or equal to the minimum"),
        ("step_gamma", {"value": 3}, "step_gamma.value: 3 is greater than the maximum of 1"),
    ],
)
def test_hyperparameters_no_job_can_use_are_refused_naming_the_key(
    tmp_path, capsys, hp, spec, words
):
    overlay, name = _space(hyperparameters={hp: spec})
    code, errors = _validate(tmp_path, overlay, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"config key train.spaces.{name}.hyperparameters.{words}" in errors[0]


@pytest.mark.parametrize(
    ("hp", "spec"),
    [
        ("momentum", {"value": 0}),
        ("momentum", {"uniform": [0.8, 0.99]}),
        ("weight_decay", {"log_uniform": [1.0e-6, 5.0e-3]}),
        ("weight_decay", {"value": 0}),
        ("min_lr_factor", {"value": 1}),
        ("warmup_decay", {"value": 0}),
        ("warmup_steps", {"uniform": [0, 10.5]}),  # a range of a count: drawn, then rounded
        ("step_gamma", {"value": 1}),
        ("lr", {"log_uniform": [0.001, 0.1]}),
    ],
)
def test_hyperparameters_at_the_edges_of_their_domain_are_accepted(tmp_path, capsys, hp, spec):
    overlay, _ = _space(hyperparameters={hp: spec})
    assert _validate(tmp_path, overlay, capsys) == (0, [])


def test_the_first_halving_rung_after_the_epoch_cap_is_refused(tmp_path, capsys):
    overlay, name = _space(max_epochs=3, halving={"enabled": True, "min_epochs": 5})
    code, errors = _validate(tmp_path, overlay, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert (
        f"train.spaces.{name}.halving.min_epochs: 5 is above train.spaces.{name}.max_epochs (3)"
        in errors[0]
    )
    overlay, _ = _space(max_epochs=3, halving={"enabled": True, "min_epochs": 3})
    assert _validate(tmp_path, overlay, capsys) == (0, [])


@pytest.mark.parametrize(
    ("normalisation", "words"),
    [
        ({"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}, None),  # ImageNet's
        ({"mean": [0, 0.5, 1], "std": [1, 1, 1]}, None),  # the edges of the domain
        ({"mean": [123.7, 0.456, 0.406]}, "mean.0: 123.7 is greater than the maximum of 1"),
        ({"mean": [0.5, -0.1, 0.5]}, "mean.1: -0.1 is less than the minimum of 0"),
        ({"std": [0.2, 0.2, 0]}, "std.2: 0 is less than or equal to the minimum of 0"),
        ({"std": [-0.2, 0.2, 0.2]}, "std.0: -0.2 is less than or equal to the minimum of 0"),
    ],
)
def test_a_normalisation_of_pixels_in_0_1_is_checked_naming_the_key(
    tmp_path, capsys, normalisation, words
):
    """Images are scaled to [0, 1] before they are normalised: a mean out of [0, 1] (a mean
    on the 0-255 scale) or a std of at most 0 is refused where the config is checked."""
    code, errors = _validate(tmp_path, {"train": {"normalisation": normalisation}}, capsys)
    if words is None:
        assert (code, errors) == (0, [])
        return
    assert code == 2 and len(errors) == 1, errors
    assert f"config key train.normalisation.{words}" in errors[0]


# ------------------------------------------------------------------------ as Snakemake reads

YTE = """\
__use_yte__: true
seed: ?7 * 6
?if True:
  description: rendered by yte
?else:
  description: not rendered
"""


def test_a_yte_template_reads_as_snakemake_reads_it(tmp_path, capsys):
    from snakemake.common.configfile import load_configfile

    from imagenot.core.config import read_config_file

    path = tmp_path / "yte.yaml"
    path.write_text(YTE)
    assert (
        read_config_file(path)
        == load_configfile(str(path))
        == {
            "seed": 42,
            "description": "rendered by yte",
        }
    )
    # read, not run, unless asked: its code runs under --allow-templates only
    code, errors = _validate(tmp_path, YTE, capsys)
    assert code == 2 and len(errors) == 1 and "--allow-templates" in errors[0], errors
    yte = ("overlay.yaml", "--allow-templates")
    assert _validate(tmp_path, YTE, capsys, *yte) == (0, [])
    # `__use_yte__: false` (Snakemake drops the key and reads the file as YAML)
    assert _validate(tmp_path, "__use_yte__: false\nseed: 3\n", capsys) == (0, [])
    # a template whose code fails: one line naming the file
    code, errors = _validate(tmp_path, "__use_yte__: true\nseed: ?1 / 0\n", capsys, *yte)
    assert code == 2 and len(errors) == 1, errors
    assert "overlay.yaml: its YTE template fails" in errors[0]
    assert "ZeroDivisionError" in errors[0]
    # a checked value a template renders: refused like a typed one
    code, errors = _validate(tmp_path, "__use_yte__: true\nseed: ?-1\n", capsys, *yte)
    assert code == 2 and "config key seed: -1 is less than the minimum of 0" in errors[0]


def test_snakemake_runs_a_yte_overlay_that_validate_config_accepts(tmp_path):
    """The workflow itself (`snakemake -n`) plans with the template that validate-config
    accepted: both read it through Snakemake's loader."""
    overlay = tmp_path / "yte.yaml"
    overlay.write_text(YTE)
    command = [
        str(Path(sys.executable).parent / "snakemake"),
        "-n",
        "-q",
        "-s",
        str(REPO / "Snakefile"),
    ]
    command += ["--configfile", str(DEMO), str(overlay), "--directory", str(tmp_path / "wd")]
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"seed: 3\ndescription: caf\xe9\n", "is not UTF-8 text (byte 0xe9 on line 2)"),
        (b"\xff\xfeseed: 3\n", "is not UTF-8 text (byte 0xff on line 1)"),
    ],
)
def test_a_config_file_that_is_not_utf8_is_named(tmp_path, capsys, data, words):
    code, errors = _validate(tmp_path, data, capsys)
    assert code == 2 and len(errors) == 1, errors
    assert f"config file {tmp_path / 'overlay.yaml'} {words}" in errors[0]


def test_a_json_config_is_read_first_as_json_and_keys_given_twice_are_refused(tmp_path, capsys):
    assert _validate(tmp_path, json.dumps({"seed": 3}), capsys, "o.json") == (0, [])
    code, errors = _validate(tmp_path, '{"seed": 3, "seed": 4}', capsys, "o.json")
    assert code == 2 and "o.json: duplicate key 'seed'" in errors[0]


# -------------------------------------------------------------------- errors on purpose

# Exceptions the project defines that are not input errors, and why no one-line refusal is
# right for them. Every other exception class it defines must be one the CLI prints as one
# line (imagenot.cli._user_errors): a new error class is one or the other, on purpose.
INTERNAL = {
    "imagenot.train.interrupts.Preempted": "a stop: exit 75 with one line (train.cli)",
    "imagenot.train.failfast.Diverged": "caught by the loop: the trial's result says so",
    "imagenot.train.feed.RingOverrun": "the feed's invariant broken: a bug, with its traceback",
    "imagenot.core.lifeline.JobEnded": "a SystemExit: the job ended, its message is one line",
}


def _defined_exceptions() -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(imagenot.__path__, "imagenot."):
        if info.name == "imagenot.__main__":  # `python -m imagenot`: importing it runs a command
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[f"{info.name}.{value.__name__}"] = value
    return found


def test_every_error_class_the_project_defines_is_a_one_line_refusal_or_named_internal():
    from imagenot.cli import _user_errors

    defined = _defined_exceptions()
    assert {"imagenot.train.trials.JobError", "imagenot.core.io.ArtefactError"} <= set(defined)
    assert set(INTERNAL) <= set(defined), "INTERNAL names a class that no longer exists"
    handled = _user_errors()
    traced = [
        name
        for name, cls in defined.items()
        if name not in INTERNAL and not issubclass(cls, handled)
    ]
    assert not traced, f"raised on purpose but printed with a traceback: {traced}"


def test_a_job_error_ends_in_one_line(tmp_path, capsys):
    """Every trial diverged: the selection's JobError is one line naming it, no traceback."""
    from trial_records import write_slot

    slot = tmp_path / "stage-0" / "slot-0.json"
    write_slot(slot, val_accuracy=-1.0, stopped_by="diverged")
    assert (
        main(
            [
                "train-select",
                "--results",
                str(slot),
                "--selection",
                str(tmp_path / "selection.json"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1 and "every trial's loss became NaN or infinite" in lines[0]


def test_a_registry_refusal_is_not_called_a_missing_key(capsys, monkeypatch):
    """A RegistryError is a KeyError (for lookups) and a ValueError: the CLI says its words,
    not "missing key" before them."""
    from imagenot.core.registries import RegistryError

    def refuse(args):
        raise RegistryError("unknown dataset kind 'nope'; adapters exist for ['cifar10']")

    _with_func(monkeypatch, refuse)
    assert main(["validate-config", str(DEMO)]) == 2
    err = capsys.readouterr().err
    assert "error: unknown dataset kind 'nope'" in err and "missing key" not in err


def _with_func(monkeypatch, func):
    """`imagenot validate-config` running ``func`` instead of its own handler."""
    from imagenot import cli

    build = cli.build_parser

    def replaced():
        parser = build()
        sub = next(a for a in parser._actions if a.dest == "command")
        sub.choices["validate-config"].set_defaults(func=func)
        return parser

    monkeypatch.setattr(cli, "build_parser", replaced)


def test_ctrl_c_in_a_command_is_one_line_and_exit_130(capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    _with_func(monkeypatch, interrupted)
    assert main(["validate-config", str(DEMO)]) == 130
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines() == ["imagenot validate-config: interrupted (Ctrl-C)"]


def test_ctrl_c_under_debug_keeps_its_traceback(monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    _with_func(monkeypatch, interrupted)
    with pytest.raises(KeyboardInterrupt):
        main(["--debug", "validate-config", str(DEMO)])


def test_a_command_that_is_not_interrupted_exits_0(capsys):
    assert main(["validate-config", str(DEMO)]) == 0
    assert "interrupted" not in capsys.readouterr().err
