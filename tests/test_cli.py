"""The command line end to end: outputs on success, one-line errors and no files on bad input."""

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import ctx_staircase
from ctx_staircase import __version__, cli, comparison, tasks, theories
from ctx_staircase.cli.lm import LM_STANDARD, LM_TINY, lm_config
from ctx_staircase.cli.parser import parser as cli_parser
from ctx_staircase.cli.run import print_record


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


def test_train_defaults_to_the_primary_regime(tmp_path):
    """Without --optimizer, --lr or --vocab-size, ``train`` runs the primary regime
    (theory/regimes.md): full-batch GD at lr 1 and a model vocabulary of 2 V_min."""
    from ctx_staircase import tasks

    out = tmp_path / "train"
    argv = [*TRAIN, "--probe-snapshots", "0", "--out", str(out)]
    assert cli.main(argv) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["config"]["optimizer"] == "gd" and summary["config"]["lr"] == 1.0
    ds = tasks.make("add", N=6)
    minimal = 1 + int(max(ds.tokens.max(), ds.labels.max()))
    assert summary["model_kwargs"]["vocab_size"] == str(2 * minimal)
    assert summary["grid"]["lr"] == [1.0]
    from ctx_staircase.cli import train as train_command
    from ctx_staircase.experiments import regime

    assert train_command.WIDE_FACTOR == regime.WIDE_FACTOR  # one primary regime


def test_theory_writes_what_training_and_each_theory_cost_and_their_roles(tmp_path, capsys):
    out = tmp_path / "theory"
    flags = "--gamma 0.8 1.2 --max-order 1 --d 8 --steps 60 --lr 0.5 --snapshot-every 5"
    assert cli.main(["theory", "add", "--param", "N=4", *flags.split(), "--out", str(out)]) == 0
    summary = json.loads((out / "metrics.json").read_text())
    names = list(summary["runs"][0]["comparisons"])
    assert list(summary["cost"]) == ["simulation", *names]
    assert all(summary["cost"][k] > 0 for k in summary["cost"])
    assert summary["roles"] == dict.fromkeys(names, "law")
    printed = capsys.readouterr().out
    assert "cost (wall, compile included): training" in printed and "law" in printed
    share = summary["cost"][names[0]] / summary["cost"]["simulation"]
    assert f"{names[0]} {summary['cost'][names[0]]:.2f} s ({share:.3g}x)" in " ".join(
        printed.split()
    )


@pytest.mark.slow  # a real CLI process, over 20 s
def test_theory_writes_overlay_escape_plot_and_numbers(tmp_path):
    out = tmp_path / "theory"
    flags = "--gamma 0.8 1.2 --max-order 0 1 --d 16 --steps 200 --lr 0.5"
    argv = ["theory", "add", "--param", "N=6", *flags.split(), "--out", str(out)]
    assert cli.main(argv) == 0
    summary = json.loads((out / "metrics.json").read_text())
    assert [run["gamma"] for run in summary["runs"]] == [0.8, 1.2]
    # every theory the registry holds for an FFN with this activation, and no other
    settings = dict(model="ffn", gammas=[0.8, 1.2], max_orders=[0, 1], d=16, lr=0.5, steps=200)
    setting = comparison.check_theory_inputs(
        tasks.make("add", N=6), activation="poly:1,0.5", snapshot_every=None, threshold=0.5,
        prediction="linear", **settings,
    ).setting  # fmt: skip
    expected = [theory.name for theory in theories.selected(setting)]
    assert list(summary["runs"][0]["comparisons"]) == expected
    assert {theories.CLOSED_FORM.name, "signature_flow_m1"} <= set(expected)
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
        assert not png.with_suffix(".pdf").exists()  # a smoke run writes no PDF beside it
    assert "jax" in record["environment"]["packages"]
    assert cli.main(["run", "--list"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("staircase", "fig2_geometry", "lm_builtin", "lm_text"))


def _help(*argv: str) -> str:
    """What ``ctx-staircase ARGV --help`` prints."""
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert cli.main([*argv, "--help"]) == 0
    return printed.getvalue()


def _entries(text: str) -> list[str]:
    """The option entries of a help text, each with its wrapped lines joined by two spaces
    (so the flags stay apart from their words)."""
    entries, current = [], None
    for line in text.splitlines():
        if line.startswith("  -"):
            current = [line.strip()]
            entries.append(current)
        elif current is not None and line.startswith("    ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return ["  ".join(entry) for entry in entries]


def test_every_subcommand_lists_its_flags_with_help_and_their_defaults():
    """Every option of every subcommand (the ones ``--help`` lists) has words, and every one
    that takes a value says its default."""
    commands = re.findall(r"^    (\w+)", _help(), flags=re.M)
    assert {"run", "list", "signatures", "train", "lm", "measure", "theory"} <= set(commands)
    for command in commands:
        for entry in _entries(_help(command)):
            flags, *words = re.split(r"\s{2,}", entry, maxsplit=1)
            assert words, f"{command} {flags}: no help"
            takes_value = any(not part.startswith("-") for part in flags.replace(",", " ").split())
            if takes_value:
                assert "default" in words[0], f"{command} {flags}: no default shown"


def _options() -> dict[str, dict[str, object]]:
    """Every listed ``--flag`` of every subcommand: flag -> {command: its argparse action}
    (deprecated spellings, hidden from ``--help``, left out)."""
    import argparse

    parser = cli_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: dict[str, dict[str, object]] = {}
    for command, sub in commands.choices.items():
        for action in sub._actions:
            if action.help == argparse.SUPPRESS:
                continue
            for name in action.option_strings:
                if name.startswith("--") and name not in ("--help",):
                    found.setdefault(name, {})[command] = action
    return found


def test_no_flag_name_means_two_things():
    """A flag that several subcommands take has one meaning: the same help in every one (a
    flag shared by construction), or a help that begins with the words `common.MEANINGS` gives
    it."""
    from ctx_staircase.cli import common

    checked = 0
    for name, uses in _options().items():
        if len(uses) < 2:
            continue
        helps = {command: action.help for command, action in uses.items()}
        if len(set(helps.values())) > 1:
            assert name in common.MEANINGS, f"{name} means {helps}: give it one meaning"
            for command, text in helps.items():
                assert text.startswith(common.MEANINGS[name]), (name, command, text)
            checked += 1
    assert checked >= 10  # the walk saw the flags whose words differ by command


@pytest.mark.parametrize(
    "command,old,new,value",
    [
        ("measure", "--steps", "--labels", ["0", "5"]),
        ("measure", "--seed", "--probe-seed", ["3"]),
        ("lm", "--vocab-size", "--words", ["50"]),
        ("lm", "--seed", "--seeds", ["3"]),
        ("theory", "--seed", "--seeds", ["3"]),
    ],
)
def test_a_renamed_flag_keeps_its_old_spelling_for_one_release(command, old, new, value, capsys):
    """The old spelling sets what the new one does, with one deprecation line on stderr."""
    head = {"measure": ["measure", "--tokens", "t.npy", "--snapshots", "a.npy", "b.npy"],
            "lm": ["lm"], "theory": ["theory", "add"]}[command]  # fmt: skip
    parser = cli_parser()
    old_args = parser.parse_args([*head, old, *value])
    err = capsys.readouterr().err
    new_args = parser.parse_args([*head, new, *value])
    assert vars(old_args) == vars(new_args)
    assert f"{old} is deprecated" in err and f"use {new}" in err and len(err.splitlines()) == 1
    assert capsys.readouterr().err == ""


def test_model_choices_are_the_registries():
    """``--model`` lists the models its command can use, from their registries: those
    ``train`` trains on a task, and those with a theory."""
    from ctx_staircase import models

    def listed(command: str) -> list[str]:
        entry = next(e for e in _entries(_help(command)) if e.startswith("--model"))
        return re.search(r"model: (.*?) \(default", entry).group(1).split(", ")

    assert listed("train") == list(models.task_names())
    assert listed("theory") == list(theories.model_names())


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
            # descriptive: no criterion, so no verdict (passed None) and never a failure
            dict(item="Fig. 2", claim="c", measured="m", criterion="—", passed=None),
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
        return lm_config(cli_parser().parse_args(["lm", *argv]))

    tiny = config("--tiny", "--steps", "7", "--d", "64")
    assert (tiny.steps, tiny.d) == (7, 64)  # explicit
    assert (tiny.n_layers, tiny.context_length) == (LM_TINY["layers"], 16)  # tiny
    standard = config("--steps", "7")
    assert (standard.steps, standard.d) == (7, LM_STANDARD["d"])
    assert standard.n_layers == LM_STANDARD["layers"]


def test_the_package_reads_nothing_outside_itself_by_default():
    """Only `paths` knows where the shared corpus lies, and no package module calls it: the
    package reads outside itself only when handed a path (sims/lm_text.py passes it)."""
    package = Path(ctx_staircase.__file__).resolve().parent
    for path in package.rglob("*.py"):
        source = path.read_text()
        assert "parents[" not in source, path
        if path.name != "paths.py":
            assert '"shared"' not in source and "shared_corpus" not in source, path


def test_a_tiny_record_says_its_verdicts_are_smoke_checks(capsys):
    claim = dict(item="§8.3", claim="c", measured="m", criterion="k", null="n", passed=True)
    record = dict(name="x", title="t", seconds=1.0, claims=[claim])
    print_record({**record, "tiny": False})
    assert "smoke checks" not in " ".join(capsys.readouterr().out.split())
    print_record({**record, "tiny": True})
    assert "smoke checks" in " ".join(capsys.readouterr().out.split())  # the title wraps


def test_a_smoke_run_compiles_without_backend_optimization_unless_the_user_says(monkeypatch):
    """--tiny puts XLA's backend optimization level 0 and its classic CPU emitters before the
    user's own XLA_FLAGS (so a flag the user sets wins: XLA reads the last), and only while JAX
    is not imported yet."""
    import sys

    monkeypatch.delitem(sys.modules, "jax", raising=False)
    monkeypatch.setenv("XLA_FLAGS", "--xla_backend_optimization_level=2")
    cli.compile_for_smoke_runs()
    flags = os.environ["XLA_FLAGS"].split()
    assert flags == [*cli.SMOKE_XLA_FLAGS.split(), "--xla_backend_optimization_level=2"]
    monkeypatch.delenv("XLA_FLAGS")
    cli.compile_for_smoke_runs()
    assert os.environ["XLA_FLAGS"] == cli.SMOKE_XLA_FLAGS
    monkeypatch.undo()
    before = os.environ.get("XLA_FLAGS")
    cli.compile_for_smoke_runs()  # JAX is imported here: too late, nothing changes
    assert os.environ.get("XLA_FLAGS") == before


def test_param_values_are_python_literals_and_split_at_the_first_equals_sign():
    """``--param KEY=VALUE``: the key is what precedes the first ``=``; the value is everything
    after it, a Python literal where it reads as one, else the text as given."""
    from ctx_staircase.cli import common

    params = common.parse_params(["N=20", "law=poisson", "x=1.5", "heldout=(1, 2)", "eq=a=b==c"])
    assert params == {"N": 20, "law": "poisson", "x": 1.5, "heldout": (1, 2), "eq": "a=b==c"}
    assert common.parse_params(["s='1=2'"]) == {"s": "1=2"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        common.parse_params(["=3"])


def test_a_param_with_several_values_is_one_dataset_each_in_train_only(tmp_path):
    from ctx_staircase.cli import common

    assert common.parse_params([["N=6"], ["L=2", "3", "4"]]) == {"N": 6, "L": (2, 3, 4)}
    assert isinstance(common.parse_params([["L=2", "3"]])["L"], common.Values)
    assert not isinstance(common.parse_params(["heldout=(1, 2)"])["heldout"], common.Values)
    with pytest.raises(ValueError, match="--param must look like KEY=VALUE"):
        common.parse_params([["3", "N=4"]])
    out = tmp_path / "never"
    argv = ["signatures", "modsum", "--param", "N=4", "--param", "L=2", "3", "--out", str(out)]
    assert cli.main(argv) == 2 and not out.exists()
    argv = [*TRAIN[:2], "--param", "N=4", "3", "--param", "L=2", "3", "--out", str(out)]
    assert cli.main(argv) == 2 and not out.exists()
    argv = ["train", "modsum", "--param", "N=4", "--param", "L=2", "2", "--out", str(out)]
    assert cli.main(argv) == 2 and not out.exists()
    argv = ["train", "modsum", "--param", "L=2", "3", "--model", "attention", "--out", str(out)]
    assert cli.main(argv) == 2 and not out.exists()


def test_train_sweeps_the_context_order_as_lanes(tmp_path, capsys):
    """``train modsum --param L=2 3``: one padded sweep, a row and an embedding export per
    (L, gamma) lane, each lane's final numbers those of its saved trajectory, and the L = 2
    lanes equal to ``train`` on L = 2 alone (float64: bitwise, tests/test_sweep.py)."""
    flags = "--gamma 0.8 1.2 --steps 30 --d 8 --float64 --probe-snapshots 0".split()
    out = tmp_path / "both"
    argv = ["train", "modsum", "--param", "N=4", "--param", "L=2", "3", *flags, "--out", str(out)]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "┃L┃γ┃seed┃" in printed.replace(" ", "")  # the varied parameter's column first
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["grid"]["dataset"] == [0, 0, 1, 1]
    assert [p["L"] for p in summary["params"]] == [2, 3]
    folders = sorted(p.name for p in (out / "embeddings").iterdir())
    assert folders[0] == "L_2_gamma_0.8_seed_0_lr_1" and len(folders) == 4
    alone = tmp_path / "alone"
    argv = ["train", "modsum", "--param", "N=4", "--param", "L=2", *flags, "--out", str(alone)]
    assert cli.main(argv) == 0
    single = json.loads((alone / "metrics.json").read_text())
    assert summary["final_loss"][:2] == pytest.approx(single["final_loss"], rel=1e-15, abs=0)
    with (
        np.load(out / "sweep" / "arrays.npz") as both,
        np.load(alone / "sweep" / "arrays.npz") as one,
    ):
        np.testing.assert_array_equal(both["W_E"][:2], one["W_E"])


def test_train_summary_is_of_the_last_snapshot(tmp_path, capsys, monkeypatch):
    """``metrics.json`` of ``ctx-staircase train``: each lane's final loss and accuracy are those
    of its last snapshot in ``sweep/arrays.npz``, and a two-token task (L = 2) gets its probe
    (the figures are skipped: they hold no number)."""
    from ctx_staircase import plots

    monkeypatch.setattr(plots, "save_figure", lambda figure, path: None)
    for name in ("training_figure", "embedding_geometry_figure"):
        monkeypatch.setattr(plots, name, lambda *args, **kwargs: None)
    out = tmp_path / "train"
    flags = "--gamma 0.5 --steps 40 --snapshot-steps 0 40 --d 8 --lr 0.05 --probe-snapshots 1"
    argv = ["train", "add", "--param", "N=5", *flags.split(), "--out", str(out)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    summary = json.loads((out / "metrics.json").read_text())
    with np.load(out / "sweep" / "arrays.npz") as arrays:
        loss, accuracy = arrays["loss"], arrays["accuracy"]
    np.testing.assert_array_equal(summary["final_loss"], loss[:, -1])
    np.testing.assert_array_equal(summary["final_accuracy"], accuracy[:, -1])
    assert accuracy[0, -1] > accuracy[0, 0]  # it learned: the two ends differ
    probe = summary["alignment"]
    assert len(probe["probe_steps"]) == 1 and np.shape(probe["probe_heldout_corr"]) == (1, 1)
