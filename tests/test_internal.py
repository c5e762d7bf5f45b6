"""Tests of `ctx_staircase.internal`: the argument checks and the pytree helpers.

Every check is exercised at its bounds (inclusive and exclusive), with None, with bools (never an
int), with numpy scalars (always a number), with NaN and ±inf (never finite), and with a message
that must name the parameter, what is allowed and the value given.
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import internal
from ctx_staircase.internal import (
    WrongTypeError,
    all_finite,
    check_choice,
    check_ids,
    check_int,
    check_real,
    check_scalar,
    check_type,
    select,
)

# --------------------------------------------------------------------------------------------
# WrongTypeError


def test_wrong_type_error_is_both_type_and_value_error():
    assert issubclass(WrongTypeError, TypeError)
    assert issubclass(WrongTypeError, ValueError)
    for catch in (TypeError, ValueError):
        with pytest.raises(catch):
            check_int("3", "n")


# --------------------------------------------------------------------------------------------
# check_int


@pytest.mark.parametrize(
    "value", [1, 7, np.int8(3), np.int32(5), np.int64(9), np.uint8(4), np.uint64(2)]
)
def test_check_int_accepts_python_and_numpy_ints_as_a_plain_int(value):
    checked = check_int(value, "n")
    assert type(checked) is int
    assert checked == int(value)


@pytest.mark.parametrize(
    "value", [True, False, np.bool_(True), 1.0, 2.5, float("nan"), "3", None, [1], np.array([1])]
)
def test_check_int_refuses_non_ints_with_wrong_type_error(value):
    with pytest.raises(WrongTypeError, match=r"^n must be an int >= 1; got "):
        check_int(value, "n")


def test_check_int_bounds_are_inclusive():
    assert check_int(2, "n", 2, 5) == 2
    assert check_int(5, "n", 2, 5) == 5
    for outside in (1, 6):
        with pytest.raises(ValueError, match=rf"^n must be an int in \[2, 5\]; got {outside}$"):
            check_int(outside, "n", 2, 5)


def test_check_int_range_error_is_a_value_error_not_a_type_error():
    with pytest.raises(ValueError) as info:
        check_int(0, "n")
    assert not isinstance(info.value, TypeError)


def test_check_int_default_low_is_one():
    assert check_int(1, "n") == 1
    with pytest.raises(ValueError, match=r"^n must be an int >= 1; got 0$"):
        check_int(0, "n")


@pytest.mark.parametrize(
    ("low", "high", "allowed"),
    [
        (None, None, "an int"),
        (0, None, "an int >= 0"),
        (None, 3, "an int <= 3"),
        (-2, 2, r"an int in \[-2, 2\]"),
    ],
)
def test_check_int_message_names_parameter_and_allowed_range(low, high, allowed):
    assert check_int(0, "seed", low, high) == 0
    with pytest.raises(WrongTypeError, match=rf"^seed must be {allowed}; got 'x'$"):
        check_int("x", "seed", low, high)


def test_check_int_unbounded_accepts_negative_and_huge():
    assert check_int(-(10**30), "k", None) == -(10**30)
    assert check_int(10**30, "k", None) == 10**30


def test_check_int_high_only():
    assert check_int(-100, "k", None, 3) == -100
    with pytest.raises(ValueError, match=r"^k must be an int <= 3; got 4$"):
        check_int(4, "k", None, 3)


def test_check_int_numpy_value_in_the_message_reads_as_a_plain_int():
    with pytest.raises(ValueError, match=r"got 0$"):
        check_int(np.int64(0), "n")


def test_check_int_none_ok_and_why():
    assert check_int(None, "size", none_ok=True) is None
    with pytest.raises(WrongTypeError, match=r"^size must be an int >= 1; got None$"):
        check_int(None, "size")
    with pytest.raises(ValueError, match=r"^d must be an int >= 1; got 0; it needs 80 GB$"):
        check_int(0, "d", why="; it needs 80 GB")
    with pytest.raises(WrongTypeError, match=r"^d must be an int >= 1; got 1.5; it needs 80 GB$"):
        check_int(1.5, "d", why="; it needs 80 GB")


# --------------------------------------------------------------------------------------------
# check_real


@pytest.mark.parametrize("value", [0, 3, -2.5, np.float32(0.25), np.float64(1e300), np.int64(7)])
def test_check_real_accepts_numbers_as_a_float(value):
    checked = check_real(value, "x")
    assert type(checked) is float
    assert checked == float(value)


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -math.inf, np.float32("nan"), np.inf]
)
def test_check_real_refuses_non_finite_even_unbounded(value):
    with pytest.raises(ValueError, match=r"^x must be a finite real number; got "):
        check_real(value, "x")


@pytest.mark.parametrize("value", [True, np.bool_(False), "1.5", None, 1j, [1.0], np.zeros(1)])
def test_check_real_refuses_non_numbers_with_wrong_type_error(value):
    with pytest.raises(WrongTypeError, match=r"^x must be a finite real number; got "):
        check_real(value, "x")


def test_check_real_closed_bounds_are_inclusive():
    assert check_real(0, "p", low=0, high=1) == 0.0
    assert check_real(1, "p", low=0, high=1) == 1.0
    for outside in (-1e-12, 1 + 1e-12):
        with pytest.raises(ValueError, match=r"^p must be a finite real number in \[0, 1\]; got "):
            check_real(outside, "p", low=0, high=1)


def test_check_real_open_bounds_are_exclusive():
    kw = {"low": 0, "high": 1, "low_open": True, "high_open": True}
    assert check_real(1e-300, "p", **kw) == 1e-300
    assert check_real(1 - 1e-16, "p", **kw) == 1 - 1e-16
    for edge in (0.0, 1.0):
        with pytest.raises(
            ValueError, match=rf"^p must be a finite real number in \(0, 1\); got {edge}$"
        ):
            check_real(edge, "p", **kw)


def test_check_real_half_open_and_one_sided_messages():
    with pytest.raises(ValueError, match=r"^s must be a finite real number > 0; got 0.0$"):
        check_real(0.0, "s", low=0, low_open=True)
    with pytest.raises(ValueError, match=r"^s must be a finite real number >= 0; got -1.0$"):
        check_real(-1.0, "s", low=0)
    with pytest.raises(ValueError, match=r"^s must be a finite real number < 2; got 2.0$"):
        check_real(2.0, "s", high=2, high_open=True)
    with pytest.raises(ValueError, match=r"^s must be a finite real number <= 2; got 3.0$"):
        check_real(3.0, "s", high=2)
    with pytest.raises(ValueError, match=r"^s must be a finite real number in \[0, 1\); got 1.0$"):
        check_real(1.0, "s", low=0, high=1, high_open=True)
    assert check_real(0.0, "s", low=0, high=1, high_open=True) == 0.0


def test_check_real_inf_is_refused_even_against_an_open_bound():
    with pytest.raises(ValueError, match=r"> 0; got inf"):
        check_real(math.inf, "s", low=0, low_open=True)


def test_check_real_none_ok():
    assert check_real(None, "mu", none_ok=True) is None
    with pytest.raises(WrongTypeError, match=r"^mu must be"):
        check_real(None, "mu")


# --------------------------------------------------------------------------------------------
# check_scalar


@pytest.mark.parametrize(
    "value",
    [
        0.5,
        3,
        np.float32(2.0),
        np.int64(4),
        np.uint8(1),
        np.asarray(1.5),
        jnp.asarray(2.0),
        jnp.asarray(3, jnp.int32),
    ],
)
def test_check_scalar_returns_a_real_scalar_unchanged(value):
    assert check_scalar(value, "g") is value


@pytest.mark.parametrize(
    "value",
    [
        True,
        np.bool_(True),
        jnp.asarray(True),
        1j,
        np.complex64(1),
        "0.5",
        None,
        [1.0],
        np.ones(2),
        jnp.ones((1,)),
    ],
)
def test_check_scalar_refuses_other_kinds_and_shapes(value):
    with pytest.raises(WrongTypeError, match=r"^g must be a finite real scalar; got "):
        check_scalar(value, "g")


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, np.float32("nan"), jnp.asarray(jnp.inf)]
)
def test_check_scalar_refuses_non_finite(value):
    with pytest.raises(ValueError, match=r"^g must be a finite real scalar; got "):
        check_scalar(value, "g")


def test_check_scalar_low_bound_inclusive_and_open():
    assert check_scalar(0.0, "s", low=0) == 0.0
    with pytest.raises(ValueError, match=r"^s must be a finite real scalar >= 0; got -1e-09$"):
        check_scalar(-1e-9, "s", low=0)
    assert check_scalar(1e-300, "s", low=0, low_open=True) == 1e-300
    with pytest.raises(ValueError, match=r"^s must be a finite real scalar > 0; got 0.0$"):
        check_scalar(0.0, "s", low=0, low_open=True)
    with pytest.raises(ValueError, match=r"> 0; got Array\(0"):
        check_scalar(jnp.asarray(0.0), "s", low=0, low_open=True)


def test_check_scalar_accepts_a_python_int_beyond_int64():
    assert check_scalar(10**30, "big", low=0) == 10**30


def test_check_scalar_nonzero():
    assert check_scalar(-2.0, "rate", nonzero=True) == -2.0
    for zero in (0, 0.0, -0.0, np.asarray(0.0)):
        with pytest.raises(ValueError, match=r"^rate must be a finite nonzero real scalar; got "):
            check_scalar(zero, "rate", nonzero=True)


def test_check_scalar_lets_a_tracer_through_but_checks_its_shape_and_dtype():
    f = jax.jit(lambda g: check_scalar(g, "g", low=0, low_open=True) * 2)
    assert float(f(-1.0)) == -2.0  # no value to check under jit
    assert np.array_equal(jax.vmap(f)(jnp.asarray([1.0, -1.0])), [2.0, -2.0])
    with pytest.raises(WrongTypeError, match=r"^g must be a finite real scalar > 0"):
        f(jnp.ones(2))
    with pytest.raises(WrongTypeError, match=r"^g must be"):
        jax.jit(lambda g: check_scalar(g, "g"))(jnp.asarray(True))


def test_checks_do_not_import_jax():
    import subprocess
    import sys

    code = (
        "import sys; from ctx_staircase import internal; "
        "internal.check_int(3, 'n'); internal.check_real(0.5, 'x'); "
        "internal.check_scalar(0.5, 'x'); internal.check_choice('a', 'c', ('a',)); "
        "internal.check_ids([0, 1], 'i', 2); print('jax' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr


# --------------------------------------------------------------------------------------------
# check_ids


def test_check_ids_returns_the_array_and_accepts_the_bounds():
    ids = np.array([[0, 4], [2, 1]], np.int32)
    assert check_ids(ids, "tokens", 5) is ids
    assert np.array_equal(check_ids([4, 0], "tokens", 5), [4, 0])
    assert check_ids(np.uint8([3]), "tokens", 4).dtype == np.uint8


@pytest.mark.parametrize(
    ("bad", "seen"), [([0, 5], r"\[0, 5\]"), ([-1, 2], r"\[-1, 2\]"), ([7], r"\[7, 7\]")]
)
def test_check_ids_range_is_half_open(bad, seen):
    allowed = r"integer ids in \[0, vocab_size\) = \[0, 5\)"
    with pytest.raises(ValueError, match=rf"^tokens must hold {allowed}; got values in {seen}$"):
        check_ids(bad, "tokens", 5)


def test_check_ids_names_the_bound():
    with pytest.raises(ValueError, match=r"^idx must hold integer ids in \[0, n\) = \[0, 3\)"):
        check_ids([3], "idx", 3, "n")


@pytest.mark.parametrize("bad", [[0.0, 1.0], np.array([True, False]), ["a"]])
def test_check_ids_refuses_non_integer_arrays(bad):
    with pytest.raises(
        WrongTypeError,
        match=r"^ids must hold integer ids in \[0, vocab_size\) = \[0, 4\); got dtype",
    ):
        check_ids(bad, "ids", 4)


def test_check_ids_empty_passes_as_int64():
    for empty in ([], np.zeros(0), np.zeros((0, 3), np.float32)):
        out = check_ids(empty, "ids", 4)
        assert out.dtype == np.int64 and out.size == 0
        assert out.shape == np.shape(empty)


# --------------------------------------------------------------------------------------------
# check_choice, check_type


def test_check_choice_returns_the_value_and_lists_the_choices():
    assert check_choice("b", "mode", ("a", "b")) == "b"
    assert check_choice(2, "k", range(4)) == 2
    with pytest.raises(ValueError, match=r"^mode must be one of 'a', 'b'; got 'c'$"):
        check_choice("c", "mode", ("a", "b"))
    with pytest.raises(ValueError, match=r"^mode must be one of 'a', 'b'; got 1$"):
        check_choice(1, "mode", ["a", "b"])


def test_check_choice_accepts_a_dict_or_generator_of_choices():
    assert check_choice("x", "name", {"x": 1, "y": 2}) == "x"
    assert check_choice("y", "name", (k for k in "xy")) == "y"
    with pytest.raises(ValueError, match=r"^name must be one of 'x', 'y'; got 'z'$"):
        check_choice("z", "name", {"x": 1, "y": 2})


@pytest.mark.parametrize("value", [["a"], {"a": 1}, np.array(["a", "b"]), np.array([1, 2])])
def test_check_choice_unhashable_or_array_value_gets_the_message(value):
    with pytest.raises(ValueError, match=r"^mode must be one of 'a', 'b'; got "):
        check_choice(value, "mode", {"a": 0, "b": 1})


def test_check_type():
    assert check_type(True, "flag", int, "an int") is True  # bool is an int subclass
    assert check_type("s", "text", (bytes, str), "a str") == "s"
    with pytest.raises(WrongTypeError, match=r"^text must be a str; got int 5$"):
        check_type(5, "text", str, "a str")


def test_every_check_has_value_first_then_name():
    import inspect

    for name in (
        "check_int",
        "check_real",
        "check_scalar",
        "check_ids",
        "check_choice",
        "check_type",
    ):
        parameters = list(inspect.signature(getattr(internal, name)).parameters)
        assert parameters[:2] == ["value", "name"], name


# --------------------------------------------------------------------------------------------
# all_finite, select


def test_all_finite():
    tree = {"a": jnp.ones(3), "b": (jnp.zeros((2, 2)), jnp.asarray(4, jnp.int32))}
    assert bool(all_finite(tree))
    for bad in (jnp.nan, jnp.inf, -jnp.inf):
        broken = {**tree, "a": tree["a"].at[1].set(bad)}
        assert not bool(all_finite(broken))
    assert not bool(all_finite({"deep": [jnp.ones(2), {"x": jnp.asarray([1.0, jnp.nan])}]}))
    assert bool(all_finite({})) and bool(all_finite([]))
    assert all_finite(tree).shape == () and all_finite(tree).dtype == jnp.bool_


def test_all_finite_under_jit():
    f = jax.jit(all_finite)
    assert bool(f([jnp.ones(2)])) and not bool(f([jnp.asarray([jnp.nan])]))


def test_select_picks_new_or_old_leafwise():
    new = {"w": jnp.ones((2, 2)), "n": jnp.asarray(5, jnp.int32)}
    old = {"w": jnp.zeros((2, 2)), "n": jnp.asarray(3, jnp.int32)}
    kept = select(jnp.asarray(True), new, old)
    assert np.array_equal(kept["w"], new["w"]) and int(kept["n"]) == 5
    frozen = select(jnp.asarray(False), new, old)
    assert np.array_equal(frozen["w"], old["w"]) and int(frozen["n"]) == 3
    assert frozen["n"].dtype == jnp.int32 and jax.tree.structure(frozen) == jax.tree.structure(old)


def test_select_with_a_batched_keep_under_vmap():
    new, old = jnp.arange(3.0), -jnp.arange(3.0)
    keep = jnp.asarray([True, False, True])
    out = jax.vmap(select)(keep, new, old)
    assert np.array_equal(out, [0.0, -1.0, 2.0])


def test_module_docstring_states_the_message_style():
    assert re.search(r"\{name\} must be", internal.__doc__)
