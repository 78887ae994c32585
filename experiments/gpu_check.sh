#!/usr/bin/env bash
# One pass of the checks a lent GPU is for: that the library jits and runs there, in float32 and
# bfloat16, and how fast (results and what they showed: experiments/results/benchmark/benchmark.md, "On a
# lent GPU"). Prepared to run as a single short command on the device machine, whose image
# brings Python 3.12, JAX with its CUDA plugin, Flax, Optax and Orbax, but not the rest of our
# stack; that travels as wheels in .whl/ (ignored by git), fetched here first:
#
#     bash experiments/gpu_check.sh wheels     # here: downloads the wheels into .whl/
#     bash experiments/gpu_check.sh [PART...]  # there: writes $OUT (default runs/gpu_check)
#
# PART is `tests`, `bench` or `demo` (default: all three, in that order; `install` only installs
# the wheels), DTYPES the dtypes the benchmarks and demos run in; the whole pass does not
# fit one call's 10 minutes with room to spare, so split it over two calls of one warm machine
# (the next call must come within its 30 idle seconds) or choose.
#
# Our own Flax pin is not carried: flax 0.12.8 does not import under the image's jax 0.11.2
# (`jax.experimental.hijax` has no `HiPrimitive`), and the image's flax 0.12.10 runs our code.
#
# 1. the tests of the score functions, attention, structures, models and decoders on the GPU;
# 2. the training benchmark (experiments/benchmark.py) at the `bench` and `paper` presets, each in
#    float32 and bfloat16, with its decoding figures (greedy and beam 10, and over a 1,000-word
#    shortlist at `bench`);
# 3. `make demo`'s run (configs/demo.py, 1,200 Adam updates on the embedded corpus, then greedy
#    and beam 5 evaluation) in float32 and in bfloat16, and a resume of the float32 run to 1,300
#    updates from its checkpoint;
# Each step has its own time limit, so one that hangs or fails leaves the others' results. On the
# H100 of 2026-11-27: the tests (stopped at their first failures) 51 s, each benchmark 40 s, each
# demo 80 s of training (half of it building the corpus and compiling) and 45 s of evaluation
# (decoding itself took seconds of it).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
PY=${PY:-python3}
DTYPES=${DTYPES:-float32 bfloat16}  # The benchmarks' and demos' model.dtype values.
if [ "${1:-}" = wheels ]; then  # The packages the image lacks, for its Python 3.12.
  mkdir -p .whl
  names="array-record dm-tree docstring-parser googleapis-common-protos grain immutabledict
    ml-collections portpicker simple-parsing sacremoses tensorboardx tensorflow-datasets
    tensorflow-metadata termcolor toml optax orbax-checkpoint chex"
  pins=$(.venv/bin/pip freeze | tr 'A-Z_' 'a-z-' | grep -E "^($(echo $names | tr ' ' '|'))==")
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl $pins || exit 1
  # promise (needed by tensorflow-datasets) is published as a source archive only.
  .venv/bin/pip wheel -q --no-deps -w .whl "$(.venv/bin/pip freeze | grep -i '^promise==')"
  exit
fi
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export PYTHONUNBUFFERED=1

# Once per machine (experiments/gpu_jobs.sh may run beside this script), and only where the
# interpreter lacks our stack.
if [ -d .whl ] && ! "$PY" -c "import grain, ml_collections, sacremoses" 2>/dev/null; then
  if [ ! -e /tmp/site/.installed ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl && touch /tmp/site/.installed || exit 1
  fi
  export PYTHONPATH=/tmp/site:$PWD
fi
[ "${1:-}" = install ] && exit
step() {  # step NAME SECONDS COMMAND...: runs COMMAND under a time limit and logs how it ended.
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  echo "=== $name ($(date -u +%H:%M:%S))"
  timeout "$limit" "$@"
  echo "=== $name: exit $? after $((SECONDS - start)) s"
}

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
lscpu | grep -E 'Model name|^CPU\(s\)'
"$PY" -c "import jax, jaxlib, flax, optax, orbax.checkpoint as o, numpy; \
print('jax', jax.__version__, 'jaxlib', jaxlib.__version__, 'flax', flax.__version__, \
'optax', optax.__version__, 'numpy', numpy.__version__); print(jax.devices())"

benchmark() {  # benchmark PRESET DTYPE [ARGS...]
  step "benchmark $1 $2" 75 "$PY" -m experiments.benchmark --preset "$1" --dtype "$2" \
    --repeats 5 --steps 20 --out "$OUT/benchmark_$1_$2.json" "${@:3}"
}
demo() {  # demo DTYPE STEPS SECONDS: configs/demo.py in /tmp/demo_DTYPE, to STEPS updates.
  step "demo $1, $2 updates" "$3" "$PY" main.py --config=configs/demo.py \
    --workdir="/tmp/demo_$1" --config.model.dtype="$1" --config.train.num_steps="$2"
}
# On the H200 (2026-12-04) xdist's workers aborted 19 times inside XLA's GPU compilation, XLA's
# message lost, and each aborted worker had torch loaded (the image has it, and its pytest
# plugins are loaded unless told not to): two CUDA stacks in one process are the first suspect.
# So the tests run with only xdist's plugin, after a probe that names what a test process
# imports, and one test that aborted there runs alone first, its whole output kept.
GPU_TEST_ENV=(env XLA_FLAGS= XLA_PYTHON_CLIENT_PREALLOCATE=false PYTEST_DISABLE_PLUGIN_AUTOLOAD=1)
tests() {
  "${GPU_TEST_ENV[@]}" "$PY" -c "import sys; sys.path.insert(0, 'tests'); import conftest, \
seq2seq.train, seq2seq.decoding.decode; print('imported:', [m for m in ('torch', 'tensorflow') \
if m in sys.modules])" > "$OUT/imports.txt" 2>&1
  cat "$OUT/imports.txt"
  step "one test that aborted on the H200, alone" 45 "${GPU_TEST_ENV[@]}" "$PY" -m pytest -x -q \
    -p no:cacheprovider \
    tests/decoding/test_decode.py::test_forced_decoding_scores_what_greedy_and_beam_search_reported \
    > "$OUT/pytest_alone.txt" 2>&1
  tail -5 "$OUT/pytest_alone.txt"
  step "tests on the GPU" 150 "${GPU_TEST_ENV[@]}" "$PY" -m pytest -p xdist -v -n 4 \
    -p no:cacheprovider tests/model/test_scores.py tests/model/test_attention.py tests/model/test_structures.py \
    tests/model/test_models.py tests/decoding/test_decode.py > "$OUT/pytest.txt" 2>&1
  grep -E "(FAILED|ERROR|crashed)|passed|failed" "$OUT/pytest.txt" | tail -40
}
bench() {
  for dtype in $DTYPES; do benchmark bench "$dtype" --shortlist-size 1000; done
  for dtype in $DTYPES; do benchmark paper "$dtype"; done
}
demos() {
  for dtype in $DTYPES; do demo "$dtype" 1200 200; done
  collect_demos
  demo float32 1300 150  # Resumes from the 1,200-update checkpoint.
}
collect_demos() {  # The demo runs' last train lines, validation rows and results: $OUT/demo.json.
"$PY" - "$OUT" <<'EOF'
import json, pathlib, sys
out = {}
for dtype in ("float32", "bfloat16"):
  run = pathlib.Path(f"/tmp/demo_{dtype}")
  rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()] \
    if (run / "metrics.jsonl").exists() else []
  out[dtype] = {
    "train_rows": [r for r in rows if r.get("split") == "train"][-3:],
    "valid_rows": [r for r in rows if r.get("split") == "valid"],
  }
  for split in ("valid", "test"):
    path = run / "eval" / split / "results.json"
    if path.exists():
      res = json.loads(path.read_text())
      out[dtype][split] = {k: v for k, v in res.items() if not isinstance(v, (list, dict))}
pathlib.Path(sys.argv[1], "demo.json").write_text(json.dumps(out, indent=2) + "\n")
EOF
}

for part in ${@:-tests bench demo}; do
  case $part in
    tests) tests ;;
    bench) bench ;;
    demo) demos ;;
    *) echo "unknown part $part: tests, bench or demo" ;;
  esac
done
