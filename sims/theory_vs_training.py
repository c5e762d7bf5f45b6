"""Theory against training on `add` (closed form, signature flow, escape-time law)."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("theory_vs_training", root=Path(__file__).resolve().parent)
