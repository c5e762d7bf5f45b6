"""Fig. 2B-F: early embedding geometry vs the zero-order signature (add, sub, mul; N=20)."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig2_geometry", "--out", sims, *sys.argv[1:]]))
