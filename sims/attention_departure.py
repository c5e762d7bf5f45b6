"""When attention leaves uniform: the key/query flow against GD training."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("attention_departure", root=Path(__file__).resolve().parent)
