"""Docs, docstrings and comments describe the software as it is: what a module does and why.
How it came to be so belongs to docs/changelog.md (by version) and to git, not to the text a
reader meets beside the code. This module reads every tracked document (Markdown) and the
docstrings and comments of every tracked source file, and refuses wording that tells a history
("used to", "no longer", "previously", a sentence that opens with "Now", "(was ...)", ...).
A genuine use is allowed by its exact phrase: anywhere for a fact about the web
(:data:`GENUINE`: many LAION URLs no longer resolve), else by its file (:data:`ALLOWED`); an
allowed phrase that no longer occurs in its file fails too, so the list stays exact."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Wording that tells what the software did before, each with a name for the failure message.
HISTORY: dict[str, re.Pattern[str]] = {
    # "used to" as a past habit, not as a passive ("the seed is used to draw ...")
    "used to": re.compile(
        r"(?<!\bis )(?<!\bare )(?<!\bbe )(?<!\bbeen )(?<!\bwas )(?<!\bwere )\bused to\b",
        re.IGNORECASE,
    ),
    "no longer": re.compile(r"\bno longer\b", re.IGNORECASE),
    "previously": re.compile(r"\bpreviously\b", re.IGNORECASE),
    "formerly": re.compile(r"\bformerly\b", re.IGNORECASE),
    "before this change": re.compile(r"\bbefore this change\b", re.IGNORECASE),
    "instead of the old": re.compile(r"\binstead of the old\b", re.IGNORECASE),
    "an earlier design": re.compile(r"\ban earlier (design|version|tree)\b", re.IGNORECASE),
    "the old way": re.compile(r"\bthe old (rotation|design|way|code|wording)\b", re.IGNORECASE),
    "since fixed": re.compile(r"\bsince fixed\b", re.IGNORECASE),
    # a sentence that opens with "Now" (after a sentence that said how it was)
    "Now ...": re.compile(r"(?:^|[.;:!?]\s+|\(\s*)Now\b"),
    "(now) / (before)": re.compile(r"\((?:now|before)\)|\(before[,:]", re.IGNORECASE),
    "(was ...)": re.compile(r"[(;]\s*was\s+[~\d]", re.IGNORECASE),
    "was ..., now": re.compile(r"\bwas\b[^.;:()]{0,60},\s+now\b", re.IGNORECASE),
    "now in / now kept": re.compile(r"\bnow (?:in|kept by|lives in|sits in|handled by)\b"),
    "issue number": re.compile(r"\b(?:issue|session) #?\d+\b", re.IGNORECASE),
}

# Genuine uses anywhere: facts about the web, not about this code.
GENUINE = ("URLs no longer resolve",)

# Genuine uses, by file: the exact phrase (whitespace as one space) that holds the match.
ALLOWED: dict[str, tuple[str, ...]] = {
    "workflow/imagenot/train/records.py": ("whose contents no longer give that digest",),
    "workflow/imagenot/train/trials.py": ("what a trial no longer needs",),
    "workflow/imagenot/train/cli.py": ("its stops no longer matter",),
    "tests/test_curate_match.py": ("batches are no longer contiguous",),
    "tests/test_one_verdict.py": ("a class that no longer exists",),
    "tests/test_preflight.py": ("it no longer holds",),
    "tests/test_slurm.py": ("no longer known to squeue",),
    "tests/test_validation.py": ("the data is no longer read",),
    "docs/contracts.md": ("could no longer be run, tested or debugged on its own",),
}

# Where history belongs, and this module (its allow-list quotes the phrases it refuses).
EXEMPT = {"docs/changelog.md", "tests/test_docs_describe.py"}
SOURCE_SUFFIXES = {".py", ".smk", ".yaml", ".yml", ".sh", ".toml", ".cfg"}
SOURCE_NAMES = {"Snakefile", "Makefile"}


@dataclass(frozen=True)
class Chunk:
    """One docstring, one run of comment lines, or one Markdown paragraph, whitespace folded."""

    line: int
    text: str


def fold(text: str) -> str:
    return " ".join(text.split())


def python_chunks(source: str) -> list[Chunk]:
    """Docstrings (module, class, function) and runs of consecutive comment lines."""
    chunks: list[Chunk] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                chunks.append(Chunk(node.body[0].lineno, fold(doc)))
    chunks += comment_runs(
        (token.start[0], token.string.lstrip("#"))
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    )
    return chunks


HASH_COMMENT = re.compile(r"(?:^|\s)#(?!!)(.*)$")


def hash_comment_chunks(source: str) -> list[Chunk]:
    """Runs of ``#`` comments in a file that is not Python (rules, Makefile, YAML, shell)."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        match = HASH_COMMENT.search(line)
        if match:
            found.append((number, match.group(1)))
    return comment_runs(found)


def comment_runs(comments) -> list[Chunk]:
    """Comments on consecutive lines joined into one chunk (a sentence may wrap)."""
    chunks: list[Chunk] = []
    start = last = None
    parts: list[str] = []
    for number, text in comments:
        if last is not None and number != last + 1:
            chunks.append(Chunk(start, fold(" ".join(parts))))
            parts, start = [], None
        start = number if start is None else start
        parts.append(text)
        last = number
    if parts:
        chunks.append(Chunk(start, fold(" ".join(parts))))
    return chunks


def markdown_chunks(source: str) -> list[Chunk]:
    """Paragraphs (blank-line separated) of a Markdown document."""
    chunks, start, parts = [], None, []
    for number, line in enumerate([*source.splitlines(), ""], 1):
        if line.strip():
            start = number if start is None else start
            parts.append(line)
        elif parts:
            chunks.append(Chunk(start, fold(" ".join(parts))))
            start, parts = None, []
    return chunks


def chunks_of(relative: str, source: str) -> list[Chunk]:
    path = Path(relative)
    if path.suffix == ".md":
        return markdown_chunks(source)
    if path.suffix == ".py":
        try:
            return python_chunks(source)
        except SyntaxError as error:
            raise AssertionError(f"{relative}: not Python: {error}") from error
    if path.suffix in SOURCE_SUFFIXES or path.name in SOURCE_NAMES:
        return hash_comment_chunks(source)
    return []


def history_hits(relative: str, source: str) -> list[str]:
    """``path:line: [pattern] text`` of every history wording that :data:`ALLOWED` does not
    allow for this file."""
    allowed = [fold(phrase) for phrase in (*GENUINE, *ALLOWED.get(relative, ()))]
    hits = []
    for chunk in chunks_of(relative, source):
        spans = [
            (m.start(), m.end())
            for phrase in allowed
            for m in re.finditer(re.escape(phrase), chunk.text)
        ]
        for name, pattern in HISTORY.items():
            for match in pattern.finditer(chunk.text):
                if any(a <= match.start() and match.end() <= b for a, b in spans):
                    continue
                around = chunk.text[max(0, match.start() - 60) : match.end() + 60]
                hits.append(f"{relative}:{chunk.line}: [{name}] ...{around}...")
    return hits


def tracked() -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO / name).is_file()]


def scanned() -> list[str]:
    return [name for name in tracked() if name not in EXEMPT and is_scanned(name)]


def is_scanned(relative: str) -> bool:
    path = Path(relative)
    return path.suffix == ".md" or path.suffix in SOURCE_SUFFIXES or path.name in SOURCE_NAMES


def test_docs_docstrings_and_comments_tell_no_history():
    names = scanned()
    assert "README.md" in names and "workflow/imagenot/core/settings.py" in names
    assert "Snakefile" in names and "docs/gpu.md" in names and "docs/changelog.md" not in names
    hits = [hit for name in names for hit in history_hits(name, (REPO / name).read_text())]
    assert not hits, "history wording (say what the code does and why):\n" + "\n".join(hits)


def test_every_allowed_phrase_still_occurs_in_its_file():
    stale = [
        f"{name}: {phrase!r}"
        for name, phrases in ALLOWED.items()
        for phrase in phrases
        if fold(phrase) not in fold((REPO / name).read_text())
    ]
    assert not stale, "ALLOWED names phrases that are gone:\n" + "\n".join(stale)


# Planted cases: each must be refused where it stands.
PLANTED_DOCSTRING = '''"""Reads the settings.

Why: each key used to be a flag of its own. Now it is a field."""
'''


@pytest.mark.parametrize(
    "relative, source, pattern",
    [
        ("workflow/imagenot/x.py", PLANTED_DOCSTRING, "used to"),
        ("workflow/imagenot/x.py", PLANTED_DOCSTRING, "Now ..."),
        ("workflow/imagenot/x.py", "def f():\n    '''Was slow; no longer.'''\n", "no longer"),
        ("tests/test_x.py", "x = 1  # previously two\n", "previously"),
        ("tests/test_x.py", "# the old rotation renamed\n# it away first\n", "the old way"),
        ("rules/x.smk", "rule a:\n    # formerly an array rule\n", "formerly"),
        ("Makefile", "test:  # before this change it ran all\n", "before this change"),
        ("docs/x.md", "| total | ~2,570 (was ~3,950) |\n", "(was ...)"),
        ("docs/x.md", "The ring (now) reads\nfaster.\n", "(now) / (before)"),
        ("docs/x.md", "It was 167 us per step,\nnow 4 us.\n", "was ..., now"),
        ("docs/x.md", "Added in session 12.\n", "issue number"),
        ("tests/test_x.py", "# the facts, now in ``train.experiments``\n", "now in / now kept"),
        ("README.md", "A run (before: every job failed) ends.\n", "(now) / (before)"),
    ],
)
def test_planted_history_is_refused(relative, source, pattern):
    hits = history_hits(relative, source)
    assert any(f"[{pattern}]" in hit for hit in hits), hits


@pytest.mark.parametrize(
    "relative, source",
    [
        # a sentence about data, a string that is no docstring, a use of "used to"
        ("docs/x.md", "The image was decoded once; the seed is used to draw the order.\n"),
        ("workflow/imagenot/x.py", "MSG = 'download work (was %s, now %s)'\n"),
        ("workflow/imagenot/x.py", "def f():\n    '''Lay the figure out now.'''\n"),
        ("config/paper.yaml", "  oversample: 1.0  # many LAION URLs no longer resolve\n"),
        ("docs/x.md", "Snakemake reruns a job whose rule now spells its command otherwise.\n"),
    ],
)
def test_descriptions_of_the_software_as_it_is_pass(relative, source):
    assert history_hits(relative, source) == []
