"""The label vocabulary as a task parameter (theory/regimes.md R2): every task takes ``vocab_size``;
the extra ids are never inputs or labels, get zero-probability rows everywhere, and switch on the
common order-0 drive of theory/closed_form.md (C1) that the paper's early collapse rests on."""

import numpy as np
import pytest

from ctx_staircase import cli, closed_form, flows, metrics, signatures, sweep, tasks, train

SMALL = {name: {} for name in tasks.names()} | {
    "modsum": {"N": 7, "L": 3},
    "rb_anchor": {"n": 2000},
    "label_law": {"x_max": 10, "anchor": 20},
}


@pytest.mark.parametrize("name", tasks.names())
def test_every_task_takes_a_wider_vocabulary_and_keeps_its_data(name):
    base = tasks.make(name, **SMALL[name])
    wide = tasks.make(name, **SMALL[name], vocab_size=2 * base.vocab_size + 1)
    assert wide.vocab_size == 2 * base.vocab_size + 1
    assert base.params["vocab_size"] is None and wide.params["vocab_size"] == wide.vocab_size
    np.testing.assert_array_equal(wide.tokens, base.tokens)
    np.testing.assert_array_equal(wide.labels, base.labels)
    assert wide.groups.keys() == base.groups.keys()
    for key in base.groups:
        np.testing.assert_array_equal(wide.groups[key], base.groups[key])
    # the minimal vocabulary is also accepted explicitly, and changes nothing
    assert tasks.make(name, **SMALL[name], vocab_size=base.vocab_size).vocab_size == base.vocab_size


def test_acceptance_mod_81():
    assert tasks.make("mod", N=40, vocab_size=81).vocab_size == 81
    assert tasks.make("mod", N=40).vocab_size == 41
    assert tasks.describe("mod")["vocab_size"] is None


@pytest.mark.parametrize(
    "value,error",
    [
        (40, ValueError),  # below 1 + largest id (40)
        (0, ValueError),
        (-5, ValueError),
        (41.0, TypeError),
        (2.5, TypeError),
        (float("nan"), TypeError),
        (True, TypeError),
        ("81", TypeError),
    ],
)
def test_bad_vocab_size_names_the_parameter(value, error):
    with pytest.raises(error, match="vocab_size"):
        tasks.make("mod", N=40, vocab_size=value)


def test_too_small_vocab_size_says_the_minimum():
    with pytest.raises(ValueError, match="at least 41"):
        tasks.make("mod", N=40, vocab_size=40)


@pytest.mark.parametrize("value", ["40", "0", "-3", "2.5", "nan", "'x'", "1e3"])
def test_cli_bad_vocab_size_is_one_line_exit_2_and_no_files(tmp_path, capsys, value):
    out = tmp_path / "never"
    argv = ["signatures", "mod", "--param", "N=40", "--param", f"vocab_size={value}"]
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and "vocab_size" in err
    assert not out.exists()


def test_cli_list_shows_the_vocab_size_parameter(capsys):
    assert cli.main(["list"]) == 0
    assert "vocab_size" in capsys.readouterr().out


def test_unused_ids_get_zero_rows_in_signatures_not_nan():
    ds = tasks.make("mod", N=8, vocab_size=20)
    extra = np.arange(9, 20)
    for order in (0, 1):
        phi = np.asarray(signatures.label_signature(ds, order))
        assert np.all(np.isfinite(phi))
        assert np.all(phi[extra] == 0)  # never an input: no conditional law
        assert np.all(phi[:, extra] == 0)  # never a label
    base = np.asarray(signatures.label_signature(tasks.make("mod", N=8), 1))
    np.testing.assert_array_equal(
        np.asarray(signatures.label_signature(ds, 1))[:9, :9, :9], base[:9, :9, :9]
    )


def test_drive_matrix_closed_form_and_flow_accept_unused_ids():
    ds = tasks.make("mod", N=8, vocab_size=20)
    M = np.asarray(flows.drive_matrix(signatures.signature_set(ds, 0), ds.vocab_size))
    assert M.shape == (20, 20) and np.all(np.isfinite(M))
    np.testing.assert_allclose(M.sum(axis=0), 0, atol=1e-12)  # 1^T M = 0 (theory/closed_form.md C1)
    assert np.all(M[:, 9:] == 0)  # an id that is never an input has no column
    # F_mod: phi^{y;0} is the same for every number, so every number's column is the same
    # (the common drive), and it is non-zero only because 11 ids are never labels
    numbers = ds.groups["numbers"]
    np.testing.assert_allclose(M[:, numbers], M[:, numbers[:1]].repeat(8, 1), atol=1e-12)
    labels = np.isin(np.arange(20), ds.groups["labels"])
    expected = np.where(labels, 1 / 8 - 1 / 20, -1 / 20) / 4  # L r_a (phi - 1/V), L r_a = 1/4
    np.testing.assert_allclose(M[:, numbers[0]], expected, atol=1e-15)
    minimal = tasks.make("mod", N=8)  # V = 9: only id 8 (an input) is never a label
    M9 = np.asarray(flows.drive_matrix(signatures.signature_set(minimal, 0), 9))
    expected = np.where(labels[:9], 1 / 8 - 1 / 9, -1 / 9) / 4
    np.testing.assert_allclose(M9[:, numbers[0]], expected, atol=1e-15)
    rng = np.random.default_rng(0)
    W_E0, W_U0 = (1e-2 * rng.standard_normal((20, 16)) for _ in range(2))
    solution = closed_form.linear_solution(M, W_E0, W_U0, 1.0)
    W_E, W_U = solution(np.array([0.0, 5.0, 50.0]))
    assert np.all(np.isfinite(np.asarray(W_E))) and np.all(np.isfinite(np.asarray(W_U)))
    for W_t in np.asarray(W_E):  # ids never seen are in the kernel of M: frozen
        np.testing.assert_allclose(W_t[9:], W_E0[9:], atol=1e-12)
    sigs = signatures.signature_set(ds, 1)
    field = flows.ffn_signature_flow(sigs, (1.0, 0.5))
    dy = field(0.0, {"W_E": W_E0, "W_U": W_U0}, None)
    assert all(np.all(np.isfinite(np.asarray(v))) for v in dy.values())
    np.testing.assert_array_equal(np.asarray(dy["W_E"])[9:], 0)  # unused rows get no drive


def test_training_on_a_wide_vocabulary_is_finite_and_starts_at_ln_v():
    ds = tasks.make("add", N=6, vocab_size=40)
    config = train.TrainConfig(optimizer="gd", lr=1.0, steps=20, snapshots=(0, 20))
    result = sweep.train_sweep("ffn", ds, config, gammas=[2.0], seeds=[0], d=16)
    loss = np.asarray(result.trajectory.loss)[0]
    assert np.all(np.isfinite(loss)) and result.status[0].ok
    np.testing.assert_allclose(loss[0], np.log(40), atol=1e-3)  # tiny init: uniform softmax


@pytest.mark.parametrize("vocab_size,collapses", [(81, True), (41, False)])
def test_mod_collapses_early_under_gd_only_with_unused_label_ids(vocab_size, collapses):
    """The measurement behind the wide-vocabulary regime (theory/regimes.md R2): F_mod N=40, ReLU
    FFN d=128, gamma=1, full-batch GD lr 2. With V = 2N+1 the common order-0 drive grows every
    number embedding along one direction (mean off-diagonal cosine 0.98 at step 120); with
    V = N+1 there is almost no such drive (0.03)."""
    ds = tasks.make("mod", N=40, vocab_size=vocab_size)
    config = train.TrainConfig(optimizer="gd", lr=2.0, steps=120, snapshots=(0, 120))
    result = sweep.train_sweep("ffn", ds, config, gammas=[1.0], seeds=[0], d=128)
    W = np.asarray(result.trajectory.W_E)[0][:, ds.groups["numbers"]]
    cosine = np.asarray(metrics.upper_triangle(metrics.cosine_matrix(W))).mean(axis=-1)
    assert abs(cosine[0]) < 0.05  # random init: no shared direction
    if collapses:
        assert cosine[1] >= 0.9
    else:
        assert cosine[1] < 0.2
