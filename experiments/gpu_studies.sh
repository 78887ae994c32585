#!/usr/bin/env bash
# The training issue's Multi30k studies (experiments/training_studies.sh) trained on a lent GPU:
# what to prepare here, the one call to make there, and how the runs come back into the studies.
#
#     bash experiments/gpu_studies.sh prepare [subword|guided]...  # here: prints the call to make
#     bash experiments/gpu_studies.sh ingest RECORDS.tgz [STEP]...  # here: runs back, reports
#
# `prepare` fetches the wheels the device's image lacks (experiments/gpu_check.sh wheels), copies
# the corpus into .gpu_carry/ (ignored by git: the data is never committed), writes each study's
# jobs file (`LAUNCHER=jobs`, every run a line) and prints the device call: the GPU tests, then
# experiments/gpu_jobs.sh over the jobs files, in the order given (unfinished runs are lost).
# `ingest` unpacks the runs' workdirs where the jobs wrote them (this checkout's paths), writes
# each study's report from its finished points (`--collect --partial`) and converts the study
# into records (`experiments.convert_results --prune`); then `python -m experiments.pages` and
# commit. The runs are the studies' own (same configs, 3,000 updates each); only the device
# differs, which their records name.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
if [ "$mode" = ingest ]; then
  records=${1:?usage: $0 ingest RECORDS.tgz [subword|guided]...}
  shift
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(subword guided)
PY=${PY:-.venv/bin/python}

case "$mode" in
  prepare)
    bash experiments/gpu_check.sh wheels
    grep -qx '/.gpu_carry/' .git/info/exclude 2>/dev/null || echo /.gpu_carry/ >> .git/info/exclude
    mkdir -p .gpu_carry && cp -r ../shared/data/multi30k .gpu_carry/
    LAUNCHER=jobs bash experiments/training_studies.sh "${steps[@]}"
    files=() carry=(.whl .gpu_carry experiments/results/multi30k_scores/data)
    for step in "${steps[@]}"; do
      files+=("experiments/results/multi30k_$step/jobs.txt")
    done
    carry+=("${files[@]}")
    echo
    echo "device call (timeout_s 590), carry: ${carry[*]}"
    echo "bash experiments/gpu_check.sh install > /dev/null || exit 1;" \
      "DTYPES=float32 OUT=\$OUT/check timeout 120 bash experiments/gpu_check.sh tests;" \
      "OUT=\$OUT/jobs bash experiments/gpu_jobs.sh 420 6 ${files[*]}"
    ;;
  ingest)
    tar xzf "$records" -C /
    for step in "${steps[@]}"; do
      study=experiments/results/multi30k_$step
      [ -d "$study" ] || continue
      LAUNCHER=local SWEEP_ARGS="--collect --partial" bash experiments/training_studies.sh "$step"
      "$PY" -m experiments.convert_results --prune "$study"
    done
    ;;
  *)
    echo "usage: $0 prepare|ingest RECORDS.tgz [subword|guided]..." >&2
    exit 2
    ;;
esac
