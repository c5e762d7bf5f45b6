"""Fig. 2B–F: early embedding geometry follows the zero-order signature (paper Fig. 2B–F).

Reproduces claim §8.3 on Task 2 (paper App. A): at epoch 100 the number tokens' embedding
cosine matrix ``S^emb`` (eq. 4) is aligned with the zero-order signature geometry
``S^{sig,(0)}`` (eq. 5), and the PCA of the embeddings is ordered as the signatures'.

Runs ``add``, ``sub`` and ``mul`` with N = 20 (all 400 pairs) on a ReLU FFN (paper §4.1),
d = 128, gamma = 1.0, float32, 300 epochs, seeds 0, 1, 2 in one vmapped sweep (``full``: 0..4;
seed 0 is the primary run), in a `regime.Regime` (primary: full-batch GD at lr 1, one wide
vocabulary ``V = 2 V_min(mul) = 802`` for the three tasks). ``quick``: seed 0 only; ``tiny``:
seed 0 at N = 10, d = 32, 100 epochs.

Measures ``rho_0`` (Pearson, eq. 6) and Spearman over the off-diagonal pairs
(``metrics.alignment``), the PCA of the embeddings and of ``phi^{y;0}_a`` (``metrics.pca``), and
mul's mean ``S^emb`` within and across odd-part clusters. Claims (kind "paper", [R] thresholds):
``rho_0 >= 0.9`` for add and sub, ``>= 0.5`` for mul, and "PCA ordered" (``|Spearman| >= 0.9``
of PC1 against a for add, against the distance from the centre for sub, whose signature
geometry is folded); null: the untrained initialization. Writes one figure per task.

The [GAP] conventions and the thresholds: theory/experiments.md, fig2_geometry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from ctx_staircase import metrics, plots, signatures, tasks
from ctx_staircase.experiments.common import reported, train_in_regime
from ctx_staircase.experiments.declarative import ClaimSpec, Criterion, Size, Spec, config_regime
from ctx_staircase.experiments.regime import PRIMARY, Regime


class Thresholds(NamedTuple):
    """The Pearson ``rho_0`` each task's alignment claim asks for."""

    add: float
    sub: float
    mul: float


TASKS = ("add", "sub", "mul")
RHO_MIN = Thresholds(add=0.9, sub=0.9, mul=0.5)  # claim §8.3 [R]; mul threshold is ours
ORDER_MIN = 0.9  # [R] |Spearman(PC1, order variable)|
ADAM_LR = 1e-3
EPOCH = 100
EPOCHS = 300
SNAPSHOTS = (0, 25, 50, 75, 100, 150, 200, 300)
TINY_N, TINY_D, TINY_EPOCHS = 10, 32, EPOCH  # a smoke run's N, d and epochs


@dataclasses.dataclass(frozen=True)
class Config:
    """What a run of this experiment is: the three tasks at N, the paper's ReLU FFN (width d,
    gamma = 1), the seeds, the epoch the claims read and the training's epochs and snapshots,
    the claims' thresholds, the null, what this size leaves out of the paper's, and the
    regime's vocabulary, name and label (`settle`)."""

    tasks: tuple[str, ...] = TASKS
    N: int = 20
    model: str = "ffn"
    d: int = 128
    activation: str = "relu"
    gamma: float = 1.0
    seeds: tuple[int, ...] = (0, 1, 2)
    adam_lr: float = ADAM_LR
    epoch: int = EPOCH
    epochs: int = EPOCHS
    snapshots: tuple[int, ...] = SNAPSHOTS
    dtype: str = "float32"
    rho_thresholds: Thresholds = RHO_MIN
    order_threshold: float = ORDER_MIN
    vocab: str = ""  # the regime's (`settle`)
    null: str = "the untrained initialization (epoch 0 of seed 0), same criteria"
    reduction: str = "none"
    regime: str = PRIMARY.name
    regime_label: str = PRIMARY.label


CONFIGS = {
    Size.TINY: Config(
        N=TINY_N,
        d=TINY_D,
        seeds=(0,),
        epochs=TINY_EPOCHS,
        snapshots=(0, 25, 50, EPOCH),
        reduction=f"tiny: seed 0, N = {TINY_N}, d = {TINY_D}, {TINY_EPOCHS} epochs",
    ),
    Size.QUICK: Config(seeds=(0,), reduction="quick: seed 0 only"),
    Size.CPU: Config(),
    Size.FULL: Config(seeds=(0, 1, 2, 3, 4)),
}


def _shared_vocab(N: int) -> int:
    """``V_min(mul)``: the wide regimes give the three tasks twice this one ``V``."""
    return tasks.make("mul", N=N).vocab_size


def settle(config: Config, regime: Regime | None) -> Config:
    """``config`` in ``regime`` (the primary one when None): the vocabulary it gives the three
    tasks, its name and its label."""
    regime = regime or PRIMARY
    vocab = (
        "each task's own V_min"
        if regime.vocab == "minimal"
        else f"one shared V = {regime.vocab_size(_shared_vocab(config.N))} = 2 V_min(mul)"
    )
    return dataclasses.replace(config, vocab=vocab, regime=regime.name, regime_label=regime.label)


# --------------------------------------------------------------------------------------------
# the record: per task, every seed at epoch `EPOCH`, the init and the signature


class Panels(NamedTuple):
    """What a task's figure draws: seed 0's ``S^emb`` at `EPOCH` and ``S^{sig,(0)}``
    ``[A, A]``, the PCAs of seed 0's embeddings and of the signatures, the number tokens
    ``[A]``."""

    S_emb: np.ndarray
    S_sig: np.ndarray
    emb_pca: metrics.PCA
    sig_pca: metrics.PCA
    alphas: np.ndarray


@dataclasses.dataclass(frozen=True)
class Run:
    """One seed at `EPOCH`: its run status, ``rho_0`` (Pearson, Spearman), Pearson ``rho_0`` at
    every snapshot (keyed by epoch), the training accuracy, the embeddings' PCA explained
    variance ratios."""

    seed: int
    status: str
    rho0_pearson: float
    rho0_spearman: float
    rho0_over_epochs: dict[str, float]
    accuracy: float
    pca_explained: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class OrderedRun(Run):
    """A `Run` of add or sub, and the Spearman of its PC1 against the order variable."""

    pc1_order_spearman: float


@dataclasses.dataclass(frozen=True)
class ClusteredRun(Run):
    """A `Run` of mul, and its mean ``S^emb`` within and across odd-part clusters."""

    mean_S_emb_same_odd_part: float
    mean_S_emb_other_pairs: float


@dataclasses.dataclass(frozen=True)
class OrderedInit:
    """Seed 0 at init on add or sub: the geometry of an `OrderedRun` and ``rho_0``."""

    pca_explained: tuple[float, ...]
    pc1_order_spearman: float
    rho0_pearson: float
    rho0_spearman: float


@dataclasses.dataclass(frozen=True)
class ClusteredInit:
    """Seed 0 at init on mul: the geometry of a `ClusteredRun` and ``rho_0``."""

    pca_explained: tuple[float, ...]
    mean_S_emb_same_odd_part: float
    mean_S_emb_other_pairs: float
    rho0_pearson: float
    rho0_spearman: float


class Signature(NamedTuple):
    """The PCA of the signatures ``phi^{y;0}_a``: explained variance ratios and the Spearman of
    PC1 against the order variable (None for mul, which has none)."""

    pca_explained: tuple[float, ...]
    pc1_order_spearman: float | None


@dataclasses.dataclass(frozen=True)
class Task:
    """One task: its ``V``, every seed's run at `EPOCH`, seed 0 at init and the signature; and,
    unsaved, what its figure draws. `OrderedTask` and `ClusteredTask` say which runs."""

    vocab_size: int
    runs: tuple[Run, ...]
    init: OrderedInit | ClusteredInit
    signature: Signature
    panels: Panels | None = dataclasses.field(
        default=None, compare=False, metadata={"saved": False}
    )


@dataclasses.dataclass(frozen=True)
class OrderedTask(Task):
    """add or sub."""

    runs: tuple[OrderedRun, ...]
    init: OrderedInit


@dataclasses.dataclass(frozen=True)
class ClusteredTask(Task):
    """mul."""

    runs: tuple[ClusteredRun, ...]
    init: ClusteredInit


@dataclasses.dataclass(frozen=True)
class Record:
    """What a run measured, per task (`TASKS`)."""

    add: OrderedTask
    sub: OrderedTask
    mul: ClusteredTask

    def by_task(self) -> dict[str, Task]:
        """Each task's entry, keyed by its name in `TASKS` order."""
        return {"add": self.add, "sub": self.sub, "mul": self.mul}


# --------------------------------------------------------------------------------------------
# measuring


def _order_variable(task: str, alphas: np.ndarray, N: int) -> np.ndarray | None:
    """The quantity the PCA should be ordered by ([R]; theory/experiments.md, fig2_geometry)."""
    if task == "add":
        return alphas.astype(np.float64)
    if task == "sub":
        return np.abs(alphas - (N + 1) / 2)
    return None


def _odd_part(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    while np.any(a % 2 == 0):
        a = np.where(a % 2 == 0, a // 2, a)
    return a


def _offdiag(S: np.ndarray) -> np.ndarray:
    return S[np.triu_indices(S.shape[0], k=1)]


def _explained(pca: metrics.PCA) -> tuple[float, ...]:
    return tuple(np.asarray(pca.explained_variance_ratio).tolist())


def _pc1_order(pca: metrics.PCA, order: np.ndarray) -> float:
    """Spearman of PC1's scores against the order variable."""
    return float(metrics.spearman(np.asarray(pca.scores)[:, 0], np.asarray(order, np.float64)))


def _odd_part_means(S_emb: np.ndarray, alphas: np.ndarray) -> tuple[float, float]:
    """The mean off-diagonal ``S^emb`` over the pairs of the same odd part and over the others."""
    odd = _odd_part(alphas)
    same, upper = _offdiag(odd[:, None] == odd[None, :]), _offdiag(S_emb)
    return float(upper[same].mean()), float(upper[~same].mean())


def _geometry(task: str, W: np.ndarray, S_emb: np.ndarray, alphas: np.ndarray, N: int) -> dict:
    """The fields of a snapshot (``W [A, d]``, ``S_emb [A, A]``) that depend on the task: the
    PCA's explained variance, and its order (add, sub) or the odd-part contrast (mul)."""
    pca = metrics.pca(W, k=2)
    order = _order_variable(task, alphas, N)
    if order is not None:
        return dict(pca_explained=_explained(pca), pc1_order_spearman=_pc1_order(pca, order))
    same, other = _odd_part_means(S_emb, alphas)
    return dict(
        pca_explained=_explained(pca), mean_S_emb_same_odd_part=same, mean_S_emb_other_pairs=other
    )


def _task(task: str, config: Config, regime: Regime) -> Task:
    """Train ``task`` (every seed a lane of one sweep) and measure it at `EPOCH` (every seed)
    and at init (seed 0)."""
    ds = regime.make(task, minimal=_shared_vocab(config.N), N=config.N)
    alphas = ds.groups["numbers"]
    phi0 = signatures.label_signature(ds, 0, alphas=alphas, labels=ds.groups["labels"])
    S_sig, sig_pca = np.asarray(metrics.cosine_matrix(phi0)), metrics.pca(phi0, k=2)
    result = train_in_regime(ds, regime, dataclasses.asdict(config), config.seeds)
    trajectory = result.trajectory
    epochs = regime.epochs_of(trajectory.steps[0])
    at = int(np.flatnonzero(epochs == config.epoch)[0])
    W = np.asarray(trajectory.W_E)[:, :, alphas]  # [G, S, A, d]
    S_emb = np.asarray(metrics.cosine_matrix(W))  # [G, S, A, A]
    pearson = np.asarray(metrics.alignment(S_emb, S_sig).value)  # [G, S]
    spearman = np.asarray(metrics.alignment(S_emb, S_sig, "spearman").value)
    order = _order_variable(task, alphas, config.N)
    kind, run, init = (
        (OrderedTask, OrderedRun, OrderedInit)
        if order is not None
        else (ClusteredTask, ClusteredRun, ClusteredInit)
    )
    runs = tuple(
        run(
            seed=int(seed),
            status=str(result.status[lane]),
            rho0_pearson=float(pearson[lane, at]),
            rho0_spearman=float(spearman[lane, at]),
            rho0_over_epochs=dict(
                zip(map(str, epochs.tolist()), pearson[lane].tolist(), strict=True)
            ),
            accuracy=float(trajectory.accuracy[lane, at]),
            **_geometry(task, W[lane, at], S_emb[lane, at], alphas, config.N),
        )
        for lane, seed in enumerate(result.seed)
    )
    return kind(
        vocab_size=int(ds.vocab_size),
        runs=runs,
        init=init(
            **_geometry(task, W[0, 0], S_emb[0, 0], alphas, config.N),
            rho0_pearson=float(pearson[0, 0]),
            rho0_spearman=float(spearman[0, 0]),
        ),
        signature=Signature(
            _explained(sig_pca), None if order is None else _pc1_order(sig_pca, order)
        ),
        panels=Panels(S_emb[0, at], S_sig, metrics.pca(W[0, at], k=2), sig_pca, alphas),
    )


def measure(config: Config, regime: Regime | None) -> Record:
    """Train add, sub and mul in ``regime`` and measure the module docstring's numbers."""
    regime = regime or PRIMARY
    return Record(
        add=_task("add", config, regime),
        sub=_task("sub", config, regime),
        mul=_task("mul", config, regime),
    )


# --------------------------------------------------------------------------------------------
# claims: each a function of the record and its config

Entry = Callable[[Record], Task]


def _alignment_note(entry: Task, rho_min: float, config: Config) -> str:
    """Why an alignment misses: ``rho_0`` at every snapshot, the accuracy and ``V``."""
    main = entry.runs[0]
    if main.rho0_pearson >= rho_min:
        return ""
    return (
        "rho_0 by epoch: "
        + ", ".join(f"{v:.3f}@{t}" for t, v in main.rho0_over_epochs.items())
        + f"; accuracy at epoch {config.epoch} {main.accuracy:.3f}; V = {entry.vocab_size}"
    )


def _aligned(task: str, entry: Entry, rho_min: float, reading: str = "") -> ClaimSpec:
    """§8.3's alignment of ``task``: seed 0's Pearson ``rho_0`` at `EPOCH` at least ``rho_min``."""

    def measured(record: Record, config: Config) -> str:
        main, *others = entry(record).runs
        rest = ", ".join(f"{r.rho0_pearson:.3f}" for r in others)
        return (
            f"Pearson {main.rho0_pearson:.3f}, Spearman {main.rho0_spearman:.3f} "
            f"(seed 0{'; other seeds Pearson ' + rest if rest else ''})"
        )

    return ClaimSpec(
        item="§8.3",
        claim=f"{task}: S^emb aligns with S^sig,(0) at epoch {EPOCH}",
        statistic=lambda r, c: entry(r).runs[0].rho0_pearson,
        measured=measured,
        criterion=Criterion(f"Pearson ≥ {rho_min}" + reading, lambda pearson: pearson >= rho_min),
        null=lambda r, c: entry(r).init.rho0_pearson,
        null_text=lambda r, c: f"init: Pearson {entry(r).init.rho0_pearson:.3f}",
        note=lambda r, c: _alignment_note(entry(r), rho_min, c),
    )


def _ordered(task: str, entry: Callable[[Record], OrderedTask], variable: str) -> ClaimSpec:
    """§8.3's PCA order of ``task``: seed 0's ``|Spearman(PC1, variable)|`` at least
    `ORDER_MIN`."""

    def measured(record: Record, config: Config) -> str:
        (main, *others), sig = entry(record).runs, entry(record).signature.pc1_order_spearman
        rest = ", ".join(f"{abs(r.pc1_order_spearman):.3f}" for r in others)
        return (
            f"|Spearman(PC1, {variable})| = {abs(main.pc1_order_spearman):.3f} (seed 0"
            f"{'; others ' + rest if rest else ''}); signature PCA {abs(sig):.3f}"
        )

    def note(record: Record, config: Config) -> str:
        main = entry(record).runs[0]
        if abs(main.pc1_order_spearman) >= ORDER_MIN:
            return ""
        explained = list(main.pca_explained)  # printed as the saved list
        return f"PCA explained variance {explained}; rho_0 {main.rho0_pearson:.3f}"

    return ClaimSpec(
        item="§8.3",
        claim=f"{task}: the PCA of the embeddings is ordered",
        statistic=lambda r, c: entry(r).runs[0].pc1_order_spearman,
        measured=measured,
        criterion=Criterion(
            f"|Spearman(PC1, {variable})| ≥ {ORDER_MIN} [R: 'ordered' held to the bar §8.3 sets "
            "rho_0 for add and sub]",
            lambda spearman: abs(spearman) >= ORDER_MIN,
        ),
        null=lambda r, c: entry(r).init.pc1_order_spearman,
        null_text=lambda r, c: f"init: {abs(entry(r).init.pc1_order_spearman):.3f}",
        note=note,
    )


CLAIMS = (
    _aligned("add", lambda r: r.add, RHO_MIN.add),
    _aligned("sub", lambda r: r.sub, RHO_MIN.sub),
    _aligned(
        "mul",
        lambda r: r.mul,
        RHO_MIN.mul,
        " [R: 'positive and high' read as the upper half of [0, 1]]",
    ),
    _ordered("add", lambda r: r.add, "a"),
    _ordered("sub", lambda r: r.sub, "|a-(N+1)/2|"),
    ClaimSpec(
        item="Fig. 2 (descriptive)",
        claim="mul: embeddings cluster by odd part",
        statistic=lambda r, c: r.mul.runs[0],
        measured=lambda r, c: (
            f"mean S^emb same odd part {r.mul.runs[0].mean_S_emb_same_odd_part:.3f} vs other "
            f"pairs {r.mul.runs[0].mean_S_emb_other_pairs:.3f}"
        ),
        criterion=Criterion("reported, no threshold", reported),
        null=lambda r, c: r.mul.init,
        null_text=lambda r, c: (
            f"init: {r.mul.init.mean_S_emb_same_odd_part:.3f} vs "
            f"{r.mul.init.mean_S_emb_other_pairs:.3f}"
        ),
    ),
)


# --------------------------------------------------------------------------------------------
# figures


def _heatmap(fig, ax, S: np.ndarray, ticks: np.ndarray, title: str) -> None:
    """A similarity matrix on its own off-diagonal range (the signature cosines of sub and mul
    live in a narrow band that a fixed [-1, 1] scale hides), with its own colour bar."""
    plots.heatmap(ax, S, ticks, title)
    image = ax.images[0]
    image.set_cmap("viridis")
    image.set_clim(float(_offdiag(S).min()), 1.0)
    plots.colorbar(fig, image, ax)


def _figure(task: str, entry: Task, config: Config):
    """``S^emb`` at `EPOCH` and ``S^{sig,(0)}``, and the PCAs of the embeddings and of the
    signatures, of ``task``'s seed 0."""
    main, panels = entry.runs[0], entry.panels
    suptitle = (
        f"{task}, N={config.N}, ReLU FFN, $\\gamma$={config.gamma:g}, seed 0; "
        f"{config.regime_label}: Pearson $\\rho_0$={main.rho0_pearson:.3f}, "
        f"Spearman={main.rho0_spearman:.3f}"
    )
    fig, axes = plots.figure(1, 4, panel=(4.0, 3.9), suptitle=suptitle)
    alphas = panels.alphas
    _heatmap(fig, axes[0], panels.S_emb, alphas, f"$S^{{emb}}$ at epoch {config.epoch}")
    _heatmap(fig, axes[1], panels.S_sig, alphas, "$S^{sig,(0)}$")
    for ax, pca, title in (
        (axes[2], panels.emb_pca, "PCA of $w^E_a$"),
        (axes[3], panels.sig_pca, "PCA of $\\varphi^{y;0}_a$"),
    ):
        scores, ratios = np.asarray(pca.scores), np.asarray(pca.explained_variance_ratio)
        plots.pca_scatter(ax, scores, alphas, ratios, title)
    return fig


def figures(config: Config, record: Record) -> dict:
    """One figure per task (`_figure`)."""
    return {task: _figure(task, entry, config) for task, entry in record.by_task().items()}


regime_text = config_regime
SPEC = Spec.declared(globals())
