"""A run's Snakemake metadata is checked before the workflow points anyone at ``snakemake
--report`` (imagenot.run.report_trust): a record whose conda_env would run code under the report's
unsafe YAML loader is named instead of the report command; the run's own records pass."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from imagenot.run import report_trust, summary_plan

REPO = Path(__file__).resolve().parents[1]
PLANTED = "!!python/object/apply:os.mkdir [RAN]"  # the report would make a folder


def _record(root: Path, name: str, conda_env: str | None) -> Path:
    """A metadata record in Snakemake's file format (JSON, ``conda_env`` base64 or null)."""
    path = root / report_trust.METADATA / name
    path.parent.mkdir(parents=True, exist_ok=True)
    env = None if conda_env is None else base64.b64encode(conda_env.encode()).decode()
    path.write_text(json.dumps({"rule": "r", "conda_env": env, "job_hash": 1}))
    return path


def test_the_unsafe_loader_runs_what_the_check_refuses_and_reads_what_it_passes(
    tmp_path, monkeypatch
):
    """The premise, on the installed PyYAML: Snakemake's report loader (yaml.Loader) runs the
    planted text; a real env file loads to the same data under the safe loader."""
    monkeypatch.chdir(tmp_path)
    yaml.load(PLANTED, Loader=yaml.Loader)
    assert (tmp_path / "RAN").exists()
    env = (REPO / "envs" / "analyse.yaml").read_text()
    assert yaml.load(env, Loader=yaml.Loader) == yaml.safe_load(env)


def test_planted_records_are_named_and_the_runs_own_pass(tmp_path):
    healthy = [
        _record(tmp_path, "b3V0", (REPO / "envs" / "analyse.yaml").read_text()),
        _record(tmp_path, "bm9uZQ==", None),  # a job without a conda env
    ]
    (tmp_path / report_trust.METADATA / "partial").write_text("{not json")  # Snakemake skips it
    assert report_trust.untrusted(tmp_path) == []
    assert report_trust.main([str(tmp_path)]) == 0
    planted = _record(tmp_path, "@a/cGxhbnRlZA==", PLANTED)
    assert report_trust.untrusted(tmp_path) == [planted]
    assert all(p.exists() for p in healthy) and not (tmp_path / "RAN").exists()


def test_the_end_of_a_run_names_the_record_instead_of_the_command(tmp_path, capsys):
    command = "snakemake --report results/report.html"
    line = summary_plan.report_line(tmp_path, command)
    assert f"`{command}` writes it." in line and "trusts .snakemake/metadata" in line
    _record(tmp_path, "cGxhbnRlZA==", PLANTED)
    line = summary_plan.report_line(tmp_path, command)
    assert command not in line and "\n" not in line
    assert "1 record(s) of .snakemake/metadata (first: .snakemake/metadata/cGxhbnRlZA==)" in line
    assert report_trust.main([str(tmp_path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "runs as Python code" in err[0]
    assert not (tmp_path / "RAN").exists()
