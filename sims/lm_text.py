"""Language model on real text: rho_next rises to an early peak, then settles (paper §6.1, Fig. 7).

Usage: python sims/lm_text.py [--text FILE] [--full | --tiny] (default: the shared corpus,
`paths.shared_corpus`).
"""

import sys
from pathlib import Path

from ctx_staircase import cli, paths

if __name__ == "__main__":
    corpus = ["--text", str(paths.shared_corpus())]  # a --text given below wins
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "lm_text", "--out", sims, *corpus, *sys.argv[1:]]))
