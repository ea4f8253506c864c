"""No PDF the project writes embeds a Type 3 font (venues refuse them): the workflow's figures,
the curation calibration, the diagnostics figures and the figures of ``imagenot rankings
--report``, each read back and its font dictionaries listed; a PDF written with Type 3 fonts is found by the same reading."""

from __future__ import annotations

import dataclasses
import re
import zlib
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

# the workflow's figures from the synthetic run that tests/test_figures.py draws them from
from test_figures import FIGURE_REQUESTS, config, figure_argv, results, runs  # noqa: F401

from imagenot.analyse.checks import validate_table
from imagenot.analyse.rankings import rankings_report
from imagenot.analyse.settings import RankingsSettings
from imagenot.cli import main
from imagenot.core.figure_style import paper_style, save
from imagenot.core.settings import Style
from imagenot.figures.report import REPORT_FIGURES, write_report

matplotlib.use("Agg")

OBJECT = re.compile(rb"\d+\s+\d+\s+obj\b(.*?)\bendobj", re.S)
STREAM = re.compile(rb"stream\r?\n(.*?)\r?\nendstream", re.S)


def _dictionaries(data: bytes) -> list[bytes]:
    """The dictionary part of every object of a PDF file, and of every object inside a
    compressed object stream (``/Type /ObjStm``: objects written there have no ``obj``)."""
    out = []
    for body in OBJECT.findall(data):
        head, _, _ = body.partition(b"stream")
        out.append(head)
        if re.search(rb"/Type\s*/ObjStm", head):
            for raw in STREAM.findall(body):
                out.append(zlib.decompress(raw))
    return out


def pdf_fonts(path: Path) -> list[tuple[str, str]]:
    """(subtype, base font) of every font dictionary of the PDF at ``path``."""
    data = path.read_bytes()
    assert data[:5] == b"%PDF-", path
    fonts = []
    for d in _dictionaries(data):
        if re.search(rb"/Type\s*/Font\b", d):
            subtype = re.search(rb"/Subtype\s*/(\w+)", d)
            base = re.search(rb"/BaseFont\s*/([^\s/<>\[\]]+)", d)
            fonts.append(
                (
                    subtype.group(1).decode() if subtype else "?",
                    base.group(1).decode() if base else "?",
                )
            )
    return fonts


def type3_fonts(path: Path) -> list[str]:
    """The Type 3 fonts of a PDF; the PDF must embed some font (a figure has text), so that a
    reading that finds no font dictionary cannot pass."""
    fonts = pdf_fonts(path)
    assert fonts, f"{path}: no font dictionary found"
    return [base for subtype, base in fonts if subtype == "Type3"]


def _text_figure():
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label="ResNet-50 (76.1%)")
    ax.set_title("accuracy")
    ax.legend()
    return fig


def test_the_reading_finds_a_planted_type3_font(tmp_path):
    """The same figure written with matplotlib's default PDF font type (3) and with TrueType:
    the first is found, the second is not."""
    import matplotlib.pyplot as plt

    fig = _text_figure()
    with plt.rc_context({"pdf.fonttype": 3}):
        fig.savefig(tmp_path / "type3.pdf")
    with plt.rc_context({"pdf.fonttype": 42}):
        fig.savefig(tmp_path / "type42.pdf")
    plt.close(fig)
    assert type3_fonts(tmp_path / "type3.pdf")
    assert type3_fonts(tmp_path / "type42.pdf") == []
    assert {s for s, _ in pdf_fonts(tmp_path / "type42.pdf")} & {"TrueType", "CIDFontType2"}


def test_save_writes_truetype_after_the_style_has_ended(tmp_path):
    """A figure drawn in the paper style is saved once that style has ended, under rc settings
    that ask for Type 3 (matplotlib's default): the writer applies the font type itself."""
    import matplotlib.pyplot as plt

    with plt.rc_context({"pdf.fonttype": 3}):
        with paper_style(Style.schema_defaults()):
            fig = _text_figure()
        save(fig, tmp_path / "f.pdf", tmp_path / "f.png", 40)
    assert type3_fonts(tmp_path / "f.pdf") == []


def test_writing_a_pdf_logs_nothing_from_fonttools_at_info(tmp_path, caplog):
    """fontTools subsets the embedded fonts and reports each step at INFO (hundreds of lines
    per PDF on stderr): a PDF written with fontTools' loggers open at INFO shows those lines
    (planted), one written by ``write_pdf`` logs nothing below WARNING from fontTools."""
    import logging

    import matplotlib.pyplot as plt

    from imagenot.core.figure_style import SAVE_RC, write_pdf

    def fonttools_info() -> list[str]:
        return [
            r.getMessage()
            for r in caplog.records
            if r.name.startswith("fontTools") and r.levelno < logging.WARNING
        ]

    caplog.set_level(logging.INFO)
    logging.getLogger("fontTools").setLevel(logging.NOTSET)
    fig = _text_figure()
    with plt.rc_context(SAVE_RC):
        fig.savefig(tmp_path / "open.pdf", format="pdf")
    assert fonttools_info(), "the capture sees no fontTools INFO line (planted)"
    caplog.clear()
    write_pdf(fig, tmp_path / "quiet.pdf")
    plt.close(fig)
    assert fonttools_info() == []
    assert type3_fonts(tmp_path / "quiet.pdf") == []


@pytest.mark.parametrize("request_", FIGURE_REQUESTS, ids=lambda r: r[0])
def test_every_workflow_figure_embeds_no_type3_font(config, results, tmp_path, request_):  # noqa: F811
    pdf, png = tmp_path / "f.pdf", tmp_path / "f.png"
    cmd = [*figure_argv(config, *request_), str(results["accuracy"])]
    assert main([*cmd, "--pdf", str(pdf), "--png", str(png)]) == 0
    assert type3_fonts(pdf) == []


def test_every_report_figure_of_the_toolbox_embeds_no_type3_font(tmp_path):
    rng = np.random.default_rng(0)
    quality = rng.uniform(50, 90, 6)
    rows = [
        {"model": f"m{i}", "dataset": d, "accuracy": round(q - shift + rng.normal(0, 2), 1)}
        for d, shift in (("ref", 0), ("a", 8), ("b", 15))
        for i, q in enumerate(quality)
    ]
    settings = RankingsSettings.hand_typed(reference="ref", reps=0)
    rep = rankings_report(validate_table(pd.DataFrame(rows)), settings)
    style = dataclasses.replace(Style.schema_defaults(), dpi=40)
    written = write_report(rep, tmp_path, style=style)
    pdfs = [Path(p) for p in written if p.endswith(".pdf")]
    assert {p.stem for p in pdfs} == set(REPORT_FIGURES)
    for pdf in pdfs:
        assert type3_fonts(pdf) == [], pdf.name


def test_the_curation_calibration_figure_embeds_no_type3_font(tmp_path):
    """``imagenot curate-calibration`` on a small scores table, under rc settings that ask for
    Type 3: its PDF embeds TrueType fonts."""
    import json

    import matplotlib.pyplot as plt
    from test_curate_calibration import _cli, _settings

    from imagenot.core.settings import to_json

    with plt.rc_context({"pdf.fonttype": 3}):
        out = _cli(tmp_path, json.loads(to_json(_settings())))
    assert type3_fonts(out["calibration.pdf"]) == []


def test_every_diagnostics_figure_embeds_no_type3_font(tmp_path):
    from imagenot.core.figure_style import save
    from imagenot.core.settings import Style
    from imagenot.diagnostics import figures

    rng = np.random.default_rng(0)
    wnids = np.array([f"n{i:08d}" for i in range(20)])
    curation = (
        {"wnid": wnids, "score": rng.uniform(0.2, 0.4, 20)},
        {"wnid": np.repeat(wnids, 5), "similarity": rng.uniform(0.1, 0.5, 100)},
    )
    style = Style.schema_defaults()  # a config's that sets nothing
    drawn = {
        "class_depth": figures.class_depth_figure({"a": rng.integers(3, 12, 50)}, style),
        "siblings": figures.siblings_figure({"a": rng.integers(0, 40, 50)}, style),
        "caption_similarity": figures.caption_similarity_figure({"a": curation}, style),
        "image_similarity": figures.image_similarity_figure(
            {"a": {"intra": rng.uniform(0.3, 0.6, 20), "inter": rng.uniform(0.0, 0.3, 20)}}, style
        ),
    }
    for name, fig in drawn.items():
        pdf = tmp_path / f"diagnostics_{name}.pdf"
        save(fig, pdf, tmp_path / f"diagnostics_{name}.png", style.dpi)
        assert type3_fonts(pdf) == [], name
