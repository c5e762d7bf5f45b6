"""Fig. 2A: the anchor's predicted label law matches p_a (Task 1, four laws)."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig2a_label_laws", "--out", sims, *sys.argv[1:]]))
