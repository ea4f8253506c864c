"""Text that fits: measuring labels, shortening and wrapping them, placing them without overlap,
and checking a drawn figure for overlapping or clipped text.

Model names run to 40-60 characters (timm's ``vit_large_patch14_clip_336.laion2b_ft_in12k
_in1k``) and tables to thousands of models. Each figure sizes its panels from the measured width
of the labels it shows (:func:`text_width_in`), names only what fits (the best, the largest
changes, the highlighted models), places point labels where they cover no marker, no error bar
and no other label, each clearly nearer its own point than any other or joined to it
(:func:`place_point_labels`) and spreads a column of labels apart (:func:`spread`).
:func:`layout_problems` lists every overlap and every text that leaves the figure, as the
renderer draws them: the tests run it on every figure kind, on tables of 5 to 2,000 models;
:func:`label_problems` lists every point label a reader could misread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

ELLIPSIS = "…"


def text_width_in(texts: Iterable[str], font_size: float) -> float:
    """Width in inches of the widest of ``texts`` at ``font_size`` points (0 for none)."""
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.font_manager import FontProperties

    renderer, prop = RendererAgg(1, 1, 72), FontProperties(size=font_size)  # a pixel a point
    widths = [renderer.get_text_width_height_descent(t, prop, ismath=False)[0] for t in texts if t]
    return max(widths, default=0.0) / 72.0


def fit_text(text: str, max_in: float, font_size: float) -> str:
    """``text``, shortened in the middle (``vit_large_pat…_in12k_in1k``) to at most ``max_in``
    inches: the start and the end of a model name tell variants apart."""
    if text_width_in([text], font_size) <= max_in:
        return text
    lo, hi = 1, len(text)
    best = text[:1] + ELLIPSIS
    while lo <= hi:  # the longest kept length that fits
        keep = (lo + hi) // 2
        head = (keep + 1) // 2
        cand = text[:head] + ELLIPSIS + text[len(text) - (keep - head) :]
        if text_width_in([cand], font_size) <= max_in:
            best, lo = cand, keep + 1
        else:
            hi = keep - 1
    return best


def wrap_text(text: str, max_in: float, font_size: float) -> str:
    """``text`` broken at spaces into lines of at most ``max_in`` inches (a word wider than
    that is shortened by :func:`fit_text`)."""
    if text_width_in([text], font_size) <= max_in:
        return text
    out: list[str] = []
    for paragraph in text.split("\n"):
        words = paragraph.split(" ")
        line = ""
        for word in words:
            cand = f"{line} {word}" if line else word
            if line and text_width_in([cand], font_size) > max_in:
                out.append(line)
                line = word
            else:
                line = cand
        out.append(line)
    return "\n".join(fit_text(x, max_in, font_size) for x in out)


def note(ax, text: str, **kwargs) -> None:
    """``text`` in the middle of an axes that has nothing to show."""
    ax.text(0.5, 0.5, text, ha="center", transform=ax.transAxes, **kwargs)


def heat_map(ax, values, columns, rows, texts, colors, font_size: float, **look):
    """``values`` as an image (``look``: ``imshow``'s), ``columns`` and ``rows`` its tick labels,
    ``texts[i][j]`` (an empty one: none) in the centre of cell (i, j) in ``colors[i][j]``.
    Returns the image (for a colour bar)."""
    image = ax.imshow(values, **look)
    for i, row in enumerate(texts):
        for j, text in enumerate(row):
            if text:
                ax.text(
                    j, i, text, ha="center", va="center", color=colors[i][j], fontsize=font_size
                )
    ax.set_xticks(range(len(columns)), columns, rotation=90)
    ax.set_yticks(range(len(rows)), rows)
    ax.grid(False)
    return image


def highlight_ticks(ticks, hot) -> None:
    """Tick labels of highlighted models (``hot``: a flag per tick) in bold, their colour."""
    from imagenot.core.figure_style import HIGHLIGHT

    for tick in (t for t, h in zip(ticks, hot, strict=True) if h):
        tick.set_color(HIGHLIGHT)
        tick.set_fontweight("bold")


def panel_grid(n: int, ncols: int, width_in: float, row_in: float, head_in: float):
    """(figure, its axes in reading order) of ``n`` panels in rows of ``ncols``, each row
    ``row_in`` high below ``head_in`` for the title; the axes beyond ``n`` hidden."""
    import matplotlib.pyplot as plt

    nrows = max(1, -(-n // ncols))
    size = (width_in, row_in * nrows + head_in)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_axis_off()
    return fig, list(axes.flat)


def pages(items: list, per_page: int) -> list[list]:
    """``items`` in pages of at most ``per_page`` (one empty page for none)."""
    return [items[i : i + per_page] for i in range(0, len(items), per_page)] or [[]]


def freeze(fig) -> None:
    """Lay the figure out now (constrained layout) and keep that layout: the axes stay where
    they are, so that labels placed afterwards in inches land where they were measured."""
    fig.canvas.draw()
    fig.set_layout_engine("none")


def spread(desired: np.ndarray, spacing: float, lo: float, hi: float) -> np.ndarray:
    """Positions as close to ``desired`` as possible, in the same order, at least ``spacing``
    apart and within [lo, hi] (one column of labels; units of the caller's choice).

    A forward pass pushes each label below its predecessor, a backward pass pulls them back
    above ``hi``; with more labels than fit, the caller names fewer."""
    d = np.asarray(desired, dtype=float)
    order = np.argsort(d, kind="stable")
    y = np.clip(d[order], lo, hi)
    for i in range(1, len(y)):
        y[i] = max(y[i], y[i - 1] + spacing)
    if len(y) and y[-1] > hi:
        y[-1] = hi
        for i in range(len(y) - 2, -1, -1):
            y[i] = min(y[i], y[i + 1] - spacing)
    out = np.empty_like(y)
    out[order] = y
    return out


@dataclass
class PointLabel:
    """A label to place beside the point (x, y) of an axes, in data coordinates."""

    text: str
    x: float
    y: float
    color: str = "k"
    weight: str = "normal"


OFFSETS = tuple(
    (round(r * dx), round(r * dy))
    for r in (1, 3, 6)
    for dx, dy in ((4, 3), (4, -3), (-4, 3), (-4, -3), (6, 0), (-6, 0), (0, 6), (0, -6))
)
"""Where a point label may go, in points from the point: the four diagonals, then the sides,
close by first, then farther out (joined to its point by a thin line)."""
LEADER_FROM_PT = 10
"""A label this far from its point (in points, |dx| + |dy| of its offset) or farther is joined
to it by a leader line; a closer one must lie clearly nearer its own point than any other
(:data:`OWN_POINT_MARGIN`)."""
OWN_POINT_MARGIN = 1.5
"""A label without a leader line lies at least this many times farther from every other point
than from its own (each measured to the nearest edge of the label's box), so that a reader
pairs them right at a glance."""
MARKER_MARGIN_PT = 1.0
"""Clearance kept between a label and every marker of the axes (points)."""


def _markers(ax, caps: bool) -> list[tuple[np.ndarray, float]]:
    """Every visible marker of ``ax`` as (its finite points in data coordinates, n x 2; the
    marker's radius in points): lines with a marker (the caps of error bars only with ``caps``)
    and scatter collections."""
    from matplotlib.collections import PathCollection
    from matplotlib.container import ErrorbarContainer

    bars = [e for e in ax.containers if isinstance(e, ErrorbarContainer)]
    skip = set() if caps else {id(c) for e in bars for c in e[1]}
    found = [
        (np.column_stack([line.get_xdata(), line.get_ydata()]), line.get_markersize() / 2)
        for line in ax.get_lines()
        if line.get_visible()
        and id(line) not in skip
        and line.get_marker() not in (None, "", " ", "None", "none")
    ]
    for coll in ax.collections:
        if isinstance(coll, PathCollection) and coll.get_visible():
            sizes = coll.get_sizes()
            found.append(
                (coll.get_offsets(), float(np.sqrt(sizes.max()) / 2) if len(sizes) else 3.0)
            )
    arrays = [(np.asarray(xy, dtype=float).reshape(-1, 2), r) for xy, r in found]
    return [(xy[np.isfinite(xy).all(axis=1)], r) for xy, r in arrays]


def obstacles(ax) -> tuple[list, list, np.ndarray]:
    """What a point label of ``ax`` must keep clear of: the window extent of every marker drawn
    (points of lines with a marker and of scatter collections), each grown by
    :data:`MARKER_MARGIN_PT`; every error bar as a path in window pixels; and the
    window position (pixels, n x 2) of every data point drawn with a marker (the caps of error
    bars are not points)."""
    from matplotlib.container import ErrorbarContainer
    from matplotlib.path import Path
    from matplotlib.transforms import Bbox

    px_per_pt = ax.figure.dpi / 72.0
    boxes = [
        Bbox.from_extents(px - r, py - r, px + r, py + r)
        for xy, radius in _markers(ax, caps=True)
        if len(xy)
        for r in [(radius + MARKER_MARGIN_PT) * px_per_pt]
        for px, py in ax.transData.transform(xy)
    ]
    bars = [
        Path(ax.transData.transform(seg))
        for e in ax.containers
        if isinstance(e, ErrorbarContainer)
        for coll in e[2]
        if coll.get_visible()
        for seg in map(np.asarray, coll.get_segments())
        if len(seg) == 2 and np.isfinite(seg).all()
    ]
    xy = np.concatenate([xy for xy, _ in _markers(ax, caps=False)] or [np.zeros((0, 2))])
    return boxes, bars, ax.transData.transform(xy) if len(xy) else np.zeros((0, 2))


def _distance(box, xy) -> np.ndarray:
    """Distance (pixels) from each point of ``xy`` (x, y in its last axis) to the nearest edge
    of ``box`` (0 inside)."""
    d = np.maximum(np.maximum(box.p0 - xy, 0.0), xy - box.p1)
    return np.hypot(d[..., 0], d[..., 1])


def place_point_labels(ax, labels: Sequence[PointLabel], font_size: float) -> list:
    """Place each label beside its point where it covers no marker of the axes
    (:func:`obstacles`), crosses no error bar, covers no label
    placed before it and nothing else of the axes that is text (legend, notes), and stays
    inside the axes. A label close to its point (no leader line, :data:`LEADER_FROM_PT`) must
    lie :data:`OWN_POINT_MARGIN` times farther from every other point than from its own, so
    that a reader pairs them right; a farther one is joined to its point by a thin line. A label that
    fits nowhere is left out (the caller orders ``labels`` by importance), a bold (highlighted)
    one wider than half the axes is first shortened in the middle. Call after :func:`freeze`.
    Returns the placed Text artists."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    taken += [text_extent(t, renderer) for t in ax.texts if t.get_visible()]
    found = obstacles(ax)
    px_per_pt = fig.dpi / 72.0
    placed = []
    for lab in labels:
        if not (np.isfinite(lab.x) and np.isfinite(lab.y)):
            continue
        text = lab.text
        if lab.weight == "bold":
            text = fit_text(text, frame.width / fig.dpi * 0.5, font_size)
        probe = ax.text(0, 0, text, fontsize=font_size, fontweight=lab.weight, transform=None)
        size = probe.get_window_extent(renderer)
        probe.remove()
        w, h = size.width, size.height
        px, py = ax.transData.transform((lab.x, lab.y))
        for dx, dy in OFFSETS:
            x0 = px + dx * px_per_pt - (0 if dx > 0 else w if dx < 0 else w / 2)
            y0 = py + dy * px_per_pt - (0 if dy > 0 else h if dy < 0 else h / 2)
            box = Bbox.from_bounds(x0, y0, w, h)
            inside = np.all(box.p0 >= frame.p0) and np.all(box.p1 <= frame.p1)
            leader = abs(dx) + abs(dy) >= LEADER_FROM_PT
            if not inside or next(_faults(box, (px, py), leader, taken, *found), None):
                continue
            side = {"ha": "left" if dx > 0 else "right" if dx < 0 else "center"}
            side["va"] = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            line = {"arrowstyle": "-", "color": "0.5", "lw": 0.4, "shrinkA": 0, "shrinkB": 2}
            look = {"fontsize": font_size, "color": lab.color, "fontweight": lab.weight}
            at = {"xytext": (dx, dy), "textcoords": "offset points", "annotation_clip": True}
            at["arrowprops"] = line if leader else None
            t = ax.annotate(text, (lab.x, lab.y), **at, **side, **look)
            taken.append(text_extent(t, renderer))
            placed.append(t)
            break
    return placed


def _faults(box, own, leader: bool, labels, markers, bars, points) -> Iterator[str]:
    """What makes a point label's ``box`` (its point at ``own``, pixels) misreadable: it covers
    one of ``labels`` (boxes) or ``markers``, crosses one of ``bars`` (paths) or, without a
    ``leader`` line, lies less than :data:`OWN_POINT_MARGIN` times farther from another of
    ``points`` than from its own. Placing a label and checking a placed one ask the same."""
    if any(box.overlaps(other) for other in labels):
        yield "overlaps a label"
    if any(box.overlaps(m) for m in markers):
        yield "covers a marker"
    if any(bar.intersects_bbox(box, filled=False) for bar in bars):
        yield "crosses an error bar"
    others = points[np.hypot(*(points - own).T) > 0.5] if len(points) else points
    near = len(others) and _distance(box, others).min() < OWN_POINT_MARGIN * _distance(box, own)
    if not leader and near:
        yield (
            f"is not {OWN_POINT_MARGIN:g} times farther from another point than from its own, "
            "and has no leader line"
        )


# ------------------------------------------------------------------------------- checking


def label_problems(ax, placed=None) -> list[str]:
    """Each point label of ``ax`` (``placed``, else every annotation of the axes) that a reader
    could misread, one line each: it covers a marker or another label, crosses an error bar,
    or, without a leader line, lies less than :data:`OWN_POINT_MARGIN` times farther from
    another point than from its own (:func:`_faults`). Empty when every label reads as its own
    point's."""
    from matplotlib.text import Annotation

    renderer = ax.figure.canvas.get_renderer()
    if placed is None:
        placed = [t for t in ax.texts if isinstance(t, Annotation) and t.get_visible()]
    boxes = [text_extent(t, renderer) for t in placed]
    found = obstacles(ax)
    problems = []
    for k, (t, box) in enumerate(zip(placed, boxes, strict=True)):
        others = [b for j, b in enumerate(boxes) if j != k]
        own, leader = ax.transData.transform(t.xy), t.arrow_patch is not None
        problems += [f"{t.get_text()!r} {f}" for f in _faults(box, own, leader, others, *found)]
    return problems


def text_extent(t, renderer):
    """The window extent of the text itself (an annotation's leader line left out)."""
    from matplotlib.text import Annotation, Text

    if isinstance(t, Annotation):
        t.update_positions(renderer)
    return Text.get_window_extent(t, renderer)


def drawn_texts(fig) -> list[tuple[object, object]]:
    """(Text, its window extent) of every text the renderer draws in ``fig``: what a reader
    sees, not the artists that exist (tick labels outside the view, empty or invisible texts
    and annotations clipped away are not drawn)."""
    from matplotlib.text import Text

    drawn: list[tuple[object, object]] = []
    original = Text.draw

    def draw(self, renderer):
        original(self, renderer)
        alpha = self.get_alpha()
        if self.get_visible() and self.get_text().strip() and (alpha is None or alpha > 0):
            drawn.append((self, text_extent(self, renderer)))

    Text.draw = draw
    try:
        fig.canvas.draw()
    finally:
        Text.draw = original
    return drawn


def layout_problems(fig, tolerance_px: float = 1.0) -> list[str]:
    """Every pair of drawn texts that overlap and every drawn text not wholly inside the figure
    (by more than ``tolerance_px`` pixels), one line each; empty when the figure is readable."""
    texts = drawn_texts(fig)
    width, height = fig.bbox.width, fig.bbox.height
    problems = []
    for t, box in texts:
        over = dict(left=-box.x0, bottom=-box.y0, right=box.x1 - width, top=box.y1 - height)
        for side in (s for s, px in over.items() if px > tolerance_px):
            problems.append(
                f"{t.get_text()!r} leaves the figure at the {side} by {over[side]:.0f} px"
            )
        clip = t.get_clip_box() if t.get_clip_on() else None
        if clip is not None and (
            np.any(box.p0 < clip.p0 - tolerance_px) or np.any(box.p1 > clip.p1 + tolerance_px)
        ):
            problems.append(f"{t.get_text()!r} is cut off by its axes")
    if len(texts) > 1:
        b = np.array([[box.x0, box.y0, box.x1, box.y1] for _, box in texts])
        for i in range(len(b) - 1):
            rest = b[i + 1 :]
            w = np.minimum(b[i, 2], rest[:, 2]) - np.maximum(b[i, 0], rest[:, 0])
            h = np.minimum(b[i, 3], rest[:, 3]) - np.maximum(b[i, 1], rest[:, 1])
            for j in np.flatnonzero((w > tolerance_px) & (h > tolerance_px)):
                a, c = texts[i][0].get_text(), texts[i + 1 + j][0].get_text()
                problems.append(f"{a!r} overlaps {c!r}")
    return problems
