"""Min-max selection: zero-order signature superposition and a trained FFN (N=20)."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "minmax", "--out", sims, *sys.argv[1:]]))
