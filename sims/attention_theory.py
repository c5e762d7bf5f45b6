"""Attention-only theory (uniform-attention flow, plateau law) against GD training."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("attention_theory", root=Path(__file__).resolve().parent)
