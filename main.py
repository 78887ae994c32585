"""Entry point: train, evaluate or translate with a config from `configs/`.

  python main.py --config=configs/demo.py --workdir=runs/demo
  python main.py --config=configs/rnnsearch.py:maxlen=30 --workdir=runs/rs30 \
      --config.model.score=dot
  python main.py --config=configs/demo.py --workdir=runs/demo --mode=eval
  python main.py --config=configs/demo.py --workdir=runs/demo --mode=translate --input=in.txt \
      --output=out.txt --alignments=att.jsonl [--nbest=5]
  python main.py --config=configs/demo.py --workdir=runs/demo --mode=score --input=src.txt \
      --reference=tgt.txt --output=scores.jsonl

Every config field can be overridden as --config.SECTION.FIELD=VALUE. Running the same command on
the same workdir resumes the run.
"""

import json
import sys

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from seq2seq import eval_run, train, translate

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
  "config", None, "Config file (configs/*.py[:variant]).", lock_config=True
)
flags.DEFINE_string("workdir", None, "Directory of the run: config, checkpoints, metrics, eval.")
flags.DEFINE_enum(
  "mode", "train", ["train", "eval", "translate", "score"], "What to do with the run."
)
flags.DEFINE_string("input", "-", "translate/score: source text, one sentence a line (- = stdin).")
flags.DEFINE_string("output", "-", "translate/score: where the output goes (- = stdout).")
flags.DEFINE_string("alignments", None, "translate/score: optional JSON-lines file of attention.")
flags.DEFINE_integer("nbest", 0, "translate: write the N best per line as an n-best list.")
flags.DEFINE_string("reference", None, "score: the given translations, one per --input line.")
flags.DEFINE_string("coordinator_address", None, "Multi-host: address:port of process 0.")
flags.DEFINE_integer("num_processes", None, "Multi-host: number of processes.")
flags.DEFINE_integer("process_id", None, "Multi-host: index of this process.")
flags.mark_flags_as_required(["config", "workdir"])

# Errors that describe a user's mistake: reported as one line, exit status 1.
# OSError covers an unwritable or full workdir (checkpoints are written to a temporary
# directory and renamed when complete, so a failed write is never loaded).
USER_ERRORS = (ValueError, KeyError, TypeError, OSError)


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.coordinator_address:
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  config = FLAGS.config
  logging.info("config:\n%s", config)
  try:
    if FLAGS.mode == "train":
      results = train.train_and_evaluate(config, FLAGS.workdir)
    elif FLAGS.mode == "eval":
      results = eval_run.evaluate_splits(config, FLAGS.workdir)
    elif FLAGS.mode == "translate":
      counts = translate.translate_file(
        config, FLAGS.workdir, FLAGS.input, FLAGS.output, FLAGS.alignments, FLAGS.nbest
      )
      logging.info("translated: %s", counts)
      return
    else:
      if not FLAGS.reference:
        raise ValueError("--mode=score needs --reference=FILE, the translations to score")
      counts = translate.score_file(
        config, FLAGS.workdir, FLAGS.input, FLAGS.reference, FLAGS.output, FLAGS.alignments
      )
      logging.info("scored: %s", counts)
      return
  except USER_ERRORS as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  print(json.dumps({"workdir": FLAGS.workdir, "results": results}, indent=2, sort_keys=True))


if __name__ == "__main__":
  app.run(main)
