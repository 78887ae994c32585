"""A sweep: named points (sets of config overrides) crossed with seeds, one workdir per run.

Every run of point P and seed S trains in OUT/runs/P/seed_S (its name in records: `P-seedS`),
with the config file's settings, then the sweep's shared overrides, then P's, then `seed=S`, then
the `--set` overrides, which win (but over no point's own value: that is refused), and last a
decoding point's own `--decode` settings. A grid (`{"model.score": ["additive", "dot"], ...}`)
becomes its cross product of points, each named from its values (`score=dot+features=coverage`).

Training (`train`): the seeds of a point go as one vmapped group through
`seq2seq.seed_group.train_together` (`training="together"`; they share the first seed's data
order and differ in initialisation and dropout) or one after another through
`seq2seq.train.train_and_evaluate` (`training="sequential"`; each seed also shuffles the data its
own way; also the fallback for one seed and for multi-process runs). A point may instead decode
another point's runs (`Point.decode_from`): each seed's workdir is copied from that point's and
evaluated with its own (decoding) settings. Finished runs are left alone, unfinished ones
resume, so a sweep is rerun, or its points run as separate jobs, without repeating work.

Collecting (`records`, `aggregate`, `bootstrap`, `curves`): every run's results and command,
per point the mean and sample standard deviation over seeds, the paired bootstrap of test BLEU
against a baseline point (pooled over seeds, see `bootstrap`), and validation learning curves.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import jax
import numpy as np

from experiments.lib import records as records_lib
from experiments.lib import runs as runs_lib
from experiments.lib import stats
from experiments.lib.runs import Run
from seq2seq import checkpoints
from seq2seq.common import registry
from seq2seq.data import copying, input_pipeline, metrics

TRAININGS = ("together", "sequential")
# Keys of the test split's results.json averaged over a point's seeds (row keys KEY_mean, KEY_std).
# oov_recall: the share of reference words outside the target vocabulary that the output holds;
# over_translation and under_translation: counts over the split; identical_word_peaks: the share
# of output words spelled like a source word whose attention peaks on it (`seq2seq.data.metrics`).
TEST_METRICS = (
  "bleu",
  "chrf",
  "aer",
  "aer_threshold",
  "attention_entropy",
  "oov_recall",
  "over_translation",
  "under_translation",
  "identical_word_peaks",
  "length_ratio",
  "attention_zero_share",
)
# Of the validation split, what a study selects on: BLEU and the output/reference length.
VALID_METRICS = ("bleu", "length_ratio")


@dataclasses.dataclass(frozen=True)
class Point:
  """One configuration of a sweep: dotted overrides, or the decoding of another point's runs."""

  name: str
  overrides: dict[str, Any]
  decode_from: str | None = None  # Evaluate copies of this point's runs instead of training.


@dataclasses.dataclass
class Sweep:
  """Points crossed with seeds on one config file, written under `out`."""

  config_file: str
  points: list[Point]
  seeds: list[int]
  out: Path
  shared: dict[str, Any]  # Every run, before its point's overrides.
  sets: dict[str, Any]  # Every run, last: --set wins.
  training: str = "together"

  def point(self, name: str) -> Point:
    for point in self.points:
      if point.name == name:
        return point
    raise ValueError(f"unknown point {name!r}; points: {', '.join(self.names())}")

  def names(self) -> list[str]:
    return [p.name for p in self.points]

  def decoding(self, point: Point) -> dict[str, Any]:
    """What a decoding point changes from the point it decodes (its `--decode` settings), which
    win over `--set`: `--set model.addons=copy(eos=target) --decode model.addons=copy(eos=null)`
    trains with one and decodes copies with the other. Empty for a trained point."""
    if point.decode_from is None:
      return {}
    source = self.point(point.decode_from).overrides
    return {k: v for k, v in point.overrides.items() if k not in source or source[k] != v}

  def runs(self, point: Point | str) -> list[Run]:
    """The point's runs, one per seed, in seed order."""
    point = self.point(point) if isinstance(point, str) else point
    last = {**self.sets, **self.decoding(point)}
    return [
      Run(
        f"{point.name}-seed{seed}",
        self.config_file,
        {**self.shared, **point.overrides, "seed": seed, **last},
        self.out / "runs" / point.name / f"seed_{seed}",
      )
      for seed in self.seeds
    ]

  def check(self) -> None:
    """Raises ValueError for a bad sweep: no seeds or points, repeated names or seeds, a
    `decode_from` that is not an earlier trained point, a run whose config does not resolve
    (an unknown field, a value of the wrong type), or a workdir holding a run trained with other
    settings (the fields a resume may not change, `checkpoints.saved_config_differences`: a
    finished run found there is reused as it is, so it must not be reported under new settings),
    before anything trains."""
    if not self.points or not self.seeds:
      raise ValueError("a sweep needs at least one point and one seed")
    if len(set(self.names())) != len(self.points):
      raise ValueError(f"repeated point names in {self.names()}")
    if len(set(self.seeds)) != len(self.seeds):
      raise ValueError(f"repeated seeds in {self.seeds}")
    if self.training not in TRAININGS:
      raise ValueError(f"unknown training {self.training!r}; valid: {', '.join(TRAININGS)}")
    for point in self.points:
      own = point.overrides.keys() - self.decoding(point).keys()
      if clash := sorted(k for k in own & self.sets.keys() if point.overrides[k] != self.sets[k]):
        raise ValueError(
          f"--set {', '.join(clash)} would override point {point.name}'s own "
          f"{', '.join(f'{k}={point.overrides[k]!r}' for k in clash)}: set it in one place"
        )
    trained: set[str] = set()
    for point in self.points:
      if point.decode_from is None:
        trained.add(point.name)
      elif point.decode_from not in trained:
        raise ValueError(
          f"{point.name} decodes {point.decode_from!r}: not a trained point before it"
        )
      else:
        decoded_model_check(self, point)
      for run in self.runs(point):
        differing = saved_config_differences(run)
        if differing:
          raise ValueError(
            f"{run.workdir} holds a run trained with other settings ({', '.join(differing)}); "
            "delete it to train this point again, or sweep with the settings it was trained with"
          )


def decoded_model_check(sweep: Sweep, point: Point) -> None:
  """Raises ValueError where a decoding point's runs would build another model than the runs
  it decodes: `--decode model.addons=...` may change an add-on's decoding-time settings only
  (`checkpoints.model_differences`)."""

  def flat(run: Run) -> dict[str, Any]:
    return checkpoints.flatten(json.loads(run.config().to_json_best_effort()))

  source = sweep.runs(point.decode_from)[0]
  if differing := checkpoints.model_differences(flat(source), flat(sweep.runs(point)[0])):
    raise ValueError(
      f"{point.name} decodes {point.decode_from!r} with another model ({', '.join(differing)}): "
      "--decode may change decoding-time settings only"
    )


def saved_config_differences(run: Run) -> list[str]:
  """The fields a resume may not change where the run's workdir holds other values: in its
  config.json, or in its record's config for a converted run (`records`; paths compared
  relative to the repository, as records keep them)."""
  if (run.workdir / "config.json").exists():
    return checkpoints.saved_config_differences(run.workdir, run.config())
  record = records_lib.read_record(run.workdir)
  if record is None:
    return []
  new = records_lib.relative(json.loads(run.config().to_json_best_effort()))
  return checkpoints.config_differences(record["config"], new)


def _value_name(text: str) -> str:
  return re.sub(r"[^A-Za-z0-9._-]", "-", text) or "empty"


def grid_points(grid: dict[str, Sequence[str]]) -> list[Point]:
  """The cross product of `grid` ({dotted key: value texts}), in order (the last key varies
  fastest), each point named `FIELD=VALUE+FIELD=VALUE...` by each key's last component (the
  whole dotted key where two keys share it)."""
  leaves = [key.rsplit(".", 1)[-1] for key in grid]
  labels = [key if leaves.count(leaf) > 1 else leaf for key, leaf in zip(grid, leaves, strict=True)]
  points = []
  for values in itertools.product(*grid.values()):
    name = "+".join(f"{label}={_value_name(v)}" for label, v in zip(labels, values, strict=True))
    points.append(Point(name, dict(zip(grid, values, strict=True))))
  return points


def copies(grid: dict[str, Sequence[str]]) -> bool:
  """Whether a sweep's grid turns copying on and off: `model.addons` values naming copy, or
  `model.copy` (studies run before the add-ons became one list)."""
  return "model.copy" in grid or any(copying.asked(v) for v in grid.get("model.addons", ()))


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
  """`["model.score=additive,dot", ...]` -> {"model.score": ["additive", "dot"], ...}. Commas
  inside parentheses belong to a value (`model.attention=soft,local_p(window=5,...)`)."""
  grid: dict[str, list[str]] = {}
  for item in items:
    key, sep, values = item.partition("=")
    key = key.strip()
    texts = [v.strip() for v in registry.split_top_level(values, ",") if v.strip()]
    if not sep or not key or not texts:
      raise ValueError(f"--grid {item!r}: expected key=value,value,...")
    if key in grid:
      raise ValueError(f"--grid {key} given twice")
    if len(set(texts)) != len(texts):
      raise ValueError(f"--grid {item!r}: repeated values")
    grid[key] = texts
  return grid


# ---------------------------------------------------------------------- training
def train(sweep: Sweep, names: Sequence[str]) -> set[str]:
  """Trains (or resumes) the unfinished runs of the points `names`, in the sweep's order; the
  names of the runs this call trained."""
  trained: set[str] = set()
  for point in sweep.points:
    if point.name not in names:
      continue
    runs = sweep.runs(point)
    if point.decode_from is not None:
      for run, source in zip(runs, sweep.runs(point.decode_from), strict=True):
        if not (runs_lib.is_finished(source) or runs_lib.is_finished(run)):
          raise SystemExit(f"error: {run.name} decodes {source.name}, which is unfinished")
        runs_lib.seed_from(run, source)
        if runs_lib.train_alone(run):
          trained.add(run.name)
    elif sweep.training == "together" and len(runs) > 1 and jax.process_count() == 1:
      if runs_lib.train_together(runs):
        trained.update(run.name for run in runs)
    else:
      trained.update(run.name for run in runs if runs_lib.train_alone(run))
  return trained


def finished_part(sweep: Sweep) -> tuple[Sweep, list[str]]:
  """The sweep cut to the points whose runs have all finished, and the names of the others: what
  a study spanning sessions can report on while it is still running."""
  done = [p for p in sweep.points if all(runs_lib.is_finished(r) for r in sweep.runs(p))]
  pending = [p.name for p in sweep.points if p not in done]
  return dataclasses.replace(sweep, points=done), pending


def unfinished(sweep: Sweep) -> list[Run]:
  """The runs without a final evaluation of their last step."""
  return [run for p in sweep.points for run in sweep.runs(p) if not runs_lib.is_finished(run)]


# ---------------------------------------------------------------------- collecting
def records(
  sweep: Sweep, trained: AbstractSet[str] = frozenset()
) -> dict[str, list[dict[str, Any]]]:
  """{point: every seed's run record}; `reused` is False for the runs in `trained`."""
  out = {}
  for point in sweep.points:
    sources = sweep.runs(point.decode_from) if point.decode_from else [None] * len(sweep.seeds)
    out[point.name] = [
      {
        **runs_lib.record(run),
        "reused": run.name not in trained,
        "decode_only_from": source.name if source else None,
      }
      for run, source in zip(sweep.runs(point), sources, strict=True)
    ]
  return out


def aggregate(sweep: Sweep, point: Point, recs: Sequence[dict[str, Any]]) -> dict[str, Any]:
  """One point's row: test BLEU, chrF, AER (argmax and thresholded) and attention entropy, and
  validation BLEU, each as mean and sample standard deviation over seeds (None where a run lacks
  it); the median training tokens/s and the summed wall time."""
  runs = sweep.runs(point)
  tests = [rec["results"]["test"] for rec in recs]
  speeds = [v for run in runs for v in runs_lib.train_tokens_per_s(run.workdir)]
  row: dict[str, Any] = {
    "name": point.name,
    "overrides": {k: v for k, v in runs[0].overrides.items() if k != "seed"},
    "seeds": list(sweep.seeds),
    "runs": [run.name for run in runs],
    "bleu": [t["bleu"] for t in tests],
  }
  for key in TEST_METRICS:
    row[f"{key}_mean"], row[f"{key}_std"] = stats.mean_std([t.get(key) for t in tests])
  for key in VALID_METRICS:
    valid = [rec["results"]["valid"].get(key) for rec in recs]
    row[f"valid_{key}_mean"], row[f"valid_{key}_std"] = stats.mean_std(valid)
  row["train_tokens_per_s_median"] = statistics.median(speeds) if speeds else None
  row["wall_s"] = sum(rec["wall_s"] for rec in recs)
  return row


def references(sweep: Sweep) -> list[str]:
  """The test split's reference translations (the corpus of the first point's first run)."""
  return [ex.tgt for ex in runs_lib.test_examples(sweep.runs(sweep.points[0])[0])]


def long_test_words(sweep: Sweep) -> tuple[int, int]:
  """Source words (inclusive) of the long test split the runs evaluate (`data.long_test_min_words`
  and `_max_words` of the first run); ValueError when the config has none."""
  data = input_pipeline.DataSettings.from_config(sweep.runs(sweep.points[0])[0].config())
  if not input_pipeline.has_long_test(data):
    raise ValueError(
      "no long test split: set data.long_test_min_words and data.long_test_max_words"
    )
  return data.long_test_min_words, data.long_test_max_words


def _pairs(points: Sequence[str], against: str | Mapping[str, str]) -> dict[str, str]:
  """{point: the point it is tested against}: every other point against one baseline, or the
  pairs given."""
  if isinstance(against, str):
    return {name: against for name in points if name != against}
  return dict(against)


def within_references(sweep: Sweep, baseline: str, key: str) -> dict[str, str]:
  """{point: its group's baseline} for a sweep whose points vary `key` and other fields: the
  group of a point is the points with its value of `key`, the group's baseline the one of them
  with the baseline's value of every other field (`--within model.decoder`: each normaliser
  against softmax in the same decoder). Left out: the baseline's own group (its points are
  tested against the baseline already), a group's baseline itself, a point whose group has none,
  and a decoding point (its own settings are not the grid's)."""
  base = sweep.point(baseline).overrides
  trained = [p for p in sweep.points if p.decode_from is None]
  if not any(key in p.overrides for p in trained):
    raise ValueError(f"--within {key}: no point sets it; the grid's fields: {', '.join(base)}")
  out = {}
  for point in trained:
    if point.overrides.keys() != base.keys() or point.overrides[key] == base[key]:
      continue
    wanted = {**base, key: point.overrides[key]}
    for other in trained:
      if other.overrides == wanted and other.name != point.name:
        out[point.name] = other.name
  return out


def bootstrap(
  sweep: Sweep,
  against: str | Mapping[str, str],
  refs: Sequence[str],
  n_samples: int,
  split: str = "test",
  indices: Sequence[int] | None = None,
  metrics: Sequence[str] = ("bleu",),
  ar_trials: int = stats.AR_TRIALS,
) -> dict[str, dict[str, dict[str, Any]]]:
  """The paired bootstrap of BLEU (and/or chrF: `metrics`) on `split` (whose references `refs`
  are): every point against the baseline point `against`, or each point of the mapping
  `against` ({point: reference point}) against its reference; seeds paired (seed S of the point
  with seed S of the other) and pooled on each resample of the sentences
  (`stats.paired_bootstrap`), the runs' hypotheses read once for all metrics. Beside it, the
  paired approximate randomisation of the same pair (`stats.paired_ar`, `ar_trials` trials).
  `indices`: only these sentences of the split (e.g. a length bucket). {metric: {point:
  stats.paired_bootstrap's result, stats.paired_ar's and "seeds"}}; a single baseline's p is
  None.
  """
  pairs = _pairs(sweep.names(), against)
  select = (lambda lines: lines) if indices is None else (lambda lines: [lines[i] for i in indices])
  needed = {*pairs, *pairs.values()}
  hypotheses = {
    name: [select(runs_lib.hypotheses(run, split)) for run in sweep.runs(name)]
    for name in sweep.names()
    if name in needed
  }
  refs_ = select(list(refs))
  out: dict[str, dict[str, dict[str, Any]]] = {}
  for metric in metrics:
    out[metric] = {
      name: {
        **stats.paired_bootstrap(hypotheses[other], hypotheses[name], refs_, n_samples, metric),
        **stats.paired_ar(hypotheses[other], hypotheses[name], refs_, ar_trials, metric),
        "seeds": list(sweep.seeds),
      }
      for name, other in pairs.items()
    }
    if isinstance(against, str):
      out[metric][sweep.point(against).name] = {"p_value": None, "seeds": list(sweep.seeds)}
  return out


def bootstrap_twins(
  recs: Mapping[str, Sequence[dict[str, Any]]], against: str | Mapping[str, str], n_samples: int
) -> dict[str, dict[str, Any]]:
  """The paired bootstrap of twin peaks on the test split (`stats.paired_bootstrap_twins`),
  every point against the baseline `against`, or each point of the mapping `against` against
  its reference, from the runs' per-sentence twin counts (`metrics.twin_counts`); the points
  whose runs, or their reference's, were evaluated without them, or made no twin pair, are
  left out. {point: the result and "seeds"}."""

  @functools.cache  # A reference (one baseline) serves many points: its counts are read once.
  def counts(point: str) -> list[np.ndarray] | None:
    tests = [rec["results"]["test"] for rec in recs[point]]
    arrays = [metrics.twin_counts(t, t["num_sentences"]) for t in tests]
    missing = any(a is None for a in arrays) or sum(a[:, 0].sum() for a in arrays) == 0
    return None if missing else arrays

  out: dict[str, dict[str, Any]] = {}
  for point, other in _pairs(list(recs), against).items():
    base = counts(other)
    mine = None if base is None else counts(point)
    if mine is not None and len(mine) == len(base):
      result = stats.paired_bootstrap_twins(base, mine, n_samples)
      out[point] = {**result, "seeds": [rec["config"]["seed"] for rec in recs[point]]}
  return out


def curves(sweep: Sweep) -> dict[str, dict[str, Any]]:
  """Per point, its runs' learning curves (`workdir_curves`)."""
  return workdir_curves({p.name: [run.workdir for run in sweep.runs(p)] for p in sweep.points})


def workdir_curves(workdirs: Mapping[str, Sequence[Path]]) -> dict[str, dict[str, Any]]:
  """Per name, its workdirs' (a point's seeds) validation BLEU (else, where no run computed it,
  validation loss) against steps: mean and sample standard deviation over the seeds at the
  steps they all logged, the final mean and its gain over the last quarter of the steps
  (`stats.last_quarter_gain`); with BLEU, the validation loss too ("loss_mean", "loss_std"); and
  the mean training wall minutes at those steps ("minutes": each run's `elapsed_s`, validation
  included), for the curves against wall time."""

  def per_seed(name: str, key: str) -> list[dict[int, float]]:
    return [runs_lib.valid_curve(workdir, key) for workdir in workdirs[name]]

  def at(seeds: list[dict[int, float]], steps: list[int]) -> list[tuple[float, float]]:
    return [stats.mean_std([c[s] for c in seeds]) for s in steps]

  metric = "bleu" if any(any(per_seed(name, "bleu")) for name in workdirs) else "loss"
  out = {}
  for name in workdirs:
    seeds = per_seed(name, metric)
    steps = sorted(set.intersection(*(set(c) for c in seeds)))
    pairs = at(seeds, steps)
    means = [m for m, _ in pairs]
    curve = {
      "metric": metric,
      "step": steps,
      "mean": means,
      "std": [s for _, s in pairs],
      "final": means[-1] if means else None,  # How trained the point is at the end ...
      "gain_last_quarter": stats.last_quarter_gain(steps, means),  # ... and still moving.
    }
    elapsed = per_seed(name, "elapsed_s")
    if all(set(steps) <= set(c) for c in elapsed):
      curve["minutes"] = [m / 60 for m, _ in at(elapsed, steps)]
    if metric == "bleu":
      losses = per_seed(name, "loss")
      if all(set(steps) <= set(c) for c in losses):
        loss = at(losses, steps)
        curve["loss_mean"], curve["loss_std"] = [m for m, _ in loss], [s for _, s in loss]
    out[name] = curve
  return out
