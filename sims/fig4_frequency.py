"""Fig. 4 and App. D: frequency-resolved first-order alignment and the 10-seed k* study."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig4_frequency", "--out", sims, *sys.argv[1:]]))
