"""The experiment registry and the one command line: every experiment is one `Experiment`
record; its flags (``tiny``, ``inputs``, ``regimes``) agree with its module's ``run``; lookups
and option checks fail with the parameter and the allowed values; modules are imported only when
run; the library subcommands never import `ctx_staircase.experiments`; every ``sims/NAME.py``
is a wrapper of ``ctx-staircase run NAME --out sims/``."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import json
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

from ctx_staircase import cli, experiments, paths
from ctx_staircase.experiments.declarative import Size

ROOT = Path(__file__).resolve().parents[1]
SIMS = ROOT / "sims"

#: The scripts in sims/ that run no experiment: the report and the claims' rescoring.
TOOLS = ("reproduce", "rescore")
#: The report order before the registry: EXPERIMENTS, then sims/reproduce.py's EXTRA.
REPORT_ORDER = (
    "fig2a_label_laws",
    "fig2_geometry",
    "fig3_staircase",
    "fig4_frequency",
    "fig5_activation_order",
    "fig6_attention",
    "fig8_role",
    "fig9_modulus",
    "appc_task4_orders",
    "minmax",
    "rb_anchor_tasks",
    "theory_vs_training",
    "escape_feedback",
    "relu_escape",
    "second_plateau",
    "staircase_steps",
    "attention_theory",
    "attention_departure",
    "lm_builtin",
    "regime_study",
    "order1_onset",
    "lm_text",
)


def _imported_experiments() -> str:
    """Python source printing, as JSON, the `ctx_staircase.experiments` modules imported."""
    return (
        "import json, sys; print(json.dumps(sorted(m for m in sys.modules "
        "if m.split('.')[:2] == ['ctx_staircase', 'experiments'])))"
    )


def _run_python(source: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


# --------------------------------------------------------------------------------------------
# the records


def test_registry_order_names_and_flagship():
    assert experiments.names() == tuple(e.name for e in experiments.REGISTRY)
    assert len(set(experiments.names())) == len(experiments.REGISTRY)
    assert experiments.reported() == REPORT_ORDER
    assert experiments.FLAGSHIP == "staircase" and experiments.names()[0] == "staircase"
    assert not experiments.get("staircase").report
    for experiment in experiments.REGISTRY:
        assert experiments.get(experiment.name) is experiment
        assert experiment.module == f"ctx_staircase.experiments.{experiment.name}"
        assert importlib.util.find_spec(experiment.module) is not None, experiment.name
        assert experiment.title and "\n" not in experiment.title


def test_which_experiments_take_tiny_inputs_and_regimes():
    inputs = {e.name: e.inputs for e in experiments.REGISTRY if e.inputs}
    assert inputs == {"lm_text": ("corpus",), "regime_study": ("root",)}
    assert experiments.with_regimes() == REPORT_ORDER[:10]


@pytest.mark.parametrize("name", experiments.names())
def test_each_record_agrees_with_its_modules_run(name):
    """The record's flags are exactly the keywords its ``run`` takes; the module no longer
    carries its own NAME, TITLE or REGIMES (the record is the one place that says them)."""
    experiment = experiments.get(name)
    module = experiment.load()
    assert not {"NAME", "TITLE", "REGIMES"} & set(vars(module)), name
    if hasattr(module, "SPEC"):  # declarative: its sizes say what it takes
        sizes = set(module.SPEC.configs)
        assert Size.TINY in sizes and Size.CPU in sizes  # a smoke run and a default one
        assert (Size.QUICK in sizes) == experiment.regimes  # quick: the regime study's size
        assert not experiment.inputs  # `Spec.outcome` takes no text or folder
        return
    accepts = set(inspect.signature(module.run).parameters)
    assert "full" in accepts
    assert "tiny" in accepts  # every experiment has a smoke run
    assert ("text_path" in accepts) == ("corpus" in experiment.inputs)
    assert ("root" in accepts) == ("root" in experiment.inputs)
    assert ({"regime", "quick"} <= accepts) == experiment.regimes


def test_records_are_frozen_and_check_their_inputs():
    record = experiments.get("lm_text")
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.regimes = False  # type: ignore[misc]
    with pytest.raises(ValueError, match=r"inputs must be among \['corpus', 'root'\]"):
        experiments.Experiment("x", "t", "m", inputs=("text",))


def test_get_names_the_allowed_experiments():
    with pytest.raises(ValueError) as refused:
        experiments.get("fig3")
    message = str(refused.value)
    assert message.startswith("experiment must be one of ") and "got 'fig3'" in message
    assert all(name in message for name in experiments.names())


@pytest.mark.parametrize(
    "name,options,needle",
    [
        ("fig2_geometry", dict(tiny=True, quick=True), "--tiny and --quick exclude each other"),
        ("staircase", dict(tiny=True, full=True), "--tiny and --full exclude each other"),
        ("staircase", dict(regime="adam-minimal"), "--regime and --quick apply to "),
        ("theory_vs_training", dict(quick=True), "--regime and --quick apply to "),
        ("lm_text", {}, "needs --text FILE"),
        ("lm_builtin", dict(corpus="x.txt"), "--text applies to lm_text only"),
        ("nope", {}, "experiment must be one of"),
    ],
)
def test_check_options_refuses_with_parameter_and_allowed_values(name, options, needle):
    with pytest.raises(ValueError) as refused:
        experiments.check_options(name, **options)
    assert needle in str(refused.value)
    if "--regime" in needle:
        assert all(n in str(refused.value) for n in experiments.with_regimes())


@pytest.mark.parametrize(
    "name,options",
    [
        ("staircase", dict(tiny=True)),
        ("order1_onset", dict(tiny=True)),
        ("lm_text", dict(tiny=True, corpus="a.txt")),
        ("fig3_staircase", dict(regime="adam-minimal", quick=True)),
        ("regime_study", dict(full=True)),
    ],
)
def test_check_options_accepts_what_applies(name, options):
    assert experiments.check_options(name, **options) is experiments.get(name)


def test_the_registry_imports_no_experiment_module_until_one_runs():
    done = _run_python(
        "from ctx_staircase import experiments as e\n"
        "e.names(); e.reported(); e.with_regimes(); e.get('lm_text')\n"
        "e.check_options('order1_onset', tiny=True)\n" + _imported_experiments()
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["ctx_staircase.experiments"]


# --------------------------------------------------------------------------------------------
# the command line


def test_run_list_shows_every_record_and_imports_no_experiment(tmp_path):
    done = _run_python(
        "from ctx_staircase import cli\nassert cli.main(['run', '--list']) == 0\n"
        + _imported_experiments()
    )
    assert done.returncode == 0, done.stderr
    listing, imported = done.stdout.rsplit("\n", 2)[0], json.loads(done.stdout.splitlines()[-1])
    assert imported == ["ctx_staircase.experiments"]
    *lines, blank, note = listing.splitlines()
    assert [line.split()[0] for line in lines] == list(experiments.names())
    for line, experiment in zip(lines, experiments.REGISTRY, strict=True):
        assert line.endswith(experiment.title)
    assert blank == "" and note.startswith("every experiment takes --tiny")


def _library_argv(tmp_path: Path) -> dict[str, list[str]]:
    out = str(tmp_path)
    return {
        "signatures": ["signatures", "add", "--param", "N=6", "--out", f"{out}/s"],
        "train": ["train", "add", "--param", "N=6", "--steps", "4", "--d", "8", "--out",
                  f"{out}/t"],
        "theory": ["theory", "add", "--param", "N=6", "--steps", "60", "--d", "8", "--gamma",
                   "1.0", "--out", f"{out}/th"],
        "lm": ["lm", "--tiny", "--steps", "2", "--gamma", "1.0", "--out", f"{out}/lm"],
    }  # fmt: skip


#: The library call each subcommand makes once its imports are done, stubbed to stop there (the
#: training itself is tested in test_cli; here only the import path matters). signatures runs.
STOP_AT = {
    "train": ("sweep", "train_sweep"),
    "theory": ("comparison", "theory_vs_training"),
    "lm": ("lm_study", "train_and_measure"),
}


@pytest.mark.parametrize("command", ["signatures", "train", "theory", "lm"])
def test_library_subcommands_import_the_library_only(tmp_path, command):
    """Each library subcommand, in a fresh interpreter, goes through its validation and every
    import up to its main library call (signatures: to the end) and leaves no
    `ctx_staircase.experiments` module in ``sys.modules``."""
    argv = _library_argv(tmp_path)[command]
    module, name = STOP_AT.get(command, ("paths", "shared_corpus"))
    done = _run_python(
        f"import sys\nfrom ctx_staircase import cli, {module}\n"
        "class Reached(Exception):\n    pass\n"
        "def stop(*args, **kwargs):\n    raise Reached\n"
        f"{module}.{name} = stop\n"
        f"try:\n    code = cli.main({argv!r})\nexcept Reached:\n    code = 0\n"
        "print()\n" + _imported_experiments() + "\nsys.exit(code)"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == [], command
    if command == "signatures":
        assert (tmp_path / "s" / "metrics.json").is_file()


def test_the_import_check_sees_an_experiment_import():
    """The check above is able to fail: importing an experiment shows up in its output."""
    done = _run_python("import ctx_staircase.experiments.lm_text\n" + _imported_experiments())
    assert "ctx_staircase.experiments.lm_text" in json.loads(done.stdout)


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["run", "--tiny"], dict(name="staircase", tiny=True, full=False)),
        (["run", "order1_onset", "--tiny"], dict(name="order1_onset", tiny=True)),
        (["run", "fig9_modulus", "--full"], dict(name="fig9_modulus", tiny=False, full=True)),
        (
            ["run", "fig3_staircase", "--regime", "adam-minimal", "--quick"],
            dict(name="fig3_staircase", regime="adam-minimal", quick=True),
        ),
        (["run", "regime_study"], dict(name="regime_study", tiny=False)),
    ],
)
def test_run_passes_the_options_to_execute(monkeypatch, tmp_path, capsys, argv, expected):
    seen = {}

    def execute(name, **kwargs):
        seen.update(name=name, **kwargs)
        return {"name": name, "title": "t", "seconds": 0.0, "claims": []}

    monkeypatch.setattr(experiments, "execute", execute)
    assert cli.main([*argv, "--out", str(tmp_path / "out")]) == 0
    for key, value in expected.items():
        assert seen[key] == value, (key, seen)
    assert seen["root"] == tmp_path / "out"
    assert ("regime" in seen) == ("--regime" in argv)


def test_run_passes_the_text_to_lm_text(monkeypatch, tmp_path):
    seen = {}
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat . " * 20)
    monkeypatch.setattr(
        experiments,
        "execute",
        lambda name, **kw: (
            seen.update(kw) or {"name": name, "title": "", "seconds": 0, "claims": []}
        ),
    )
    argv = ["run", "lm_text", "--tiny", "--text", str(corpus), "--out", str(tmp_path / "o")]
    assert cli.main(argv) == 0
    assert seen["text_path"] == corpus and seen["tiny"] is True


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["run", "order1_onset", "--quick"], "--regime and --quick apply to"),
        (["run", "lm_text"], "needs --text FILE"),
        (["run", "staircase", "--text", "x.txt"], "--text applies to lm_text only"),
        (["run", "staircase", "--tiny", "--full"], "exclude each other"),
        (["run", "fig2_geometry", "--regime", "sgd-huge"], "regime must be one of"),
    ],
)
def test_run_refuses_options_that_do_not_apply(tmp_path, capsys, argv, needle):
    assert cli.main([*argv, "--out", str(tmp_path / "never")]) == 2
    assert needle in capsys.readouterr().err
    assert not (tmp_path / "never").exists()


# --------------------------------------------------------------------------------------------
# sims/ wrappers


def _wrappers() -> dict[str, Path]:
    return {p.stem: p for p in SIMS.glob("*.py") if p.stem not in TOOLS}


def test_every_reported_experiment_has_a_wrapper_and_no_wrapper_is_unregistered():
    assert set(_wrappers()) == set(experiments.reported())


@pytest.mark.parametrize("name", sorted(_wrappers()))
def test_each_wrapper_runs_its_experiment_into_sims(monkeypatch, name):
    """``python sims/NAME.py --full`` is ``ctx-staircase run NAME --out sims/ --full`` (and
    lm_text adds the shared corpus, which a later ``--text`` overrides)."""
    calls = []
    monkeypatch.setattr(cli, "main", lambda argv: calls.append(argv) or 0)
    monkeypatch.setattr(sys, "argv", [str(_wrappers()[name]), "--full"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(_wrappers()[name]), run_name="__main__")
    assert done.value.code == 0
    (argv,) = calls
    corpus = ["--text", str(paths.shared_corpus())] if name == "lm_text" else []
    assert argv == ["run", name, "--out", str(SIMS), *corpus, "--full"]
    assert len(_wrappers()[name].read_text().splitlines()) <= 16


def test_no_global_x64_flip_in_the_experiments_or_the_cli():
    """float64 is scoped (``with jax.enable_x64``), never switched on for the whole process."""
    package = ROOT / "ctx_staircase"
    for path in [*package.glob("experiments/*.py"), *package.glob("cli/*.py"), *SIMS.glob("*.py")]:
        assert "jax_enable_x64" not in path.read_text(), path


def test_shared_corpus_lies_beside_the_repository():
    assert paths.shared_corpus() == ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
    assert paths.shared_corpus("x.txt").name == "x.txt"


@pytest.mark.parametrize(
    "name,options,expected",
    [
        ("regime_study", {}, dict(full=False, root="ROOT")),
        ("order1_onset", dict(tiny=True), dict(full=False, tiny=True)),
        ("theory_vs_training", dict(full=True), dict(full=True)),
    ],
)
def test_execute_gives_run_what_its_record_says(monkeypatch, tmp_path, name, options, expected):
    """`execute` hands ``run`` exactly the keywords the record calls for (``root`` to the
    experiments that need it, ``tiny`` when asked) and writes the record's title."""
    from ctx_staircase.experiments import Outcome

    seen = {}
    module = experiments.get(name).load()
    monkeypatch.setattr(module, "run", lambda **kw: seen.update(kw) or Outcome([], {}, {}, {}))
    record = experiments.execute(name, root=tmp_path, **options)
    expected = {k: tmp_path if v == "ROOT" else v for k, v in expected.items()}
    assert seen == expected
    assert record["title"] == experiments.get(name).title and record["tiny"] == bool(
        options.get("tiny")
    )
    assert (tmp_path / "results" / f"{name}.json").is_file()
