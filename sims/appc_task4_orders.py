"""App. C Figs. 12-13: Task 4 anchor geometry against signature orders 0, 1, 2."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "appc_task4_orders", "--out", sims, *sys.argv[1:]]))
