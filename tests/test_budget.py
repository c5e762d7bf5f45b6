"""Memory estimates (ctx_staircase.budget): the limit, the refusal line, the integer bounds, and
the calibration of every estimator against XLA's own buffer assignment (``memory_analysis``) or
NumPy's traced allocations, on configurations that differ in n, d, V and L."""

import math
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import (
    budget,
    closed_form,
    comparison,
    escape,
    geometry,
    internal,
    lm,
    metrics,
    signatures,
    sweep,
    tasks,
    text,
    train,
)
from ctx_staircase.experiments import lm_text, staircase
from ctx_staircase.sweep import Layout

GiB = 2**30
#: The machine the measured failures came from: requests are checked against 24 GiB.
LIMIT = budget.Limit(24 * GiB, "test: 24 GiB")
#: An estimate must lie within this factor of XLA's (or NumPy's) own number.
LOW, HIGH = 0.5, 2.0


# --------------------------------------------------------------------------------------------
# the limit and the refusal line


@pytest.mark.parametrize(
    ("text_", "expected"),
    [
        ("8GiB", 8 * GiB),
        ("8 gib", 8 * GiB),
        ("500MB", 500 * 10**6),
        ("500kB", 500 * 10**3),
        ("3 KiB", 3 * 2**10),
        ("2k", 2 * 2**10),
        ("1.5GB", 1_500_000_000),
        ("1TB", 10**12),
        ("4 MiB", 4 * 2**20),
        ("1.5G", int(1.5 * GiB)),
        ("2T", 2 * 2**40),
        ("123", 123),
        ("1e9", 10**9),
        (4096, 4096),
        (2.5e9, 2_500_000_000),
    ],
)
def test_parse_size_reads_units(text_, expected):
    assert budget.parse_size(text_) == expected


def test_parse_size_percent_is_a_share_of_available_memory():
    half = budget.parse_size("50%")
    assert half == pytest.approx(0.5 * budget.available_bytes(), rel=0.05)


@pytest.mark.parametrize(
    "bad", ["", "abc", "-1GB", "0", "0GiB", "nan", "inf", "8XB", "GB", "1e-3", True, -5, 0.0]
)
def test_parse_size_refuses_bad_sizes_naming_the_flag(bad):
    with pytest.raises(ValueError, match="--max-memory"):
        budget.parse_size(bad)
    with pytest.raises(ValueError, match=budget.ENV_VAR):
        budget.parse_size(bad, name=budget.ENV_VAR)


def test_limit_override_beats_environment_beats_default(monkeypatch):
    monkeypatch.delenv(budget.ENV_VAR, raising=False)
    default = budget.memory_limit()
    assert default.source == "80% of available memory"
    assert default.bytes == pytest.approx(
        budget.DEFAULT_FRACTION * budget.available_bytes(), rel=0.05
    )
    monkeypatch.setenv(budget.ENV_VAR, "3GiB")
    assert budget.memory_limit() == (3 * GiB, budget.ENV_VAR)
    assert budget.memory_limit("500MB") == (500 * 10**6, "--max-memory")
    assert budget.limit_bytes(1234) == 1234
    monkeypatch.setenv(budget.ENV_VAR, "lots")
    with pytest.raises(ValueError, match=budget.ENV_VAR):
        budget.memory_limit()


def test_available_bytes_is_positive():
    available = budget.available_bytes()
    assert available > 2**20


def test_check_refuses_in_one_line_naming_request_estimate_limit_and_knob():
    assert budget.check(10 * GiB, what="x", knob="y", limit=LIMIT) == 10 * GiB
    with pytest.raises(ValueError) as error:
        budget.check(
            int(81.4e9),
            what="train modsum N=70 L=4",
            knob="lower --param N, --d or the number of lanes",
            limit=budget.Limit(int(19.2e9), "80% of available memory"),
        )
    assert str(error.value) == (
        "train modsum N=70 L=4: needs about 81.4 GB (estimate), over the 19.2 GB limit (80% of "
        "available memory); lower --param N, --d or the number of lanes, or raise --max-memory"
    )
    with pytest.raises(ValueError, match=r"over the 1 GB limit \(--max-memory\)"):
        budget.check(2 * 10**9, what="x", knob="y", limit="1GB")


@pytest.mark.parametrize(
    ("size", "shown"),
    [(12, "12 B"), (1500, "1.5 kB"), (5e8, "500 MB"), (81.4e9, "81.4 GB"), (5.3e14, "530 TB")],
)
def test_format_bytes(size, shown):
    assert budget.format_bytes(size) == shown


def test_integer_bounds_are_the_code_s_own():
    """One definition of each bound (int32 step counters, uint32 seeds), used by the configs
    and the sweeps: the largest value passes, one more is refused, naming the parameter."""
    assert internal.INT32_MAX == np.iinfo(np.int32).max
    assert internal.SEED_MAX == np.iinfo(np.uint32).max
    assert train.TrainConfig(steps=internal.INT32_MAX, snapshots=(0,)).steps == internal.INT32_MAX
    for bad in (0, internal.INT32_MAX + 1, True, 1.0):
        with pytest.raises(ValueError, match=r"steps must be an int in \[1, 2147483647\]"):
            train.TrainConfig(steps=bad, snapshots=(0,))
    ds = tasks.make("add", N=3)
    config = train.TrainConfig(steps=2, snapshots=(0, 2))
    with pytest.raises(ValueError, match="seeds must be an int in \\[0, 4294967295\\]"):
        sweep.train_sweep("ffn", ds, config, gammas=[1.0], seeds=[internal.SEED_MAX + 1], d=4)


def test_lanes_in_flight_mirrors_the_sweep_layout():
    cores = sweep.default_concurrent_calls("cpu")
    # CPU, lane by lane: one lane per thread, `concurrent_calls` threads (default one per core)
    assert budget.lanes_in_flight(8, Layout(concurrent_calls=2), platform="cpu", devices=1) == 2
    assert budget.lanes_in_flight(8, platform="cpu", devices=4) == min(8, cores)
    assert budget.lanes_in_flight(1, Layout(concurrent_calls=2), platform="cpu", devices=1) == 1
    # vmapped lanes: a group of `lanes_per_batch` per call; an accelerator vmaps all at once
    assert budget.lanes_in_flight(8, Layout(None, 4, 1), platform="cpu", devices=1) == 4
    assert budget.lanes_in_flight(8, platform="gpu", devices=1) == 8
    assert budget.lanes_in_flight(8, platform="gpu", devices=2) == 8
    # an uneven split over devices: 9 lanes on 2 devices are 5 per device (the last padded)
    assert budget.lanes_in_flight(9, platform="gpu", devices=2) == 10


def test_lanes_in_flight_never_exceeds_the_concurrent_calls():
    """An uneven split of a device's lanes over its concurrent calls: 7 lanes over 2 calls run
    as calls of 4 and 3; one lane at a time per call (``lanes_per_batch=1``) holds 2 lanes, one
    per call, never a third call's."""
    gpu = dict(platform="gpu", devices=1)
    assert budget.lanes_in_flight(7, Layout(None, 1, 2), **gpu) == 2
    assert budget.lanes_in_flight(7, Layout(None, 1, 3), **gpu) == 3
    # every lane of each call vmapped at once: calls of ceil(7 / 2) = 4 lanes (the last padded)
    assert budget.lanes_in_flight(7, Layout(concurrent_calls=2), platform="gpu", devices=1) == 8


# --------------------------------------------------------------------------------------------
# calibration against XLA and NumPy


def test_xla_bytes_counts_arguments_and_outputs_and_a_donated_buffer_once():
    x = jnp.zeros(1000, jnp.float32)  # 4000 bytes in, 4000 out, no temporaries
    assert budget.xla_bytes(jax.jit(lambda x: 2 * x).lower(x).compile()) == 8000
    donated = jax.jit(lambda x: 2 * x, donate_argnums=0).lower(x).compile()
    assert budget.xla_bytes(donated) == 4000  # the output reuses the argument's buffer


def _train_xla_bytes(model, ds, config, **model_kwargs) -> int:
    graphdef, state = train.init_state(model, ds, gamma=1.0, seed=0, **model_kwargs)
    run = train.make_run(graphdef, config)
    lr = jnp.asarray(config.lr, dtype=train.state_dtype(state))
    data = train.TrainData.from_dataset(ds)
    return budget.xla_bytes(jax.jit(run).lower(state, lr, jax.random.key(0), data).compile())


SHORT = dict(steps=10, snapshots=(0, 10))  # few snapshots: the step's memory dominates
TRAIN_CASES = {
    # the `ctx-staircase train add` default: the 34 recorded snapshots dominate
    "ffn add N=20 d=128": ("ffn", "add", dict(N=20), dict(steps=100), dict(d=128)),
    # long sequences: the gathered embeddings [n, L, d] dominate
    "ffn modsum N=12 L=4 d=32": ("ffn", "modsum", dict(N=12, L=4), SHORT, dict(d=32)),
    # a wide vocabulary: the logits [n, V] and their gradient dominate
    "ffn add N=120 V=1500 d=64": ("ffn", "add", dict(N=120, vocab_size=1500), SHORT, dict(d=64)),
    "attention modsum N=8 L=4 d=64": (
        "attention",
        "modsum",
        dict(N=8, L=4),
        dict(SHORT, optimizer="gd"),
        dict(d=64),
    ),
}


@pytest.mark.parametrize("model", ["ffn", "attention"])
def test_a_float64_lane_estimates_twice_the_float32_one(model):
    """Every floating buffer doubles in float64; only the int32 tokens and labels do not, so
    the estimate grows by nearly 2 (an estimate that took 4 bytes whatever the dtype would
    stay at 1, and still sit inside the XLA calibration band at about 0.54)."""
    ds = tasks.make("add", N=20)
    config = train.TrainConfig(steps=100)
    single, double = (
        budget.train_lane_bytes(model, ds, config, d=64, dtype=dtype)
        for dtype in ("float32", "float64")
    )
    assert 1.9 <= double / single <= 2.0, (single, double)
    measured = _train_xla_bytes(model, ds, config, d=64, dtype="float64")
    assert LOW <= double / measured <= HIGH, (double, measured)


@pytest.mark.parametrize("case", list(TRAIN_CASES))
def test_train_estimate_matches_xla(case):
    model, task, params, settings, model_kwargs = TRAIN_CASES[case]
    ds = tasks.make(task, **params)
    config = train.TrainConfig(**settings)
    measured = _train_xla_bytes(model, ds, config, **model_kwargs)
    estimate = budget.train_lane_bytes(model, ds, config, **model_kwargs)
    assert LOW <= estimate / measured <= HIGH, (case, estimate, measured)


def test_lm_estimate_matches_xla():
    corpus = text.prepare_corpus(text.builtin_corpus(n_sentences=3000), vocab_size=None)
    config = lm_text.lm_config(tiny=True)
    measured = _lm_xla_bytes(config, corpus)
    estimate = budget.lm_lane_bytes(config, corpus.vocab_size, tokens=corpus.train.size)
    assert LOW <= estimate / measured <= HIGH, (estimate, measured)


@pytest.mark.slow
@pytest.mark.parametrize(
    "shape",
    [
        dict(d=128, n_layers=2, n_heads=4, context_length=64, batch_size=32),
        dict(d=256, n_layers=1, n_heads=4, context_length=32, batch_size=64),
        dict(d=64, n_layers=2, n_heads=2, context_length=128, batch_size=32),
        dict(d=32, n_layers=1, n_heads=2, context_length=16, batch_size=8, tracked=24),
        dict(d=64, n_layers=1, n_heads=2, context_length=32, batch_size=8, signature_windows=512),
    ],
)
def test_lm_estimate_matches_xla_at_larger_shapes(shape):
    corpus = text.prepare_corpus(text.builtin_corpus(n_sentences=3000), vocab_size=None)
    config = lm.LMConfig(**shape, steps=40, snapshot_every=10, min_count=5)
    measured = _lm_xla_bytes(config, corpus)
    estimate = budget.lm_lane_bytes(config, corpus.vocab_size, tokens=corpus.train.size)
    assert LOW <= estimate / measured <= HIGH, (estimate, measured)


def _lm_xla_bytes(config, corpus) -> int:
    V, T = corpus.vocab_size, config.context_length
    tracked = lm.eligible_tokens(
        corpus.train, corpus.vocabulary, count=config.tracked, min_count=config.min_count
    )
    position = np.full(V, -1, np.int32)
    position[tracked] = np.arange(tracked.size, dtype=np.int32)
    lane = lm.lane_function(config, V, position.tobytes())
    states = jax.eval_shape(lambda: lm.initial_states(config, V, np.ones(1), 0))
    state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape[1:], x.dtype), states)
    windows = (
        lm.spread_windows(text.windows(corpus.train, T), config.signature_windows),
        lm.spread_windows(text.windows(corpus.validation, T), config.validation_windows),
    )
    args = (
        state,
        jnp.asarray(corpus.train, jnp.int32),
        jnp.asarray(tracked, jnp.int32),
        *(jnp.asarray(w, jnp.int32) for w in windows),
        jnp.asarray(0, jnp.uint32),
    )
    return budget.xla_bytes(jax.jit(lane).lower(*args).compile())


SIGNATURE_CASES = {
    "add N=60 order 1": ("add", dict(N=60), 1),
    "modsum N=12 L=3 order 2": ("modsum", dict(N=12, L=3), 2),
    "modsum N=10 L=4 order 3": ("modsum", dict(N=10, L=4), 3),
    "label_law order 2 (V=101)": ("label_law", dict(), 2),
}


@pytest.mark.parametrize("case", list(SIGNATURE_CASES))
def test_signature_estimate_matches_numpy_and_xla(case):
    task, params, order = SIGNATURE_CASES[case]
    ds = tasks.make(task, **params)
    alphas = geometry.group_tokens(ds, geometry.default_group(ds))
    axes = dict(labels=np.unique(ds.labels[ds.weights > 0]), context=np.unique(ds.tokens))
    # the counting, as geometry.signature_geometry does it: every order kept to the end
    tracemalloc.start()
    kept = [signatures.label_signature(ds, m, alphas=alphas, **axes) for m in range(order + 1)]
    kept.append(
        signatures.label_signature(ds, 1, alphas=alphas, labels=axes["labels"], context=alphas)
    )
    counted = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert {
        name: phi.shape for name, phi in zip(budget.signature_shapes(ds, order), kept, strict=True)
    } == (budget.signature_shapes(ds, order))
    # the JAX part: cosine matrix and PCA of the largest order's vectors
    largest = max(kept, key=np.size)
    rows = jax.ShapeDtypeStruct((largest.shape[0], largest.size // largest.shape[0]), jnp.float64)
    processing = budget.xla_bytes(
        jax.jit(lambda X: (metrics.cosine_matrix(X), metrics.pca(X))).lower(rows).compile()
    )
    estimate = budget.signature_bytes(ds, order)
    assert LOW <= estimate / (counted + processing) <= HIGH, (estimate, counted, processing)


@pytest.mark.parametrize("N", [20, 40])
def test_theory_escape_stage_matches_xla(N):
    # the closed form's escape search: the logit scale on one chunk of the escape grid
    add = tasks.make("add", N=N)
    d, grid = 128, escape.ESCAPE_CHUNK
    weights = jax.ShapeDtypeStruct((grid, add.vocab_size, d), jnp.float64)
    compiled = closed_form.logit_scale.lower(weights, weights, add.tokens, (1.0, 0.5)).compile()
    estimate = budget.theory_stages(add, d=d)["escape"]
    assert LOW <= estimate / budget.xla_bytes(compiled) <= HIGH
    assert budget.theory_bytes(add, d=d) >= estimate


@pytest.mark.parametrize(
    ("steps", "every"), [(900, None), (1000, 7), (4000, None), (50_000, None), (123, 10)]
)
def test_theory_snapshots_bound_the_comparison_s_own(steps, every):
    count = len(comparison.snapshot_steps(steps, every))
    # an upper bound: past MAX_SNAPSHOTS the geometric steps round onto each other
    assert count <= budget.theory_snapshots(steps, every) <= 1.25 * count + 2
    assert budget.theory_snapshots(None, None) >= budget.THEORY_MAX_SNAPSHOTS


def test_signature_cap_is_checked_for_every_order_up_front():
    ds = tasks.random_dataset(n=200, L=5, vocab_size=120)  # no groups: every axis is V
    assert budget.signature_shapes(ds, 3)["order3"] == (120, 120, 120, 120, 120)
    budget.check_signature_shapes(ds, 1, what="signatures", knob="k")
    with pytest.raises(ValueError, match=r"^signatures x: the order3 signature would be .* k$"):
        budget.check_signature_shapes(ds, 3, what="signatures x", knob="k")
    with pytest.raises(ValueError, match="signature would be a dense float64 array"):
        signatures.label_signature(ds, 3)  # the cap the check anticipates
    assert budget.signature_bytes(ds, 3, group="occurring") > signatures.MAX_OUTPUT_BYTES


# --------------------------------------------------------------------------------------------
# the measured failures are refused, the defaults accepted


def test_measured_failures_are_refused_under_24_gib():
    # `train modsum --param N=70 --param L=4`: XLA RESOURCE_EXHAUSTED at 81 GB
    modsum = tasks.make("modsum", N=70, L=4)
    estimate = budget.train_bytes("ffn", modsum, train.TrainConfig(), lanes=1, d=128)
    assert LOW <= estimate / 81e9 <= HIGH
    with pytest.raises(ValueError, match="train modsum N=70 L=4: needs about"):
        budget.check(estimate, what="train modsum N=70 L=4", knob="lower --param N", limit=LIMIT)
    # `theory add --param N=2000`: its training alone asked for 264 GB
    add = tasks.make("add", N=2000)
    assert budget.theory_bytes(add) > 264e9
    with pytest.raises(ValueError, match="theory add N=2000"):
        budget.check(budget.theory_bytes(add), what="theory add N=2000", knob="k", limit=LIMIT)
    # `lm --d 65536`: asked for 68 GB (one allocation of many)
    config = lm.LMConfig(d=65536, steps=1000, snapshot_every=20)
    assert budget.lm_bytes(config, 145, 2) > 68e9
    with pytest.raises(ValueError, match="lm d=65536"):
        budget.check(budget.lm_bytes(config, 145, 2), what="lm d=65536", knob="k", limit=LIMIT)


def test_default_configurations_are_accepted_under_24_gib():
    add = tasks.make("add")
    corpus = text.prepare_corpus(text.builtin_corpus(), vocab_size=None)
    cli_lm = lm.LMConfig(steps=1000, snapshot_every=20)
    estimates = {
        "train add": budget.train_bytes("ffn", add, train.TrainConfig(), d=128),
        "theory add": budget.theory_bytes(add),
        "theory add attention": budget.theory_bytes(add, model="attention"),
        "signatures add": budget.signature_bytes(add, 1),
        "lm (built-in)": budget.lm_bytes(cli_lm, corpus.vocab_size, 2, tokens=corpus.train.size),
        "lm (text, 2000 words)": budget.lm_bytes(cli_lm, 2001, 2, tokens=1_000_000),
        "lm_text experiment": budget.lm_bytes(lm_text.lm_config(), 2001, 2, tokens=1_000_000),
        "run (flagship)": staircase.memory_bytes(),
        "run --tiny": staircase.memory_bytes(tiny=True),
    }
    for what, estimate in estimates.items():
        assert budget.check(estimate, what=what, knob="k", limit=LIMIT) == estimate
    largest = max(math.prod(s) for s in budget.signature_shapes(add, 1).values())
    assert 8 * largest <= signatures.MAX_OUTPUT_BYTES


def test_estimators_compile_nothing(compilations):
    """The estimators are arithmetic on shapes: no XLA program is built (their time is measured
    in benchmarks/validation.py)."""
    add = tasks.make("add")
    config = train.TrainConfig()
    compilations.clear()
    budget.train_bytes("ffn", add, config, lanes=4)
    budget.signature_bytes(add, 1)
    budget.theory_bytes(add)
    budget.lm_bytes(lm.LMConfig(), 2001, 2)
    assert not compilations


def test_train_cli_budgets_every_lane_of_its_grid(tmp_path, capsys):
    """`ctx-staircase train` estimates the whole grid, gammas x seeds x lrs: one gamma over 8
    seeds and 2 rates is 16 lanes. Under a limit that one lane fits and 16 do not, it refuses
    before anything is trained or written, and says how many lanes it counted."""
    from ctx_staircase import cli

    ds = tasks.make("add", N=20)
    config = train.TrainConfig(optimizer="gd", lr=0.1, steps=2)
    one, sixteen = (budget.train_bytes("ffn", ds, config, lanes=n, d=256) for n in (1, 16))
    assert sixteen > 2 * one
    argv = ["train", "add", "--param", "N=20", "--d", "256", "--steps", "2", "--gamma", "1"]
    argv += ["--seeds", *map(str, range(8)), "--lr", "0.1", "0.2"]
    limit = f"{(one + sixteen) // 2}B"
    assert cli.main([*argv, "--max-memory", limit, "--out", str(tmp_path / "never")]) == 2
    assert "16 lanes" in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


def test_each_more_lane_holds_its_recorded_weights_twice():
    """`train_bytes`: a lane beyond those in flight adds only its trajectory, held twice; the
    weights part of it is S snapshots of ``W_E, W_U [V, d]``."""
    ds, d = tasks.make("add", N=8), 16
    extra = {}
    for record in (True, False):
        config = train.TrainConfig(steps=10, snapshots=(0, 5, 10), record_weights=record)
        one, two = (
            budget.train_bytes("ffn", ds, config, lanes=n, concurrent=1, d=d) for n in (1, 2)
        )
        extra[record] = two - one
    assert extra[False] > 0
    assert extra[True] - extra[False] == 2 * 4 * 3 * (2 * ds.vocab_size * d)


def test_ode_lanes_hold_working_memory_only_for_the_lanes_in_flight():
    """`theory.Size.ode_bytes`: the trajectories of every lane, and the solver's copies and the
    field's temporaries of the lanes in flight only (more in flight than lanes adds nothing)."""
    from ctx_staircase import theory

    def size(G, in_flight):
        return theory.Size(G, 50, 100, 2, 10, 8, 10, 10, (0,), "uniform", in_flight)

    state, field = 160, 1000
    one = size(8, 1).ode_bytes(state, field)
    two = size(8, 2).ode_bytes(state, field)
    per_lane = two - one
    assert per_lane == 8 * (theory.SOLVER_COPIES * state + field)
    assert size(8, 8).ode_bytes(state, field) == one + 7 * per_lane
    assert size(8, 64).ode_bytes(state, field) == size(8, 8).ode_bytes(state, field)
    assert one == 8 * 8 * 50 * state + per_lane  # every lane's trajectory, one lane's work


# --------------------------------------------------------------------------------------------
# direct tests of the public helpers (each one planted-bug checked, tests/README.md)


@pytest.mark.parametrize(
    ("task", "params"),
    [("add", {"N": 5}), ("mod", {"N": 7}), ("modsum", {"N": 3, "L": 3}), ("task4", {})],
)
def test_dataset_samples_is_the_count_the_task_builds(task, params):
    assert budget.dataset_samples(task, params) == tasks.make(task, **params).tokens.shape[0]


def test_dataset_samples_is_none_for_an_unknown_task_or_a_non_integer():
    assert budget.dataset_samples("no_such_task", {"N": 5}) is None
    assert budget.dataset_samples("add", {"N": "five"}) is None
    assert budget.dataset_bytes("no_such_task", {"N": 5}) == 0


def test_dataset_bytes_is_a_whole_number_of_copies_of_the_built_arrays():
    """tokens int32 [n, L], labels int32 [n] and weights float64 [n], the same whole number of
    times for every task and size (so the count follows n and L exactly)."""
    ratios = set()
    for task, params in [
        ("minmax", {"N": 4}),
        ("task4", {"n_x": 5, "n_a": 3}),
        ("modsum", {"N": 3, "L": 4}),
        ("anchor_parity", {"n": 50}),
    ]:
        ds = tasks.make(task, **params)
        n, L = ds.tokens.shape
        built = n * L * 4 + n * 4 + n * 8
        estimate = budget.dataset_bytes(task, params)
        assert estimate % built == 0
        ratios.add(estimate // built)
    assert len(ratios) == 1 and ratios.pop() >= 1


def test_dataset_bytes_reads_the_sequence_length_the_task_builds():
    ds = tasks.make("add", N=5)
    n, L = ds.tokens.shape
    assert budget.dataset_bytes("add", {"N": 5}) == 3 * n * (4 * L + 4 + 8)


@pytest.mark.parametrize(
    ("model", "kwargs", "sizes"),
    [
        ("ffn", {"d": 8}, {"d": 8}),
        ("attention", {"d": 8, "d_k": 4}, {"d": 8, "d_k": 4}),
        (
            "attention",
            {"d": 8, "d_k": 4, "positional": False},
            {"d": 8, "d_k": 4, "positional": False},
        ),
        ("transformer", {"d": 8, "d_ff": 12}, {"d": 8, "d_ff": 12}),
    ],
)
def test_model_parameters_counts_the_built_models_parameters(model, kwargs, sizes):
    from flax import nnx

    from ctx_staircase import models

    module = models.create(model, vocab_size=7, seq_len=3, rngs=nnx.Rngs(0), **kwargs)
    built = sum(int(np.size(leaf)) for leaf in jax.tree.leaves(nnx.state(module, nnx.Param)))
    assert budget.model_parameters(model, vocab_size=7, L=3, **sizes) == built


def test_model_parameters_refuses_a_model_without_a_count():
    with pytest.raises(ValueError, match="model must be one of"):
        budget.model_parameters("gpt", vocab_size=7, L=3)


def test_lm_estimate_holds_the_second_embedding_only_when_untied():
    """Untying the GPT's unembedding adds its ``V d`` parameters to every one of the ``1 + (3 +
    1.5 * 2)`` parameter copies the estimate holds (parameters, gradient, update, AdamW's two
    moments), counted from the built `models.GPT` of each kind."""
    import dataclasses

    from flax import nnx

    from ctx_staircase import models

    config, V = lm_text.lm_config(tiny=True), 50

    def parameters(tied: bool) -> int:
        gpt = models.GPT(
            V, config.context_length, config.d, n_layers=config.n_layers,
            n_heads=config.n_heads, tied=tied, rngs=nnx.Rngs(0),
        )  # fmt: skip
        return sum(int(np.size(p)) for p in jax.tree.leaves(nnx.state(gpt, nnx.Param)))

    tied, untied = (budget.lm_lane_bytes(dataclasses.replace(config, tied=t), V) for t in (1, 0))
    expected = 4 * (1 + 3 + 1.5 * 2) * (parameters(False) - parameters(True))
    assert parameters(False) - parameters(True) == V * config.d
    assert abs((untied - tied) - expected) <= 1  # each estimate is truncated to whole bytes


# --------------------------------------------------------------------------------------------
# lines the default suite never ran (tests/README.md, "Tests for lines the default suite never
# ran"): an accelerator's free memory, the platform guessed without a backend, the host's
# physical memory, and the small theory helpers


class _FakeAccelerator:
    """A JAX device as `budget` reads one: its platform and its ``memory_stats``."""

    platform = "gpu"

    def memory_stats(self):
        return {"bytes_limit": 10 * GiB, "bytes_in_use": 3 * GiB}


def test_an_initialized_accelerator_offers_its_free_memory(monkeypatch):
    """On an accelerator the limit is the first device's ``bytes_limit - bytes_in_use`` (7 GiB
    here), and its devices are the lanes' devices (two accelerators: the lanes split over two)."""
    monkeypatch.setattr(jax, "local_devices", lambda: [_FakeAccelerator(), _FakeAccelerator()])
    monkeypatch.delenv(budget.ENV_VAR, raising=False)
    assert budget.available_bytes() == 7 * GiB
    assert budget.parse_size("50%") == 7 * GiB // 2
    assert budget.memory_limit() == (int(0.8 * 7 * GiB), "80% of available memory")
    # 8 lanes, one call per device, one lane at a time: one lane in flight on each of 2 devices
    assert budget.lanes_in_flight(8, Layout(lanes_per_batch=1)) == 2
    # every lane of a device vmapped at once: 4 per device
    assert budget.lanes_in_flight(8, Layout(concurrent_calls=1)) == 8


def _no_backend():
    raise RuntimeError("no usable backend")


@pytest.mark.parametrize(
    ("platforms", "flags", "kwargs", "expected"),
    [
        # an accelerator asked for (cuda counts as gpu): 8 lanes as 2 calls of 4 vmapped lanes
        # (CPU would run them lane by lane, 2 at a time)
        ("cuda", "", {"concurrent_calls": 2}, 8),
        ("tpu", "", {"concurrent_calls": 2}, 8),
        # CPU with 3 forced host devices, lanes vmapped 2 at a time: ceil(8 / 3) = 3 lanes per
        # device in one call, 2 of them at a time, on each of the 3 devices
        (
            "cpu",
            "--xla_force_host_platform_device_count=3",
            {"concurrent_calls": 1, "lanes_per_batch": 2},
            6,
        ),
        ("cpu", "", {"concurrent_calls": 1, "lanes_per_batch": 2}, 2),  # one host device
    ],
)
def test_without_a_backend_the_platform_is_guessed_from_the_environment(
    monkeypatch, platforms, flags, kwargs, expected
):
    monkeypatch.setattr(jax, "local_devices", _no_backend)
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    monkeypatch.setenv("XLA_FLAGS", flags)
    assert budget.lanes_in_flight(8, Layout(**kwargs)) == expected
    # and no backend means the host's memory, as /proc/meminfo gives it
    with open("/proc/meminfo") as meminfo:
        line = next(line for line in meminfo if line.startswith("MemAvailable:"))
    assert budget.available_bytes() == pytest.approx(int(line.split()[1]) * 1024, rel=0.05)


def test_without_proc_meminfo_the_host_s_physical_memory_is_available(monkeypatch):
    import builtins
    import os

    real_open = builtins.open

    def no_meminfo(path, *args, **kwargs):
        if path == "/proc/meminfo":
            raise OSError("no /proc here")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(jax, "local_devices", _no_backend)
    monkeypatch.setattr(builtins, "open", no_meminfo)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert budget.available_bytes() == physical


def test_a_task_of_length_zero_needs_no_dataset_bytes():
    """modsum with ``L=0`` has one (empty) sample by its formula but no tokens: 0 bytes, and the
    task itself refuses it, naming ``L``."""
    assert budget.dataset_samples("modsum", {"N": 3, "L": 0}) == 1
    assert budget.dataset_bytes("modsum", {"N": 3, "L": 0}) == 0
    with pytest.raises(ValueError, match="L"):
        tasks.make("modsum", N=3, L=0)


@pytest.mark.parametrize(
    ("model", "max_orders", "prediction", "expected"),
    [
        ("ffn", (0, 1), "linear", 3),  # the linear readout sees every order: L - 1
        ("ffn", (0, 2), "uniform", 2),  # else the largest order asked for
        ("ffn", (1, 0), "softmax", 1),
        ("attention", (0, 2), "linear", 0),  # attention contracts order 0 only
    ],
)
def test_theory_signature_order(model, max_orders, prediction, expected):
    ds = tasks.make("modsum", N=3, L=4)
    assert budget.theory_signature_order(ds, model, max_orders, prediction) == expected


def test_theory_snapshots_with_a_spacing_and_no_horizon_bound_the_longest_run():
    """No horizon but a spacing: the longest automatic horizon (`THEORY_MAX_STEPS`) at that
    spacing, plus the last step and one spare: 50000 // 100 + 2 = 502 snapshots."""
    assert budget.theory_snapshots(None, 100) == 502
    count = len(comparison.snapshot_steps(budget.THEORY_MAX_STEPS, 100))
    assert count == 501 <= budget.theory_snapshots(None, 100)
