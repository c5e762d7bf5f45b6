"""Order-1 onset: when does the order-1 drive overtake order 0? (see theory/order1_onset.md)"""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "order1_onset", "--out", sims, *sys.argv[1:]]))
