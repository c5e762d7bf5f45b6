"""A whole experiment in one declarative file: is the zero-order label signature token-dependent?

On ``add`` the label distribution given one token moves with the token, so the zero-order
signature separates tokens (the first step of the staircase has something to learn); on ``mod``
every token sees the uniform label law, so it cannot (the paper §3.2, its Fig. 2). The null is
the same statistic on ``mod``. Exact: no training, a fraction of a second.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ctx_staircase import signatures, tasks
from ctx_staircase.experiments import Kind
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec

#: The smallest spread (total variation between token rows) read as "token-dependent".
SPREAD = 1e-3


@dataclasses.dataclass(frozen=True)
class Config:
    N: int
    tasks: tuple[str, str] = ("add", "mod")
    regime: str = "exact (no training)"


@dataclasses.dataclass(frozen=True)
class Record:
    """The largest total-variation distance between two tokens' zero-order signature rows, on
    the task and on its null, and the signature rows of the task ``[V_tokens, V]``."""

    spread: float
    null_spread: float
    rows: np.ndarray


CONFIG_CPU = Config(N=20)
CONFIGS = {Size.TINY: Config(N=6), Size.CPU: CONFIG_CPU, Size.FULL: Config(N=40)}


def spread(rows: np.ndarray) -> float:
    """``max_{a, b} (1/2) |phi_a - phi_b|_1`` over the rows ``[A, V]``."""
    return float(0.5 * np.abs(rows[:, None, :] - rows[None, :, :]).sum(-1).max())


def signature_rows(task: str, N: int) -> np.ndarray:
    ds = tasks.make(task, N=N)
    inputs = np.unique(ds.tokens)
    return signatures.label_signature(ds, 0, alphas=inputs)


def measure(config: Config, regime) -> Record:
    rows, null = (signature_rows(task, config.N) for task in config.tasks)
    return Record(spread(rows), spread(null), rows)


def figures(config: Config, record: Record) -> dict:
    from ctx_staircase import plots

    figure, axis = plots.figure(panel=(5, 4))
    axis.imshow(record.rows, aspect="auto")
    plots.axis_labels(axis, "label", "token", f"{config.tasks[0]} N={config.N}: phi^(y;0)")
    return {"signature": figure}


SPEC = Spec(
    record=Record,
    configs=CONFIGS,
    measure=measure,
    claims=(
        ClaimSpec(
            item="Fig. 2",
            claim="the zero-order label signature of add depends on the token",
            statistic=lambda r, c: r.spread,
            measured=lambda r, c: f"largest TV distance between tokens {r.spread:.3f}",
            criterion=Criterion(f"> {SPREAD}", lambda value: value > SPREAD),
            null=lambda r, c: r.null_spread,
            null_text=lambda r, c: f"the same on {c.tasks[1]}: {r.null_spread:.1e}",
            kind=Kind.PROJECT,
        ),
    ),
    figures=figures,
    regime_text=lambda config: config.regime,
)
