"""Fig. 8: FFN vs attention-only on mod, and fixed signature embeddings."""

import sys
from pathlib import Path

from ctx_staircase import cli

if __name__ == "__main__":
    sims = str(Path(__file__).resolve().parent)
    raise SystemExit(cli.main(["run", "fig8_role", "--out", sims, *sys.argv[1:]]))
