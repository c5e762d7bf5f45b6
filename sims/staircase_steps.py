"""Where a staircase step is a gradient-flow phenomenon (lr and lr/4 on every L >= 2 task)."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "staircase_steps", "--out", sims, *sys.argv[1:]]))
