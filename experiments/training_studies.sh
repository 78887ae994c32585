#!/usr/bin/env bash
# The training issue's Multi30k en->fr measurements, resumable as experiments/multi30k_studies.sh
# is: rerun this script (from the repository root, in any session) and every sweep skips the
# points whose runs are committed or finished and resumes an unfinished run from its last
# checkpoint. Commit a point's folder when its three seeds are evaluated, with the study's
# `--collect --partial` report. Every run trains for 3,000 updates, seeds 0, 1 and 2 one after
# another, on the score study's corpus files, as the other Multi30k studies do.
#
#     bash experiments/training_studies.sh [subword|guided]...
#
# 1. subword: subword regularisation (data.subword_sampling, Kudo 2018: alpha 0.1 over the 64
#    best) against the deterministic segmentation, both with 8,000-piece unigram SentencePiece
#    vocabularies (the word runs' vocabulary size).
# 2. guided: guided alignment (the supervision term, weight 1) on eflomal's grow-diag-final-and
#    links of the training split against the plain model. The plain point is trained here too
#    (its config names the links, which it does not read), not borrowed from the score study,
#    so the two points differ in the loss alone. The links are made once, into
#    experiments/alignments/multi30k.en-fr.train.align, and committed: eflomal takes no seed, so
#    the file, not the command, fixes them (this one: eflomal 2.0.0, 2026-12-04).
set -euo pipefail
cd "$(dirname "$0")/.."

source experiments/study_settings.sh

subword() {
  sweep "${PAPER[@]}" "${COMMON[@]}" --out $RESULTS/multi30k_subword \
    --set data.tokenizer=sentencepiece --set data.sp_model_type=unigram \
    --grid 'data.subword_sampling=none,sample(alpha=0.1, nbest_size=64)'
}

guided() {
  local out=$RESULTS/multi30k_guided links=$PWD/experiments/alignments/multi30k.en-fr.train.align
  if [ ! -e "$links" ]; then
    local data=$out/data_run  # The corpus and vocabularies of the runs' data settings.
    mkdir -p "$out" "$(dirname "$links")"
    nice -n 10 "$PY" main.py --config=configs/multi30k.py --workdir="$data" \
      --config.data.cache_dir="$RESULTS/multi30k_scores/data" \
      --config.train.num_steps=0 --config.train.final_eval=false
    nice -n 10 "$PY" -m seq2seq.build_alignments --workdir="$data" --out="$links"
  fi
  sweep "${PAPER[@]}" "${COMMON[@]}" --out "$out" --set "data.local.align=$links" \
    --grid 'train.loss_terms=none,supervision(weight=1.0)'
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(subword guided)
for step in "${steps[@]}"; do
  case "$step" in
    subword|guided) "$step" ;;
    *) echo "usage: $0 [subword|guided]..." >&2; exit 2 ;;
  esac
done
