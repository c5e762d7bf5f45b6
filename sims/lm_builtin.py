"""Built-in corpus: semantic structure of next-token signatures and of the learned embeddings."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("lm_builtin", root=Path(__file__).resolve().parent)
