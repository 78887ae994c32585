"""The `seq2seq` command (also `python -m seq2seq`, and `python main.py` from a checkout): train,
evaluate, translate, score or prepare the data with a config from `configs/`, or write a run's
explorer again. The HTTP service has a command of its own: python -m seq2seq.serve
(seq2seq-serve).

  python main.py --config=configs/demo.py --workdir=runs/demo
  python main.py --config=configs/rnnsearch.py:maxlen=30 --workdir=runs/rs30 \
      --config.model.score=dot
  python main.py --config=configs/demo.py --workdir=runs/demo --mode=eval
  python main.py --config=configs/demo.py --workdir=runs/demo --mode=translate --input=in.txt \
      --output=out.txt --alignments=att.jsonl [--nbest=5] [--word_alignments=out.align]
  python main.py --config=configs/demo.py --workdir=runs/demo --mode=score --input=src.txt \
      --reference=tgt.txt --output=scores.jsonl
  python main.py --mode=report --workdir=runs/demo [--compare=runs/other]
  python main.py --config=configs/wmt14.py --workdir=runs/wmt --mode=prepare

--mode=prepare builds the corpus, the vocabularies and the corpus store of ids once (in parallel
over the machine's cores), which training, evaluation and every process of a job then only open;
the first run of any mode prepares them as well.

Every config field can be overridden as --config.SECTION.FIELD=VALUE. Running the same command on
the same workdir resumes the run. Library logs go to WORKDIR/log.txt (--verbosity=0 shows them).
"""

import sys

import jax
from absl import app, flags
from ml_collections import config_flags

from seq2seq import cli

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file(
  "config", None, "Config file (configs/*.py[:variant]); report mode reads none.", lock_config=True
)
flags.DEFINE_string("workdir", None, "Directory of the run: config, checkpoints, metrics, eval.")
flags.DEFINE_enum("mode", "train", list(cli.MODES), "What to do with the run.")
flags.DEFINE_string(
  "input",
  "-",
  "translate/score: source text, one sentence a line (- = stdin); a multi-source run "
  "(data.local.src_lang=en+de) takes one file per source language, joined by commas.",
)
flags.DEFINE_string("output", "-", "translate/score: where the output goes (- = stdout).")
flags.DEFINE_string("alignments", None, "translate/score: optional JSON-lines file of attention.")
flags.DEFINE_string(
  "word_alignments",
  None,
  "translate/score: optional file of hard word alignments in Pharaoh format (i-j, source and "
  "target word indices), one line per output line.",
)
flags.DEFINE_float(
  "alignment_threshold",
  0.0,
  "translate/score: with --word_alignments, every link of at least this attention weight; 0: "
  "one link per target word, to its most attended source word.",
)
flags.DEFINE_integer("nbest", 0, "translate: write the N best per line as an n-best list.")
flags.DEFINE_string(
  "prefixes",
  None,
  "translate: a file of target prefixes, one per --input line (empty: none); each translation "
  "starts with its line's prefix.",
)
flags.DEFINE_string(
  "constraints",
  None,
  'translate: a JSON-lines file, per --input line a list of phrases (["le chat", "dort"]); each '
  "translation contains its line's phrases.",
)
flags.DEFINE_string("reference", None, "score: the given translations, one per --input line.")
flags.DEFINE_string("compare", None, "report: a second run's workdir, shown beside this one.")
flags.DEFINE_bool("json", False, "train/eval: print every result as JSON instead of the table.")
flags.DEFINE_string(
  "compilation_cache",
  "workdir",
  "Where compiled programs are kept for the next run of any mode, so a second translate compiles "
  "nothing: 'workdir' (WORKDIR/jax_cache), a folder, or 'none'.",
)
flags.DEFINE_enum(
  "distributed",
  "off",
  ["off", "auto"],
  "Multi-host: 'auto' has jax.distributed.initialize() read the cluster's own environment "
  "(SLURM, Open MPI, Cloud TPU, Kubernetes JobSet): run one process per host or task, no ranks "
  "to set; or set the three flags below by hand.",
)
flags.DEFINE_string("coordinator_address", None, "Multi-host: address:port of process 0.")
flags.DEFINE_integer("num_processes", None, "Multi-host: number of processes.")
flags.DEFINE_integer("process_id", None, "Multi-host: index of this process.")
flags.mark_flags_as_required(["workdir"])


def main(argv: list[str] | None = None) -> None:
  """Without `argv` (the console script), parses sys.argv and calls itself through absl's
  `app.run`; with the arguments absl left (`argv[0]`, the program), runs the mode."""
  if argv is None:
    for flag in FLAGS.get_key_flags_for_module(__name__):  # --helpshort lists them for any name.
      FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    app.run(main, flags_parser=cli.parse_flags)
    return
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if FLAGS.coordinator_address and FLAGS.distributed == "auto":
    raise app.UsageError("--distributed=auto finds the coordinator: drop --coordinator_address")
  if FLAGS.coordinator_address:
    jax.distributed.initialize(FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
  elif FLAGS.distributed == "auto":
    jax.distributed.initialize()  # Raises, naming what it looked for, outside a cluster.
  sys.exit(
    cli.run(
      FLAGS.mode,
      FLAGS.config,
      FLAGS.workdir,
      input_path=FLAGS.input,
      output_path=FLAGS.output,
      alignments_path=FLAGS.alignments,
      nbest=FLAGS.nbest,
      links_path=FLAGS.word_alignments,
      links_threshold=FLAGS.alignment_threshold,
      prefixes_path=FLAGS.prefixes,
      constraints_path=FLAGS.constraints,
      reference_path=FLAGS.reference,
      compare=FLAGS.compare,
      as_json=FLAGS.json,
      verbose=FLAGS["verbosity"].present and FLAGS.verbosity >= 0,
      compilation_cache=FLAGS.compilation_cache,
    )
  )


if __name__ == "__main__":
  main()
