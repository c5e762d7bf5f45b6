"""The controlled tasks of the Context Staircase paper and its predecessors (paper App. A; [RB]).

Every task is a pure builder registered under a public name: ``tasks.make("add", N=40)`` builds a
``TokenDataset``; `names` lists the tasks, `describe` gives a task's parameters with their defaults
(``{"N": 20, "vocab_size": None}``) and `summary` its one line of documentation. Conventions:

- **One vocabulary** for inputs and labels (the paper §3.1 takes ``y`` in the token vocabulary), of
  minimal size ``1 + max(max token id, max label id, max id of a declared token group)``. The
  declared groups are exactly the token ranges the task uses, so the vocabulary depends on the
  parameters only, never on which ids a random draw happens to hit.
- **The label vocabulary is an axis** ([GAP], theory/regimes.md R2): ``vocab_size`` (default
  ``None``, the minimal size); a larger value appends ids that are never inputs or labels, over
  which the softmax still ranges (the common order-0 drive of theory/closed_form.md C1).
- Tokens and labels are int32; ``groups`` hold sorted token-id arrays: ``"numbers"`` the arithmetic
  operand tokens, ``"labels"`` the label ids that occur, other groups named per task.
- Random tasks are deterministic functions of their ``seed`` (``np.random.default_rng(seed)``);
  complete enumerations take no seed. ``ds.params`` records every parameter, defaults filled in.
- Bad input raises ``ValueError`` (bad value) or ``TypeError`` (bad type) naming the parameter,
  the value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np

from ctx_staircase.dataset import TokenDataset
from ctx_staircase.internal import check_choice, check_int, check_real

__all__ = [
    "LAWS",
    "describe",
    "label_law_distribution",
    "make",
    "names",
    "random_dataset",
    "sample_count",
    "sequence_length",
    "summary",
]

#: Largest number of samples (or memory-table entries) a task may build.
_MAX_SAMPLES = 50_000_000

LAWS = ("uniform", "normal", "poisson", "exponential")


# ------------------------------------------------------------------------------------------------
# Validation helpers


def _seed(value: Any) -> np.random.Generator:
    return np.random.default_rng(check_int(value, "seed", 0))


def _token_range(low_name: str, low: Any, high_name: str, high: Any, min_low: int = 0) -> range:
    """The token ids ``low..high`` (inclusive), validated."""
    low = check_int(low, low_name, min_low)
    high = check_int(high, high_name, low)
    return range(low, high + 1)


def _check_size(name: str, value: Any, count: int) -> None:
    """Refuse a parameter choice that would build more than ``_MAX_SAMPLES`` rows."""
    if count > _MAX_SAMPLES:
        raise ValueError(
            f"{name}={value!r} would build {count:,} samples; at most {_MAX_SAMPLES:,} are allowed"
        )


def _grid(*axes: np.ndarray) -> np.ndarray:
    """All combinations of ``axes`` as int32 rows ``[prod(len), len(axes)]``, first axis major."""
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1).astype(np.int32)


# ------------------------------------------------------------------------------------------------
# Registry


class _Parts(NamedTuple):
    """What a builder returns; :func:`make` assembles the TokenDataset."""

    tokens: np.ndarray
    labels: np.ndarray
    groups: dict[str, np.ndarray]
    weights: np.ndarray | None = None
    sample_groups: dict[str, np.ndarray] | None = None
    max_id: int = 0  # a declared id the vocabulary must cover even if no sample draws it


class _Task(NamedTuple):
    builder: Callable[..., _Parts]
    defaults: dict[str, Any]
    summary: str
    samples: Callable[[dict[str, Any]], int]
    length: Callable[[dict[str, Any]], int]


_REGISTRY: dict[str, _Task] = {}


def _register(
    name: str,
    summary: str,
    *,
    samples: Callable[[dict[str, Any]], int],
    length: Callable[[dict[str, Any]], int],
    **defaults: Any,
) -> Callable:
    """Register a task: its builder, one-line summary, parameter defaults, and as functions of
    its full parameters ``samples``, the sample count ``n``, and ``length``, the sequence length
    ``L`` (what the memory estimate reads before the task is built)."""

    def decorate(builder: Callable[..., _Parts]) -> Callable[..., _Parts]:
        _REGISTRY[name] = _Task(builder, defaults, summary, samples, length)
        return builder

    return decorate


def _all_pairs(params: dict[str, Any]) -> int:
    return params["N"] ** 2


def _two(params: dict[str, Any]) -> int:
    return 2


def _three(params: dict[str, Any]) -> int:
    return 3


def _param_L(params: dict[str, Any]) -> int:
    return params["L"]


def _task(name: Any) -> _Task:
    check_choice(name, "name", names())
    return _REGISTRY[name]


def names() -> list[str]:
    """Every registered task name, in registration order."""
    return list(_REGISTRY)


def describe(name: str) -> dict[str, Any]:
    """The parameters of task ``name`` with their defaults (a fresh dict).

    Every task also takes ``vocab_size`` (default ``None``: the minimal vocabulary).
    """
    return {**_task(name).defaults, "vocab_size": None}


def sample_count(name: str, params: dict[str, Any]) -> int | None:
    """The samples ``n`` that ``make(name, **params)`` would build, without building them;
    ``None`` for parameters that are not plain numbers (then `make` validates them)."""
    try:
        return int(_task(name).samples({**describe(name), **params}))
    except (TypeError, ValueError, KeyError, OverflowError):
        return None


def sequence_length(name: str, params: dict[str, Any]) -> int | None:
    """The sequence length ``L`` of ``make(name, **params)``, without building it; ``None`` for
    parameters that are not plain numbers (then `make` validates them)."""
    try:
        return int(_task(name).length({**describe(name), **params}))
    except (TypeError, ValueError, KeyError, OverflowError):
        return None


def summary(name: str) -> str:
    """One line describing task ``name``, with its section or figure of the paper."""
    return _task(name).summary


def make(name: str, **params: Any) -> TokenDataset:
    """Build task ``name`` with ``params`` (defaults from :func:`describe` fill in the rest).

    Raises ``ValueError`` for an unknown task or parameter and for an out-of-range value, and
    ``TypeError`` for a value of the wrong type; the message names the parameter.
    """
    task = _task(name)
    allowed = {**task.defaults, "vocab_size": None}
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {unknown} for task {name!r}; "
            f"allowed parameters are {sorted(allowed)}"
        )
    requested = params.pop("vocab_size", None)
    if requested is not None:
        requested = check_int(requested, "vocab_size", 1)
    full = {**task.defaults, **params}
    parts = task.builder(**full)
    labels = parts.labels.astype(np.int32, copy=False)
    groups = dict(parts.groups)
    groups["labels"] = np.flatnonzero(np.bincount(labels)).astype(np.int32)
    max_id = max(
        int(parts.tokens.max()),
        int(labels.max()),
        parts.max_id,
        *(int(ids.max()) for ids in groups.values() if ids.size),
    )
    if requested is not None and requested <= max_id:
        raise ValueError(
            f"vocab_size must be at least {max_id + 1} for task {name!r} with these parameters "
            f"(its largest token or label id is {max_id}); got {requested}"
        )
    record = {key: _record(value, task.defaults[key]) for key, value in full.items()}
    record["vocab_size"] = requested
    return TokenDataset(
        tokens=parts.tokens,
        labels=labels,
        vocab_size=max_id + 1 if requested is None else requested,
        groups=groups,
        weights=parts.weights,
        sample_groups=parts.sample_groups or {},
        name=name,
        params=record,
    )


def _record(value: Any, default: Any) -> Any:
    """A plain-Python copy of a validated parameter value, for ``ds.params``."""
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return tuple(_record(v, None) for v in value)
    return value


def random_dataset(n: int, L: int, vocab_size: int, seed: int = 0) -> TokenDataset:
    """Uniformly random tokens ``[n, L]`` and labels ``[n]`` in ``[0, vocab_size)``.

    A brute-force fixture for other modules' tests (no structure, uniform weights).
    """
    n = check_int(n, "n", 1)
    L = check_int(L, "L", 1)
    vocab_size = check_int(vocab_size, "vocab_size", 1)
    _check_size("n", n, n)
    rng = _seed(seed)
    tokens = rng.integers(0, vocab_size, size=(n, L), dtype=np.int32)
    labels = rng.integers(0, vocab_size, size=n, dtype=np.int32)
    return TokenDataset(
        tokens=tokens,
        labels=labels,
        vocab_size=vocab_size,
        name="random",
        params={"n": n, "L": L, "vocab_size": vocab_size, "seed": seed},
    )


# ------------------------------------------------------------------------------------------------
# Task 1: prescribed label law


def label_law_distribution(
    law: str,
    x_max: int = 50,
    *,
    mu: float = 25.0,
    sigma: float = 1.0,
    lam: float = 10.0,
    rate: float = 5.0,
) -> np.ndarray:
    """The exact label law ``p_a`` of Task 1 on ``X = {0..x_max}``: float64 ``[x_max + 1]``.

    Paper App. A, Fig. 2A. Laws:

    - ``"uniform"``: ``1 / (x_max + 1)``.
    - ``"normal"``: discretized normal [GAP: the source does not say how]: the
      ``N(mu, sigma^2)`` density evaluated at the integers of ``X``, renormalized to sum to 1.
    - ``"poisson"``: ``Poisson(lam)`` truncated to ``X`` and renormalized.
    - ``"exponential"``: ``p(y) ∝ exp(-rate * y)`` on ``X``.

    Only the parameters of ``law`` are used, but all are validated. Computed in log space, so
    extreme parameters underflow to exact zeros instead of NaN.
    """
    law = check_choice(law, "law", LAWS)
    x_max = check_int(x_max, "x_max", 1)
    mu = check_real(mu, "mu")
    sigma = check_real(sigma, "sigma", low=0, low_open=True)
    lam = check_real(lam, "lam", low=0, low_open=True)
    rate = check_real(rate, "rate", low=0, low_open=True)
    y = np.arange(x_max + 1, dtype=np.float64)
    if law == "uniform":
        log_p = np.zeros_like(y)
    elif law == "normal":
        log_p = -0.5 * ((y - mu) / sigma) ** 2
    elif law == "poisson":
        log_factorial = np.concatenate([[0.0], np.cumsum(np.log(y[1:]))])
        log_p = y * math.log(lam) - log_factorial
    else:
        log_p = -rate * y
    p = np.exp(log_p - log_p.max())
    return p / p.sum()


@_register(
    "label_law",
    "Task 1 (paper Fig. 2A): (anchor, x1, x2), x_i in {0..x_max}; y ~ p_a, a prescribed law",
    samples=lambda p: (p["x_max"] + 1) ** (3 if p["labels"] == "expected" else 2),
    length=_three,
    law="uniform",
    anchor=100,
    x_max=50,
    mu=25.0,
    sigma=1.0,
    lam=10.0,
    rate=5.0,
    labels="sampled",
    seed=0,
)
def _label_law(
    *,
    law: str,
    anchor: int,
    x_max: int,
    mu: float,
    sigma: float,
    lam: float,
    rate: float,
    labels: str,
    seed: int,
) -> _Parts:
    """Task 1 (paper Fig. 2A): inputs ``(a, x1, x2)`` over all ``(x_max + 1)^2`` pairs, x1 major.

    The anchor ``a`` sits at position 0 and must lie outside ``X`` (``anchor > x_max``). The label
    vocabulary is ``X`` and the law is :func:`label_law_distribution`.

    - ``labels="sampled"`` (the paper's protocol): one label per input drawn iid from ``p_a`` with
      ``seed``, then fixed.
    - ``labels="expected"`` [GAP/R: the population version]: each input is repeated once per label
      ``nu`` in the support of ``p_a`` (input major, ``nu`` minor) with sample weight
      ``p_a(nu) / (x_max + 1)^2``, so the zeroth-order signature of the anchor equals ``p_a``
      exactly. ``seed`` is then unused.
    """
    p = label_law_distribution(law, x_max, mu=mu, sigma=sigma, lam=lam, rate=rate)
    labels = check_choice(labels, "labels", ("sampled", "expected"))
    anchor = check_int(anchor, "anchor", x_max + 1)
    rng = _seed(seed)
    numbers = np.arange(x_max + 1)
    pairs = _grid(numbers, numbers)
    n_inputs = pairs.shape[0]
    weights = None
    if labels == "sampled":
        y = rng.choice(x_max + 1, size=n_inputs, p=p).astype(np.int32)
    else:
        support = np.flatnonzero(p > 0)
        _check_size("labels", labels, n_inputs * support.size)
        pairs = np.repeat(pairs, support.size, axis=0)
        y = np.tile(support, n_inputs).astype(np.int32)
        weights = np.tile(p[support], n_inputs) / n_inputs
    tokens = np.concatenate([np.full((pairs.shape[0], 1), anchor, np.int32), pairs], axis=1)
    return _Parts(tokens, y, {"anchors": np.array([anchor]), "numbers": numbers}, weights)


# ------------------------------------------------------------------------------------------------
# Task 2 (arithmetic), Fig. 5 (modsum), Fig. 9 (modulus)


def _pairs(N: int) -> np.ndarray:
    """All ``(x1, x2)`` in ``{1..N}^2``, x1 major; ``N`` validated (``>= 2``, ``N^2`` capped)."""
    N = check_int(N, "N", 2)
    _check_size("N", N, N * N)
    numbers = np.arange(1, N + 1)
    return _grid(numbers, numbers)


def _labelled_pairs(pairs: np.ndarray, labels: np.ndarray) -> _Parts:
    return _Parts(pairs, labels, {"numbers": np.unique(pairs)})


def _arithmetic(label: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., _Parts]:
    """The builder of a Task 2 operation (paper App. A): all ``N^2`` pairs ``(x1, x2)``, x1
    major, labelled ``y = label(x1, x2)``; the numbers ``1..N`` are the group ``"numbers"``."""

    def build(*, N: int) -> _Parts:
        pairs = _pairs(N)
        return _labelled_pairs(pairs, label(pairs[:, 0], pairs[:, 1]))

    return build


for _name, _figures, _formula, _label in (  # closed forms of add: theory/signatures.md §2
    ("add", "Figs. 2-4", "x1 + x2", np.add),
    ("sub", "Fig. 2", "|x1 - x2|", lambda x1, x2: np.abs(x1 - x2)),
    ("mul", "Fig. 2", "x1 * x2", np.multiply),  # the vocabulary reaches N^2
):
    _register(
        _name,
        f"Task 2 (paper App. A, {_figures}): all (x1, x2) in {{1..N}}^2, y = {_formula}",
        samples=_all_pairs,
        length=_two,
        N=20,
    )(_arithmetic(_label))


@_register(
    "mod",
    "Task 2 (paper App. A, Figs. 3, 4, 8): all (x1, x2) in {1..N}^2, y = (x1 + x2 + 1) mod N",
    samples=_all_pairs,
    length=_two,
    N=40,
    convention="main",
)
def _mod(*, N: int, convention: str) -> _Parts:
    """F_mod (paper App. A; closed forms: theory/signatures.md §2), all ``N^2`` pairs, x1 major.

    [GAP] the paper defines ``F_mod`` inconsistently: ``convention="main"`` is the main text's
    ``(x1 + x2 + 1) mod N`` (labels ``0..N-1``); ``"appendix"`` is App. A.1.7's
    ``1 + ((x1 + x2) mod N)`` (labels ``1..N``). Default ``N = 40`` (Figs. 3, 4 and 8 use it;
    Fig. 6's attention run uses ``N = 20``).
    """
    pairs = _pairs(N)
    convention = check_choice(convention, "convention", ("main", "appendix"))
    total = pairs[:, 0] + pairs[:, 1]
    labels = (total + 1) % N if convention == "main" else 1 + total % N
    return _labelled_pairs(pairs, labels)


@_register(
    "modsum",
    "Fig. 5 (paper §4.7, App. A.1.7): all (x_1..x_L) in {1..N}^L, y = 1 + (sum_i x_i mod N)",
    samples=lambda p: p["N"] ** p["L"],
    length=_param_L,
    N=50,
    L=4,
)
def _modsum(*, N: int, L: int) -> _Parts:
    """Length-``L`` modular sum (paper App. A.1.7, the activation-order sweep of Fig. 5).

    All ``N^L`` sequences in lexicographic order (position 0 most significant), labels
    ``1 + (sum mod N)`` in ``1..N`` (App. A.1.7's convention). Built column by column with
    ``repeat``/``tile`` in int32, so the default ``N = 50, L = 4`` (6.25M rows) needs only the
    output arrays. ``N^L`` is capped at ``_MAX_SAMPLES``.
    """
    N = check_int(N, "N", 2)
    L = check_int(L, "L", 1)
    if L * math.log(N) > math.log(_MAX_SAMPLES) + 1e-9 or N**L > _MAX_SAMPLES:
        raise ValueError(
            f"N={N}, L={L} would build N^L = {N}^{L} samples; at most {_MAX_SAMPLES:,} are "
            "allowed (lower N or L)"
        )
    n = N**L
    digits = np.arange(1, N + 1, dtype=np.int32)
    tokens = np.empty((n, L), dtype=np.int32)
    total = np.zeros(n, dtype=np.int32)
    for position in range(L):
        column = np.tile(np.repeat(digits, N ** (L - 1 - position)), N**position)
        tokens[:, position] = column
        total += column
    total %= N
    total += 1
    return _Parts(tokens, total, {"numbers": digits})


@_register(
    "modulus",
    "Fig. 9 (paper §7.1): all (x1, x2) in {1..N}^2, y = (x1 + x2) mod M",
    samples=_all_pairs,
    length=_two,
    N=20,
    M=4,
)
def _modulus(*, N: int, M: int) -> _Parts:
    """Modulus sweep (paper §7.1, Fig. 9): ``y = (x1 + x2) mod M``, all ``N^2`` pairs.

    [GAP] The paper does not list the ``M`` it tested (slow runs at ``M = 4, 5, 10, 20``); any
    ``M >= 2`` is allowed and the default is ``M = 4``.
    """
    pairs = _pairs(N)
    M = check_int(M, "M", 2)
    return _labelled_pairs(pairs, (pairs[:, 0] + pairs[:, 1]) % M)


# ------------------------------------------------------------------------------------------------
# Task 3: anchor–noise parity


@_register(
    "anchor_parity",
    "Task 3 (paper App. A, Fig. 6I-L): one anchor among L-1 noise tokens; y = parity of the anchor",
    samples=lambda p: p["n"],
    length=_param_L,
    L=8,
    n=10000,
    anchor_low=11,
    anchor_high=20,
    noise_low=21,
    noise_high=60,
    seed=0,
)
def _anchor_parity(
    *,
    L: int,
    n: int,
    anchor_low: int,
    anchor_high: int,
    noise_low: int,
    noise_high: int,
    seed: int,
) -> _Parts:
    """Task 3 (paper Fig. 6I-L): ``n`` sequences of length ``L``, generated once from ``seed``.

    Each row has one anchor, uniform on ``{anchor_low..anchor_high}``, at a uniform position in
    ``[L]``; every other position is iid uniform on ``{noise_low..noise_high}`` (with replacement).
    ``y = 0`` if the anchor is even, else ``1``. The two ranges must be disjoint. Draw order (part
    of the determinism contract): noise ``[n, L]``, then anchors ``[n]``, then positions ``[n]``.
    """
    L = check_int(L, "L", 1)
    n = check_int(n, "n", 1)
    _check_size("n", n, n)
    anchors = _token_range("anchor_low", anchor_low, "anchor_high", anchor_high)
    noise = _token_range("noise_low", noise_low, "noise_high", noise_high)
    if anchors.start <= noise.stop - 1 and noise.start <= anchors.stop - 1:
        raise ValueError(
            f"the anchor range [{anchors.start}, {anchors.stop - 1}] (anchor_low, anchor_high) "
            f"and the noise range [{noise.start}, {noise.stop - 1}] (noise_low, noise_high) "
            "must be disjoint"
        )
    rng = _seed(seed)
    tokens = rng.integers(noise.start, noise.stop, size=(n, L), dtype=np.int32)
    anchor = rng.integers(anchors.start, anchors.stop, size=n, dtype=np.int32)
    position = rng.integers(0, L, size=n)
    tokens[np.arange(n), position] = anchor
    groups = {"anchors": np.array(anchors), "noise": np.array(noise)}
    return _Parts(tokens, anchor % 2, groups)


# ------------------------------------------------------------------------------------------------
# Task 4 (App. C) and min–max selection (§7.2)


@_register(
    "task4",
    "Task 4 (paper App. C): all (a1, a2, x), y = (v(a1) + v(a2) + x) mod n_x",
    samples=lambda p: p["n_x"] * p["n_a"] ** 2,
    length=_three,
    n_x=20,
    n_a=10,
)
def _task4(*, n_x: int, n_a: int) -> _Parts:
    """Task 4 (paper App. C, Figs. 12-13): all ``n_a^2 * n_x`` inputs ``(a1, a2, x)``.

    [GAP] The paper gives neither the sizes nor the token ids. Choice: ``X = {0..n_x-1}`` (so the
    labels, residues ``0..n_x-1``, are the X tokens' own ids), anchors ``A = {n_x..n_x+n_a-1}``
    with numeric value ``v(a) = a - n_x + 1`` in ``{1..n_a}``; defaults ``n_x = 20, n_a = 10``.
    Order: a1 major, then a2, then x.
    """
    n_x = check_int(n_x, "n_x", 2)
    n_a = check_int(n_a, "n_a", 1)
    _check_size("n_a", n_a, n_a * n_a * n_x)
    numbers = np.arange(n_x)
    anchors = np.arange(n_x, n_x + n_a)
    tokens = _grid(anchors, anchors, numbers)
    value = tokens[:, :2] - (n_x - 1)
    labels = (value[:, 0] + value[:, 1] + tokens[:, 2]) % n_x
    return _Parts(tokens, labels, {"anchors": anchors, "numbers": numbers})


@_register(
    "minmax",
    "Min-max selection (paper §7.2, Fig. 10): (c, x1, x2); y = max if c = a else min",
    samples=lambda p: 2 * p["N"] ** 2,
    length=_three,
    N=20,
)
def _minmax(*, N: int) -> _Parts:
    """Min-max selection (paper §7.2, Fig. 10): all ``2 N^2`` inputs ``(c, x1, x2)``.

    Numbers are ``1..N``; the control tokens are ``a = N + 1`` (label ``max(x1, x2)``) and
    ``b = N + 2`` (label ``min(x1, x2)``). [GAP] The paper gives no data protocol; the complete
    enumeration (c major, then x1, then x2) makes ``c`` and ``x_i`` uniform as the text assumes.
    """
    N = check_int(N, "N", 2)
    _check_size("N", N, 2 * N * N)
    controls = np.array([N + 1, N + 2])
    numbers = np.arange(1, N + 1)
    tokens = _grid(controls, numbers, numbers)
    x = tokens[:, 1:]
    labels = np.where(tokens[:, 0] == N + 1, x.max(axis=1), x.min(axis=1))
    return _Parts(tokens, labels, {"numbers": numbers, "controls": controls})


# ------------------------------------------------------------------------------------------------
# [RB] reasoning vs memory anchors (Yao–Zhang–Xu, arXiv 2502.04375)

_MEMORY_ANCHORS = np.arange(1, 11)
_REASONING_ANCHORS = np.arange(11, 21)
_RANGE_LOW = 30


@_register(
    "rb_anchor",
    "[RB] (arXiv 2502.04375, Fig. 3): key z_p then q anchors among noise keys; reasoning"
    " y = z_p + sum(anchors), memory y = a fixed random label",
    samples=lambda p: p["n"],
    length=_param_L,
    L=9,
    q=2,
    n=200000,
    key_low=21,
    key_high=120,
    memory_labels="uniform",
    heldout=((11, 13), (13, 11)),
    seed=0,
)
def _rb_anchor(
    *,
    L: int,
    q: int,
    n: int,
    key_low: int,
    key_high: int,
    memory_labels: str,
    heldout: Any,
    seed: int,
) -> _Parts:
    """[RB] anchor-function composite task (arXiv 2502.04375, Fig. 3 and Fig. 8 there).

    A row is ``[z_1 .. z_p, a_{p+1} .. a_{p+q}, z_{p+q+1} .. z_L]``: keys iid uniform on
    ``Z = {key_low..key_high}``, the key ``z_p`` at a uniform (1-based) position
    ``p in {1..L-q}`` immediately before ``q`` anchors, all reasoning (``A_rsn = {11..20}``) or
    all memory (``A_mem = {1..10}``), never mixed: ``2 * 10^q`` tuples. Reasoning:
    ``y = z_p + sum(anchors)``. Memory: one label per ``(z_p, tuple)``, drawn once;
    ``memory_labels`` ``"uniform"`` (F_mem,1: uniform on ``Z``), ``"local"`` (F_mem,2: uniform on
    ``[z_p - sum a, z_p + sum a]``) or ``"ranges"`` (four memory groups, group ``i`` uniform on
    ``{30..29+20i}``). ``sample_groups``: ``"rsn_train"``, ``"rsn_test"`` (the ``heldout``
    tuples, weight 0: outside the training distribution, kept for evaluation), ``"mem"``, and for
    ``"ranges"`` also ``"mem_group1".."mem_group4"``. Training rows have equal weights summing to 1.

    [GAP] choices: balance, ``n // (2 * 10^q)`` rows per tuple, so the dataset has
    ``(n // (2 * 10^q)) * 2 * 10^q`` rows (exactly ``n`` for the default), shuffled once. The
    ``"ranges"`` groups: memory tuples in lexicographic order (first anchor most significant),
    rank ``r`` in ``[0, 10^q)`` in group ``1 + floor(4 r / 10^q)`` (``q = 2``: ranks 0-24,
    25-49, 50-74, 75-99). Keys lie above the anchors (``key_low >= 21``); ``"local"`` also needs
    ``key_low >= 10 q`` so no label is negative. The vocabulary covers every label the task can
    produce (the reasoning maximum ``key_high + 20 q``, the ``"ranges"`` maximum 109), whether or
    not the draw hits it. Draw order (part of the determinism contract): memory label table
    ``[|Z|, 10^q]``, keys ``[n, L]``, key positions ``[n]``, row permutation.
    """
    L, q, n, keys, memory_labels, heldout_ranks = _rb_anchor_checked(
        L, q, n, key_low, key_high, memory_labels, heldout
    )
    rng = _seed(seed)
    table = _memory_label_table(rng, memory_labels, keys, q)
    tokens, is_memory, rank, key = _anchor_rows(rng, n, L, q, keys)
    labels = np.where(
        is_memory,
        table[key - keys.start, rank],
        key + _tuples(_REASONING_ANCHORS, q)[rank].sum(axis=1),
    )
    test = ~is_memory & np.isin(rank, heldout_ranks)
    weights = np.where(test, 0.0, 1.0)
    groups = {
        "keys": np.array(keys),
        "anchors_mem": _MEMORY_ANCHORS,
        "anchors_rsn": _REASONING_ANCHORS,
    }
    sample_groups = _anchor_sample_groups(is_memory, test, rank, q, memory_labels == "ranges")
    max_label = max(keys.stop - 1 + q * int(_REASONING_ANCHORS[-1]), _RANGE_LOW + 79)
    return _Parts(tokens, labels, groups, weights / weights.sum(), sample_groups, max_id=max_label)


def _rb_anchor_checked(L, q, n, key_low, key_high, memory_labels, heldout):
    """`_rb_anchor`'s parameters checked (the error names the parameter): ``(L, q, n, the key
    range, memory_labels, the ranks of the held-out reasoning tuples)``."""
    L = check_int(L, "L", 2)
    q = check_int(q, "q", 1, L - 1)
    n_tuples = 10**q
    n = check_int(n, "n", 2 * n_tuples)
    _check_size("n", n, n)
    keys = _token_range("key_low", key_low, "key_high", key_high, min_low=21)
    _check_size("q", q, len(keys) * n_tuples)
    memory_labels = check_choice(memory_labels, "memory_labels", ("uniform", "local", "ranges"))
    if memory_labels == "local" and keys.start < 10 * q:
        raise ValueError(
            f'key_low must be >= 10 q = {10 * q} with memory_labels="local" (labels '
            f"z_p - sum(anchors) must be >= 0); got {keys.start}"
        )
    return L, q, n, keys, memory_labels, _heldout_ranks(heldout, q)


def _anchor_sample_groups(is_memory, test, rank, q: int, ranges: bool) -> dict[str, np.ndarray]:
    """Row indices of ``rsn_train``, ``rsn_test``, ``mem`` and, for ``ranges``, the four
    ``mem_group``s."""
    groups = {
        "rsn_train": np.flatnonzero(~is_memory & ~test),
        "rsn_test": np.flatnonzero(test),
        "mem": np.flatnonzero(is_memory),
    }
    if ranges:
        group = _memory_range_group(q)[rank]
        for g in range(1, 5):
            groups[f"mem_group{g}"] = np.flatnonzero(is_memory & (group == g))
    return groups


def _memory_range_group(q: int) -> np.ndarray:
    """The ``"ranges"`` group ``1..4`` of each memory tuple, by lexicographic rank: ``[10^q]``."""
    return 1 + (4 * np.arange(10**q)) // 10**q


def _memory_label_table(rng: np.random.Generator, memory_labels: str, keys: range, q: int):
    """The memory labels, drawn once: ``[|Z|, 10^q]``, one per (key, memory tuple) (the draws
    of `_rb_anchor`'s docstring for each ``memory_labels``)."""
    n_tuples = 10**q
    if memory_labels == "uniform":
        return rng.integers(keys.start, keys.stop, size=(len(keys), n_tuples))
    if memory_labels == "local":
        key_values = np.array(keys)[:, None]
        spread = _tuples(_MEMORY_ANCHORS, q).sum(axis=1)[None, :]
        return rng.integers(key_values - spread, key_values + spread + 1)
    high = np.broadcast_to(_RANGE_LOW + 20 * _memory_range_group(q), (len(keys), n_tuples))
    return rng.integers(_RANGE_LOW, high)


def _anchor_rows(rng: np.random.Generator, n: int, L: int, q: int, keys: range):
    """The rows, ``n // (2 * 10^q)`` per anchor tuple, shuffled: tokens ``[n, L]`` (keys with
    the tuple's anchors right after the key ``z_p``), whether a row is a memory row, its tuple's
    lexicographic rank and its key ``z_p`` (each ``[n]``)."""
    n_tuples = 10**q
    per_combo = n // (2 * n_tuples)
    n = per_combo * 2 * n_tuples
    combo = np.repeat(np.arange(2 * n_tuples), per_combo)
    tokens = rng.integers(keys.start, keys.stop, size=(n, L), dtype=np.int32)
    key_pos = rng.integers(0, L - q, size=n)  # 0-based index of z_p
    order = rng.permutation(n)
    combo, tokens, key_pos = combo[order], tokens[order], key_pos[order]
    rows = np.arange(n)
    is_memory = combo >= n_tuples
    rank = combo % n_tuples
    anchors = np.where(
        is_memory[:, None],
        _tuples(_MEMORY_ANCHORS, q)[rank],
        _tuples(_REASONING_ANCHORS, q)[rank],
    )
    for i in range(q):
        tokens[rows, key_pos + 1 + i] = anchors[:, i]
    return tokens, is_memory, rank, tokens[rows, key_pos]


def _tuples(alphabet: np.ndarray, q: int) -> np.ndarray:
    """All ``q``-tuples over ``alphabet`` in lexicographic order: ``[len^q, q]``."""
    return _grid(*([alphabet] * q))


def _heldout_ranks(heldout: Any, q: int) -> np.ndarray:
    """Lexicographic ranks in ``A_rsn^q`` of the held-out reasoning tuples (validated)."""
    allowed = (
        f"a sequence of {q}-tuples of reasoning anchors in "
        f"[{_REASONING_ANCHORS[0]}, {_REASONING_ANCHORS[-1]}], e.g. ((11, 13), (13, 11)) for q=2"
    )
    if isinstance(heldout, np.ndarray):
        heldout = heldout.tolist()
    if isinstance(heldout, str | bytes | Mapping) or not isinstance(heldout, Sequence):
        raise TypeError(f"heldout must be {allowed}; got {heldout!r}")
    ranks = []
    for entry in heldout:
        if isinstance(entry, str | bytes) or not isinstance(entry, Sequence) or len(entry) != q:
            raise ValueError(f"heldout must be {allowed}; got entry {entry!r}")
        rank = 0
        for anchor in entry:
            if isinstance(anchor, bool) or not isinstance(anchor, int | np.integer):
                raise TypeError(f"heldout must be {allowed}; got entry {entry!r}")
            if not _REASONING_ANCHORS[0] <= anchor <= _REASONING_ANCHORS[-1]:
                raise ValueError(f"heldout must be {allowed}; got entry {entry!r}")
            rank = rank * 10 + int(anchor - _REASONING_ANCHORS[0])
        ranks.append(rank)
    if len(set(ranks)) == 10**q:
        raise ValueError(f"heldout must leave some reasoning tuples for training; got {heldout!r}")
    return np.array(ranks, dtype=np.int64)
