"""Tests of the result files: strict JSON with non-finite numbers as null plus a reason, the exact
round trip through `results.read_json`, and the provenance of `results.environment`."""

import json
import math
import os
import platform
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from ctx_staircase import results

SPECIALS = (math.nan, math.inf, -math.inf)


def strict_loads(text: str):
    """A strict parser: bare NaN / Infinity / -Infinity are errors, as in JavaScript or jq."""

    def refuse(constant):
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def plain(value):
    """``value`` as `read_json` returns it: lists for tuples and arrays, Python scalars."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if hasattr(value, "__array__"):  # NumPy and JAX arrays and scalars
        return plain(np.asarray(value).tolist())
    return value


def same(a, b) -> bool:
    """Equality with NaN equal to NaN, and the types of numbers kept (1 is not 1.0)."""
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


def random_value(rng: np.random.Generator, depth: int = 0):
    """A random nested structure of dicts, lists, tuples, NumPy arrays and scalars, rich in
    NaN and infinities."""
    kind = rng.integers(0, 9 if depth < 3 else 4)
    if kind == 0:
        return float(rng.choice([*SPECIALS, rng.normal(), 0.0, -0.0, 1e308]))
    if kind == 1:
        return [None, True, False, "NaN", "inf", int(rng.integers(-5, 5))][rng.integers(0, 6)]
    if kind == 2:
        return np.float32(rng.choice([*SPECIALS, 1.5]))
    if kind == 3:
        return np.int64(rng.integers(-3, 3))
    if kind == 4:
        shape = tuple(rng.integers(0, 4, size=rng.integers(1, 4)))
        array = rng.normal(size=shape)
        array[rng.random(shape) < 0.3] = rng.choice(SPECIALS)
        return array
    if kind in (5, 6):
        keys = ["a", "b", "", "loss", "nonfinite", "x__y", "1"]
        return {str(rng.choice(keys)): random_value(rng, depth + 1) for _ in range(3)}
    items = [random_value(rng, depth + 1) for _ in range(rng.integers(0, 4))]
    return tuple(items) if kind == 7 else items


def test_round_trip_of_random_nested_structures(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "r.json"
    nonfinite = 0
    for _ in range(300):
        value = random_value(rng)
        results.write_json(path, value)
        text = path.read_text()
        strict_loads(text)  # a strict parser accepts every file
        nonfinite += "__nonfinite" in text
        assert same(plain(value), results.read_json(path)), text
    assert nonfinite > 100  # the property was exercised on non-finite values


def test_encoding_of_scalars_lists_and_nested_arrays(tmp_path):
    record = {
        "loss": math.nan,
        "best": np.float64(-np.inf),
        "curve": np.array([0.5, np.inf, np.nan]),
        "grid": [[1.0, 2.0], [3.0, math.nan], [math.inf]],
        "runs": [{"final": math.inf}, {"final": 1.0}],
        "fine": [1.0, 2],
        "device": jnp.array([1.0, jnp.nan]),
    }
    path = results.write_json(tmp_path / "r.json", record)
    written = strict_loads(path.read_text())
    assert written["loss"] is None and written["loss__nonfinite"] == "nan"
    assert written["best"] is None and written["best__nonfinite"] == "-inf"
    assert written["curve"] == [0.5, None, None]
    assert written["curve__nonfinite"] == {"1": "inf", "2": "nan"}
    assert written["grid__nonfinite"] == {"1,1": "nan", "2,0": "inf"}
    assert written["runs"] == [{"final": None, "final__nonfinite": "inf"}, {"final": 1.0}]
    assert "runs__nonfinite" not in written and "fine__nonfinite" not in written
    assert written["device__nonfinite"] == {"1": "nan"}
    back = results.read_json(path)
    assert same(plain(record), back)
    assert list(back) == list(record)  # the siblings are gone, the order kept


@pytest.mark.parametrize(
    "root", [math.nan, -math.inf, [1.0, math.nan], [[math.inf]], np.array([np.nan, 2.0])]
)
def test_a_non_finite_root_that_is_not_an_object(tmp_path, root):
    path = results.write_json(tmp_path / "r.json", root)
    written = strict_loads(path.read_text())
    assert written["__nonfinite"] == "root"
    assert same(plain(root), results.read_json(path))


def test_finite_files_are_unchanged_json(tmp_path):
    record = {"a": [1, 2.5, None], "b": {"c": "d"}, "e": np.arange(3)}
    path = results.write_json(tmp_path / "r.json", record)
    assert strict_loads(path.read_text()) == {"a": [1, 2.5, None], "b": {"c": "d"}, "e": [0, 1, 2]}
    assert (
        results.write_json(tmp_path / "s.json", [1.0, 2.0]).read_text() == "[\n  1.0,\n  2.0\n]\n"
    )


def test_old_files_with_bare_nan_still_read(tmp_path):
    path = tmp_path / "old.json"
    path.write_text('{"loss": NaN, "curve": [Infinity, -Infinity, 1.0]}')
    back = results.read_json(path)
    assert math.isnan(back["loss"]) and back["curve"] == [math.inf, -math.inf, 1.0]


def test_reserved_keys_and_malformed_reasons_are_errors(tmp_path):
    with pytest.raises(ValueError, match="reserved"):
        results.write_json(tmp_path / "r.json", {"loss__nonfinite": 1})
    with pytest.raises(ValueError, match="key"):
        results.write_json(tmp_path / "r.json", {math.nan: 1})
    with pytest.raises(TypeError, match="complex"):
        results.write_json(tmp_path / "r.json", {"z": 1j})
    for text in (
        '{"a__nonfinite": "nan"}',  # a reason without its value
        '{"a": 1.0, "a__nonfinite": "nan"}',  # a reason for a number that is not null
        '{"a": [null], "a__nonfinite": {"3": "nan"}}',  # a path outside the list
        '{"a": null, "a__nonfinite": "huge"}',  # an unknown reason
    ):
        with pytest.raises(ValueError):
            results.loads(text)
    assert not (tmp_path / "r.json").exists()  # a failed write leaves no file


def test_keys_are_written_as_json_writes_them(tmp_path):
    record = {1: math.nan, 2.5: [math.inf], False: 1, None: 2, np.int64(7): math.nan}
    back = results.read_json(results.write_json(tmp_path / "r.json", record))
    assert same(back, {"1": math.nan, "2.5": [math.inf], "false": 1, "null": 2, "7": math.nan})


def test_a_writer_that_allows_nan_fails_the_strict_parser():
    """The check the round-trip tests rely on: bare NaN, as the old writer wrote, is refused."""
    with pytest.raises(ValueError, match="non-standard"):
        strict_loads(json.dumps({"loss": math.nan}, allow_nan=True))


# --------------------------------------------------------------------------------------------
# provenance


def test_cpu_reads_the_model_and_the_vector_extensions(tmp_path):
    """The host's CPU model and vector ISA, from the first processor of a cpuinfo file."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(
        "processor\t: 0\nmodel name\t: Test CPU 9000\n"
        "flags\t\t: fpu sse4_2 avx2 pae avx512f fma sse4_1 avx\n\n"
        "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n"
    )
    info = results.cpu(cpuinfo)
    assert info["model"] == "Test CPU 9000"
    assert info["isa"] == ["avx", "avx2", "avx512f", "fma", "sse4_1", "sse4_2"]
    assert info["cores"] == os.cpu_count() and info["machine"] == platform.machine()
    missing = results.cpu(tmp_path / "absent")
    assert missing["isa"] is None and missing["model"] == (platform.processor() or None)
    assert results.environment()["cpu"] == results.cpu()


def test_environment_records_schema_command_line_and_git_commit():
    info = results.environment()
    assert info["schema_version"] == results.SCHEMA_VERSION == 2
    assert info["command_line"] == sys.argv and all(isinstance(a, str) for a in sys.argv)
    json.dumps(info, allow_nan=False)
    head = subprocess.run(
        ["git", "-C", str(results.Path(results.__file__).parent), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
    )
    if head.returncode != 0:
        assert info["git_commit"] is None and info["git_dirty"] is None
    else:
        assert info["git_commit"] == head.stdout.strip()
        assert isinstance(info["git_dirty"], bool)


def git(directory, *arguments):
    subprocess.run(
        ["git", "-C", str(directory), *arguments],
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "PATH": results.os.environ.get("PATH", ""),
        },
    )


def test_git_state_of_a_checkout_clean_dirty_and_untracked(tmp_path):
    package = tmp_path / "repo" / "pkg"
    package.mkdir(parents=True)
    (package / "code.py").write_text("x = 1\n")
    git(tmp_path / "repo", "init", "-q")
    assert results.git_state(package) == (None, None)  # no commit yet: nothing tracked
    git(tmp_path / "repo", "add", ".")
    git(tmp_path / "repo", "commit", "-q", "-m", "one")
    commit, dirty = results.git_state(package)
    assert len(commit) == 40 and dirty is False
    (package / "notes.txt").write_text("untracked files do not make a checkout dirty")
    assert results.git_state(package) == (commit, False)
    (package / "code.py").write_text("x = 2\n")
    assert results.git_state(package) == (commit, True)
    # an installed copy inside a checkout's untracked folder belongs to no commit
    installed = tmp_path / "repo" / "venv" / "pkg"
    installed.mkdir(parents=True)
    (installed / "code.py").write_text("x = 1\n")
    assert results.git_state(installed) == (None, None)


def test_git_state_never_fails(tmp_path, monkeypatch):
    assert results.git_state(tmp_path) == (None, None)  # not a checkout
    assert results.git_state(tmp_path / "absent") == (None, None)

    def timeout(*args, **kwargs):
        raise subprocess.TimeoutExpired(args[0], kwargs["timeout"])

    monkeypatch.setattr(results.subprocess, "run", timeout)
    assert results.git_state() == (None, None)
    info = results.environment()
    assert info["git_commit"] is None and info["git_dirty"] is None
    monkeypatch.undo()
    monkeypatch.setenv("PATH", str(tmp_path))  # git missing
    assert results.git_state() == (None, None)


@pytest.mark.parametrize("stop", [KeyboardInterrupt, SystemExit, OSError])
def test_an_interrupted_write_leaves_no_file_and_no_temporary(tmp_path, monkeypatch, stop):
    """Ctrl-C (KeyboardInterrupt), an exit or a disk error during the rename: the old file is
    untouched and no temporary is left behind (a handler of Exception alone would leak the
    temporary on Ctrl-C)."""
    path = tmp_path / "result.json"
    results.write_json(path, {"old": 1})

    def interrupted(source, target):
        raise stop()

    monkeypatch.setattr(results.os, "replace", interrupted)
    with pytest.raises(stop):
        results.write_json(path, {"new": 2})
    monkeypatch.undo()
    assert results.read_json(path) == {"old": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"]


def test_source_fingerprint_covers_the_sources_of_every_subpackage(tmp_path):
    """A stored unit is reused only under the fingerprint of the code that made it, so a change
    in any source file of the package, a subpackage's included (``cli/``, ``experiments/``),
    changes it; other files do not."""
    import importlib.util
    import shutil

    package = tmp_path / "package"
    (package / "sub" / "deeper").mkdir(parents=True)
    shutil.copy(results.__file__, package / "results.py")
    (package / "top.py").write_text("A = 1\n")
    (package / "sub" / "mod.py").write_text("B = 1\n")
    (package / "sub" / "deeper" / "leaf.py").write_text("C = 1\n")
    (package / "notes.txt").write_text("not a source\n")
    spec = importlib.util.spec_from_file_location("copied_results", package / "results.py")
    copied = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copied)

    seen = {copied.source_fingerprint()}
    for path, text in (
        ("top.py", "A = 2\n"),
        ("sub/mod.py", "B = 2\n"),
        ("sub/deeper/leaf.py", "C = 2\n"),
    ):
        (package / path).write_text(text)
        seen.add(copied.source_fingerprint())
    assert len(seen) == 4  # each edit gave a new fingerprint
    (package / "notes.txt").write_text("edited\n")
    assert copied.source_fingerprint() in seen  # unchanged by a non-source file
    assert len(copied.source_fingerprint()) == 16
