"""App. C Figs. 12-13: Task 4 anchor geometry against signature orders 0, 1, 2."""

from pathlib import Path

from ctx_staircase.experiments.cli import main

if __name__ == "__main__":
    main("appc_task4_orders", root=Path(__file__).resolve().parent)
