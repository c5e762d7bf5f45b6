"""Context order L as a lane axis of the FFN signature flows (flows.context_signature_flows;
theory/ffn.md eq. F11): a padded lane against the separate one-L field and solve, bad input."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import flows, signatures, sweep, tasks, theory

ORDERS = (0, 1, 2, 3)


def _problem(datasets, orders=ORDERS, prediction="uniform", coefficients=(1.0, 0.5), ds=None):
    """A `theory.Problem` of 2 gammas at d = 8 on a grid past every lane's blow-up."""
    V, d = datasets[0].vocab_size, 8
    rng = np.random.default_rng(0)
    unit = {"W_E": rng.normal(size=(V, d)), "W_U": rng.normal(size=(V, d))}
    gammas = np.array([0.8, 1.2])
    y0 = {k: np.stack([v * d**-g for g in gammas]) for k, v in unit.items()}
    setting = theory.Setting(None, gammas, tuple(orders), prediction, "poly", coefficients)
    ts = np.linspace(0.0, 40.0, 41)
    map_lanes = functools.partial(sweep.sweep_map)
    return theory.Problem(setting, ds, d, unit, y0, None, 1.0, 0.5, ts, map_lanes, {})


@pytest.fixture(scope="module")
def modsum():
    return [tasks.make("modsum", N=4, L=L) for L in (2, 3, 4)]


def test_padded_field_is_bitwise_the_one_L_field_on_the_same_index_set():
    """Every (dataset, order) lane's field, traced L and orders padded to 3, is bitwise
    ffn_signature_field with the static L on that dataset's own tables (the common index set,
    as jit arguments): the binomials are exact integers and padded orders add exact zeros.
    Random datasets of L = 2, 3, 4 (different occurring tokens, different COO choices), a
    degree-4 sigma (orders up to 3), both prediction terms."""
    datasets = [tasks.random_dataset(40, L, 6, seed=L) for L in (2, 3, 4)]
    stacked = flows.context_signatures(datasets, 3)
    ids = stacked.sigs
    coefficients = (0.9, -0.5, 0.3, 0.2)
    rng = np.random.default_rng(1)
    W_E, W_U = (jnp.asarray(0.4 * rng.normal(size=(6, 5))) for _ in range(2))
    one_L = jax.jit(flows.ffn_signature_field, static_argnames=("coefficients", "L", "prediction"))

    @functools.partial(jax.jit, static_argnames="prediction")
    def lane(i, m, tables, prediction):
        L, sigs = tables.select(i)
        return flows.context_signature_field(W_E, W_U, sigs, coefficients, L, m, prediction)

    uses = [s.use for s in ids.sparse if s is not None and s.use is not None]
    assert uses, "the datasets should disagree on some order's dense/COO form"
    for i, ds in enumerate(datasets):
        alone = flows.flow_signatures(
            signatures.signature_set(
                ds, ds.L - 1, alphas=ids.alphas, labels=ids.labels, context=ids.context
            )
        )
        for m in range(ds.L):
            for prediction in ("none", "uniform"):
                expected = one_L(
                    W_E, W_U, alone, coefficients, L=ds.L, max_order=m, prediction=prediction
                )
                got = lane(i, m, stacked, prediction)
                for a, b in zip(got, expected, strict=True):
                    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _blow_up_time(status: theory.SolverStatus) -> float:
    return float(status.result.split("= ")[-1]) if "blow-up" in status.result else np.inf


def test_padded_lanes_equal_the_separate_solves(modsum):
    """modsum N = 4 at L = 2, 3, 4, orders 0..3, 2 gammas in one solve: each lane equals
    signature_flow_lanes of its dataset alone to 1e-12 relative on the snapshots before the
    blow-up event, with the same solver status (blow-up time to 6 digits); orders above
    L - 1 are skipped. Not bitwise: the separate solve's tables are constants of its program,
    which XLA simplifies (a few ulp in the field); at the blow-up event the flow grows so fast
    that the held state amplifies them (to ~1e-8). Measured: <= 2e-14 before the blow-up."""
    padded = flows.context_signature_flows(_problem(modsum), modsum)
    assert padded.L == (2, 3, 4) and padded.orders == ORDERS
    for i, ds in enumerate(modsum):
        orders = tuple(m for m in ORDERS if m <= ds.L - 1)
        problem = _problem(modsum, orders, ds=ds)
        for m in ORDERS:
            if m > ds.L - 1:
                assert padded.lanes[i][m] is None
                with pytest.raises(ValueError, match="exceeds L-1"):
                    padded.of(i, m)
                continue
            lanes, alone = padded.of(i, m), flows.signature_flow_lanes(problem, m)
            _assert_equal_before_blow_up(lanes, alone, problem.ts)


def _assert_equal_before_blow_up(lanes, alone, ts):
    """The same solver status, trajectories within 1e-12 relative before 0.9 x the blow-up
    (if any)."""
    for g in range(2):
        assert lanes.solver[g] == alone.solver[g]
        before = ts < 0.9 * _blow_up_time(alone.solver[g])
        assert before.sum() >= 3
        for name in ("W_E", "W_U"):
            got = getattr(lanes.trajectories[g], name)[before]
            want = getattr(alone.trajectories[g], name)[before]
            assert np.max(np.abs(got - want)) <= 1e-12 * np.max(np.abs(want))


def test_one_L_with_the_linear_prediction_equals_the_separate_solve(modsum):
    """With a single L the linear prediction (Remark 1) runs with a static L."""
    ds = modsum[1]
    problem = _problem([ds], (0, 1), prediction="linear", ds=ds)
    padded = flows.context_signature_flows(problem, [ds])
    for m in (0, 1):
        _assert_equal_before_blow_up(
            padded.of(0, m), flows.signature_flow_lanes(problem, m), problem.ts
        )


@pytest.mark.parametrize(
    ("datasets", "orders", "prediction", "match"),
    [
        ([], ORDERS, "uniform", r"datasets must hold one or more TokenDataset.*got \[\]"),
        ("V", ORDERS, "uniform", r"datasets must share one vocab_size.*\[5, 6\] for L \[2, 3\]"),
        ("modsum", ORDERS, "linear", r"prediction='linear'.*L \[2, 3, 4\].*'none' or 'uniform'"),
        ("modsum", (0, 4), "uniform", r"max_orders.*\[0, 3\]"),
        ("modsum", (), "uniform", r"max_orders must hold one or more orders"),
        ("y0", ORDERS, "uniform", r"problem.y0 must hold .* V = vocab_size = 6"),
    ],
)
def test_bad_input_is_refused_naming_the_parameter(modsum, datasets, orders, prediction, match):
    problem = _problem(modsum, orders, prediction)
    if datasets == "V":
        datasets = [modsum[0], tasks.random_dataset(10, 3, 6, seed=0)]
    elif datasets == "modsum":
        datasets = modsum
    elif datasets == "y0":
        datasets = [tasks.random_dataset(10, 3, 6, seed=0)]
    with pytest.raises(ValueError, match=match):
        flows.context_signature_flows(problem, datasets)


def test_a_single_dataset_is_not_a_sequence(modsum):
    with pytest.raises(ValueError, match="datasets must be a sequence"):
        flows.context_signature_flows(_problem(modsum), modsum[0])
