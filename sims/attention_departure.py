"""When attention leaves uniform: the key/query flow against GD training."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "attention_departure", "--out", sims, *sys.argv[1:]]))
