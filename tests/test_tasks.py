"""Tests of the task registry (paper App. A; [RB], arXiv 2502.04375): label rules re-derived
independently, complete enumerations, determinism, the structure of the random tasks, and every
rejected input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ctx_staircase import tasks
from ctx_staircase.dataset import TokenDataset

ALL_TASKS = [
    "label_law",
    "add",
    "sub",
    "mul",
    "mod",
    "modsum",
    "modulus",
    "anchor_parity",
    "task4",
    "minmax",
    "rb_anchor",
]
RANDOM_TASKS = ["label_law", "anchor_parity", "rb_anchor"]

# Small versions of every task for the generic checks (modsum at full size is tested on its own).
SMALL = {name: {} for name in ALL_TASKS} | {"modsum": {"N": 7, "L": 3}, "rb_anchor": {"n": 20000}}
VOCAB = {  # 1 + the largest possible token or label id, from the task definitions by hand
    "label_law": 101,  # anchor 100
    "add": 41,  # 20 + 20
    "sub": 21,  # numbers 1..20
    "mul": 401,  # 20 * 20
    "mod": 41,  # numbers 1..40
    "modsum": 8,  # N = 7: numbers and labels 1..7
    "modulus": 21,
    "anchor_parity": 61,  # noise 21..60
    "task4": 30,  # anchors 20..29
    "minmax": 23,  # controls 21, 22
    "rb_anchor": 161,  # reasoning label 120 + 20 + 20
}


def zero_order_signature(ds: TokenDataset) -> np.ndarray:
    """phi^{y;0}[alpha, nu] by brute-force occurrence counting (paper §3.2, uniform weights)."""
    counts = np.zeros((ds.vocab_size, ds.vocab_size))
    for position in range(ds.L):
        np.add.at(counts, (ds.tokens[:, position], ds.labels), 1.0)
    return counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)


# ------------------------------------------------------------------------------------------------
# Registry and generic properties


def test_registry_lists_every_task_with_defaults_and_summary():
    assert tasks.names() == ALL_TASKS
    for name in ALL_TASKS:
        defaults = tasks.describe(name)
        assert isinstance(defaults, dict) and defaults
        summary = tasks.summary(name)
        assert isinstance(summary, str) and "\n" not in summary
        assert "paper" in summary or "[RB]" in summary  # cites where the task comes from
    assert tasks.describe("add") == {"N": 20, "vocab_size": None}
    assert tasks.describe("mod") == {"N": 40, "convention": "main", "vocab_size": None}
    assert tasks.describe("modsum") == {"N": 50, "L": 4, "vocab_size": None}
    tasks.describe("add")["N"] = 3  # a fresh copy: mutating it changes nothing
    assert tasks.describe("add") == {"N": 20, "vocab_size": None}


@pytest.mark.parametrize("name", ALL_TASKS)
def test_shapes_dtypes_vocab_and_groups(name):
    ds = tasks.make(name, **SMALL[name])
    assert isinstance(ds, TokenDataset)
    assert ds.name == name
    assert ds.params == {**tasks.describe(name), **SMALL[name]}
    assert ds.tokens.dtype == np.int32 and ds.labels.dtype == np.int32
    assert ds.tokens.ndim == 2 and ds.labels.shape == (ds.n,)
    assert ds.tokens.min() >= 0 and ds.labels.min() >= 0
    # one shared vocabulary, fixed by the parameters (not by which ids a random draw hits): it
    # covers every token and label id, and is tight except where a possible label is not drawn
    assert ds.vocab_size == VOCAB[name]
    assert ds.vocab_size >= 1 + max(ds.tokens.max(), ds.labels.max())
    if name != "rb_anchor":
        assert ds.vocab_size == 1 + max(ds.tokens.max(), ds.labels.max())
    np.testing.assert_array_equal(ds.groups["labels"], np.unique(ds.labels))
    for key, ids in ds.groups.items():
        assert ids.dtype == np.int32 and np.all(np.diff(ids) > 0), key
        assert ids.min() >= 0 and ids.max() < ds.vocab_size, key
    assert ds.weights.shape == (ds.n,) and np.all(ds.weights >= 0)


@pytest.mark.parametrize("name", ["label_law", "add", "sub", "mul", "mod", "modulus", "minmax"])
def test_numbers_group_is_the_operand_range(name):
    ds = tasks.make(name)
    low = 0 if name == "label_law" else 1
    high = 50 if name == "label_law" else ds.params["N"]
    np.testing.assert_array_equal(ds.groups["numbers"], np.arange(low, high + 1))


@pytest.mark.parametrize("name", ALL_TASKS)
def test_deterministic_for_a_seed(name):
    a, b = tasks.make(name, **SMALL[name]), tasks.make(name, **SMALL[name])
    np.testing.assert_array_equal(a.tokens, b.tokens)
    np.testing.assert_array_equal(a.labels, b.labels)
    np.testing.assert_array_equal(a.weights, b.weights)


@pytest.mark.parametrize("name", RANDOM_TASKS)
def test_different_seeds_give_different_data(name):
    a = tasks.make(name, **SMALL[name], seed=0)
    b = tasks.make(name, **SMALL[name], seed=1)
    assert b.params["seed"] == 1
    assert not (np.array_equal(a.tokens, b.tokens) and np.array_equal(a.labels, b.labels))


def test_random_dataset_helper():
    ds = tasks.random_dataset(50, 4, 7, seed=3)
    assert ds.tokens.shape == (50, 4) and ds.labels.shape == (50,) and ds.vocab_size == 7
    assert ds.tokens.max() < 7 and ds.labels.max() < 7
    again = tasks.random_dataset(50, 4, 7, seed=3)
    np.testing.assert_array_equal(ds.tokens, again.tokens)
    assert not np.array_equal(ds.tokens, tasks.random_dataset(50, 4, 7, seed=4).tokens)
    with pytest.raises(ValueError, match="vocab_size"):
        tasks.random_dataset(5, 2, 0)


# ------------------------------------------------------------------------------------------------
# Complete enumerations and label rules


@pytest.mark.parametrize("N", [2, 5, 20])
def test_arithmetic_labels_and_enumeration(N):
    x1, x2 = np.meshgrid(np.arange(1, N + 1), np.arange(1, N + 1), indexing="ij")
    x1, x2 = x1.ravel(), x2.ravel()
    expected = {
        "add": x1 + x2,
        "sub": abs(x1 - x2),
        "mul": x1 * x2,
        "mod": (x1 + x2 + 1) % N,
    }
    for name, labels in expected.items():
        ds = tasks.make(name, N=N)
        assert ds.n == N * N == len({tuple(row) for row in ds.tokens})  # every pair once
        np.testing.assert_array_equal(ds.tokens[:, 0], x1)  # x1 major
        np.testing.assert_array_equal(ds.tokens[:, 1], x2)
        np.testing.assert_array_equal(ds.labels, labels)
        np.testing.assert_allclose(ds.weights, 1.0 / N**2)


def test_mod_conventions():
    main = tasks.make("mod", N=7)
    appendix = tasks.make("mod", N=7, convention="appendix")
    s = main.tokens.sum(axis=1)
    np.testing.assert_array_equal(main.labels, (s + 1) % 7)
    np.testing.assert_array_equal(appendix.labels, 1 + s % 7)
    np.testing.assert_array_equal(main.groups["labels"], np.arange(7))
    np.testing.assert_array_equal(appendix.groups["labels"], np.arange(1, 8))
    assert tasks.make("mod").params == {"N": 40, "convention": "main", "vocab_size": None}


def test_zero_order_signatures_match_closed_forms():
    """theory/signatures.md §2: add gives phi_a = 1/N on {a+1..a+N}; mod gives the uniform law on
    residues."""
    N = 9
    phi = zero_order_signature(tasks.make("add", N=N))
    for a in range(1, N + 1):
        expected = np.zeros(phi.shape[1])
        expected[a + 1 : a + N + 1] = 1.0 / N
        np.testing.assert_allclose(phi[a], expected, atol=1e-15)
    phi = zero_order_signature(tasks.make("mod", N=N))
    np.testing.assert_allclose(phi[1 : N + 1, :N], 1.0 / N, atol=1e-15)


@pytest.mark.parametrize(("N", "L"), [(2, 1), (3, 4), (5, 3), (7, 2)])
def test_modsum_small_complete_lexicographic(N, L):
    ds = tasks.make("modsum", N=N, L=L)
    assert ds.tokens.shape == (N**L, L)
    assert len({tuple(row) for row in ds.tokens}) == N**L
    # lexicographic order: read the row as base-N digits (x - 1), position 0 most significant
    value = ((ds.tokens.astype(np.int64) - 1) * N ** np.arange(L - 1, -1, -1)).sum(axis=1)
    np.testing.assert_array_equal(value, np.arange(N**L))
    np.testing.assert_array_equal(ds.labels, 1 + ds.tokens.sum(axis=1) % N)
    assert ds.labels.min() >= 1 and ds.labels.max() <= N


def test_modsum_defaults_full_size():
    ds = tasks.make("modsum")
    assert ds.tokens.shape == (50**4, 4) and ds.tokens.dtype == np.int32
    assert ds.vocab_size == 51
    rng = np.random.default_rng(0)
    idx = rng.integers(0, ds.n, size=5000)
    digits = (idx[:, None] // 50 ** np.arange(3, -1, -1)) % 50 + 1  # independent decoding
    np.testing.assert_array_equal(ds.tokens[idx], digits)
    np.testing.assert_array_equal(ds.labels[idx], 1 + digits.sum(axis=1) % 50)
    np.testing.assert_array_equal(ds.tokens[-1], [50, 50, 50, 50])
    # every label value equally often (each residue class has N^(L-1) members)
    np.testing.assert_array_equal(np.bincount(ds.labels)[1:], np.full(50, 50**3))


@pytest.mark.parametrize("M", [2, 3, 4, 7, 20, 45])
def test_modulus_labels(M):
    ds = tasks.make("modulus", M=M)
    assert ds.n == 400 and len({tuple(row) for row in ds.tokens}) == 400
    np.testing.assert_array_equal(ds.labels, (ds.tokens[:, 0] + ds.tokens[:, 1]) % M)
    assert ds.params == {"N": 20, "M": M, "vocab_size": None}


def test_modulus_zero_order_signature_constant_iff_m_divides_n():
    """Claim §8.8 (paper §7.1): S^{sig,(0)} is constant exactly when M | N (the slow cases of
    Fig. 9)."""
    for M in (3, 4, 5, 6, 10):
        ds = tasks.make("modulus", N=20, M=M)
        phi = zero_order_signature(ds)[1:21, :M]
        assert np.allclose(phi, phi[0]) == (20 % M == 0), M


def test_task4_enumeration_and_labels():
    ds = tasks.make("task4", n_x=6, n_a=4)
    assert ds.n == 4 * 4 * 6 and len({tuple(row) for row in ds.tokens}) == ds.n
    np.testing.assert_array_equal(ds.groups["numbers"], np.arange(6))
    np.testing.assert_array_equal(ds.groups["anchors"], np.arange(6, 10))
    assert np.all(np.isin(ds.tokens[:, :2], ds.groups["anchors"]))
    assert np.all(np.isin(ds.tokens[:, 2], ds.groups["numbers"]))
    for (a1, a2, x), y in zip(ds.tokens, ds.labels, strict=True):
        assert y == ((a1 - 6 + 1) + (a2 - 6 + 1) + x) % 6
    default = tasks.make("task4")
    assert default.n == 2000 and default.vocab_size == 30
    assert set(default.groups["labels"]) <= set(default.groups["numbers"])


def test_minmax_labels_and_superposition():
    N = 12
    ds = tasks.make("minmax", N=N)
    assert ds.n == 2 * N * N and len({tuple(row) for row in ds.tokens}) == ds.n
    np.testing.assert_array_equal(ds.groups["controls"], [N + 1, N + 2])
    c, x1, x2 = ds.tokens.T
    np.testing.assert_array_equal(
        ds.labels, np.where(c == N + 1, np.maximum(x1, x2), np.minimum(x1, x2))
    )
    assert np.mean(c == N + 1) == 0.5
    # claim §8.12 (paper §7.2): argmax of the summed zero-order signatures is always the label
    phi = zero_order_signature(ds)
    np.testing.assert_array_equal(phi[ds.tokens].sum(axis=1).argmax(axis=1), ds.labels)


# ------------------------------------------------------------------------------------------------
# Task 1: label law


def law_reference(law: str, x_max: int, mu=25.0, sigma=1.0, lam=10.0, rate=5.0) -> np.ndarray:
    y = np.arange(x_max + 1)
    if law == "uniform":
        p = np.ones(x_max + 1)
    elif law == "normal":
        p = np.exp(-((y - mu) ** 2) / (2 * sigma**2)) / (sigma * math.sqrt(2 * math.pi))
    elif law == "poisson":
        p = np.array([math.exp(-lam) * lam**k / math.factorial(k) for k in y])
    else:
        p = np.exp(-rate * y)
    return p / p.sum()


@pytest.mark.parametrize("law", tasks.LAWS)
def test_label_law_distribution_matches_reference(law):
    for kwargs in ({}, {"mu": 10.5, "sigma": 3.0, "lam": 3.5, "rate": 0.25}):
        p = tasks.label_law_distribution(law, 50, **kwargs)
        assert p.shape == (51,) and p.dtype == np.float64
        assert abs(p.sum() - 1.0) < 1e-14 and np.all(p >= 0)
        np.testing.assert_allclose(p, law_reference(law, 50, **kwargs), rtol=1e-10, atol=1e-300)
    assert tasks.label_law_distribution("normal", 50).argmax() == 25
    assert tasks.label_law_distribution("poisson", 50).argmax() in (9, 10)  # mode of Poisson(10)


def test_label_law_structure():
    ds = tasks.make("label_law", law="poisson")
    assert ds.n == 51**2 and ds.vocab_size == 101
    assert np.all(ds.tokens[:, 0] == 100)
    assert len({tuple(row) for row in ds.tokens[:, 1:]}) == 51**2
    np.testing.assert_array_equal(ds.groups["anchors"], [100])
    assert ds.labels.max() <= 50


@pytest.mark.parametrize("law", tasks.LAWS)
def test_label_law_expected_weights_reproduce_p_exactly(law):
    ds = tasks.make("label_law", law=law, labels="expected")
    p = tasks.label_law_distribution(law, 50)
    support = np.flatnonzero(p > 0)
    assert ds.n == 51**2 * support.size
    assert abs(ds.weights.sum() - 1.0) < 1e-12
    # every input carries total weight 1/51^2, split over the labels as p_a
    per_input = ds.weights.reshape(51**2, support.size)
    np.testing.assert_allclose(per_input.sum(axis=1), 1.0 / 51**2, rtol=1e-12)
    assert np.all(ds.tokens.reshape(51**2, support.size, 3) == ds.tokens[:: support.size, None])
    # weighted label marginal = the anchor's zero-order signature = p_a
    marginal = np.bincount(ds.labels, weights=ds.probabilities, minlength=51)
    np.testing.assert_allclose(marginal, p, rtol=0, atol=1e-12)
    # and within every input the conditional label law is p_a too (labels independent of x)
    x1 = ds.tokens[:, 1]
    for value in (0, 17, 50):
        rows = x1 == value
        cond = np.bincount(ds.labels[rows], weights=ds.weights[rows], minlength=51)
        np.testing.assert_allclose(cond / cond.sum(), p, rtol=0, atol=1e-12)


@pytest.mark.parametrize("law", tasks.LAWS)
def test_label_law_sampled_histogram_close_to_p(law):
    n = 51**2
    p = tasks.label_law_distribution(law, 50)
    for seed in (0, 1):
        ds = tasks.make("label_law", law=law, seed=seed)
        observed = np.bincount(ds.labels, minlength=51)
        expected = n * p
        # pool the sparse tail into one bin so every bin expects >= 5 counts
        big = expected >= 5
        obs = np.append(observed[big], observed[~big].sum())
        exp = np.append(expected[big], expected[~big].sum())
        keep = exp > 0
        chi2 = (((obs - exp) ** 2)[keep] / exp[keep]).sum()
        dof = max(int(keep.sum()) - 1, 1)
        assert chi2 < dof + 6 * math.sqrt(2 * dof), (law, seed, chi2, dof)
        assert np.all(observed[p == 0] == 0)


def test_label_law_records_params_and_custom_anchor():
    ds = tasks.make("label_law", law="normal", sigma=2, anchor=60, x_max=10, seed=5)
    assert ds.params == {
        "law": "normal",
        "anchor": 60,
        "x_max": 10,
        "mu": 25.0,
        "sigma": 2.0,
        "lam": 10.0,
        "rate": 5.0,
        "labels": "sampled",
        "seed": 5,
        "vocab_size": None,
    }
    assert isinstance(ds.params["sigma"], float)
    assert ds.vocab_size == 61 and np.all(ds.tokens[:, 0] == 60) and ds.n == 121


# ------------------------------------------------------------------------------------------------
# Task 3: anchor–noise parity


def test_anchor_parity_structure():
    ds = tasks.make("anchor_parity")
    assert ds.tokens.shape == (10000, 8) and ds.vocab_size == 61
    np.testing.assert_array_equal(ds.groups["anchors"], np.arange(11, 21))
    np.testing.assert_array_equal(ds.groups["noise"], np.arange(21, 61))
    np.testing.assert_array_equal(ds.groups["labels"], [0, 1])
    is_anchor = (ds.tokens >= 11) & (ds.tokens <= 20)
    assert np.all(is_anchor.sum(axis=1) == 1)  # exactly one anchor per row
    assert np.all((ds.tokens[~is_anchor] >= 21) & (ds.tokens[~is_anchor] <= 60))
    anchor = ds.tokens[is_anchor]  # row-major: one per row, in row order
    np.testing.assert_array_equal(ds.labels, np.where(anchor % 2 == 0, 0, 1))
    # anchors, positions and noise are roughly uniform
    position = is_anchor.argmax(axis=1)
    assert np.all(np.abs(np.bincount(position, minlength=8) / 10000 - 1 / 8) < 0.02)
    assert np.all(np.abs(np.bincount(anchor - 11, minlength=10) / 10000 - 1 / 10) < 0.02)
    noise_freq = np.bincount(ds.tokens[~is_anchor] - 21, minlength=40) / (~is_anchor).sum()
    assert np.all(np.abs(noise_freq - 1 / 40) < 0.005)


def test_anchor_parity_custom_ranges():
    ds = tasks.make(
        "anchor_parity", L=3, n=500, anchor_low=40, anchor_high=43, noise_low=0, noise_high=9
    )
    is_anchor = (ds.tokens >= 40) & (ds.tokens <= 43)
    assert np.all(is_anchor.sum(axis=1) == 1) and np.all(ds.tokens[~is_anchor] <= 9)
    np.testing.assert_array_equal(ds.labels, ds.tokens[is_anchor] % 2)
    assert ds.vocab_size == 44


# ------------------------------------------------------------------------------------------------
# [RB] reasoning vs memory anchors


def rb_parts(ds: TokenDataset):
    """Independently locate the anchors: the key z_p is the token just before the first anchor."""
    is_anchor = ds.tokens <= 20
    assert np.all(is_anchor.sum(axis=1) == ds.params["q"])
    first = is_anchor.argmax(axis=1)
    q = ds.params["q"]
    rows = np.arange(ds.n)
    anchors = np.stack([ds.tokens[rows, first + i] for i in range(q)], axis=1)
    assert np.all(anchors <= 20)  # anchors are consecutive
    assert np.all(first >= 1)  # there is always a key before them
    return ds.tokens[rows, first - 1], anchors, first


def test_rb_anchor_structure_and_reasoning_labels():
    ds = tasks.make("rb_anchor", n=40000)
    assert ds.tokens.shape == (40000, 9) and ds.vocab_size == 161
    np.testing.assert_array_equal(ds.groups["keys"], np.arange(21, 121))
    np.testing.assert_array_equal(ds.groups["anchors_mem"], np.arange(1, 11))
    np.testing.assert_array_equal(ds.groups["anchors_rsn"], np.arange(11, 21))
    key, anchors, first = rb_parts(ds)
    assert np.all((key >= 21) & (key <= 120))
    assert np.all(ds.tokens[ds.tokens > 20] <= 120)  # every non-anchor token is a key in Z
    # the key position p (1-based) is uniform on {1..L-q}
    counts = np.bincount(first - 1, minlength=7)
    assert counts.size == 7 and np.all(np.abs(counts / ds.n - 1 / 7) < 0.02)
    memory = np.all(anchors <= 10, axis=1)
    reasoning = np.all(anchors >= 11, axis=1)
    assert np.all(memory ^ reasoning)  # no mixed tuples
    np.testing.assert_array_equal(ds.labels[reasoning], (key + anchors.sum(axis=1))[reasoning])
    # balance: n // 200 rows for every one of the 200 tuples
    tuple_id = (anchors[:, 0] - 1) * 20 + (anchors[:, 1] - 1)
    assert np.unique(tuple_id).size == 200
    np.testing.assert_array_equal(np.bincount(tuple_id, minlength=400)[np.unique(tuple_id)], 200)


def test_rb_anchor_heldout_pairs_and_weights():
    ds = tasks.make("rb_anchor", n=20000)
    _, anchors, _ = rb_parts(ds)
    pairs = {tuple(row) for row in anchors[ds.sample_groups["rsn_test"]]}
    assert pairs == {(11, 13), (13, 11)}
    heldout = np.isin(anchors[:, 0] * 100 + anchors[:, 1], [1113, 1311])
    np.testing.assert_array_equal(np.flatnonzero(heldout), ds.sample_groups["rsn_test"])
    assert np.all(ds.weights[heldout] == 0) and np.all(ds.weights[~heldout] > 0)
    assert np.allclose(ds.weights[~heldout], ds.weights[~heldout][0])
    assert abs(ds.weights.sum() - 1.0) < 1e-12
    memory = np.all(anchors <= 10, axis=1)
    np.testing.assert_array_equal(ds.sample_groups["mem"], np.flatnonzero(memory))
    np.testing.assert_array_equal(ds.sample_groups["rsn_train"], np.flatnonzero(~memory & ~heldout))
    assert ds.sample_groups["rsn_test"].size == 2 * 100
    assert ds.params["heldout"] == ((11, 13), (13, 11))
    custom = tasks.make("rb_anchor", n=2000, heldout=[[20, 20]])
    _, anchors, _ = rb_parts(custom)
    assert {tuple(r) for r in anchors[custom.sample_groups["rsn_test"]]} == {(20, 20)}
    assert custom.params["heldout"] == ((20, 20),)
    as_array = tasks.make("rb_anchor", n=2000, heldout=np.array([[20, 20]]))
    assert as_array.params["heldout"] == ((20, 20),)
    np.testing.assert_array_equal(as_array.labels, custom.labels)
    none = tasks.make("rb_anchor", n=2000, heldout=())
    assert none.sample_groups["rsn_test"].size == 0 and np.all(none.weights > 0)


def memory_table(ds: TokenDataset) -> dict:
    key, anchors, _ = rb_parts(ds)
    memory = np.all(anchors <= 10, axis=1)
    table: dict = {}
    for z, a, y in zip(key[memory], map(tuple, anchors[memory]), ds.labels[memory], strict=True):
        assert table.setdefault((int(z), a), int(y)) == y  # same (z_p, anchors) -> same label
    return table


@pytest.mark.parametrize("mode", ["uniform", "local", "ranges"])
def test_rb_anchor_memory_labels(mode):
    ds = tasks.make("rb_anchor", n=200000, memory_labels=mode)
    table = memory_table(ds)
    assert len(table) > 5000  # many (z_p, tuple) pairs repeat, so consistency is really tested
    z = np.array([k[0] for k in table])
    s = np.array([sum(k[1]) for k in table])
    y = np.array(list(table.values()))
    if mode == "uniform":
        assert y.min() >= 21 and y.max() <= 120
        assert y.min() < 26 and y.max() > 115  # it covers Z
    elif mode == "local":
        assert np.all((y >= z - s) & (y <= z + s))
        assert np.any(y == z - s) and np.any(y == z + s)
    else:
        rank = np.array([(k[1][0] - 1) * 10 + (k[1][1] - 1) for k in table])
        group = 1 + rank // 25
        assert np.all((y >= 30) & (y <= 29 + 20 * group))
        for g in range(1, 5):
            assert y[group == g].max() == 29 + 20 * g  # the whole range is used
        _, anchors, _ = rb_parts(ds)
        rank_rows = (anchors[:, 0] - 1) * 10 + (anchors[:, 1] - 1)
        memory = np.all(anchors <= 10, axis=1)
        for g in range(1, 5):
            expected = np.flatnonzero(memory & (rank_rows // 25 + 1 == g))
            np.testing.assert_array_equal(ds.sample_groups[f"mem_group{g}"], expected)
    assert ds.vocab_size == 161


def test_rb_anchor_memory_table_depends_on_the_seed_only():
    """The (z_p, tuple) -> label table is drawn first, so it is the same for every n."""
    a = memory_table(tasks.make("rb_anchor", n=20000, seed=3))
    b = memory_table(tasks.make("rb_anchor", n=40000, seed=3))
    shared = set(a) & set(b)
    assert len(shared) > 100 and all(a[k] == b[k] for k in shared)
    c = memory_table(tasks.make("rb_anchor", n=20000, seed=4))
    shared = set(a) & set(c)
    assert len(shared) > 100 and sum(a[k] != c[k] for k in shared) > 0.9 * len(shared)


def test_rb_anchor_sizes():
    ds = tasks.make("rb_anchor")
    assert ds.n == 200000
    assert tasks.make("rb_anchor", n=1999).n == 1800  # 9 per tuple, 200 tuples
    emb = tasks.make("rb_anchor", L=3, n=2000)  # Emb-MLP case: p = 1, L = q + 1
    assert np.all(emb.tokens[:, 0] >= 21) and np.all(emb.tokens[:, 1:] <= 20)
    q1 = tasks.make("rb_anchor", q=1, L=4, n=200, heldout=[(12,)])
    _, anchors, _ = rb_parts(q1)
    assert anchors.shape == (200, 1) and q1.vocab_size == 1 + max(120 + 20, 109)


# ------------------------------------------------------------------------------------------------
# Rejected input: every error names the parameter


def test_unknown_task_name_lists_valid_names():
    with pytest.raises(ValueError, match="name") as info:
        tasks.make("addition")
    message = str(info.value)
    assert "'addition'" in message
    for name in ALL_TASKS:
        assert name in message
    with pytest.raises(ValueError, match="name"):
        tasks.describe("nope")
    with pytest.raises(ValueError, match="name"):
        tasks.summary(3)


def test_unknown_parameter():
    with pytest.raises(ValueError, match="n_numbers") as info:
        tasks.make("add", n_numbers=3)
    assert "N" in str(info.value)  # and the allowed ones
    with pytest.raises(ValueError, match="seed"):
        tasks.make("add", seed=0)  # complete enumerations take no seed
    with pytest.raises(ValueError, match="convention"):
        tasks.make("add", convention="main")


@pytest.mark.parametrize(
    ("name", "params", "error", "pattern"),
    [
        ("add", {"N": 1}, ValueError, r"N must be an int >= 2; got 1"),
        ("sub", {"N": 0}, ValueError, "N"),
        ("mul", {"N": -3}, ValueError, "N"),
        ("mod", {"N": 1}, ValueError, "N"),
        ("add", {"N": float("nan")}, TypeError, r"N must be an int >= 2; got nan"),
        ("add", {"N": 20.0}, TypeError, r"N must be an int >= 2; got 20\.0$"),
        ("add", {"N": "20"}, TypeError, "N"),
        ("add", {"N": True}, TypeError, "N"),
        ("add", {"N": None}, TypeError, "N"),
        ("add", {"N": 10**4}, ValueError, "N=10000"),
        ("mod", {"convention": "other"}, ValueError, "convention must be one of 'main', 'app"),
        ("modulus", {"M": 1}, ValueError, "M must be an int >= 2; got 1"),
        ("modulus", {"M": 2.5}, TypeError, "M"),
        ("modulus", {"N": 1}, ValueError, "N"),
        ("modsum", {"N": 1}, ValueError, "N"),
        ("modsum", {"L": 0}, ValueError, "L"),
        ("modsum", {"N": 50, "L": 5}, ValueError, "N=50, L=5"),
        ("modsum", {"N": 2, "L": 10**9}, ValueError, "L"),
        ("modsum", {"L": np.nan}, TypeError, "L"),
        ("label_law", {"law": "gamma"}, ValueError, "law must be one of"),
        ("label_law", {"labels": "mean"}, ValueError, "labels must be one of"),
        ("label_law", {"sigma": 0.0}, ValueError, "sigma must be a finite real number > 0"),
        ("label_law", {"sigma": float("nan")}, ValueError, "sigma"),
        ("label_law", {"mu": float("inf")}, ValueError, "mu"),
        ("label_law", {"mu": "25"}, TypeError, "mu"),
        ("label_law", {"lam": -1.0}, ValueError, "lam"),
        ("label_law", {"rate": 0}, ValueError, "rate"),
        ("label_law", {"x_max": 0}, ValueError, "x_max"),
        ("label_law", {"anchor": 50}, ValueError, "anchor must be an int >= 51; got 50"),
        ("label_law", {"seed": -1}, ValueError, "seed"),
        ("label_law", {"seed": 1.5}, TypeError, "seed"),
        ("anchor_parity", {"L": 0}, ValueError, "L"),
        ("anchor_parity", {"n": 0}, ValueError, "n must be"),
        ("anchor_parity", {"anchor_high": 5}, ValueError, "anchor_high"),
        ("anchor_parity", {"noise_low": 15}, ValueError, "noise_low"),
        ("anchor_parity", {"anchor_low": -1}, ValueError, "anchor_low"),
        ("anchor_parity", {"seed": None}, TypeError, "seed"),
        ("task4", {"n_x": 1}, ValueError, "n_x"),
        ("task4", {"n_a": 0}, ValueError, "n_a"),
        ("minmax", {"N": 1}, ValueError, "N"),
        ("rb_anchor", {"q": 0}, ValueError, "q"),
        ("rb_anchor", {"q": 9}, ValueError, r"q must be an int in \[1, 8\]"),
        ("rb_anchor", {"L": 1}, ValueError, "L"),
        ("rb_anchor", {"n": 199}, ValueError, "n must be an int >= 200"),
        ("rb_anchor", {"key_low": 20}, ValueError, "key_low"),
        ("rb_anchor", {"key_high": 20}, ValueError, "key_high"),
        ("rb_anchor", {"memory_labels": "random"}, ValueError, "memory_labels"),
        ("rb_anchor", {"heldout": ((1, 3),)}, ValueError, "heldout"),
        ("rb_anchor", {"heldout": ((11, 13, 15),)}, ValueError, "heldout"),
        ("rb_anchor", {"heldout": "11,13"}, TypeError, "heldout"),
        ("rb_anchor", {"heldout": ((11.0, 13),)}, TypeError, "heldout"),
        ("rb_anchor", {"q": 3, "L": 9}, ValueError, "heldout"),  # default pairs need q = 2
        ("rb_anchor", {"q": 3, "heldout": (), "memory_labels": "local"}, ValueError, "key_low"),
    ],
)
def test_bad_parameters_name_the_parameter(name, params, error, pattern):
    with pytest.raises(error, match=pattern):
        tasks.make(name, **params)


def test_rb_anchor_heldout_cannot_hold_every_pair():
    every = [(a, b) for a in range(11, 21) for b in range(11, 21)]
    with pytest.raises(ValueError, match="heldout"):
        tasks.make("rb_anchor", n=2000, heldout=every)


def test_label_law_distribution_rejects_bad_input():
    with pytest.raises(ValueError, match="law"):
        tasks.label_law_distribution("cauchy", 50)
    with pytest.raises(TypeError, match="x_max"):
        tasks.label_law_distribution("uniform", 50.0)
    with pytest.raises(ValueError, match="lam"):
        tasks.label_law_distribution("poisson", 50, lam=0)


def test_token_dataset_ids_must_lie_below_vocab_size():
    ok = TokenDataset(tokens=[[0, 2]], labels=[2], vocab_size=3)
    assert ok.vocab_size == 3 and ok.labels.tolist() == [2]
    bound = r"integer ids in \[0, vocab_size\) = \[0, 3\)"
    with pytest.raises(ValueError, match=rf"^labels must hold {bound}; got values in \[3, 3\]$"):
        TokenDataset(tokens=[[0, 2]], labels=[3], vocab_size=3)
    with pytest.raises(ValueError, match=rf"^tokens must hold {bound}; got values in \[-1, 2\]$"):
        TokenDataset(tokens=[[-1, 2]], labels=[0], vocab_size=3)
    with pytest.raises(
        ValueError, match=r"^sample_groups\['test'\] must hold integer ids in \[0, n\)"
    ):
        TokenDataset(tokens=[[0, 2]], labels=[0], vocab_size=3, sample_groups={"test": [1]})


@pytest.mark.parametrize("name", tasks.names())
def test_each_task_states_its_own_sample_count(name):
    """`tasks.sample_count` (what the memory estimate reads before anything is built) equals
    the built dataset's n, at the defaults (where they build fast) and at other parameters."""
    count = tasks.sample_count(name, {})
    assert isinstance(count, int) and count > 0
    if count <= 300_000:
        assert tasks.make(name).n == count
    special = {
        "modsum": dict(N=5, L=3),
        "label_law": dict(x_max=6, labels="expected"),
        "rb_anchor": dict(n=400),
    }
    other = special.get(
        name, {k: 7 for k in ("N", "n", "x_max", "n_x") if k in tasks.describe(name)}
    )
    assert tasks.make(name, **other).n == tasks.sample_count(name, other), other


@pytest.mark.parametrize("name", tasks.names())
def test_each_task_states_its_own_sequence_length(name):
    """`tasks.sequence_length` (what the memory estimate reads) is the built dataset's L, at the
    small sizes and at another L where the task takes one."""
    assert tasks.sequence_length(name, SMALL[name]) == tasks.make(name, **SMALL[name]).L
    if "L" in tasks.describe(name):
        other = {**SMALL[name], "L": 5 if name != "modsum" else 2}
        assert tasks.sequence_length(name, other) == tasks.make(name, **other).L == other["L"]
    assert tasks.sequence_length(name, {"L": "five"}) is None or "L" not in tasks.describe(name)


# lines the default suite never ran (tests/README.md, "Tests for lines the default suite never
# ran"): `TokenDataset.subset`, its repr and the shape and weight refusals


def hand_dataset(**kwargs) -> TokenDataset:
    """Four samples of length 2 over 5 tokens, weights 1:2:3:4, groups x = {0, 1}, y = {3}."""
    return TokenDataset(
        tokens=[[0, 1], [2, 1], [1, 1], [4, 3]],
        labels=[0, 2, 1, 3],
        vocab_size=5,
        groups={"x": [1, 0, 1], "y": [3]},
        weights=[1.0, 2.0, 3.0, 4.0],
        name="mine",
        params={"k": 1},
        **kwargs,
    )


def test_token_dataset_subset_keeps_the_samples_their_weights_and_the_vocabulary():
    ds = hand_dataset()
    sub = ds.subset(np.array([3, 1, 3]))
    assert sub.tokens.tolist() == [[4, 3], [2, 1], [4, 3]]
    assert sub.labels.tolist() == [3, 2, 3]
    # weights 4, 2, 4 of the chosen samples, normalized again over the subset
    np.testing.assert_allclose(sub.probabilities, [0.4, 0.2, 0.4])
    assert (sub.vocab_size, sub.name, sub.params, sub.n, sub.L) == (5, "mine", {"k": 1}, 3, 2)
    assert {k: v.tolist() for k, v in sub.groups.items()} == {"x": [0, 1], "y": [3]}
    assert ds.subset([0]).probabilities.tolist() == [1.0]


def test_token_dataset_repr_names_its_sizes_and_group_sizes():
    assert repr(hand_dataset()) == "TokenDataset(name='mine', n=4, L=2, V=5, groups={x:2, y:1})"
    one = TokenDataset(tokens=[[0, 1, 1]], labels=[1], vocab_size=2)
    assert repr(one) == "TokenDataset(name='custom', n=1, L=3, V=2, groups={})"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            dict(tokens=[0, 1, 1], labels=[0, 1, 1]),
            r"^tokens must be a non-empty int array of shape \[n, L\]; got shape \(3,\)$",
        ),
        (
            dict(tokens=np.zeros((2, 0), int), labels=[0, 1]),
            r"^tokens must be a non-empty int array of shape \[n, L\]; got shape \(2, 0\)$",
        ),
        (
            dict(tokens=[[0], [1]], labels=[0, 1], weights=[1.0, 2.0, 3.0]),
            r"^weights must have shape \[n\] = \[2\]; got \(3,\)$",
        ),
        (
            dict(tokens=[[0], [1]], labels=[0, 1], weights=[0.0, 0.0]),
            r"^weights must have a positive sum$",
        ),
        (
            dict(tokens=[[0], [1]], labels=[0, 1], weights=[1.0, np.inf]),
            r"^weights must be finite and non-negative$",
        ),
    ],
)
def test_token_dataset_refuses_bad_shapes_and_weights_naming_them(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TokenDataset(vocab_size=2, **kwargs)
    assert TokenDataset(tokens=[[0], [1]], labels=[0, 1], vocab_size=2, weights=[0.0, 3.0]).n == 2


def test_vocab_size_must_cover_the_largest_id_exactly():
    """add N=5's largest id is 10: ``vocab_size=11`` (ids 0..10) is the least `make` accepts,
    and 10 is refused by `make` itself, naming the least size."""
    assert tasks.make("add", N=5, vocab_size=11).vocab_size == 11
    with pytest.raises(ValueError, match="vocab_size must be at least 11 for task 'add'"):
        tasks.make("add", N=5, vocab_size=10)
