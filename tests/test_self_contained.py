"""A clone is the whole product: no tracked file names a folder outside the repository (a
``shared`` folder beside the clone or above it). What the workflow, its examples and its tests
read lies under resources/ (resources/README.md names each file's source and licence)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A path out of the repository into a folder named shared: "../shared", a Python path built
# above the repository (".parent / 'shared'", ".parents[2] / 'shared'"), an absolute
# "/work/shared", or a path into the folders such a place held (shared/data, shared/gpu, ...)
# however it is reached. A folder named shared that a test makes in its own tmp_path, or a
# cluster's "/shared/conda", is none of these.
OUTSIDE = re.compile(
    r"\.\./+shared\b"
    r"|\.parents?(\[\d+\])?\s*/\s*[\"']shared[\"']"
    r"|/work/shared\b"
    r"|\bshared/(data|gpu|hooks|reference|method\.md)\b"
)


def outside_references(path: Path) -> list[str]:
    """``path:line: text`` of every line of a text file that names a place outside the clone
    (:data:`OUTSIDE`); none for a binary file."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return []
    text = data.decode("utf-8", errors="replace")
    return [
        f"{path.name}:{number}: {line.strip()[:160]}"
        for number, line in enumerate(text.splitlines(), 1)
        if OUTSIDE.search(line)
    ]


def tracked_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [REPO / name for name in listed.split("\0") if name and (REPO / name).is_file()]


def test_no_tracked_file_names_a_folder_beside_the_clone():
    """Every tracked text file but this one (whose planted cases below name such folders)."""
    files = tracked_files()
    assert len(files) > 100 and REPO / "resources" / "README.md" in files
    this = Path(__file__).resolve()
    found = [hit for path in files if path != this for hit in outside_references(path)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "  captions: ../shared/data/web_captions_1000.parquet",
        "see [`../shared/method.md`](../shared/method.md)",
        'WEB = REPO.parent / "shared" / "data" / "web_captions_1000.parquet"',
        "DEFAULT = Path(__file__).resolve().parents[2] / 'shared' / 'gpu'",
        "the reference plain loop (``shared/gpu/plain_loop.py``)",
        "cat /work/shared/README.md",
    ],
)
def test_a_planted_reference_outside_the_clone_is_found(tmp_path, line):
    planted = tmp_path / "planted.py"
    planted.write_text(f"first line\n{line}\nlast line\n")
    assert outside_references(planted) == [f"planted.py:2: {line.strip()}"]


@pytest.mark.parametrize(
    "line",
    [
        'shared = tmp_path / "shared" / "results" / "datasets"',
        'directory = _write(tmp_path, "--conda-prefix", "/shared/conda")',
        "the nodes see the clone on the shared filesystem",
        "captions: resources/captions/web_captions_1000.parquet",
    ],
)
def test_a_folder_named_shared_inside_a_test_or_on_a_cluster_is_not_flagged(tmp_path, line):
    clean = tmp_path / "clean.py"
    clean.write_text(f"{line}\n")
    assert outside_references(clean) == []
    binary = tmp_path / "data.bin"
    binary.write_bytes(b"\0../shared/data\n")
    assert outside_references(binary) == []


def test_the_resources_readme_names_the_source_of_every_file_under_resources():
    readme = (REPO / "resources" / "README.md").read_text(encoding="utf-8")
    rows = {m[1] for m in re.finditer(r"^\| `([^`]+)` \|", readme, re.M)}
    shipped = {
        p.relative_to(REPO / "resources").as_posix()
        for p in tracked_files()
        if p.is_relative_to(REPO / "resources") and p.name != "README.md"
    }
    assert shipped and shipped == rows, (shipped - rows, rows - shipped)
