"""Built-in corpus: semantic structure of next-token signatures and of the learned embeddings."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "lm_builtin", "--out", sims, *sys.argv[1:]]))
