"""Fig. 5: activation order gates learnability (modsum, sigma = z^K)."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("fig5_activation_order", root=Path(__file__).resolve().parent)
