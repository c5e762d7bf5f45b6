"""Attention-only theory (uniform-attention flow, plateau law) against GD training."""

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("attention_theory")
