#!/usr/bin/env bash
# Multi30k studies trained on a lent GPU: the training issue's (experiments/training_studies.sh:
# subword, guided) and the Luong decoder's (experiments/luong_studies.sh: plateau, table4): what
# to prepare here, the one call to make there, and how the runs come back into the studies.
#
#     bash experiments/gpu_studies.sh prepare [STEP]...               # here: the call to make
#     bash experiments/gpu_studies.sh ingest RECORDS.tgz [STEP]...    # here: runs back, reports
#
# `prepare` fetches the wheels the device's image lacks (experiments/gpu_check.sh wheels), copies
# the corpus into .gpu_carry/ (ignored by git: the data is never committed), writes each study's
# jobs file (`LAUNCHER=jobs`, every run a line) and prints the device call: the GPU tests, then
# experiments/gpu_jobs.sh over the jobs files, in the order given (unfinished runs are lost).
# `ingest` unpacks the runs' workdirs where the jobs wrote them (this checkout's paths), writes
# each study's report from its finished points (`--collect --partial`) and converts the study
# into records (`experiments.convert_results --prune`); then `python -m experiments.pages` and
# commit the finished points. Until then the study folders that `prepare` made (jobs files,
# logs, unfinished runs) fail tests/experiments/test_results.py's check that every folder is a study: move
# aside what did not finish. The runs are the studies' own (same configs and budgets); only the
# device differs, which their records name. STEP defaults to subword guided plateau.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
shift || true
if [ "$mode" = ingest ]; then
  records=${1:?usage: $0 ingest RECORDS.tgz [STEP]...}
  shift
fi
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(subword guided plateau)
PY=${PY:-.venv/bin/python}
study() {  # study STEP: the step's script and study folder.
  case "$1" in
    subword|guided) echo "training_studies.sh multi30k_$1" ;;
    plateau) echo "luong_studies.sh multi30k_luong_plateau" ;;
    table4) echo "luong_studies.sh multi30k_luong" ;;
    *) echo "unknown step $1: subword, guided, plateau or table4" >&2; exit 2 ;;
  esac
}

case "$mode" in
  prepare)
    bash experiments/gpu_check.sh wheels
    grep -qx '/.gpu_carry/' .git/info/exclude 2>/dev/null || echo /.gpu_carry/ >> .git/info/exclude
    mkdir -p .gpu_carry && cp -r ../shared/data/multi30k .gpu_carry/
    files=() carry=(.whl .gpu_carry experiments/results/multi30k_scores/data)
    for step in "${steps[@]}"; do
      info=$(study "$step")
      read -r script folder <<< "$info"
      LAUNCHER=jobs bash "experiments/$script" "$step"
      files+=("experiments/results/$folder/jobs.txt")
    done
    carry+=("${files[@]}")
    echo
    echo "device call (timeout_s 590), carry: ${carry[*]}"
    echo "bash experiments/gpu_check.sh install > /dev/null || exit 1;" \
      "DTYPES=float32 OUT=\$OUT/check timeout 150 bash experiments/gpu_check.sh tests;" \
      "OUT=\$OUT/jobs bash experiments/gpu_jobs.sh 400 6 ${files[*]}"
    ;;
  ingest)
    tar xzf "$records" -C /
    for step in "${steps[@]}"; do
      info=$(study "$step")
      read -r script folder <<< "$info"
      [ -d "experiments/results/$folder" ] || continue
      LAUNCHER=local SWEEP_ARGS="--collect --partial" bash "experiments/$script" "$step"
      "$PY" -m experiments.convert_results --prune "experiments/results/$folder"
    done
    ;;
  *)
    echo "usage: $0 prepare [STEP]... | ingest RECORDS.tgz [STEP]..." >&2
    exit 2
    ;;
esac
