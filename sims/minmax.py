"""Min-max selection: zero-order signature superposition and a trained FFN (N=20)."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("minmax", root=Path(__file__).resolve().parent)
