"""Fig. 9: epochs to 95% train accuracy vs modulus M (N=20), slow iff M | N."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig9_modulus", "--out", sims, *sys.argv[1:]]))
