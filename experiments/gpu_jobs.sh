#!/usr/bin/env bash
# Trains sweeps' runs on a lent GPU: the lines of jobs files that `experiments.sweep
# --launcher=jobs` wrote here (as `LAUNCHER=jobs bash experiments/training_studies.sh` does), on
# the one GPU, each a whole run of its own (train, evaluate): each point's first run until they
# train (they compile the programs the others then load), then the others PROCESSES at a time.
# What the runs record, not their checkpoints, comes back as one archive, refreshed every minute
# so that a call cut at its limit still returns the runs finished by then. Unfinished runs are
# lost with the machine: order the jobs files by priority.
#
#     bash experiments/gpu_jobs.sh SECONDS PROCESSES JOBS_FILE...   # there, from the repo root
#     tar xzf RECORDS.tgz -C /                                     # here: the runs' workdirs
#
# The jobs name this machine's paths (its checkout, the corpus under ../shared/data, the
# interpreter in .venv), so there the checkout is copied to the same path, the corpus from
# .gpu_carry/ (a copy of ../shared/data/multi30k, ignored by git, carried with the call), and
# the image's python3 (with our missing pins from .whl/, as experiments/gpu_check.sh installs
# them) stands in for .venv's. Float32 products at full precision
# (JAX_DEFAULT_MATMUL_PRECISION=highest), not the GPU's TF32 default, as on the CPU.
set -uo pipefail
seconds=$1 processes=$2
shift 2
OUT=${OUT:-runs/gpu_jobs}
PY=${PY:-python3}  # The interpreter there (the image's), for the jobs' .venv/bin/python.
export PY
poll=${POLL:-10}  # Seconds between looks at the runs.
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
root=$(sed -n '1s/^cd \([^ ]*\) .*/\1/p' "$1")  # The checkout the jobs were written in.
[ -n "$root" ] || { echo "$1: no 'cd ROOT' at its start" >&2; exit 2; }
if [ "$PWD" != "$root" ]; then
  mkdir -p "$root" && cp -a . "$root" || exit 1
fi
cd "$root" || exit 1
if [ ! -d ../shared/data/multi30k ] && [ -d .gpu_carry/multi30k ]; then
  mkdir -p ../shared/data && cp -r .gpu_carry/multi30k ../shared/data/ || exit 1
fi
bash experiments/gpu_check.sh install || exit 1
export PYTHONPATH=/tmp/site:$root JAX_DEFAULT_MATMUL_PRECISION=highest
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1
# The jobs' workdirs: the --out folders their lines name, and what of them comes back.
studies=$(grep -ho -- '--out=[^ ]*' "$@" | sort -u | cut -d= -f2-)
pack() {  # What the studies commit (.gitignore's list for experiments/results), and the logs.
  tar czf "$OUT/records.tgz.part" --exclude=checkpoints --exclude=best --exclude=jax_cache \
    --exclude=tensorboard --exclude=data --exclude='*.npz' --exclude=.lock \
    --exclude=report.html --exclude=sentences.jsonl --exclude=alignments $studies 2>/dev/null
  mv "$OUT/records.tgz.part" "$OUT/records.tgz"
}
# GEMM autotuning compiles hundreds of kernel variants per product on the host's cores; level 0
# takes XLA's default kernels instead (and the same ones in every process). Triton's GEMM fusions
# took over 3 minutes each to compile with six processes on 16 cores (2026-12-04, H200);
# without them the products are cuBLAS calls. Each flag is kept where this XLA has it.
probe="import jax.numpy as jnp; (jnp.ones((64, 64)) @ jnp.ones((64, 64))).block_until_ready()"
for flag in --xla_gpu_autotune_level=0 --xla_gpu_enable_triton_gemm=false; do
  if XLA_FLAGS="${XLA_FLAGS:-} $flag" "$PY" -c "$probe" 2>/dev/null; then
    export XLA_FLAGS="${XLA_FLAGS:-} $flag"
  fi
done
echo "XLA_FLAGS=${XLA_FLAGS:-}"
# The first run of each point (its out folder and --only) starts before the others.
: > /tmp/first_jobs.txt
: > /tmp/other_jobs.txt
sed "s#$root/.venv/bin/python#$PY#" "$@" | awk '{
  match($0, /--out=[^ ]*/); out = substr($0, RSTART, RLENGTH)
  match($0, /--only=[^ ]*/); key = out substr($0, RSTART, RLENGTH)
  print > ((key in seen) ? "/tmp/other_jobs.txt" : "/tmp/first_jobs.txt"); seen[key] = 1
}'
echo "$(cat /tmp/*_jobs.txt | wc -l) jobs, $processes at a time, for at most $seconds s"
start=$SECONDS
left() { [ $((SECONDS - start)) -lt "$seconds" ]; }
# Each point's first run compiles its programs into its study's compilation cache (the sweep's
# OUT/jax_cache); the others start once the first runs train, and load them: the seeds of a point
# run the same programs. Six runs compiling the same programs at once (H200, 2026-12-04, with
# autotuning) had not finished after 6 minutes.
pids=()
while read -r line; do
  setsid sh -c "$line" &
  pids+=($!)
done < /tmp/first_jobs.txt
i=0
for log in $(sed 's/.*>> \([^ ]*\) 2>&1$/\1/' /tmp/first_jobs.txt); do  # Training, ended or late.
  until grep -q 'step [0-9]*/[0-9]' "$log" 2>/dev/null || ! kill -0 "${pids[i]}" 2>/dev/null \
    || ! left; do
    sleep "$poll"
  done
  i=$((i + 1))
done
echo "first runs training after $((SECONDS - start)) s"
setsid xargs -d '\n' -P "$processes" -I{} sh -c {} < /tmp/other_jobs.txt &
pids+=($!)
running() { for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && return; done; return 1; }
last_pack=$SECONDS
while running && left; do
  sleep "$poll"
  if [ $((SECONDS - last_pack)) -ge 60 ]; then
    pack
    last_pack=$SECONDS
  fi
done
for pid in "${pids[@]}"; do kill -- -"$pid" 2>/dev/null; done
wait
echo "jobs: stopped after $((SECONDS - start)) s"
pack
for s in $studies; do  # The runs evaluated on the test split.
  find "$s" -path '*/eval/test/results.json' | sed 's/^/finished: /'
done
