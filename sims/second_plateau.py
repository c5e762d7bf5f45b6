"""The end of the collapse plateau: the second escape predicted against GD training."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "second_plateau", "--out", sims, *sys.argv[1:]]))
