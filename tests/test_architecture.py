"""The architecture the layout promises (ARCHITECTURE.md), checked by walking the source's AST.

- no module imports or touches another module's ``_private`` name (tests and benchmarks too);
- the package's import graph has no cycle;
- imports only go down the layers of ARCHITECTURE.md: the library never imports the experiments
  or the command line, and a layer never imports a higher one;
(that the library subcommands of the CLI load no experiment module is tested in test_registry)
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ctx_staircase"

# ARCHITECTURE.md's layers, bottom up. A module may import its own layer and the ones below.
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "internal",
        "distributed",
        "paths",
        "progress",
        "results",
        "records",
        "units",
        "interrupt",
        "dataset",
        "activations",
        "text",
        "word_vectors",
    ),
    ("signatures", "tasks", "models", "ode", "checkpoints", "theory"),
    (
        "metrics",
        "curvature",
        "flows",
        "closed_form",
        "attention_dynamics",
        "plateau",
        "semantics",
        "relu",
        "relu_escape",
        "second_escape",
        "ledger",
        "steps",
        "escape",
        "theories",
    ),
    ("geometry", "loop", "train", "sweep", "lm"),
    ("comparison", "budget", "plots", "lm_study", "plateau_study", "measure"),
    ("experiments",),
    ("cli", "__main__"),
)


def module_name(path: Path) -> str:
    """``ctx_staircase/a/b.py`` -> ``ctx_staircase.a.b`` (a package is its ``__init__``)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    file = ROOT / Path(*name.split("."))
    return file.with_suffix(".py").exists() or (file / "__init__.py").exists()


def imports_of(path: Path) -> set[str]:
    """The ``ctx_staircase`` modules ``path`` imports (``from pkg import mod`` names the module,
    ``from mod import name`` the module the name comes from)."""
    name = module_name(path)
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "ctx_staircase"}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            if base.split(".")[0] != "ctx_staircase":
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if is_module(candidate) else base)
    found.discard(name)
    return found


def import_graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def layer(module: str) -> int:
    """The layer index of a package module (``ctx_staircase.experiments.x`` -> experiments)."""
    parts = module.split(".")[1:]
    if not parts:
        return -1  # the package __init__ re-exports lazily; it is no layer
    for index, names in enumerate(LAYERS):
        if parts[0] in names:
            return index
    raise AssertionError(f"{module} is in no layer of ARCHITECTURE.md; add it to LAYERS")


def test_imports_have_no_cycle():
    assert cycle(import_graph()) is None


def test_the_cycle_check_sees_a_planted_cycle():
    graph = import_graph()
    assert "ctx_staircase.dataset" in graph["ctx_staircase.signatures"]
    graph["ctx_staircase.dataset"] = {*graph["ctx_staircase.dataset"], "ctx_staircase.signatures"}
    found = cycle(graph)
    assert found is not None and found[0] == found[-1]


def test_every_module_has_a_layer_and_imports_only_down():
    upward = []
    for module, deps in import_graph().items():
        if module == "ctx_staircase":
            continue
        for dep in deps:
            if dep != "ctx_staircase" and layer(dep) > layer(module):
                upward.append(f"{module} -> {dep}")
    assert not upward, "imports up the layers of ARCHITECTURE.md:\n" + "\n".join(sorted(upward))


def test_the_library_never_imports_the_experiments_or_the_cli():
    top = {"ctx_staircase.experiments", "ctx_staircase.cli", "ctx_staircase.__main__"}
    for module, deps in import_graph().items():
        if layer(module) < LAYERS.index(("experiments",)) and module != "ctx_staircase":
            assert not {d for d in deps if d.startswith(tuple(top))}, module


# --------------------------------------------------------------------------------------------
# private names


def our_modules() -> set[str]:
    return {module_name(p) for p in PACKAGE.rglob("*.py")}


def private_uses(path: Path, ours: set[str]) -> list[str]:
    """``from m import _x`` and ``m._x`` where ``m`` is one of our modules (not ``self._x``, not
    another library's names such as ``os._exit``)."""
    tree = ast.parse(path.read_text())
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    aliases: dict[str, str] = {}  # local name -> our module it stands for
    uses = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in ours:
                    aliases[a.asname or a.name.split(".")[0]] = a.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ctx_staircase"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in ours:
                    aliases[a.asname or a.name] = full
                elif a.name.startswith("_") and not a.name.startswith("__"):
                    uses.append(f"{where}:{node.lineno} imports {full}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            uses.append(f"{where}:{node.lineno} {node.value.id}.{node.attr}")
    return uses


def source_files() -> list[Path]:
    folders = ("ctx_staircase", "tests", "benchmarks", "sims")
    return [path for folder in folders for path in (ROOT / folder).rglob("*.py")]


def test_no_module_touches_another_modules_private_names():
    ours = our_modules()
    uses = [use for path in source_files() for use in private_uses(path, ours)]
    assert not uses, "private names used across modules:\n" + "\n".join(uses)


def test_the_private_check_sees_planted_uses(tmp_path):
    ours = our_modules()
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from ctx_staircase import train as t\nfrom ctx_staircase.metrics import _x\n"
        "import os\nt._hidden()\nos._exit\n"
    )
    uses = private_uses(planted, ours)
    assert len(uses) == 2 and any("t._hidden" in u for u in uses)
    assert any("ctx_staircase.metrics._x" in u for u in uses)


def hand_scored_claims(path: Path) -> list[str]:
    """The `Claim(...)` calls of ``path`` that set a verdict by hand: a ``passed`` or
    ``null_passed`` keyword, or a fifth positional argument, instead of ``**scored(...)``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Claim":
            by_hand = {k.arg for k in node.keywords} & {"passed", "null_passed"}
            if by_hand or len(node.args) > 4:
                found.append(f"{path.name}:{node.lineno}")
    return found


def test_every_claim_is_scored_by_one_criterion_on_run_and_null():
    """ARCHITECTURE.md: every claim's verdicts come from `common.scored`, the same criterion
    applied to the run and to its null, so the two cannot drift apart (no verdict by hand)."""
    experiments = sorted((PACKAGE / "experiments").glob("*.py"))
    assert [f for path in experiments for f in hand_scored_claims(path)] == []


def test_the_claim_check_sees_verdicts_by_hand(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "Claim('a', 'b', 'c', 'd', True)\nClaim('a', 'b', 'c', 'd', null_passed=False)\n"
        "Claim('a', 'b', 'c', 'd', **scored(f, 1, 2))\n"
    )
    assert hand_scored_claims(planted) == ["planted.py:1", "planted.py:2"]


# The public surface: every library module (the package's modules and the command line's, not the
# experiments) says what it exports in ``__all__``, and that is exactly what it defines.
IMPLEMENTATION = ("internal", "paths", "progress")  # imported by other modules, not advertised


def library_files() -> list[Path]:
    """Every module of the library and the command line: not the experiments, not the package's
    lazy ``__init__`` (checked on its own below)."""
    return sorted(
        path
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "experiments" and path != PACKAGE / "__init__.py"
    )


def top_level_bindings(tree: ast.Module) -> tuple[list[str], set[str]]:
    """``(defined, imported)``: the names a module binds at top level (also inside a top-level
    ``if``, ``try`` or ``with``) by ``def``, ``class`` or assignment, in order, and by import."""
    defined: list[str] = []
    imported: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.append(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                defined.extend(
                    n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)
                )
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                imported.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                visit(getattr(node, "finalbody", []))
                for handler in getattr(node, "handlers", []):
                    visit(handler.body)
            elif isinstance(node, ast.With):
                visit(node.body)

    visit(tree.body)
    return defined, imported


def declared_all(tree: ast.Module) -> list[str] | None:
    """The literal ``__all__`` of a module, or None where it has none."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    return None


def surface_problems(path: Path) -> list[str]:
    """What is wrong with the ``__all__`` of ``path``: missing, duplicated, naming what the module
    imports or does not define, or leaving out a public name it defines."""
    tree = ast.parse(path.read_text(), filename=str(path))
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    listed = declared_all(tree)
    if listed is None:
        return [f"{where}: no __all__"]
    defined, imported = top_level_bindings(tree)
    public = {name for name in defined if not name.startswith("_")}
    problems = [
        f"{where}: {name!r} listed twice" for name in sorted(set(listed)) if listed.count(name) > 1
    ]
    problems += [
        f"{where}: {name!r} is imported, not defined here"
        for name in sorted(set(listed) & imported - set(defined))
    ]
    problems += [
        f"{where}: {name!r} is not defined here"
        for name in sorted(set(listed) - imported - set(defined))
    ]
    problems += [
        f"{where}: {name!r} is defined but not in __all__" for name in sorted(public - set(listed))
    ]
    problems += [
        f"{where}: {name!r} is private but in __all__"
        for name in sorted(set(listed) & set(defined) - public)
    ]
    return problems


def test_every_library_module_lists_exactly_what_it_defines_in_all():
    files = library_files()
    assert len(files) > 40 and PACKAGE / "cli" / "__init__.py" in files
    problems = [problem for path in files for problem in surface_problems(path)]
    assert not problems, "__all__ out of step with the module:\n" + "\n".join(problems)


def test_the_all_check_sees_planted_mismatches(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from os import path\n\n__all__ = ['path', 'kept', 'kept', 'gone', '_hidden']\n\n"
        "kept = 1\n_hidden = 2\n\n\ndef helper():\n    pass\n"
    )
    problems = " ".join(surface_problems(planted))
    assert "'path' is imported" in problems and "'kept' listed twice" in problems
    assert "'gone' is not defined" in problems and "'helper' is defined but not in" in problems
    assert "'_hidden' is private" in problems
    (tmp_path / "bare.py").write_text("def helper():\n    pass\n")
    assert surface_problems(tmp_path / "bare.py") == [f"{tmp_path / 'bare.py'}: no __all__"]


def test_the_package_all_is_its_lazy_table_without_the_implementation_modules():
    """``from ctx_staircase import tasks, ...`` (README.md) and ``ctx_staircase.train_sweep`` go
    through the package's lazy tables; its ``__all__`` lists every library module but the
    implementation ones, and every re-exported name, each defined where the table says."""
    import ctx_staircase

    tables = {
        t.id: ast.literal_eval(node.value)
        for node in ast.parse((PACKAGE / "__init__.py").read_text()).body
        if isinstance(node, ast.Assign)
        for t in node.targets
        if isinstance(t, ast.Name) and t.id in ("_NAMES", "_SUBMODULES", "_IMPLEMENTATION")
    }
    names, submodules = tables["_NAMES"], tables["_SUBMODULES"]
    assert tuple(tables["_IMPLEMENTATION"]) == IMPLEMENTATION
    listed = ctx_staircase.__all__
    assert len(set(listed)) == len(listed)
    assert set(listed) == (set(names) | set(submodules)) - set(IMPLEMENTATION)
    library = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert set(submodules) == library  # every module reachable lazily, implementation ones too
    for name, module in names.items():
        assert name in declared_all(ast.parse((PACKAGE / f"{module}.py").read_text())), name
    assert ctx_staircase.internal.check_int(3, "n") == 3  # still reachable, just not advertised
    readme = (ROOT / "README.md").read_text()
    for line in re.findall(r"^from ctx_staircase import (.+)$", readme, flags=re.M):
        for name in line.split(","):
            assert name.strip() in listed, name


# Readable in a day: a module docstring says what the module computes in at most 20 lines (the
# derivations and the history live in theory/ and benchmarks/README.md), and no function is
# longer than a screen.
MODULE_DOCSTRING_LINES = 20
FUNCTION_LINES = 60


def long_parts(path: Path) -> list[str]:
    """A module docstring over `MODULE_DOCSTRING_LINES` lines and every function (nested too)
    over `FUNCTION_LINES` lines, from its ``def`` to its last line."""
    tree = ast.parse(path.read_text(), filename=str(path))
    docstring = ast.get_docstring(tree) or ""
    found = []
    if len(docstring.splitlines()) > MODULE_DOCSTRING_LINES:
        found.append(f"{path.name}: module docstring of {len(docstring.splitlines())} lines")
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            lines = node.end_lineno - node.lineno + 1
            if lines > FUNCTION_LINES:
                found.append(f"{path.name}:{node.lineno} {node.name} of {lines} lines")
    return found


def test_module_docstrings_and_functions_are_short():
    found = [part for path in sorted(PACKAGE.rglob("*.py")) for part in long_parts(path)]
    assert found == []


def test_the_length_check_sees_a_long_docstring_and_a_long_nested_function(tmp_path):
    planted = tmp_path / "planted.py"
    body = "\n".join(f"        x{i} = {i}" for i in range(60))
    docstring = "\n".join(["line"] * 21)
    planted.write_text(f'"""{docstring}"""\n\n\ndef outer():\n    def inner():\n{body}\n')
    found = long_parts(planted)
    assert found[0] == "planted.py: module docstring of 21 lines"
    assert [part.split()[1] for part in found[1:]] == ["outer", "inner"]
