"""`python main.py --config=configs/demo.py --workdir=runs/demo [--mode=...]` from a checkout: the
`seq2seq` command, whose flags and modes are in seq2seq/__main__.py (`--helpshort` lists them).
"""

from absl import flags

from seq2seq import __main__ as command
from seq2seq.__main__ import FLAGS, main

__all__ = ["FLAGS", "main"]
flags.adopt_module_key_flags(command)  # So that --helpshort lists them as this program's.

if __name__ == "__main__":
  main()
