"""The import rules of DESIGN.md, checked on the source and on a live interpreter."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ["core", "training", "addon", "operators", "panels"]


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(module, level) of every import statement in a file, nested ones included."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.module or "", node.level))
    return out


def package_files():
    files = [ROOT / "__init__.py", ROOT / "worker.py"]
    for d in PACKAGE_DIRS:
        files += sorted((ROOT / d).rglob("*.py"))
    return [f for f in files if f.exists()]


def top(name: str) -> str:
    return name.split(".")[0]


def test_core_imports_neither_bpy_nor_torch():
    for f in (ROOT / "core").rglob("*.py"):
        for mod, level in imports_of(f):
            if level == 0:
                assert top(mod) not in {"bpy", "torch", "bmesh", "mathutils"}, f"{f}: imports {mod}"
            else:  # relative imports must stay inside core
                depth = len(f.relative_to(ROOT / "core").parts)  # core/x.py: 1, core/a/x.py: 2
                assert level <= depth, f"{f}: relative import leaves core ({'.' * level}{mod})"


def test_training_never_imports_bpy():
    for f in (ROOT / "training").rglob("*.py"):
        for mod, level in imports_of(f):
            assert level > 0 or top(mod) not in {"bpy", "bmesh", "mathutils"}, f"{f}: imports {mod}"


def test_only_blender_layers_import_bpy():
    for f in package_files():
        rel = f.relative_to(ROOT)
        layer = rel.parts[0] if len(rel.parts) > 1 else rel.name
        if layer in {"addon", "operators", "panels"}:
            continue
        for mod, level in imports_of(f):
            if level == 0 and top(mod) == "bpy":
                # the root __init__ may import bpy lazily inside register(); nothing at module level
                assert rel.name == "__init__.py" and len(rel.parts) == 1, f"{rel}: imports bpy"


def test_package_imports_are_relative():
    for f in package_files():
        for mod, level in imports_of(f):
            if level == 0:
                assert top(mod) != "neural_rom", (
                    f"{f}: absolute import of {mod}; use a relative import"
                )


def sibling_imports(folder: Path) -> dict[str, set[str]]:
    """Which modules of ``folder`` each of its modules imports: ``from . import x`` and
    ``from .x import y``, at module level or inside a function alike."""
    mods = {p.stem for p in folder.glob("*.py")}
    graph = {}
    for p in folder.glob("*.py"):
        found = set()
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    found.add(node.module.split(".")[0])
                else:
                    found |= {a.name for a in node.names}
        graph[p.stem] = (found & mods) - {p.stem}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles a depth-first walk of ``graph`` meets, each as a closed path."""
    cycles, state, path = [], {}, []

    def visit(m: str) -> None:
        state[m] = "open"
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                cycles.append(path[path.index(n) :] + [n])
            elif n not in state:
                visit(n)
        path.pop()
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return cycles


def test_import_cycles_are_seen():
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_addon_modules_import_each_other_without_cycles():
    # A cycle hides which module is the lower layer (and a function-level import that
    # breaks one at import time still ties the two together): the add-on reads bottom up,
    # paths -> tets -> bakes -> simulate -> export, compare -> playback (the frame handler).
    graph = sibling_imports(ROOT / "addon")
    assert {"paths", "tets", "bakes", "simulate"} <= set(graph)  # the walk sees the layout
    assert not import_cycles(graph), "import cycles in addon/: " + "; ".join(
        " -> ".join(c) for c in import_cycles(graph)
    )


def test_importing_core_loads_no_bpy_or_torch():
    code = (
        "import sys, pkgutil, importlib\n"
        "import neural_rom.core as c\n"
        "for m in pkgutil.iter_modules(c.__path__):\n"
        "    importlib.import_module('neural_rom.core.' + m.name)\n"
        "bad = [m for m in ('bpy', 'torch') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_unsafe_loading_anywhere():
    needles = ("allow_pickle=True", "pickle.load", "shell=True", "weights_only=False")
    for f in package_files():
        text = f.read_text()
        for n in needles:
            assert n not in text, f"{f}: {n}"


def private_imports(path: Path) -> list[str]:
    """``from <package module> import _name`` statements of a file: the imported name, not its
    alias, is what counts (``from . import fem as _fem`` is fine)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0 and top(node.module or "") != "neural_rom":
            continue  # a third-party module's business
        for a in node.names:
            if a.name.startswith("_") and not a.name.startswith("__"):
                out.append(
                    f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}"
                )
    return out


def test_private_imports_are_seen(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "from . import fem as _fem\nfrom .cache import mesh_hash as _h\n"
        "def g():\n    from ..core.cache import BakeCache, _replace\n"
    )
    assert private_imports(f) == ["4: from ..core.cache import _replace"]


def test_no_module_imports_a_private_name_of_another():
    # A private helper another module needs is made public in one shared place (STYLE.md).
    bad = [f"{f.relative_to(ROOT)}:{line}" for f in package_files() for line in private_imports(f)]
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_trainers_repeat_no_record_and_check_settings_once():
    """R12 (issue 29): no dataclass in training/ repeats three or more setting names of a
    method's record (a trainer reads ``run.settings``), and the settings are checked in one
    place of training/ (``TrainingRun.create``: ``Method.values``), none other."""
    from neural_rom.core import registry

    names = {m.name: {s.name for s in m.settings} for m in registry.methods()}
    checks = []
    for f in sorted((ROOT / "training").rglob("*.py")):
        tree = ast.parse(f.read_text(), filename=str(f))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                "dataclass" in ast.unparse(d) for d in node.decorator_list
            ):
                fields = {
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                }
                for method, settings in names.items():
                    shared = sorted(fields & settings)
                    assert len(shared) < 3, f"{f.name}:{node.name} repeats {method}'s {shared}"
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("validate", "values")
                and node.args
            ):
                checks.append(f"{f.relative_to(ROOT).as_posix()}:{node.lineno}")
    assert len(checks) == 1 and checks[0].startswith("training/run.py:"), checks
