"""Figures of the experiment scripts, drawn from the structures their JSON files hold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from seq2seq.plots import save  # noqa: E402


def _save(fig: Any, path: Path) -> None:
  fig.tight_layout()
  save(fig, path)


def bar_plot(
  names: Sequence[str],
  means: Sequence[float],
  stds: Sequence[float],
  path: Path,
  title: str,
  ylabel: str = "test BLEU",
) -> None:
  """Bars of `means` with +- `stds` error bars, one per name (PNG at `path`)."""
  fig, ax = plt.subplots(figsize=(max(4.0, 0.9 * len(names) + 1.5), 4))
  x = np.arange(len(names))
  ax.bar(x, means, yerr=stds, capsize=4, color="tab:blue", alpha=0.8)
  ax.set_xticks(x, names, rotation=30, ha="right")
  ax.set_ylabel(ylabel)
  ax.set_ylim(bottom=0)
  ax.grid(axis="y", alpha=0.3)
  ax.set_title(title)
  _save(fig, path)


def distinct_colors(count: int) -> list:
  """`count` colours, no two alike up to 20: tab10's, then tab20's lighter shades of them (the
  default cycle repeats after 10, giving two bars of one chart the same colour)."""
  if count <= 10:
    return [plt.get_cmap("tab10")(n) for n in range(count)]
  tab20 = plt.get_cmap("tab20")
  order = list(range(0, 20, 2)) + list(range(1, 20, 2))  # The ten dark shades, then the light.
  return [tab20(order[n % 20]) for n in range(count)]


def grouped_bars(
  groups: Mapping[str, Mapping[str, tuple[float, float]]],
  path: Path,
  title: str,
  xlabel: str,
  ylabel: str,
) -> None:
  """Bars of (mean, sd) with sd error bars: one cluster per category (the inner keys, in order),
  one bar per group within it (PNG at `path`)."""
  names = list(groups)
  categories = list(next(iter(groups.values()), {}))
  width = 0.8 / max(1, len(names))
  fig, ax = plt.subplots(figsize=(min(11.0, max(6.0, 0.2 * len(names) * len(categories) + 2)), 4.5))
  x = np.arange(len(categories))
  colors = distinct_colors(len(names))
  for n, name in enumerate(names):
    means = [groups[name][c][0] for c in categories]
    stds = [groups[name][c][1] for c in categories]
    offset = (n - (len(names) - 1) / 2) * width
    ax.bar(x + offset, means, width, yerr=stds, capsize=2, label=name, color=colors[n])
  ax.set_xticks(x, categories)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.grid(axis="y", alpha=0.3)
  top = max((m + (s or 0.0) for g in groups.values() for m, s in g.values()), default=1.0)
  ax.set_ylim(0.0, 1.4 * top)  # Room for the legend above the bars.
  ax.legend(fontsize=7, ncol=3, loc="upper left")
  ax.set_title(title, fontsize=9)
  _save(fig, path)


def learning_curves(curves: Mapping[str, Mapping[str, Any]], path: Path, title: str) -> None:
  """One line per point, its mean over seeds with a band of one standard deviation, against
  training steps and (where the curves hold "minutes") against wall minutes; a second row for
  the validation loss where the curves hold it beside BLEU.

  `curves`: {point: {"metric": "bleu" | "loss", "step": [...], "mean": [...], "std": [...],
  optionally "minutes", "loss_mean", "loss_std"}}, as a sweep's JSON holds them (every point's
  curve has the same metric).
  """
  items = list(curves.values())
  metric = items[0]["metric"] if items else "bleu"
  columns = ["step"] + (["minutes"] if items and all("minutes" in c for c in items) else [])
  rows = [("mean", "std", metric)]
  if items and all("loss_mean" in c for c in items):
    rows.append(("loss_mean", "loss_std", "loss"))
  fig, axes = plt.subplots(
    len(rows), len(columns), figsize=(5.5 * len(columns), 3.6 * len(rows)), squeeze=False
  )
  for r, (mean_key, std_key, what) in enumerate(rows):
    for c, x_key in enumerate(columns):
      ax = axes[r][c]
      for name, curve in curves.items():
        x = np.asarray(curve[x_key], float)
        mean, std = np.asarray(curve[mean_key], float), np.asarray(curve[std_key], float)
        (line,) = ax.plot(x, mean, marker="o", markersize=3, label=name)
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
      ax.set_xlabel("training step" if x_key == "step" else "training wall minutes")
      ax.set_ylabel("validation BLEU (greedy)" if what == "bleu" else "validation loss")
      ax.grid(alpha=0.3)
  if curves:
    axes[0][0].legend(fontsize=8)
  fig.suptitle(title)
  _save(fig, path)
