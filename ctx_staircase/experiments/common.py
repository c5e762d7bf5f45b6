"""Helpers shared by the experiments: the paper's FFN settings, one configured training sweep,
one criterion scored on a run and its null, and an `Outcome` joined from an experiment's parts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ctx_staircase import sweep, train
from ctx_staircase.dataset import TokenDataset
from ctx_staircase.experiments import Claim, Outcome


def paper_ffn(adam_lr: float) -> dict:
    """The config entries of the paper's one-layer ReLU FFN (d = 128, gamma = 1) under Adam at
    ``adam_lr``: ``model``, ``d``, ``activation``, ``adam_lr``, ``gamma`` (what
    `train_configured` reads)."""
    return dict(model="ffn", d=128, activation="relu", adam_lr=adam_lr, gamma=1.0)


def train_configured(
    ds: TokenDataset,
    train_config: train.TrainConfig,
    config: dict,
    seeds: Sequence[int],
    activation: str | None = None,
) -> sweep.SweepResult:
    """`sweep.train_sweep` of ``config["model"]`` at the single ``config["gamma"]``, width
    ``config["d"]`` and ``config["activation"]`` (or ``activation``), one lane per seed."""
    return sweep.train_sweep(
        config["model"],
        ds,
        train_config,
        gammas=[config["gamma"]],
        seeds=seeds,
        d=config["d"],
        activation=config["activation"] if activation is None else activation,
    )


def scored(criterion: Callable[[Any], Any], run: Any, null: Any) -> dict[str, Any]:
    """``passed`` and ``null_passed`` of a `Claim`: the same ``criterion`` applied to the run's
    measurement and to its null control's, so the two can never drift apart."""
    return dict(passed=criterion(run), null_passed=criterion(null))


def joined_outcome(
    parts: dict[str, tuple[list[Claim], Any, dict]], config: dict, regime: str
) -> Outcome:
    """One `Outcome` from named parts ``name -> (claims, figure, numbers)``: the claims in part
    order, each tagged with ``regime``; the figures and numbers under the part names."""
    claims = [claim for part_claims, _, _ in parts.values() for claim in part_claims]
    for claim in claims:
        claim.regime = regime
    figures = {name: figure for name, (_, figure, _) in parts.items()}
    numbers = {name: part_numbers for name, (_, _, part_numbers) in parts.items()}
    return Outcome(claims, figures, numbers, config)
