"""Fig. 3: the staircase in one run (add and mod, N=40): rho_0(t), probe, early/late geometry."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig3_staircase", "--out", sims, *sys.argv[1:]]))
