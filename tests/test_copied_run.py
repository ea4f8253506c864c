"""A finished run copied without its file times (cp -r) plans nothing once restamped, and the
workflow says so in one line before planning.

Snakemake compares a job's inputs by checksum only where they are files of at most 1 MB: a
folder (``directory()``) or a larger file that a copy wrote after the outputs made from it
looks updated. The cheapest real case: a three-rule Snakefile of that shape (a folder, a file
over 1 MB made from it, a file made from that) run by Snakemake for real in seconds, copied as
``cp -r`` copies (shutil.copyfile: times not kept) in the worst order; then the workflow's own
Snakefile on that copy (a dry run, nothing of the demo runs): its one line before planning.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imagenot.cli import main
from imagenot.run import restamp

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent

# directory() output, consumed; a file over Snakemake's 1 MB checksum limit, consumed
SNAKEFILE = """
rule all:
    input: "results/summary.txt"

rule folder:
    output: directory("results/folder")
    shell: "mkdir -p {output} && echo a > {output}/a.txt"

rule big:
    input: "results/folder"
    output: "results/big.bin"
    shell: "head -c 2000000 /dev/zero > {output}"

rule summary:
    input: "results/big.bin"
    output: "results/summary.txt"
    shell: "wc -c < {input} > {output}"
"""


def _snakemake(workdir: Path, *extra: str) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [str(BIN / "snakemake"), "-s", str(workdir / "Snakefile"), "--directory", str(workdir),
         "--cores", "1", "--quiet", "rules", *extra],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return run


def _planned(workdir: Path) -> list[str]:
    """The rules a dry run plans (``--quiet rules`` prints a table of them)."""
    run = _snakemake(workdir, "--dry-run")
    names = {"folder", "big", "summary", "all"}
    return sorted({line.split()[0] for line in run.stdout.splitlines() if line.split()[:1]
                   and line.split()[0] in names} - {"all"})  # fmt: skip


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("finished")
    (workdir / "Snakefile").write_text(SNAKEFILE)
    _snakemake(workdir)
    return workdir


def _copy(finished: Path, to: Path, keep_times: bool) -> Path:
    """A copy of the run; without its times, in the worst order (the folder and the large file
    written last: newer than what was made from them), as a ``cp -r`` may write them."""
    copy = shutil.copy2 if keep_times else shutil.copyfile
    shutil.copytree(finished, to, symlinks=True, copy_function=copy)
    if not keep_times:
        later = time.time() + 30
        for path in (
            "results/summary.txt",
            "results/big.bin",
            "results/folder/.snakemake_timestamp",
        ):
            later += 1
            os.utime(to / path, (later, later))
    return to


def test_a_copy_with_its_times_is_not_flagged(finished, tmp_path):
    """cp -a, mv, rsync -a: the times are the recorded ones."""
    copy = _copy(finished, tmp_path / "copy", keep_times=True)
    assert restamp.copied_without_times(copy) is None
    assert restamp.restamp(copy) == (0, 3, 0)  # (set back, unchanged, missing)


def test_a_copy_without_its_times_plans_nothing_once_restamped(finished, tmp_path, capsys):
    copy = _copy(finished, tmp_path / "copy", keep_times=False)
    # the folder and the large file look updated: Snakemake would redo what was made from them
    assert _planned(copy) == ["big", "summary"]
    line = restamp.copied_without_times(copy)
    assert line is not None and "\n" not in line
    assert f"imagenot restamp --directory {copy}" in line
    assert main(["restamp", "--directory", str(copy)]) == 0
    assert capsys.readouterr().out.startswith(f"{copy}: 3 outputs set back to their recorded time")
    assert _planned(copy) == []
    assert restamp.copied_without_times(copy) is None


def test_a_really_changed_input_still_reruns_after_a_restamp(finished, tmp_path):
    """Restamping sets recorded outputs back only: an output rebuilt after the copy (a new
    record) stays as new as it is, and what was made from it reruns."""
    copy = _copy(finished, tmp_path / "copy", keep_times=True)
    _snakemake(copy, "--forcerun", "big", "--until", "big")
    restamp.restamp(copy)
    assert _planned(copy) == ["summary"]


def test_records_outside_the_working_directory_are_never_touched(tmp_path):
    """A copied run's records are another person's files: a record naming a path outside the
    working directory is passed over, not restamped."""
    import base64
    import json

    outside = tmp_path / "outside.txt"
    outside.write_text("mine")
    before = outside.stat().st_mtime
    meta = tmp_path / "run" / ".snakemake" / "metadata"
    meta.mkdir(parents=True)
    for name in (str(outside), "../outside.txt"):
        key = base64.urlsafe_b64encode(name.encode()).decode()
        (meta / key).write_text(json.dumps({"endtime": 1000.0, "incomplete": False}))
    assert restamp.restamp(tmp_path / "run") == (0, 0, 0)
    assert outside.stat().st_mtime == before


def test_the_workflow_prints_the_one_line_before_planning(finished, tmp_path):
    copy = _copy(finished, tmp_path / "copy", keep_times=False)
    cmd = [str(BIN / "snakemake"), "--snakefile", str(REPO / "Snakefile"), "--directory",
           str(copy), "--configfile", str(REPO / "config" / "config.yaml"), "--cores", "1",
           "--dry-run", "--until", "prepare_wordnet"]  # fmt: skip
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    lines = [line for line in run.stderr.splitlines() if "imagenot restamp" in line]
    assert len(lines) == 1 and lines[0].startswith("imagenot: 3 of 3 outputs checked in")


def test_a_record_of_a_long_path_is_read_where_snakemake_writes_it(tmp_path):
    """Snakemake cuts the name of a long output's record into folders (``@<piece>``)."""
    import json
    from types import SimpleNamespace

    from snakemake.persistence.file import FilePersistence

    long = "results/" + "/".join(["a_rather_long_folder_name_of_a_run"] * 12) + "/out.txt"
    (tmp_path / long).parent.mkdir(parents=True)
    (tmp_path / long).write_text("x")
    meta = tmp_path / restamp.METADATA
    meta.mkdir(parents=True)
    where = FilePersistence._record_path(SimpleNamespace(_fetch_max_len=lambda _: 255), meta, long)
    assert "@" in where  # cut into folders, as Snakemake stores it
    Path(where).parent.mkdir(parents=True, exist_ok=True)
    Path(where).write_text(json.dumps({"endtime": 1_000_000.0, "incomplete": False}))
    assert list(restamp.records(tmp_path)) == [(long, 1_000_000.0)]
    assert restamp.restamp(tmp_path) == (1, 0, 0)
    assert (tmp_path / long).stat().st_mtime == 1_000_000.0
