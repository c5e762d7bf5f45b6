"""Training as one compiled scan, with snapshots of the embedding trajectory (ARCHITECTURE.md).

A run is a pure function ``run(state, lr, key, data) -> Trajectory`` of the model state (from
``nnx.split``), the learning rate, a PRNG key and the dataset as a `TrainData` argument, so
`sweep.py` can vmap it over a grid of (gamma, seed, lr) and reuse one compiled program for every
dataset of the same shapes. The loop is `loop.run`: ``lax.scan`` over snapshot segments, each a
``fori_loop`` of optimizer steps; nothing runs per step in Python.

Time: for full-batch ``gd`` a step is gradient-flow time ``lr`` (``t = lr * step``), so
theory and training share an axis; `time_axis` gives it.

Divergence: a lane whose loss or parameters become non-finite freezes at its last finite state
and records the step in ``diverged_step`` (-1 while finite); the other lanes of a sweep go on.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from ctx_staircase import internal, loop, models, progress
from ctx_staircase.dataset import TokenDataset

__all__ = [
    "OPTIMIZERS",
    "Finished",
    "TrainConfig",
    "TrainData",
    "Trajectory",
    "check_lr",
    "default_snapshots",
    "finish",
    "init_state",
    "loss_function",
    "make_finishing_run",
    "make_run",
    "minibatch_key",
    "state_dtype",
    "time_axis",
    "train",
    "trajectory_arrays",
    "trajectory_from_arrays",
]

OPTIMIZERS = ("gd", "sgd", "adam", "adamw")
_SCHEDULES = ("constant", "warmup_cosine")


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How to train ([GAP]: the paper gives no optimizer; defaults full-batch Adam, lr 1e-3).

    Attributes:
        optimizer: ``"gd"`` (full batch), ``"sgd"`` (minibatch), ``"adam"``, ``"adamw"``.
        lr: learning rate; the sweep's lr grid overrides it lane by lane.
        steps: optimizer steps (epochs, for full batch).
        batch_size: minibatch size (``sgd`` needs one; ``None`` is full batch). Minibatches are
            drawn with replacement with probability proportional to the sample weights, so the
            minibatch loss is unbiased for the weighted population loss.
        weight_decay: decoupled weight decay of ``adamw``.
        schedule: ``"constant"`` or ``"warmup_cosine"`` (linear warm-up over ``warmup_steps``,
            then cosine decay to ``min_lr_ratio * lr``).
        snapshots: steps at which the state is recorded (default `default_snapshots`).
        record_weights: keep ``W_E`` and ``W_U`` at every snapshot (the memory-heavy part).
    """

    optimizer: str = "adam"
    lr: float = 1e-3
    steps: int = 1000
    batch_size: int | None = None
    weight_decay: float = 1e-2
    schedule: str = "constant"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    snapshots: tuple[int, ...] | None = None
    record_weights: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.optimizer, str) or self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}; got {self.optimizer!r}")
        if not isinstance(self.schedule, str) or self.schedule not in _SCHEDULES:
            raise ValueError(f"schedule must be one of {_SCHEDULES}; got {self.schedule!r}")
        check_lr(self.lr)
        internal.check_int(self.steps, "steps", 1, internal.INT32_MAX)
        internal.check_int(self.warmup_steps, "warmup_steps", 0, internal.INT32_MAX)
        if self.batch_size is not None:
            internal.check_int(self.batch_size, "batch_size", 1)
        if self.optimizer == "sgd" and self.batch_size is None:
            raise ValueError("batch_size must be set for optimizer='sgd' (minibatch)")
        for name in ("weight_decay", "min_lr_ratio"):
            value = getattr(self, name)
            real = not isinstance(value, bool) and isinstance(value, int | float | np.number)
            if not real or not math.isfinite(value) or value < 0:
                raise ValueError(f"{name} must be a finite number >= 0; got {value!r}")
        snapshots = default_snapshots(self.steps) if self.snapshots is None else self.snapshots
        snapshots = tuple(sorted({_snapshot_step(s) for s in _steps(snapshots)}))
        if not snapshots or snapshots[0] < 0 or snapshots[-1] > self.steps:
            raise ValueError(
                f"snapshots must be steps in [0, steps] = [0, {self.steps}]; got "
                f"{list(self.snapshots or [])}"
            )
        object.__setattr__(self, "snapshots", snapshots)


class Trajectory(NamedTuple):
    """Snapshots of one run (a sweep adds a leading lane axis to every array).

    Attributes:
        steps: int ``[S]`` snapshot steps.
        loss, accuracy: ``[S]`` weighted full-dataset cross-entropy and accuracy.
        W_E, W_U: ``[S, V, d]`` (empty ``[S, 0, 0]`` when not recorded).
        group_norms: ``{group: [S]}`` mean embedding norm ``||w^E_alpha||`` over each token group.
        attention_position: ``[S, L]`` mean last-row attention each position receives (zeros for
            models without attention).
        attention_group: ``{group: [S]}`` mean attention mass on each token group.
        sample_loss, sample_accuracy: ``{sample group: [S]}`` mean loss and accuracy over each of
            ``ds.sample_groups`` (uniform within the group; held-out samples of weight 0 count).
        diverged_step: int, the step whose update went non-finite, or -1.
        logit_scale: ``[S]`` the escape statistic of theory/closed_form.md (C7), the largest
            centred logit ``max_n max_nu |f_nu(X_n) - mean_nu f(X_n)|`` of the model's own
            forward pass over every sample (None in lanes saved before it was recorded).
    """

    steps: jax.Array
    loss: jax.Array
    accuracy: jax.Array
    W_E: jax.Array
    W_U: jax.Array
    group_norms: dict[str, jax.Array]
    attention_position: jax.Array
    attention_group: dict[str, jax.Array]
    sample_loss: dict[str, jax.Array]
    sample_accuracy: dict[str, jax.Array]
    diverged_step: jax.Array
    logit_scale: jax.Array | None = None


def default_snapshots(steps: int, n_log: int = 24, n_linear: int = 16) -> tuple[int, ...]:
    """Log-spaced plus linearly spaced steps in ``[0, steps]``, with 0 and ``steps``."""
    log = np.unique(np.round(np.logspace(0, np.log10(max(steps, 1)), n_log)).astype(int))
    linear = np.round(np.linspace(0, steps, n_linear + 1)).astype(int)
    return tuple(sorted({0, steps, *log.tolist(), *linear.tolist()}))


def time_axis(steps, lr) -> np.ndarray:
    """Gradient-flow time ``t = lr * step`` (exact for full-batch ``gd``)."""
    return np.asarray(lr, dtype=np.float64)[..., None] * np.asarray(steps, dtype=np.float64)


def check_lr(lr) -> None:
    try:
        values = np.atleast_1d(np.asarray(lr, dtype=np.float64))
    except (TypeError, ValueError):
        raise ValueError(f"lr must be finite and > 0; got {lr!r}") from None
    if values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"lr must be finite and > 0; got {np.asarray(lr).tolist()}")


def init_state(
    model: str, ds: TokenDataset | TrainData, *, gamma, seed: int | jax.Array, **model_kwargs
) -> tuple[nnx.GraphDef, nnx.State]:
    """Build a model for ``ds`` and split it into (graphdef, state); vmappable in gamma and seed.

    Only ``ds.vocab_size`` and ``ds.L`` are read, so a traced `TrainData` serves as well.

    The initial weights use ``fold_in(key(seed), 0)``; the same seed gives the same standard
    normal draw at every gamma, scaled by ``d^{-gamma}``.
    """
    vocab_size = model_kwargs.pop("vocab_size", ds.vocab_size)
    if vocab_size < ds.vocab_size:
        raise ValueError(
            f"vocab_size must be >= the data's vocabulary ({ds.vocab_size}); got {vocab_size}"
        )
    key = seed if _is_key(seed) else jax.random.key(seed)
    module = models.create(
        model,
        vocab_size=vocab_size,
        seq_len=ds.L,
        gamma=gamma,
        rngs=nnx.Rngs(jax.random.fold_in(key, 0)),
        **model_kwargs,
    )
    return nnx.split(module)


def minibatch_key(key: jax.Array) -> jax.Array:
    """The minibatch stream of a run seeded with ``key``: ``fold_in(key, 1)``, apart from the
    initialization's ``fold_in(key, 0)`` (`init_state`). `train` and every lane of
    `sweep.train_sweep` use it, so one seed is one run either way."""
    return jax.random.fold_in(key, 1)


def train(
    model: str, ds: TokenDataset, config: TrainConfig, *, gamma=0.8, seed: int = 0, **model_kwargs
) -> Trajectory:
    """Train one model on ``ds``; see `make_run` for the compiled loop and `minibatch_key` for
    its random streams."""
    graphdef, state = init_state(model, ds, gamma=gamma, seed=seed, **model_kwargs)
    run = _jitted_run(graphdef, config)
    lr = jnp.asarray(config.lr, dtype=state_dtype(state))
    return run(state, lr, minibatch_key(jax.random.key(seed)), TrainData.from_dataset(ds))


class Finished(NamedTuple):
    """A run with the state it ends in (`finish`).

    Attributes:
        trajectory: its `Trajectory`.
        graphdef: the model's structure (``nnx.merge(graphdef, state)`` rebuilds it).
        state: the parameters after the last step (the last finite ones if it diverged).
    """

    trajectory: Trajectory
    graphdef: nnx.GraphDef
    state: nnx.State


def finish(
    model: str, ds: TokenDataset, config: TrainConfig, *, gamma=0.8, seed: int = 0, **model_kwargs
) -> Finished:
    """`train`, keeping the state the run ends in: the same run (the same steps and random
    streams), so ``state``'s embedding is the trajectory's last snapshot when that is the last
    step."""
    graphdef, state = init_state(model, ds, gamma=gamma, seed=seed, **model_kwargs)
    run = _jitted_finishing_run(graphdef, config)
    progress.expect(config.steps)  # its steps tick the bars like a sweep's
    lr = jnp.asarray(config.lr, dtype=state_dtype(state))
    trajectory, state = run(
        state, lr, minibatch_key(jax.random.key(seed)), TrainData.from_dataset(ds)
    )
    return Finished(trajectory, graphdef, state)


@functools.lru_cache(maxsize=32)
def _jitted_run(graphdef, config):
    return jax.jit(make_run(graphdef, config))


@functools.lru_cache(maxsize=32)
def _jitted_finishing_run(graphdef, config):
    return jax.jit(make_finishing_run(graphdef, config))


@functools.partial(
    jax.tree_util.register_dataclass,
    data_fields=["tokens", "labels", "probabilities", "groups", "sample_groups", "mask"],
    meta_fields=["vocab_size", "nonempty_groups"],
)
@dataclasses.dataclass(frozen=True)
class TrainData:
    """A `TokenDataset` as the arrays a compiled run takes as an argument (a pytree).

    Passing the data as an argument, not closing over it, keeps it out of the compiled program
    (no constant folding of a large dataset) and lets one compiled run serve every dataset of
    the same shapes. Groups are masks, not id lists, so datasets whose groups differ in size
    (two label laws, two tasks at one V) share one compiled run too.

    Attributes:
        tokens: int ``[n, L]``; labels: int ``[n]``.
        probabilities: ``[n]`` the sample weights normalized to sum 1
            (`TokenDataset.probabilities`).
        groups: ``{group: [V]}`` the 0/1 membership of every token group.
        sample_groups: ``{group: [n]}`` the 0/1 membership of each non-empty sample group.
        vocab_size: V; nonempty_groups: the token groups with a member (both static: part of
            the pytree structure, not arrays).
        mask: bool ``[n, L]``, the positions a padded dataset's samples hold (`padded`);
            None: every position.
    """

    tokens: jax.Array
    labels: jax.Array
    probabilities: jax.Array
    groups: dict[str, jax.Array]
    sample_groups: dict[str, jax.Array]
    vocab_size: int
    nonempty_groups: tuple[str, ...]
    mask: jax.Array | None = None

    @property
    def L(self) -> int:
        """Sequence length (static)."""
        return self.tokens.shape[1]

    @classmethod
    def from_dataset(cls, ds: TokenDataset) -> TrainData:
        """The arrays of ``ds`` (empty sample groups dropped)."""
        dtype = np.asarray(ds.probabilities).dtype

        def mask(ids, size):
            member = np.zeros(size, dtype)
            member[np.asarray(ids, dtype=np.int64)] = 1
            return jnp.asarray(member)

        return cls(
            tokens=jnp.asarray(ds.tokens),
            labels=jnp.asarray(ds.labels),
            probabilities=jnp.asarray(ds.probabilities),
            groups={name: mask(ids, ds.vocab_size) for name, ids in ds.groups.items()},
            sample_groups={g: mask(i, ds.n) for g, i in ds.sample_groups.items() if i.size},
            vocab_size=ds.vocab_size,
            nonempty_groups=tuple(name for name, ids in ds.groups.items() if np.size(ids)),
        )

    @classmethod
    def padded(cls, datasets: Sequence[TokenDataset]) -> TrainData:
        """Datasets of one vocabulary and one set of groups, padded to one shape and stacked:
        every array gets a leading ``[D]`` axis, ``tokens [D, n_max, L_max]``.

        A dataset's samples keep their places; the positions past its ``L`` are token 0 with
        ``mask`` False (``mask`` is None when every ``L`` is the same), and the samples past its
        ``n`` are token 0, label 0, with probability 0 and in no group. So one compiled run
        serves every dataset, and a model that takes the mask (`models.ModelSpec.sequence`
        False) sees each dataset's own loss and gradient: the padding adds exact zeros.
        """
        datasets = _paddable(datasets)
        first = datasets[0]
        n = max(ds.n for ds in datasets)
        L = max(ds.L for ds in datasets)
        each = [cls.from_dataset(ds) for ds in datasets]
        nonempty = tuple(g for g in first.groups if any(g in d.nonempty_groups for d in each))
        sample_groups = tuple(
            g for g in first.sample_groups if any(g in d.sample_groups for d in each)
        )

        def pad(x, shape):
            x = np.asarray(x)
            return np.pad(x, [(0, want - have) for want, have in zip(shape, x.shape, strict=True)])

        def stack(arrays):
            return jnp.asarray(np.stack(arrays))

        return cls(
            tokens=stack([pad(d.tokens, (n, L)) for d in each]),
            labels=stack([pad(d.labels, (n,)) for d in each]),
            probabilities=stack([pad(d.probabilities, (n,)) for d in each]),
            groups={g: stack([d.groups[g] for d in each]) for g in first.groups},
            sample_groups={
                g: stack(
                    [
                        pad(d.sample_groups.get(g, np.zeros(ds.n, d.probabilities.dtype)), (n,))
                        for d, ds in zip(each, datasets, strict=True)
                    ]
                )
                for g in sample_groups
            },
            vocab_size=first.vocab_size,
            nonempty_groups=nonempty,
            mask=None
            if all(ds.L == L for ds in datasets)
            else stack([pad(np.ones(ds.tokens.shape, bool), (n, L)) for ds in datasets]),
        )


def _paddable(datasets: Sequence[TokenDataset]) -> list[TokenDataset]:
    """``datasets`` as a list of one or more that `TrainData.padded` can stack: one vocabulary,
    one set of token groups and of sample groups; ValueError otherwise."""
    datasets = list(datasets)
    if not datasets:
        raise ValueError("datasets must hold at least one TokenDataset; got none")
    first = datasets[0]
    for ds in datasets[1:]:
        if ds.vocab_size != first.vocab_size or set(ds.groups) != set(first.groups):
            raise ValueError(
                "datasets padded together must share the vocabulary and the token groups; "
                f"got V={first.vocab_size} {sorted(first.groups)} and V={ds.vocab_size} "
                f"{sorted(ds.groups)}"
            )
        if set(ds.sample_groups) != set(first.sample_groups):
            raise ValueError(
                "datasets padded together must share the sample groups; got "
                f"{sorted(first.sample_groups)} and {sorted(ds.sample_groups)}"
            )
    return datasets


def loss_function(graphdef: nnx.GraphDef, ds: TokenDataset) -> Callable[[nnx.State], jax.Array]:
    """The weighted full-dataset cross-entropy as a function of the model state.

    ``flows.gradient_flow(loss_function(graphdef, ds))`` is full-batch training as an ODE.
    """
    tokens, labels = jnp.asarray(ds.tokens), jnp.asarray(ds.labels)

    def loss(state):
        logits = nnx.merge(graphdef, state)(tokens)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
        return jnp.sum(jnp.asarray(ds.probabilities, dtype=nll.dtype) * nll)

    return loss


@functools.lru_cache(maxsize=32)
def make_run(
    graphdef: nnx.GraphDef, config: TrainConfig
) -> Callable[[nnx.State, jax.Array, jax.Array, TrainData], Trajectory]:
    """The pure training function ``run(state, lr, key, data) -> Trajectory`` (vmap- and
    jit-safe): `make_finishing_run`'s run without its last state."""
    finishing = make_finishing_run(graphdef, config)

    def run(state, lr, key, data):
        return finishing(state, lr, key, data)[0]

    return run


@functools.lru_cache(maxsize=32)
def make_finishing_run(
    graphdef: nnx.GraphDef, config: TrainConfig
) -> Callable[[nnx.State, jax.Array, jax.Array, TrainData], tuple[Trajectory, nnx.State]]:
    """The pure training function ``run(state, lr, key, data) -> (Trajectory, last state)``
    (vmap- and jit-safe), one `loop.run` of ``config.steps`` optimizer steps recorded at
    ``config.snapshots``.

    ``data`` is a `TrainData`; the function is cached per (graphdef, config), so a jit of it
    compiles once per data shapes. A step uses all of ``data`` (``batch_size`` None, the
    weighted loss) or ``batch_size`` samples drawn with replacement with probabilities
    ``data.probabilities`` from ``fold_in(key, step)``, uniformly weighted.
    """
    transform = _transform(config)
    schedule = _schedule(config)

    def weighted_loss(state, batch_tokens, batch_labels, batch_weights, batch_mask):
        logits = _forward(nnx.merge(graphdef, state), batch_tokens, batch_mask)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, batch_labels)
        return jnp.sum(batch_weights * nll)

    def run(state, lr, key, data):
        dtype = state_dtype(state)
        probabilities = jnp.asarray(data.probabilities, dtype=dtype)
        opt_state = _call_optax(transform.init, state)

        def step(i, carry):
            batch = _step_batch(config.batch_size, data, probabilities, key, i, dtype)
            loss, grads = jax.value_and_grad(weighted_loss)(carry.state, *batch)
            updates, new_opt_state = _call_optax(
                transform.update, grads, carry.opt_state, carry.state
            )
            rate = lr.astype(dtype) * jnp.asarray(_call_optax(schedule, i), dtype)
            new_state = jax.tree.map(lambda p, u: p - rate * u, carry.state, updates)
            return loop.guarded_step(i, carry, loss, new_state, new_opt_state)

        result = loop.run(
            step,
            loop.initial_carry(state, opt_state),
            lambda state: _record(nnx.merge(graphdef, state), data, probabilities, config),
            config.snapshots,
            record_initial=False,
            # the default int (int64 under x64): the step count the schedule and fold_in see
            step_dtype=jax.dtypes.canonicalize_dtype(jnp.int64),
        )
        trajectory = Trajectory(
            steps=jnp.asarray(config.snapshots, dtype=jnp.int32),
            diverged_step=result.carry.diverged,
            **result.recorded,
        )
        return trajectory, result.carry.state

    return run


def _step_batch(batch_size: int | None, data: TrainData, probabilities, key, i, dtype) -> tuple:
    """The batch ``(tokens, labels, weights, mask)`` of step ``i``: all of ``data`` weighted by
    ``probabilities [n]`` (``batch_size`` None), or ``batch_size`` samples drawn with
    replacement with those probabilities from ``fold_in(key, i)``, uniformly weighted."""
    tokens, labels = data.tokens, data.labels
    if batch_size is None:
        return (tokens, labels, probabilities, data.mask)
    index = jax.random.choice(
        jax.random.fold_in(key, i),
        tokens.shape[0],
        (batch_size,),
        p=probabilities,
    )
    uniform = jnp.full(batch_size, 1.0 / batch_size, dtype)
    mask = None if data.mask is None else data.mask[index]
    return (tokens[index], labels[index], uniform, mask)


def _record(module: nnx.Module, data: TrainData, probabilities, config: TrainConfig) -> dict:
    """One snapshot of `Trajectory` (every field but ``steps`` and ``diverged_step``): the
    model's forward pass over every sample of ``data``, weighted by ``probabilities [n]``."""
    tokens, labels = data.tokens, data.labels
    logits = _forward(module, tokens, data.mask)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    correct = (jnp.argmax(logits, axis=-1).astype(labels.dtype) == labels).astype(
        probabilities.dtype
    )
    weights = models.weights(module)
    W_E, W_U = weights["W_E"], weights["W_U"]
    norms = jnp.linalg.norm(W_E, axis=-1)  # the model's vocabulary may exceed the data's

    def mean_over(member, values):  # the mean of ``values`` over a 0/1 membership mask
        member = member.astype(values.dtype)
        return jnp.sum(member * values[: member.size]) / jnp.sum(member)

    if models.spec_of(module).attention:
        attention = module.attention(tokens).astype(probabilities.dtype)  # [n, L]
    else:
        attention = jnp.zeros(tokens.shape, probabilities.dtype)
    if not config.record_weights:
        W_E, W_U = W_E[:0, :0], W_U[:0, :0]
    return dict(
        loss=jnp.sum(probabilities * nll),
        accuracy=jnp.sum(probabilities * correct),
        W_E=W_E,
        W_U=W_U,
        group_norms={g: mean_over(data.groups[g], norms) for g in data.nonempty_groups},
        attention_position=probabilities @ attention,
        attention_group={
            g: probabilities @ jnp.sum(jnp.where(member[tokens] > 0, attention, 0), -1)
            for g, member in data.groups.items()
        },
        sample_loss={g: mean_over(m, nll) for g, m in data.sample_groups.items()},
        sample_accuracy={g: mean_over(m, correct) for g, m in data.sample_groups.items()},
        logit_scale=jnp.max(jnp.abs(logits - jnp.mean(logits, axis=-1, keepdims=True))),
    )


def _forward(module: nnx.Module, tokens: jax.Array, mask: jax.Array | None) -> jax.Array:
    """The logits of ``tokens``, the positions ``mask`` drops (if any) left out."""
    return module(tokens) if mask is None else module(tokens, mask)


def _transform(config: TrainConfig) -> optax.GradientTransformation:
    """The optimizer's direction, without the learning rate (which is a traced value)."""
    if config.optimizer in ("gd", "sgd"):
        return optax.identity()
    adam = optax.scale_by_adam()
    if config.optimizer == "adam":
        return adam
    # decoupled decay, scaled by the same lr as the Adam direction (as optax.adamw does)
    return optax.chain(adam, optax.add_decayed_weights(config.weight_decay))


def _schedule(config: TrainConfig) -> Callable[[jax.Array], jax.Array]:
    if config.schedule == "constant":
        return lambda step: jnp.ones((), jnp.float32)
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=1.0,
        warmup_steps=config.warmup_steps,
        decay_steps=config.steps,
        end_value=config.min_lr_ratio,
    )


def _call_optax(fn, *args):
    # optax mixes python floats with int32 step counts, which strict dtype promotion rejects.
    with jax.numpy_dtype_promotion("standard"):
        return fn(*args)


def _is_key(x) -> bool:
    return isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key)


def state_dtype(state) -> Any:
    """The floating dtype of a model state (that of its first leaf)."""
    return jax.tree.leaves(state)[0].dtype


def _steps(snapshots) -> list:
    """``snapshots`` as a list, or ``TypeError`` naming it (a str or a scalar is not a list)."""
    if isinstance(snapshots, str | bytes) or not hasattr(snapshots, "__iter__"):
        raise TypeError(f"snapshots must be a sequence of steps; got {snapshots!r}")
    return list(snapshots)


def _snapshot_step(step) -> int:
    """One snapshot step as an int; a non-number or a fraction is refused, naming snapshots."""
    number = not isinstance(step, bool) and isinstance(step, int | float | np.number)
    if not number or not math.isfinite(step) or step != int(step):
        raise ValueError(f"snapshots must hold integer steps; got {step!r}")
    return int(step)


def trajectory_arrays(trajectory: Trajectory) -> dict[str, np.ndarray]:
    """Flatten a trajectory into named arrays (``group_norms/<group>`` for the dicts)."""
    arrays = {}
    for field, value in trajectory._asdict().items():
        if value is None:
            continue
        if isinstance(value, dict):
            arrays.update({f"{field}/{g}": np.asarray(v) for g, v in value.items()})
        else:
            arrays[field] = np.asarray(value)
    return arrays


def trajectory_from_arrays(arrays: dict[str, np.ndarray]) -> Trajectory:
    """Inverse of `trajectory_arrays`."""
    fields: dict[str, Any] = {
        "group_norms": {},
        "attention_group": {},
        "sample_loss": {},
        "sample_accuracy": {},
    }
    for name, value in arrays.items():
        field, _, group = name.partition("/")
        if field not in Trajectory._fields:
            continue
        if group:
            fields[field][group] = value
        else:
            fields[field] = value
    return Trajectory(**fields)
