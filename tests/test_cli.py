"""The command line end to end: outputs on success, one-line errors and no files on bad input."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ctx_staircase import __version__, cli


def test_list_names_every_task(capsys):
    from ctx_staircase import tasks

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in tasks.names():
        assert name in out


def test_signatures_writes_figure_arrays_and_summary(tmp_path):
    out = tmp_path / "sig"
    assert cli.main(["signatures", "add", "--param", "N=8", "--order", "1", "--out", str(out)]) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["task"] == "add" and summary["params"]["N"] == 8
    assert summary["status"] == "ok" and "jax" in summary["environment"]["packages"]
    assert set(summary["geometry"]) == {"order0", "order1", "order1_k1", "order1_k4"}
    arrays = np.load(out / "arrays.npz")
    a = np.arange(1, 9)
    expected = np.maximum(0, 1 - np.abs(a[:, None] - a[None, :]) / 8)  # theory/signatures.md (S3)
    np.testing.assert_allclose(arrays["order0"], expected, atol=1e-12)
    png = (out / "signature_geometry.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 300_000


TRAIN = ["train", "add", "--param", "N=6", "--steps", "5", "--d", "8"]
THEORY = ["theory", "add", "--param", "N=6", "--steps", "20", "--d", "8"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["signatures", "nope"], "name"),
        (["signatures", "add", "--param", "N=1"], "N"),
        (["signatures", "add", "--param", "N=nan"], "N"),
        (["signatures", "add", "--param", "bogus=3"], "bogus"),
        (["signatures", "add", "--param", "N"], "--param"),
        (["signatures", "add", "--order", "2"], "--order"),
        (["signatures", "add", "--group", "anchors"], "group"),
        ([*TRAIN, "--model", "lstm"], "--model"),
        ([*TRAIN, "--optimizer", "lbfgs"], "optimizer"),
        ([*TRAIN, "--lr", "0"], "lr"),
        ([*TRAIN, "--lr", "nan"], "lr"),
        ([*TRAIN, "--steps", "0"], "steps"),
        ([*TRAIN, "--steps", "5", "--snapshot-steps", "0", "9"], "snapshots"),
        ([*TRAIN, "--gamma", "0.5", "nan"], "gamma"),
        ([*TRAIN, "--vocab-size", "4"], "vocab_size"),
        ([*TRAIN, "--activation", "tanh"], "activation"),
        ([*THEORY, "--model", "gpt"], "model"),
        ([*THEORY, "--max-order", "2"], "max_orders"),
        ([*THEORY, "--gamma", "nan"], "gamma"),
        ([*THEORY, "--threshold", "-1"], "threshold"),
        ([*THEORY, "--steps", "0"], "steps"),
        ([*THEORY, "--prediction", "full"], "prediction"),
        (["run", "nope"], "experiment"),
        (["run", "fig2_geometry", "--tiny", "--quick"], "--tiny"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_files(tmp_path, capsys, argv, needle):
    out = tmp_path / "never"
    assert cli.main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and needle in err
    assert not out.exists()


@pytest.mark.slow  # a real CLI process, over 20 s
def test_train_writes_curves_figures_and_resumes(tmp_path, capsys):
    out = tmp_path / "train"
    flags = "--gamma 0.8 1.2 --steps 30 --d 16 --lr 0.01 --probe-snapshots 2"
    argv = ["train", "add", "--param", "N=8", *flags.split(), "--out", str(out)]
    assert cli.main(argv) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["status"] == ["ok", "ok"]
    alignment = summary["alignment"]
    assert np.shape(alignment["rho0"]) == (2, len(alignment["steps"]))
    assert np.shape(alignment["probe_heldout_corr"]) == (2, 2)
    for name in ("training.png", "geometry.png", "sweep/arrays.npz", "alignment.npz"):
        assert (out / name).stat().st_size > 0
    assert len(list((out / "sweep" / "units").glob("lane_*.npz"))) == 2
    capsys.readouterr()
    assert cli.main(argv) == 0  # a rerun finds every lane saved and recomputes none
    assert "ok" in capsys.readouterr().out  # the table goes to stdout


@pytest.mark.slow  # a real CLI process, over 20 s
def test_theory_writes_overlay_escape_plot_and_numbers(tmp_path):
    out = tmp_path / "theory"
    flags = "--gamma 0.8 1.2 --max-order 0 1 --d 16 --steps 200 --lr 0.5"
    argv = ["theory", "add", "--param", "N=6", *flags.split(), "--out", str(out)]
    assert cli.main(argv) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert [run["gamma"] for run in summary["runs"]] == [0.8, 1.2]
    names = set(summary["runs"][0]["comparisons"])
    assert names == {
        "closed_form",
        "closed_form_feedback",
        "signature_flow_m0",
        "signature_flow_m1",
    }
    for run in summary["runs"]:
        for c in run["comparisons"].values():
            assert {
                "weight_rel_error_max",
                "gram_rel_error_max",
                "escape_time",
                "onset_time",
                "rho_distance_max",
            } <= set(c)
    assert {"simulation", "closed_form", "analytic"} <= set(summary["escape_slope"])
    for name in ("theory_overlay.png", "escape_time.png"):
        assert (out / name).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow  # a real CLI process, over 20 s
def test_flagship_run_tiny_end_to_end(tmp_path, capsys):
    out = tmp_path / "staircase"
    assert cli.main(["run", "--tiny", "--out", str(out)]) == 0
    record = json.loads((out / "results" / "staircase.json").read_text())
    assert record["name"] == "staircase" and record["tiny"] is True
    assert set(record["numbers"]) == {"add", "mod", "theory"}
    for task in ("add", "mod"):
        numbers = record["numbers"][task]
        assert len(numbers["rho0"]) == len(numbers["steps"]) and numbers["probe_corr"]
        assert np.shape(numbers["spectrum"]) == (len(numbers["steps"]), 5)  # k = 0..N/2
    assert {c["item"] for c in record["claims"]} >= {"§8.3", "§8.5", "§8.6", "§8.14", "theory"}
    for key in ("staircase", "theory_overlay", "escape_time"):
        png = out / record["figures"][key]
        assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size < 300_000
        assert png.with_suffix(".pdf").read_bytes()[:4] == b"%PDF"  # the PDF beside it
    assert "jax" in record["environment"]["packages"]
    assert cli.main(["run", "--list"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("staircase", "fig2_geometry", "lm_builtin", "lm_text"))


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from ((f"{name} {flag}", a, sub) for flag, a in _own(sub))
        else:
            yield from ((flag, a, parser) for flag, a in _own(parser))


def _own(parser):
    return [(a.option_strings[-1], a) for a in parser._actions if a.option_strings]


def test_every_flag_has_help_and_shows_its_default():
    parser = cli.parser()
    for flag, action, owner in _options(parser):
        if action.dest in ("help", "version"):
            continue
        assert action.help, flag
        shown = owner.formatter_class(owner.prog)._get_help_string(action)
        if action.default is not False:  # switches are off by default
            assert "default" in shown, flag
        if action.choices is not None:
            assert all(str(c) in owner.format_help() for c in action.choices), flag


def test_version_and_module_entry_point():
    done = subprocess.run(
        [sys.executable, "-m", "ctx_staircase", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0 and done.stdout.strip() == f"ctx-staircase {__version__}"
    done = subprocess.run(
        [sys.executable, "-m", "ctx_staircase", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "signatures" in done.stdout and not done.stderr


@pytest.mark.parametrize(
    "strict,failed,code", [(False, True, 0), (True, True, 1), (True, False, 0)]
)
def test_strict_run_exits_1_when_a_claim_fails(monkeypatch, tmp_path, capsys, strict, failed, code):
    from ctx_staircase import experiments

    record = {
        "name": "staircase",
        "title": "t",
        "seconds": 1.0,
        "claims": [
            dict(item="§8.3", claim="c", measured="m", criterion="k", passed=not failed),
            dict(item="§8.5", claim="c", measured="m", criterion="k", passed=True),
        ],
    }
    monkeypatch.setattr(experiments, "execute", lambda *args, **kwargs: record)
    argv = ["run", "--tiny", "--out", str(tmp_path / "out")] + (["--strict"] if strict else [])
    assert cli.main(argv) == code
    printed = capsys.readouterr()
    assert "§8.3" in printed.out  # the claims table goes to stdout
    assert ("--strict" in printed.err) == (code == 1)


def test_tiny_never_overrides_an_explicit_flag():
    def config(*argv):
        return cli.lm_config(cli.parser().parse_args(["lm", *argv]))

    tiny = config("--tiny", "--steps", "7", "--d", "64")
    assert (tiny.steps, tiny.d) == (7, 64)  # explicit
    assert (tiny.n_layers, tiny.context_length) == (cli.LM_TINY["layers"], 16)  # tiny
    standard = config("--steps", "7")
    assert (standard.steps, standard.d) == (7, cli.LM_STANDARD["d"])
    assert standard.n_layers == cli.LM_STANDARD["layers"]


def test_the_package_reads_nothing_outside_itself_by_default():
    """Only `paths` knows where the shared corpus lies, and no package module calls it: the
    package reads outside itself only when handed a path (sims/lm_text.py passes it)."""
    package = Path(cli.__file__).resolve().parent
    for path in package.rglob("*.py"):
        source = path.read_text()
        assert "parents[" not in source, path
        if path.name != "paths.py":
            assert '"shared"' not in source and "shared_corpus" not in source, path


def test_a_tiny_record_says_its_verdicts_are_smoke_checks(capsys):
    claim = dict(item="§8.3", claim="c", measured="m", criterion="k", null="n", passed=True)
    record = dict(name="x", title="t", seconds=1.0, claims=[claim])
    cli.print_record({**record, "tiny": False})
    assert "smoke checks" not in " ".join(capsys.readouterr().out.split())
    cli.print_record({**record, "tiny": True})
    assert "smoke checks" in " ".join(capsys.readouterr().out.split())  # the title wraps


def test_a_smoke_run_compiles_without_backend_optimization_unless_the_user_says(monkeypatch):
    """--tiny puts XLA's backend optimization level 0 before the user's own XLA_FLAGS (so a flag
    the user sets wins: XLA reads the last), and only while JAX is not imported yet."""
    import sys

    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")
    cli.compile_for_smoke_runs()
    flags = os.environ["XLA_FLAGS"].split()
    assert flags == [cli.SMOKE_XLA_FLAGS, "--xla_backend_optimization_level=2"]
    monkeypatch.delenv("XLA_FLAGS")
    cli.compile_for_smoke_runs()
    assert os.environ["XLA_FLAGS"] == cli.SMOKE_XLA_FLAGS
    monkeypatch.undo()
    before = os.environ.get("XLA_FLAGS")
    cli.compile_for_smoke_runs()  # JAX is imported here: too late, nothing changes
    assert os.environ.get("XLA_FLAGS") == before
