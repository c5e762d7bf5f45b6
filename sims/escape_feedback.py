"""The escape law with the softmax feedback on five tasks, and the ReLU gate alignment."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "escape_feedback", "--out", sims, *sys.argv[1:]]))
