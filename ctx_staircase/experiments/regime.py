"""Training regimes and null controls shared by the reproduction experiments (theory/regimes.md).

The paper leaves two settings open that decide its early dynamics ([GAP]; theory/regimes.md R1,
R2): the label vocabulary ``V``, whose size sets the common order-0 drive of
theory/closed_form.md C1, and the optimizer (the theory is gradient flow). A :class:`Regime`
fixes both. The primary regime, fixed *before* any result was looked at, is the one the
gradient-flow theory describes: full-batch GD at constant ``lr = 1`` (``t = lr * step`` is the
epoch count the paper quotes) with a wide label vocabulary ``V = 2 V_min``.

The regime study runs every FFN and attention-only claim under the 2 x 3 grid of
``vocab in {"minimal", "wide"}`` x ``optimizer in {"gd", "adam", "adam_minibatch"}``.

Null controls: a claim's criterion is also scored on a null (the untrained initialization, a
label-shuffled dataset, ...); a claim whose null passes too is reported as *vacuous*.

Why each setting matters: theory/experiments.md, regime.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from ctx_staircase import tasks, train
from ctx_staircase.dataset import TokenDataset

VOCABS = ("minimal", "wide")
OPTIMIZERS = ("gd", "adam", "adam_minibatch")

#: Full-batch GD learning rate of the primary regime: t = step, so paper epochs = flow time.
GD_LR = 1.0
#: Minibatch Adam: this many minibatches (drawn with replacement) make one epoch.
MINIBATCHES_PER_EPOCH = 8
#: Wide vocabulary: V = WIDE_FACTOR * V_min.
WIDE_FACTOR = 2


@dataclasses.dataclass(frozen=True)
class Regime:
    """An (optimizer, label vocabulary) setting of a controlled experiment.

    Attributes:
        optimizer: ``"gd"`` (full-batch gradient descent, constant lr), ``"adam"`` (full-batch)
            or ``"adam_minibatch"`` (``MINIBATCHES_PER_EPOCH`` minibatches per epoch).
        vocab: ``"minimal"`` (``V = V_min``, today's default of `tasks.make`) or ``"wide"``
            (``V = WIDE_FACTOR * V_min``: ids that are never inputs or labels).
        gd_lr: the GD step, ``1 / k`` for a whole ``k`` (default `GD_LR`): an epoch stays one
            unit of gradient-flow time, ``k`` steps of ``1 / k`` (`steps_per_epoch`), so a run
            at a smaller step covers the same flow time. GD only.
    """

    optimizer: str = "gd"
    vocab: str = "wide"
    gd_lr: float = GD_LR

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {list(OPTIMIZERS)}; got {self.optimizer!r}")
        if self.vocab not in VOCABS:
            raise ValueError(f"vocab must be one of {list(VOCABS)}; got {self.vocab!r}")
        steps = 1.0 / self.gd_lr if self.gd_lr > 0 else math.inf
        if not (math.isfinite(steps) and steps == round(steps)):
            raise ValueError(f"gd_lr must be 1/k for a whole k >= 1; got {self.gd_lr!r}")
        if self.optimizer != "gd" and self.gd_lr != GD_LR:
            raise ValueError(f"gd_lr applies to optimizer 'gd' only; got {self.optimizer!r}")

    @property
    def name(self) -> str:
        """Short id, e.g. ``"gd-wide"``, ``"gd-wide-lr0.25"`` (file names, table rows)."""
        step = "" if self.gd_lr == GD_LR else f"-lr{self.gd_lr:g}"
        return f"{self.optimizer.replace('_', '')}-{self.vocab}{step}"

    @property
    def label(self) -> str:
        """Human-readable, e.g. ``"full-batch GD, V = 2·V_min"``."""
        optimizer = {
            "gd": "full-batch GD" + ("" if self.gd_lr == GD_LR else f" at lr {self.gd_lr:g}"),
            "adam": "full-batch Adam",
            "adam_minibatch": f"minibatch Adam ({MINIBATCHES_PER_EPOCH}/epoch)",
        }[self.optimizer]
        vocab = "V = V_min" if self.vocab == "minimal" else f"V = {WIDE_FACTOR}·V_min"
        return f"{optimizer}, {vocab}"

    @property
    def primary(self) -> bool:
        return self == PRIMARY

    @property
    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch: the minibatches of one, or GD's ``1 / gd_lr`` steps of
        one unit of flow time."""
        if self.optimizer == "adam_minibatch":
            return MINIBATCHES_PER_EPOCH
        return round(1.0 / self.gd_lr) if self.optimizer == "gd" else 1

    def halved(self) -> Regime:
        """This GD regime at half its step (the same flow time in twice the steps)."""
        return dataclasses.replace(self, gd_lr=self.gd_lr / 2)

    def vocab_size(self, minimal: int) -> int | None:
        """The ``vocab_size`` to pass to `tasks.make` for a task whose ``V_min`` is ``minimal``
        (``None`` keeps the minimal vocabulary)."""
        return None if self.vocab == "minimal" else WIDE_FACTOR * int(minimal)

    def make(self, task: str, *, minimal: int | None = None, **params: Any) -> TokenDataset:
        """`tasks.make` in this regime's vocabulary.

        ``minimal`` overrides ``V_min`` (one shared ``V`` for several tasks, as in Fig. 2).
        """
        if minimal is None:
            minimal = tasks.make(task, **params).vocab_size
        return tasks.make(task, vocab_size=self.vocab_size(minimal), **params)

    def train_config(
        self,
        ds: TokenDataset,
        *,
        epochs: int,
        snapshots: tuple[int, ...] | list[int] | None = None,
        adam_lr: float = 1e-3,
        **options: Any,
    ) -> train.TrainConfig:
        """A `train.TrainConfig` for ``epochs`` epochs on ``ds``, snapshots given in epochs.

        Snapshot steps are ``epoch * steps_per_epoch``; use :meth:`epochs_of` to map recorded
        steps back to epochs.
        """
        per = self.steps_per_epoch
        snaps = None if snapshots is None else tuple(int(e) * per for e in snapshots)
        if self.optimizer == "gd":
            return train.TrainConfig(
                optimizer="gd", lr=self.gd_lr, steps=epochs * per, snapshots=snaps, **options
            )
        batch = None
        if self.optimizer == "adam_minibatch":
            batch = max(1, -(-ds.n // per))
        return train.TrainConfig(
            optimizer=options.pop("optimizer", "adam"),
            lr=adam_lr,
            steps=epochs * per,
            snapshots=snaps,
            batch_size=batch,
            **options,
        )

    def epochs_of(self, steps) -> np.ndarray:
        """Recorded optimizer steps as epochs."""
        return np.asarray(steps) // self.steps_per_epoch

    def describe(self, **settings: Any) -> dict[str, Any]:
        """The regime and its settings, for an experiment's ``config``."""
        return {"regime": self.name, "regime_label": self.label, **settings}


PRIMARY = Regime("gd", "wide")
ALL = tuple(Regime(o, v) for v in ("wide", "minimal") for o in OPTIMIZERS)


def parse(name: str | Regime | None) -> Regime:
    """A :class:`Regime` from its :attr:`Regime.name` (``None`` gives the primary regime)."""
    if name is None:
        return PRIMARY
    if isinstance(name, Regime):
        return name
    for regime in ALL:
        if regime.name == name:
            return regime
    raise ValueError(f"regime must be one of {[r.name for r in ALL]}; got {name!r}")


# ------------------------------------------------------------------------------------------------
# Null controls


def shuffled_labels(ds: TokenDataset, seed: int = 0, *, unordered: bool = False) -> TokenDataset:
    """``ds`` with its labels permuted: the label marginal is kept, every relation between the
    inputs and the label is destroyed (the natural null of a learned-structure claim).

    ``unordered``: permute across the unordered input multisets instead of the samples, so
    samples with the same tokens up to order keep one shared label, as in ``add`` or ``mod``.
    A model that sees only the multiset (the FFN sums its embeddings) can then fit the null as
    well as it could fit the task; a per-sample shuffle would cap it (near 52% on ``mod``'s
    pairs, where each unordered pair gets two labels).
    """
    rng = np.random.default_rng(seed)
    labels = np.asarray(ds.labels)
    if unordered:
        key = np.sort(np.asarray(ds.tokens), axis=1)
        _, first, inverse = np.unique(key, axis=0, return_index=True, return_inverse=True)
        labels = labels[first][rng.permutation(first.size)][inverse.ravel()]
    else:
        labels = labels[rng.permutation(ds.n)]
    return TokenDataset(
        tokens=ds.tokens,
        labels=labels,
        vocab_size=ds.vocab_size,
        groups=ds.groups,
        weights=ds.weights,
        sample_groups=ds.sample_groups,
        name=f"{ds.name} (labels shuffled{' over unordered inputs' if unordered else ''})",
        params={**ds.params, "labels_shuffled_seed": seed},
    )
