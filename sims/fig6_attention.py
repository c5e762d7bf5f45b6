"""Fig. 6: attention-only staircase on add/mod and attention routing on Task 3."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig6_attention", "--out", sims, *sys.argv[1:]]))
