"""Fig. 5: activation order gates learnability (modsum, sigma = z^K)."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig5_activation_order", "--out", sims, *sys.argv[1:]]))
