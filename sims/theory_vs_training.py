"""Theory against training on `add` (closed form, signature flow, escape-time law)."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "theory_vs_training", "--out", sims, *sys.argv[1:]]))
