"""Fig. 8: FFN vs attention-only on mod, and fixed signature embeddings."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig8_role", root=Path(__file__).resolve().parent)
