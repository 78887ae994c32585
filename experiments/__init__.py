"""Experiment scripts over the `seq2seq` library, run from the repository root as modules:

    python -m experiments.sweep --config=configs/demo.py --grid model.score=additive,dot ...
    python -m experiments.reproduce_paper --out runs/repro --preset cpu

What the scripts share (configs and overrides, runs and their workdirs, statistics, tables,
figures, the sweep engine and its launchers) lives in `experiments.lib`.
"""
