"""[RB] reasoning vs memory anchors at three init scales."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "rb_anchor_tasks", "--out", sims, *sys.argv[1:]]))
