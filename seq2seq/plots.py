"""Figures: alignment heatmaps (the paper's Fig. 3), BLEU against sentence length (Fig. 2) and
validation BLEU against training minutes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.image  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def alignment_heatmap(
  alpha_TS: np.ndarray, src_words: Sequence[str], out_words: Sequence[str], path: str | Path
) -> np.ndarray:
  """Greyscale heatmap (white = weight 1) with source words on x and output words on y.

  Saves a PNG at `path` and returns the RGB image [H, W, 3] uint8 (for TensorBoard).
  """
  alpha = np.asarray(alpha_TS)[: len(out_words), : len(src_words)]
  size = 0.3
  fig, ax = plt.subplots(
    figsize=(max(3, size * len(src_words) + 1.5), max(3, size * len(out_words) + 1.5))
  )
  ax.imshow(alpha, cmap="gray", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest")
  ax.set_xticks(range(len(src_words)), src_words, rotation=90, fontsize=8)
  ax.set_yticks(range(len(out_words)), out_words, fontsize=8)
  ax.xaxis.tick_top()
  fig.tight_layout()
  image = save(fig, path)
  return image


def bleu_vs_length(curves: dict[str, list[dict]], path: str | Path, title: str = "") -> np.ndarray:
  """BLEU per source-length bin, one line per model: {name: evaluate.bleu_by_length rows}; a
  row's `bleu_std` (a mean over seeds) draws a band of one standard deviation around the line."""
  fig, ax = plt.subplots(figsize=(6, 4))
  for name, rows in curves.items():
    mids = [(r["min_len"] + r["max_len"]) / 2 for r in rows]
    bleu = np.asarray([r["bleu"] for r in rows], float)
    (line,) = ax.plot(mids, bleu, marker="o", label=name)
    if rows and all(r.get("bleu_std") is not None for r in rows):
      std = np.asarray([r["bleu_std"] for r in rows], float)
      ax.fill_between(mids, bleu - std, bleu + std, color=line.get_color(), alpha=0.2)
  ax.set_xlabel("source sentence length (words)")
  ax.set_ylabel("BLEU")
  ax.set_ylim(bottom=0)
  ax.grid(alpha=0.3)
  if title:
    ax.set_title(title)
  ax.legend()
  fig.tight_layout()
  return save(fig, path)


def bleu_vs_minutes(curves: dict[str, list[dict]], path: str | Path) -> np.ndarray:
  """Validation BLEU against wall-clock minutes, one line per run: {name: [{minutes, bleu}]}."""
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for name, rows in curves.items():
    ax.plot([r["minutes"] for r in rows], [r["bleu"] for r in rows], marker=".", label=name)
  ax.set_xlabel("training wall-clock minutes")
  ax.set_ylabel("validation BLEU")
  ax.set_ylim(bottom=0)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  return save(fig, path)


def save(fig, path: str | Path) -> np.ndarray:
  """Draws `fig` once, writes it to `path` as a PNG and returns its RGB pixels [H, W, 3] uint8.

  One draw serves both: `savefig` followed by a draw for the pixels rendered the figure twice,
  which made the heatmaps of a small run's evaluation cost more than its decoding."""
  path = Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fig.set_dpi(100)
  fig.canvas.draw()
  image = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
  plt.close(fig)
  matplotlib.image.imsave(path, image)
  return image
