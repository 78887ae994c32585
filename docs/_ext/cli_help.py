"""Prints, as one JSON object, `main.py --helpshort` and the `--help` of each module named on
the command line (`python -m MODULE --help`), for the generated CLI reference. Run from the
repository root by `reference.py`, in a process of its own (one import of JAX for all)."""

import contextlib
import importlib
import importlib.util
import io
import json
import sys
from pathlib import Path


def main_flags() -> str:
  from absl import flags

  spec = importlib.util.spec_from_file_location("main", Path("main.py"))
  module = importlib.util.module_from_spec(spec)
  sys.modules["main"] = module  # So that absl files its flags under "main".
  spec.loader.exec_module(module)
  return flags.FLAGS.module_help("main")


def module_help(name: str) -> str:
  module = importlib.import_module(name)
  sys.argv[0] = f"python -m {name}"
  buf = io.StringIO()
  with contextlib.redirect_stdout(buf):
    try:
      module.main(["--help"])
    except SystemExit:
      pass
  return buf.getvalue()


if __name__ == "__main__":
  sys.path.insert(0, ".")
  helps = {"main.py": main_flags()}
  for name in sys.argv[1:]:
    helps[name] = module_help(name)
  json.dump(helps, sys.stdout)
