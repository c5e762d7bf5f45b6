"""The ReLU first escape as a law: unit flow and feedback clock on add, sub, mod and Task 4."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "relu_escape", "--out", sims, *sys.argv[1:]]))
