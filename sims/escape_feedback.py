"""The escape law with the softmax feedback on five tasks, and the ReLU gate alignment."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("escape_feedback", root=Path(__file__).resolve().parent)
