"""The regime study: every FFN and attention-only claim under vocabulary x optimizer.

The regimes and why the claims need them: theory/regimes.md."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "regime_study", "--out", sims, *sys.argv[1:]]))
