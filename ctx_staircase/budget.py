"""Validate, then work: memory estimates made before any computation.

Every CLI command estimates the memory its request needs, compares it with a limit and refuses an
impossible request with one line (what was asked, the estimate, the limit, the knob to turn)
instead of failing minutes later with an XLA ``RESOURCE_EXHAUSTED``. The pieces:

- the limit: `memory_limit` (``--max-memory``, else ``CTX_STAIRCASE_MAX_MEMORY``, else
  `DEFAULT_FRACTION` of `available_bytes`), sizes read by `parse_size`, printed by `format_bytes`;
- the estimators, in bytes, each taking the objects the library takes: `train_bytes` (a sweep of
  `sweep.train_sweep`, from the model's own `models.ModelSpec` formulas; `train_lane_bytes` is
  one compiled lane), `signature_bytes` (`geometry.signature_geometry` of ``ctx-staircase
  signatures``), `lm_bytes` (`lm.train_lm` and its metrics), `theory_bytes`
  (`comparison.theory_vs_training`, by stage in `theory_stages`, from each `theory.Theory.nbytes`);
- the checks: `check` (the one-line refusal), `check_signature_shapes` (the per-tensor cap of
  `signatures`, for every order before the first is counted); the integer bounds (int32 step
  counters, uint32 seeds) are `internal.INT32_MAX` and `internal.SEED_MAX`.

The estimators are arithmetic on shapes (no JAX compilation, no backend initialization), with
constants fitted to XLA's buffer assignment (`xla_bytes`) on CPU; what they count, what a call
costs and the calibration: benchmarks/README.md, "Validation cost".
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import sys
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

#: Share of the available memory a request may take when no limit is given.
DEFAULT_FRACTION = 0.8
#: Environment variable holding a limit (same syntax as ``--max-memory``).
ENV_VAR = "CTX_STAIRCASE_MAX_MEMORY"

_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 10**3,
    "kib": 2**10,
    "m": 2**20,
    "mb": 10**6,
    "mib": 2**20,
    "g": 2**30,
    "gb": 10**9,
    "gib": 2**30,
    "t": 2**40,
    "tb": 10**12,
    "tib": 2**40,
}
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([a-z]*|%)\s*$", re.IGNORECASE)


class Limit(NamedTuple):
    """A memory limit: ``bytes`` and where it came from (``source``, for the refusal line)."""

    bytes: int
    source: str


# --------------------------------------------------------------------------------------------
# the limit


def available_bytes() -> int:
    """Memory available to this process, in bytes.

    On an accelerator whose JAX backend is already initialized: the first device's free memory
    (``bytes_limit - bytes_in_use`` of ``memory_stats()``), which is what the compiled program
    competes for. Otherwise (CPU, or no backend yet: this never starts one) the host's
    ``MemAvailable`` from ``/proc/meminfo``, else physical memory from ``os.sysconf``.
    """
    device = _initialized_device()
    if device is not None and device.platform != "cpu":
        stats = device.memory_stats() or {}
        if "bytes_limit" in stats:
            return int(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def parse_size(text, *, name: str = "--max-memory") -> int:
    """A size in bytes from ``text``: ``"8GiB"``, ``"500MB"``, ``"1.5G"``, ``"50%"``, ``"123"``.

    Units (case-insensitive, optional space): B; kB, MB, GB, TB (powers of 1000); KiB, MiB, GiB,
    TiB and the single letters K, M, G, T (powers of 1024); ``%`` is a share of
    `available_bytes`. A bare number (or an int/float) is bytes. Zero, negative, NaN, infinite
    or unreadable sizes raise ``ValueError`` naming ``name``.
    """
    allowed = f"{name} must be a positive size such as 8GiB, 500MB, 50% or a number of bytes"
    if isinstance(text, bool):
        raise ValueError(f"{allowed}; got {text!r}")
    if isinstance(text, int | float | np.integer | np.floating):
        value, unit = float(text), ""
    elif isinstance(text, str) and (match := _SIZE.match(text)):
        value, unit = float(match.group(1)), match.group(2).lower()
    else:
        raise ValueError(f"{allowed}; got {text!r}")
    if unit not in _UNITS and unit != "%":
        raise ValueError(f"{allowed}; got {text!r} (unknown unit {unit!r})")
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{allowed}; got {text!r}")
    size = value / 100 * available_bytes() if unit == "%" else value * _UNITS[unit]
    if size < 1:
        raise ValueError(f"{allowed}; got {text!r} (less than one byte)")
    return int(size)


def memory_limit(override=None) -> Limit:
    """The limit a request is checked against, with its source.

    ``override`` (the ``--max-memory`` value: a size string, a number of bytes or a `Limit`)
    wins; else the environment variable ``CTX_STAIRCASE_MAX_MEMORY``; else `DEFAULT_FRACTION` of
    `available_bytes`.
    """
    if isinstance(override, Limit):
        return override
    if override is not None:
        return Limit(parse_size(override), "--max-memory")
    env = os.environ.get(ENV_VAR)
    if env is not None and env.strip():
        return Limit(parse_size(env, name=ENV_VAR), ENV_VAR)
    share = f"{DEFAULT_FRACTION:.0%} of available memory"
    return Limit(int(DEFAULT_FRACTION * available_bytes()), share)


def limit_bytes(override=None) -> int:
    """`memory_limit` in bytes."""
    return memory_limit(override).bytes


def format_bytes(size) -> str:
    """``size`` in decimal units, 3 significant digits: ``81.4 GB``, ``500 MB``, ``12 B``."""
    size = float(size)
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(size) >= scale:
            value = size / scale
            return f"{value:.3g} {unit}" if value < 1000 else f"{value:.0f} {unit}"
    return f"{size:.0f} B"


def check(estimate: int, *, what: str, knob: str, limit=None) -> int:
    """Refuse a request whose ``estimate`` (bytes) exceeds the limit; return the estimate.

    Args:
        estimate: bytes the request needs (one of the estimators here).
        what: the request, e.g. ``"train modsum N=70 L=4"``.
        knob: what to lower, e.g. ``"lower --param N, --d or the number of lanes"``.
        limit: ``None`` (`memory_limit`), a `Limit`, or a ``--max-memory`` value (size string or
            bytes).

    Raises:
        ValueError: one line, ``"{what}: needs about 81.4 GB (estimate), over the 19.2 GB limit
        (80% of available memory); {knob}, or raise --max-memory"``.
    """
    limit = memory_limit(limit)
    if estimate > limit.bytes:
        raise ValueError(
            f"{what}: needs about {format_bytes(estimate)} (estimate), over the "
            f"{format_bytes(limit.bytes)} limit ({limit.source}); {knob}, or raise --max-memory"
        )
    return int(estimate)


# --------------------------------------------------------------------------------------------
# how lanes run


def lanes_in_flight(
    lanes: int,
    layout=None,
    *,
    platform: str | None = None,
    devices: int | None = None,
) -> int:
    """How many lanes of a `sweep.sweep_map` under ``layout`` (a `sweep.Layout`; None: every
    default) hold their working memory at the same time: `sweep.Plan.in_flight` of
    `sweep.plan`, the plan `sweep_map` runs. ``platform`` and ``devices`` (a count; the
    layout's devices when it names them) default to the initialized backend's, else a guess
    that starts no backend (``JAX_PLATFORMS``, an installed GPU plugin,
    ``--xla_force_host_platform_device_count``).
    """
    from ctx_staircase import sweep

    layout = (layout or sweep.Layout()).checked()
    guess_platform, guess_devices = _platform()
    if layout.devices:
        devices = len(layout.devices)
    return sweep.plan(layout, lanes, platform or guess_platform, devices or guess_devices).in_flight


def _platform() -> tuple[str, int]:
    device = _initialized_device()
    if device is not None:
        import jax

        return device.platform, len(jax.local_devices())  # this process holds its own lanes
    requested = os.environ.get("JAX_PLATFORMS", "").split(",")[0].strip().lower()
    if requested and requested != "cpu":
        return ("gpu" if requested in ("cuda", "rocm") else requested), 1
    if not requested and any(
        importlib.util.find_spec(name) is not None
        for name in ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin")
    ):
        return "gpu", 1
    match = re.search(
        r"xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", "")
    )
    return "cpu", int(match.group(1)) if match else 1


def _initialized_device():
    """The first JAX device if JAX is already imported (never imports it), else None; a
    command that estimates before it computes has usually imported JAX already."""
    if "jax" not in sys.modules:
        return None
    try:
        return sys.modules["jax"].local_devices()[0]
    except Exception:  # no usable backend: fall back to the host's memory
        return None


# --------------------------------------------------------------------------------------------
# datasets (tasks.make), before they are built

#: Copies of the sample arrays alive while a task is built (enumeration, labels, weights).
_BUILD_COPIES = 3


def dataset_samples(task: str, params: dict) -> int | None:
    """Samples ``n`` that `tasks.make(task, **params)` would build, without building it (each
    task states its own count, `tasks.sample_count`); None for an unknown task or parameters
    that are not plain integers (then `tasks.make` validates them)."""
    from ctx_staircase import tasks

    if task not in tasks.names():
        return None
    return tasks.sample_count(task, params)


def dataset_bytes(task: str, params: dict) -> int:
    """Peak bytes of building a task: ``n`` samples of ``L`` int32 tokens, an int32 label and a
    float64 weight, `_BUILD_COPIES` times (0 when `dataset_samples` has no formula)."""
    from ctx_staircase import tasks

    n = dataset_samples(task, params)
    if n is None or n <= 0:
        return 0
    L = tasks.sequence_length(task, params)
    if L is None or L <= 0:
        return 0
    return int(_BUILD_COPIES * n * (4 * L + 4 + 8))


# --------------------------------------------------------------------------------------------
# training (train.make_run, sweep.train_sweep)

#: Optimizer state, in copies of the parameters.
_OPTIMIZER_COPIES = {"gd": 0, "sgd": 0, "adam": 2, "adamw": 2}
#: A step holds the parameters, their gradient, the update and the new parameters, plus the old
#: and the new optimizer state; fitted to XLA: 6.2 P (Adam) and 2.7 P (GD), P = parameter bytes.
_STEP_PARAMETER_COPIES = 3.0
_STEP_OPTIMIZER_FACTOR = 1.5
#: Finished trajectories live twice: the sweep's output and the stacked `SweepResult`.
_HELD_COPIES = 2


def xla_bytes(compiled) -> int:
    """Peak bytes XLA assigns a compiled function (``jax.jit(f).lower(...).compile()``): its
    ``memory_analysis()`` arguments + outputs + temporaries, less the aliased (donated) bytes
    counted twice. The measurement every estimator here is calibrated against."""
    analysis = compiled.memory_analysis()
    return (
        analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        + analysis.temp_size_in_bytes
        - analysis.alias_size_in_bytes
    )


def model_parameters(
    model: str,
    *,
    vocab_size: int,
    L: int,
    d: int = 128,
    d_k: int = 64,
    d_ff: int | None = None,
    positional: bool = True,
) -> int:
    """Parameter count of a `models` model: ``W_E, W_U [V, d]`` plus the model's own matrices
    (`models.ModelSpec.parameters`); ValueError for a model it does not cover."""
    from ctx_staircase import models

    return _parameters(model, models.Sizes(vocab_size, L, d, d_k, d_ff, positional))


def _parameters(model: str, sizes) -> int:
    """`model_parameters` at the `models.Sizes` ``sizes``."""
    from ctx_staircase import models

    spec = models.get(model)
    if spec.parameters is None:
        counted = ", ".join(s.name for s in models.REGISTRY if s.parameters is not None)
        raise ValueError(f"model must be one of {counted}; got {model!r}")
    return spec.parameters(sizes)


def _snapshot_elements(V: int, d: int, L: int, groups: int, record_weights: bool) -> int:
    """Elements one snapshot records: ``W_E, W_U [V, d]`` and the scalars of a `Trajectory`."""
    return (2 * V * d if record_weights else 0) + L + 4 + 2 * groups + 4


def _lane_and_trajectory_bytes(
    model: str,
    ds,
    config,
    *,
    vocab_size: int | None = None,
    dtype="float32",
    **model_kwargs,
) -> tuple[int, int]:
    """`train_lane_bytes`, and the part of it that is the recorded trajectory. Of the model
    keywords, those of `models.Sizes` (``d, d_k, d_ff, positional``, its defaults where not
    given) set the sizes; the others do not change memory and are ignored."""
    from ctx_staircase import models

    V = ds.vocab_size if vocab_size is None else int(vocab_size)
    n, L = ds.n, ds.L
    itemsize = np.dtype(dtype).itemsize
    groups = len(ds.groups)
    given = {k: v for k, v in model_kwargs.items() if k in models.Sizes._fields[2:]}  # after V, L
    sizes = models.Sizes(V, L, **given)
    spec, params = models.get(model), _parameters(model, sizes)
    copies = _STEP_PARAMETER_COPIES + _STEP_OPTIMIZER_FACTOR * _OPTIMIZER_COPIES[config.optimizer]
    rows = n if config.batch_size is None else min(config.batch_size, n)
    working = max(spec.step_elements(sizes, rows), spec.record_elements(sizes, n, groups))
    data = n * (L * 4 + 4 + itemsize)
    snapshots = len(config.snapshots)
    recorded = snapshots * _snapshot_elements(V, sizes.d, L, groups, config.record_weights)
    lane = int(itemsize * ((1 + copies) * params + working + recorded) + data)
    return lane, itemsize * recorded


def train_lane_bytes(model: str, ds, config, **model_kwargs) -> int:
    """Peak bytes of one compiled training lane, ``jax.jit(train.make_run(...))`` (arguments +
    temporaries + outputs, as XLA's ``memory_analysis`` counts them).

    Counts: the parameters P (`model_parameters`) as the argument; inside the step
    ``(3 + 1.5 k) P`` for the parameters, gradient, update and k optimizer copies (Adam: k = 2,
    GD/SGD: 0); the larger of one step's activations over the batch (``batch_size`` or all n
    sequences; the model's `models.ModelSpec.step_elements`: e.g. FFN ``n (L d + 2 d + 2 V)``,
    the logits ``[n, V]`` twice) and one snapshot's forward pass over all n sequences
    (`models.ModelSpec.record_elements`); the data (tokens ``[n, L]``, labels,
    weights); and the recorded trajectory, ``S`` snapshots of ``W_E, W_U [V, d]`` and scalars.
    The model keywords, with their defaults: ``d=128``, ``vocab_size=None`` (the data's),
    ``dtype="float32"``, ``d_k=64``, ``d_ff=None`` (``4 d``), ``positional=True``; those that do
    not change memory (activation, init, gamma...) are accepted and ignored.
    """
    return _lane_and_trajectory_bytes(model, ds, config, **model_kwargs)[0]


def train_bytes(
    model: str,
    ds,
    config,
    *,
    lanes: int = 1,
    concurrent: int | None = None,
    chunk: int | None = None,
    **model_kwargs,
) -> int:
    """Peak bytes of ``sweep.train_sweep(model, ds, config, ..., **model_kwargs)`` over ``lanes``
    (gamma x seed x lr) lanes, run ``chunk`` lanes per call (default all).

    ``concurrent`` lanes (default `lanes_in_flight` of a chunk: on CPU one per core, on an
    accelerator all) each hold a lane's working memory (`train_lane_bytes` less its
    trajectory); every lane's trajectory (``S`` snapshots of ``W_E, W_U [V, d]``...) is held
    twice, as the sweep's output and as the stacked result. The model keywords are
    `train_lane_bytes`'s.
    """
    lane, trajectory = _lane_and_trajectory_bytes(model, ds, config, **model_kwargs)
    size = min(lanes, chunk or lanes)
    in_flight = min(size, concurrent or lanes_in_flight(size))
    return int(in_flight * (lane - trajectory) + _HELD_COPIES * lanes * trajectory)


# --------------------------------------------------------------------------------------------
# signatures (geometry.signature_geometry)


def _axis_sizes(ds) -> tuple[int, int]:
    """``(Vnu, P)``: labels and context tokens, from the task's groups (every `tasks` group set
    covers exactly the tokens its samples use), else the whole vocabulary. Counting the tokens
    themselves would cost a pass over the data."""
    V = ds.vocab_size
    labels = ds.groups.get("labels")
    Vnu = V if labels is None else min(V, labels.size)
    inputs = [ids for name, ids in ds.groups.items() if name != "labels"]
    P = min(V, np.unique(np.concatenate(inputs)).size) if inputs else V
    return Vnu, P


def signature_shapes(ds, max_order: int, group: str | None = None) -> dict[str, tuple[int, ...]]:
    """Shapes of the dense float64 tensors `geometry.signature_geometry` counts.

    ``order{m}``: ``[A, Vnu, P^m]`` (A: the token group, Vnu: labels, P: context tokens) for
    ``m = 0..max_order``, and for ``max_order >= 1`` the within-group order-1 tensor
    ``order1_within`` ``[A, Vnu, A]``. Each must stay under `signatures.MAX_OUTPUT_BYTES`.
    """
    from ctx_staircase import geometry

    Vnu, P = _axis_sizes(ds)
    name = group or geometry.default_group(ds)
    A = P if name == "occurring" else ds.groups[name].size if name in ds.groups else P
    shapes = {f"order{m}": (A, Vnu, *([P] * m)) for m in range(max_order + 1)}
    if max_order >= 1:
        shapes["order1_within"] = (A, Vnu, A)
    return shapes


def check_signature_shapes(ds, max_order: int, group: str | None = None, *, what, knob) -> None:
    """Refuse up front a request whose signatures `signatures` would refuse one order at a time
    (a dense tensor over `signatures.MAX_OUTPUT_BYTES`), after computing the lower orders.

    Raises:
        ValueError: one line, ``"{what}: the order3 signature would be a dense float64 array of
        shape (60, 60, 60, 60, 60) (6.22 GB), over the 4.29 GB one signature may take; {knob}"``.
    """
    from ctx_staircase import signatures

    for name, shape in signature_shapes(ds, max_order, group).items():
        size = 8 * math.prod(shape)
        if size > signatures.MAX_OUTPUT_BYTES:
            raise ValueError(
                f"{what}: the {name} signature would be a dense float64 array of shape {shape} "
                f"({format_bytes(size)}), over the {format_bytes(signatures.MAX_OUTPUT_BYTES)} "
                f"one signature may take; {knob}"
            )


#: The cosine matrix and PCA of the largest signature hold this many copies of it (fitted to
#: XLA: the input, its square and unit rows, the centred copy and the SVD's right vectors).
_PCA_COPIES = 5


def signature_bytes(ds, max_order: int, group: str | None = None) -> int:
    """Peak bytes of ``geometry.signature_geometry(ds, max_order, group=group)``.

    Every order's tensor ``[A, Vnu, P^m]`` float64 is kept until the end (`signature_shapes`),
    so they count all at once; the largest also counts once more for the full-size ``bincount``
    of its counting (when it is small next to a chunk of the data) and five times more for its
    float64 cosine matrix and PCA in JAX (the input, unit rows, the centred copy, the SVD).
    Plus the ``[A, A]`` similarity matrices and the counting's index chunks
    (`signatures.CHUNK_INDICES` indices at most).
    """
    counting, processing = _signature_parts(ds, max_order, group)
    return counting + processing


def _signature_parts(ds, max_order: int, group: str | None) -> tuple[int, int]:
    """``(NumPy bytes of the counting, JAX bytes of the cosine matrices and PCA)``."""
    from ctx_staircase import signatures

    shapes = signature_shapes(ds, max_order, group)
    sizes = [math.prod(shape) for shape in shapes.values()]
    A = next(iter(shapes.values()))[0]
    largest = max(sizes)
    tuples = math.perm(ds.L, max_order + 1)
    rows = min(ds.n, max(1, signatures.CHUNK_INDICES // tuples))
    chunks = (max_order + 6) * rows
    # `signatures._scatter` adds through a full-size bincount only when the output is small
    # next to the chunk; larger outputs are scattered in place
    bincount = largest if largest <= 4 * rows else 0
    counting = 8 * (sum(sizes) + bincount + chunks + ds.vocab_size)
    matrices = (max_order + 1 + 2 * (max_order >= 1)) * A * A
    return counting, 8 * (_PCA_COPIES * largest + matrices)


# --------------------------------------------------------------------------------------------
# the language model (lm.train_lm, lm.lm_metrics)


def lm_lane_bytes(config, vocab_size: int, *, tokens: int = 0) -> int:
    """Peak bytes of one compiled GPT lane of `lm.train_lm` (arguments + temporaries + outputs).

    Counts (float32): the parameters P (``W_E, W_U [V, d]``, per layer ``W_Q, W_K, W_V, W_O
    [d, d]``, ``W_gate, W_up, W_down`` with the SwiGLU width h) and ``(3 + 1.5 * 2) P`` for
    gradient, update and the AdamW moments; one step's activations over the batch (per layer
    ``B T (12 d + 4 h)`` and the attention ``3 B H T^2``, the logits ``3 B T V``); the
    snapshot's forward pass over the signature windows W (logits ``[W, T, V]``, the stacked
    attention maps ``[layers, W, H, T, T]``, the eq. 22 scatter), which XLA places beside the
    step's buffers rather than over them (`_LM_RECORD_SHARE` of it); the data (``tokens`` of the
    training stream, the windows) and the recorded trajectory (per snapshot: the whole ``W_E
    [V, d]``, tracked ``W_U``, value paths ``[layers, A, d]``, attention-signature cosines
    ``[layers, A, A]``; the final ``W_E [V, d]``).
    """
    from ctx_staircase import models

    V, d, layers, heads = vocab_size, config.d, config.n_layers, config.n_heads
    T, B, W = config.context_length, config.batch_size, config.signature_windows
    hidden = models.swiglu_hidden(d)
    A = min(config.tracked, V)
    params = (1 if config.tied else 2) * V * d + layers * (4 * d * d + 3 * hidden * d + 2 * d) + d
    copies = _STEP_PARAMETER_COPIES + _STEP_OPTIMIZER_FACTOR * 2
    step = layers * (B * T * (12 * d + 4 * hidden) + 3 * B * heads * T * T) + 3 * B * T * V
    logits = W * T * (V + 4 * d + hidden)
    attention = (layers + 1) * W * heads * T * T + 3 * W * T * T
    record = logits + attention + (A + 1) * V
    recorded = len(config.snapshots) * (2 + V * d + (1 + layers) * A * d + layers * A * A) + V * d
    data = tokens + (W + config.validation_windows) * (T + 1)
    working = step + _LM_RECORD_SHARE * record
    return int(4 * ((1 + copies) * params + working + recorded + data))


#: Share of a GPT snapshot's forward pass that adds to the step's buffers (fitted to XLA on 8
#: shapes: 0.5-0.7; the two live in different loops of the program and share little).
_LM_RECORD_SHARE = 0.65


def lm_bytes(
    config, vocab_size: int, lanes: int = 2, *, tokens: int = 0, concurrent: int | None = None
) -> int:
    """Peak bytes of ``lm_text.train_and_measure(corpus, config, gammas=<lanes values>)``.

    ``concurrent`` lanes (default `lanes_in_flight`) each hold `lm_lane_bytes`; every lane holds
    its own copy of the training stream (``tokens``, broadcast over lanes) and its trajectory
    twice; then `lm.lm_metrics` holds the cosine matrices ``[lanes, S, A, A]`` (four kinds,
    float64) and fits the prefix probe on ``[A, K, K]`` per snapshot and restart.
    """
    in_flight = min(lanes, concurrent or lanes_in_flight(lanes))
    lane = lm_lane_bytes(config, vocab_size, tokens=tokens)
    A, K = min(config.tracked, vocab_size), min(config.probe_vocabulary, vocab_size)
    S = len(config.snapshots)
    d = config.d
    trajectory = 4 * (S * (2 + vocab_size * d + (1 + config.n_layers) * A * d) + vocab_size * d)
    metrics = 8 * lanes * S * (4 * A * A + 4 * 4 * A * K) + 8 * 2 * A * K * K
    return int(in_flight * lane + lanes * (4 * tokens + _HELD_COPIES * trajectory) + metrics)


# --------------------------------------------------------------------------------------------
# the theory (comparison.theory_vs_training)
#
# The size of a theory run is fixed here, below the run itself: `comparison` reads these caps
# (and checks its estimate with `check`) and budget never imports `comparison`; the theories
# estimate their own solves (`theory.Theory.nbytes`).

#: The automatic horizon of a theory run may not exceed this many GD steps.
THEORY_MAX_STEPS = 50_000
#: Snapshots beyond this many are placed geometrically (dense early, where escapes differ most).
THEORY_MAX_SNAPSHOTS = 400


def theory_signature_order(ds, model: str, max_orders, prediction: str) -> int:
    """The highest signature order the theory's flows contract
    (`theory.ModelTheory.signature_order`): 0 for attention; for the FFN ``L - 1`` with
    ``prediction="linear"`` (the linear readout sees every order), else the largest of
    ``max_orders``."""
    from ctx_staircase import theories

    return theories.model(model).signature_order(ds.L, tuple(max_orders), prediction)


class _GDConfig(NamedTuple):
    """The fields of `train.TrainConfig` the estimators read: full-batch GD with weights."""

    snapshots: Sequence[int]
    optimizer: str = "gd"
    batch_size: int | None = None
    record_weights: bool = True


def theory_snapshots(steps: int | None, snapshot_every: int | None) -> int:
    """How many snapshots `comparison.theory_vs_training` records (an upper bound when ``steps``
    is None: the horizon then comes from the predicted escape, at most `THEORY_MAX_STEPS`)."""
    if steps is None:
        if snapshot_every is None:
            return THEORY_MAX_SNAPSHOTS + 2
        steps = THEORY_MAX_STEPS
    if snapshot_every is not None or steps // 10 <= THEORY_MAX_SNAPSHOTS:
        return steps // (snapshot_every or 10) + 2
    return THEORY_MAX_SNAPSHOTS + 2


def theory_bytes(ds, **settings) -> int:
    """Peak bytes of ``comparison.theory_vs_training(ds, **settings)`` (float64 throughout):
    the largest of its stages (`theory_stages`, which takes the same settings)."""
    return max(theory_stages(ds, **settings).values())


def theory_stages(
    ds,
    *,
    model: str = "ffn",
    d: int = 128,
    gammas: Sequence[float] | None = None,
    max_orders: Sequence[int] = (0, 1),
    steps: int | None = None,
    snapshot_every: int | None = None,
    prediction: str = "linear",
    activation: str = "poly:1,0.5",
    theories: Sequence[str] | None = None,
    concurrent: int | None = None,
    **_other_settings,
) -> dict[str, int]:
    """Peak bytes of each stage of `comparison.theory_vs_training`, in the order they run;
    settings that do not change memory (lr, threshold, seed...) are ignored.

    All stages hold the drive matrix, its SVD and the count second moment (``[V, V]`` each)
    and the data. Then:

    - ``escape`` (a model whose theory predicts it in pieces, `theory.ModelTheory.escape_bytes`;
      FFN: the closed form's escape on its time grid);
    - ``training``: `train_bytes` of the G gamma lanes (full-batch GD, float64, T snapshots);
    - ``theories``: the training trajectories and the theories of the run
      (`theories.selected`: those ``theories`` names, or all), solved one after another:
      each solve's peak (`theory.Theory.nbytes`) over the trajectories of those before it;
    - ``compare``: every trajectory (training and each theory's) and the comparison's
      temporaries (`theory.ModelTheory.compare_bytes`).
    """
    from ctx_staircase import theories as registry
    from ctx_staircase.theory import Setting, Size

    theory_model = registry.model(model)
    gammas = theory_model.default_gammas if gammas is None else gammas
    G, T = len(gammas), theory_snapshots(steps, snapshot_every)
    n, L, V = ds.n, ds.L, ds.vocab_size
    size = Size(
        G, T, n, L, V, d, *_axis_sizes(ds), tuple(max_orders), prediction,
        in_flight=concurrent or lanes_in_flight(G),
    )  # fmt: skip
    setting = Setting(
        theory_model, np.asarray(gammas), size.max_orders, prediction, activation, (), theories
    )
    solves = [theory.nbytes(size) for theory in registry.selected(setting)]
    base = 8 * (5 * V * V + n * (L + 2))
    config = _GDConfig(snapshots=range(T))  # a TrainConfig would list and sort T steps
    kwargs = theory_model.trained_kwargs(d, activation)
    training = train_bytes(model, ds, config, lanes=G, concurrent=concurrent, **kwargs)
    held = base + size.trajectory_bytes  # training's trajectories
    stages = {
        "training": base + training,
        "theories": held
        + max((k * size.trajectory_bytes + b for k, b in enumerate(solves)), default=0),
        "compare": held + len(solves) * size.trajectory_bytes + theory_model.compare_bytes(size),
    }
    if theory_model.escape_bytes is not None:
        stages = {"escape": base + theory_model.escape_bytes(size), **stages}
    return {name: int(value) for name, value in stages.items()}


__all__ = [
    "DEFAULT_FRACTION",
    "ENV_VAR",
    "THEORY_MAX_SNAPSHOTS",
    "THEORY_MAX_STEPS",
    "Limit",
    "available_bytes",
    "check",
    "check_signature_shapes",
    "dataset_bytes",
    "dataset_samples",
    "format_bytes",
    "lanes_in_flight",
    "limit_bytes",
    "lm_bytes",
    "lm_lane_bytes",
    "memory_limit",
    "model_parameters",
    "parse_size",
    "signature_bytes",
    "signature_shapes",
    "theory_bytes",
    "theory_signature_order",
    "theory_snapshots",
    "theory_stages",
    "train_bytes",
    "train_lane_bytes",
    "xla_bytes",
]
