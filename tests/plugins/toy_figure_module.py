"""The toy figures' plotting module: ``draw(accuracy, options, style, **drawn_for)`` -> a
matplotlib figure."""

from __future__ import annotations


def draw(acc, opts, style):
    """Test top-1 per model, one bar each."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(style.width_in, style.width_in / 2))
    mean = acc.groupby("model")["accuracy"].mean()
    ax.bar(list(mean.index), list(mean.values))
    ax.set_ylabel("top-1 (%)")
    return fig


def draw_per_dataset(acc, opts, style, dataset):
    """Test top-1 per model on one dataset (a kind drawn once per ST dataset)."""
    return draw(acc[acc["dataset"] == dataset], opts, style)
