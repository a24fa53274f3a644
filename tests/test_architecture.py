"""The import rules of DESIGN.md, checked on the source and on a live interpreter."""

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = ["core", "training", "addon", "ui"]
#: the layers, bottom up: a layer imports only the layers below it (DESIGN.md)
LAYERS = ["core", "training", "addon", "ui"]


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
        if layer in {"addon", "ui"}:
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


def nested_imports(folder: Path) -> dict[str, set[str]]:
    """Which modules of ``folder`` (its subpackages included, as dotted names relative to it:
    ``kinds.fem.bake``) each of its modules imports, at module level or inside a function."""
    mods = {}
    for p in folder.rglob("*.py"):
        parts = list(p.relative_to(folder).with_suffix("").parts)
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph = {}
    for name, p in mods.items():
        pkg = name.split(".") if p.name == "__init__.py" else name.split(".")[:-1]
        pkg = [x for x in pkg if x]
        found = set()
        for node in ast.walk(ast.parse(p.read_text(), filename=str(p))):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            if node.level - 1 > len(pkg):
                continue  # leaves the folder
            base = pkg[: len(pkg) - (node.level - 1)] + (
                node.module.split(".") if node.module else []
            )
            for a in node.names:
                sub = ".".join(base + [a.name])
                found.add(sub if sub in mods else ".".join(base))
        graph[name] = (found & set(mods)) - {name, ""}
    return graph


def test_addon_modules_import_each_other_without_cycles():
    # A cycle hides which module is the lower layer (and a function-level import that
    # breaks one at import time still ties the two together): the add-on reads bottom up,
    # io.paths -> kinds.fem.tets -> kinds.fem.bake -> simulate -> io.export, compare ->
    # playback (the frame handler).
    graph = nested_imports(ROOT / "addon")
    assert {"io.paths", "kinds.fem.tets", "kinds.fem.bake", "simulate"} <= set(graph)
    assert not import_cycles(graph), "import cycles in addon/: " + "; ".join(
        " -> ".join(c) for c in import_cycles(graph)
    )


def run_fresh(code: str) -> None:
    """Run ``code`` in a fresh interpreter; it must exit 0."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_importing_core_loads_no_bpy_or_torch():
    code = (
        "import sys, pkgutil, importlib\n"
        "import neural_rom.core as c\n"
        "names = [m.name for m in pkgutil.walk_packages(c.__path__, 'neural_rom.core.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "assert 'neural_rom.core.physics.fem' in names and 'neural_rom.core.jobs.face' in names\n"
        "bad = [m for m in ('bpy', 'torch') if m in sys.modules]\n"
        "print(bad); sys.exit(1 if bad else 0)\n"
    )
    run_fresh(code)


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
        own = path.name == "__init__.py" and node.level == 1 and not node.module
        for a in node.names:
            if own:
                continue  # a package's __init__ using its own private module (core/_moved.py)
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


# ---------------------------------------------------------------------------------------
# The rules of issue #29's layout (docs/dev/redesign-29-plan.md, section 2). A rule its work
# package has not reached yet is a strict xfail: it fails today for the reason it names, and
# the WP that makes it pass removes its marker (a rule passing while marked fails CI).
# ---------------------------------------------------------------------------------------


def resolved_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every import of a package file, as a dotted name inside the package
    (``core.physics.fem``; ``from . import x`` gives ``<package>.x``); imports of other
    packages are left out."""
    rel = path.relative_to(ROOT)
    package = list(rel.parts[:-1])
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [
                (a.name.split(".", 1)[1], node.lineno)
                for a in node.names
                if a.name.startswith("neural_rom.")
            ]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if not (node.module or "").startswith("neural_rom"):
                    continue
                base = (node.module or "").split(".")[1:]
            else:
                base = package[: len(package) - (node.level - 1)] + (node.module or "").split(".")
                base = [b for b in base if b]
            out += [(".".join(base + [a.name]), node.lineno) for a in node.names]
    return out


def layer_violations() -> list[str]:
    bad = []
    for f in package_files():
        rel = f.relative_to(ROOT)
        layer = rel.parts[0] if len(rel.parts) > 1 else None
        if layer not in LAYERS:
            continue
        above = set(LAYERS[LAYERS.index(layer) + 1 :])
        for mod, line in resolved_imports(f):
            if top(mod) in above:
                bad.append(f"{rel}:{line}: imports {mod}")
    return bad


def test_layer_violations_are_seen(tmp_path, monkeypatch):
    fake = tmp_path / "core" / "x"
    fake.mkdir(parents=True)
    (fake / "m.py").write_text("from ...training import worker\nfrom . import y\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert resolved_imports(fake / "m.py") == [("training.worker", 1), ("core.x.y", 2)]
    assert layer_violations() == ["core/x/m.py:1: imports training.worker"]


def test_r1_each_layer_imports_only_the_layers_below():
    # R1: core imports nothing of training/addon/ui (absolute or relative, at module level
    # or in a function); training imports no addon/ui; addon imports no ui.
    bad = layer_violations()
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def package_dirs() -> list[Path]:
    """Every folder of the package holding an ``__init__.py`` (the root included)."""
    dirs = [ROOT]
    for d in PACKAGE_DIRS:
        dirs += sorted(
            p.parent for p in (ROOT / d).rglob("__init__.py") if "__pycache__" not in p.parts
        )
    return dirs


def test_r11_pyproject_lists_every_package_folder():
    # R11: setuptools installs only the packages pyproject names (a hand-kept list), so a
    # package folder missing there imports from a checkout and fails from a wheel.
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    on_disk = [".".join(["neural_rom", *d.relative_to(ROOT).parts]) for d in package_dirs()]
    assert sorted(listed) == sorted(on_disk)


def test_r11_every_top_level_package_ships():
    # R11: tests/test_manifest.RUNTIME (what the extension zip holds) names each top-level
    # package folder.
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_manifest import RUNTIME
    finally:
        sys.path.remove(str(ROOT / "tests"))
    tops = {d.relative_to(ROOT).parts[0] + "/" for d in package_dirs() if d != ROOT}
    assert tops <= RUNTIME and {"__init__.py", "worker.py"} <= RUNTIME


def test_old_module_paths_give_the_same_module_objects():
    # The flat names of before nest by concept (core/_moved.py) and the UI moved to ui/
    # (ui/_moved.py): each old name imports as the very module object of its new one, in a
    # fresh interpreter, whichever comes first.
    code = (
        "import importlib, sys\n"
        "from neural_rom.core import _moved\n"
        "for old, new in _moved.MOVED.items():\n"
        "    a = importlib.import_module('neural_rom.core.' + old)\n"
        "    b = importlib.import_module('neural_rom.core.' + new)\n"
        "    assert a is b and a.__name__ == 'neural_rom.core.' + new, (old, a, b)\n"
        "    assert a.__spec__.name == a.__name__, old\n"
        "from neural_rom.core import bake, cache, fem, mesher, surface\n"  # move29: keep
        "import neural_rom.core.sim as sim, neural_rom.core.simulator as simulator\n"
        "from neural_rom.core.registry import Method, Setting\n"
        "from neural_rom.core.engine.protocol import FrameInputs, StepReport\n"
        "assert sim.FrameInputs is FrameInputs and sim.StepReport is StepReport\n"
        "assert simulator.SimulatorBase.__module__ == 'neural_rom.core.engine.protocol'\n"
        "import neural_rom.core as c\n"
        "assert c.fem is fem and c.onnxgraph is sys.modules['neural_rom.core.data.onnx']\n"
        "from neural_rom.ui import _moved as ui_moved\n"
        "assert set(_moved.PUBLIC) <= set(_moved.MOVED)\n"
        "assert set(_moved.PUBLIC_ROOT) <= set(ui_moved.MOVED)\n"
        "for old, new in ui_moved.MOVED.items():\n"
        "    a = importlib.import_module('neural_rom.' + old)\n"
        "    assert a is importlib.import_module('neural_rom.' + new), old\n"
        "from neural_rom.addon import _moved as addon_moved\n"
        "for old, new in addon_moved.MOVED.items():\n"
        "    a = importlib.import_module('neural_rom.' + old)\n"
        "    assert a is importlib.import_module('neural_rom.' + new), old\n"
        "import neural_rom.addon.compare as cmp, neural_rom.addon.compare.bake as cb\n"
        "assert cmp.error_colors is cb.error_colors and cmp.methods.__name__.endswith('methods')\n"
        "import neural_rom, neural_rom.operators.bake as ob\n"
        "assert ob is sys.modules['neural_rom.ui.operators.bake']\n"
        "assert neural_rom.addon.cli.main is neural_rom.ui.cli.main\n"
        "mods = {id(m): m for n, m in sys.modules.items() if n.startswith('neural_rom.')}\n"
        "files = [getattr(m, '__file__', None) for m in mods.values()]\n"
        "assert len(files) == len(set(files)), 'a module ran twice'\n"
    )
    run_fresh(code)


#: Names whose home moved within a module's lifetime (issue 29): the old module re-exports
#: them (core.sim.FrameInputs and StepReport are public), the package uses the new one.
MOVED_NAMES = {
    "core.physics.sim": {"FrameInputs", "Markers", "StepReport"},
    "core.jobs.simulate": {
        "Track",
        "FrameReader",
        "ground_plane",
        "read_track",
        "write_track",
        "read_render_map",
        "render_local",
        "to_local",
        "to_local_shown",
        "to_world",
    },
}


def old_name_imports(files) -> list[str]:
    """Imports (``file:line: name``) of a module through an old path of the _moved tables, or
    of a name of :data:`MOVED_NAMES` from its old home."""
    from neural_rom.addon import _moved as addon_moved
    from neural_rom.core import _moved as core_moved
    from neural_rom.ui import _moved as ui_moved

    old = {f"core.{k}" for k in core_moved.MOVED} | set(ui_moved.MOVED) | set(addon_moved.MOVED)
    bad = []
    for f in files:
        for name, line in resolved_imports(f):
            module, _, attr = name.rpartition(".")
            if any(name == o or name.startswith(o + ".") for o in old) or attr in MOVED_NAMES.get(
                module, ()
            ):
                bad.append(f"{f.relative_to(ROOT)}:{line}: {name}")
    return bad


def test_the_package_bench_and_scripts_use_the_new_module_paths():
    # The old paths stay for plug-ins and scripts (core/_moved.py says which for good); the
    # package, bench and scripts import the new ones (tests too, but the aliases' own tests).
    files = [f for f in package_files() if f.name != "_moved.py"]
    files += sorted((ROOT / "bench").rglob("*.py")) + sorted((ROOT / "scripts").rglob("*.py"))
    bad = old_name_imports(files)
    assert not bad, "imports through an old path (use the new one):\n" + "\n".join(bad)


def test_old_name_imports_are_seen(tmp_path, monkeypatch):
    (tmp_path / "core" / "jobs").mkdir(parents=True)
    (tmp_path / "core" / "jobs" / "x.py").write_text(
        "from ..physics.sim import FrameInputs, SimSettings\nfrom .. import fem\n"
        "from ..engine.protocol import StepReport\nfrom .simulate import Track, run_simulate\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert old_name_imports([tmp_path / "core" / "jobs" / "x.py"]) == [
        "core/jobs/x.py:1: core.physics.sim.FrameInputs",
        "core/jobs/x.py:2: core.fem",
        "core/jobs/x.py:4: core.jobs.simulate.Track",
    ]


def test_an_old_module_name_monkeypatched_is_the_new_one(monkeypatch):
    from neural_rom.core import fem as old  # move29: keep
    from neural_rom.core.physics import fem as new

    monkeypatch.setattr("neural_rom.core.fem.PRESETS", {"x": 1})  # move29: keep
    assert old is new and new.PRESETS == {"x": 1}


def test_an_old_addon_module_name_monkeypatched_is_the_new_one(monkeypatch):
    from neural_rom.addon import bakes as old  # move29: keep
    from neural_rom.addon.kinds.fem import bake as new

    monkeypatch.setattr("neural_rom.addon.bakes.forget", len)  # move29: keep
    assert old is new and new.forget is len


def test_r2_no_import_cycle_in_any_package():
    # R2: the sibling rule of addon/ above, for every package folder.
    cycles = []
    for d in package_dirs():
        for c in import_cycles(sibling_imports(d)):
            cycles.append(f"{d.relative_to(ROOT)}: " + " -> ".join(c))
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


#: R3: names a method had before it had one (core/data/modelfile.py's "pca" for the linear
#: method, "hoda" for Shen's), checked as the registered names are. ("reduced" and "latent",
#: the linear and autoencoder runtimes' former class and bench names, are also plain words
#: that stored keys use: compare's .npz "reduced", the face file's "latent".)
FORMER_METHOD_NAMES = {"pca": "linear", "hoda": "shen"}

#: R3's allow-list: (file, string) -> why the string there does not name the method.
R3_ALLOWED = {
    ("core/jobs/compare_methods.py", "pca"): "OLD_BASELINE: Compare Methods' state.json files "
    "written before issue 29 keep the baseline under the key 'pca', still read",
    ("training/autoencoder/trainer.py", "pca"): "the autoencoder's own PCA-layer fallback "
    "(PCA-r in its network's place), stored as the model's 'fallback' metadata",
    ("core/methods/active/settings.py", "linear"): "the stored enum value of active faces' "
    "'decoder' setting: a linear decoder, not the linear method",
    ("core/methods/snp/runtime.py", "linear"): "snp's normal model: normals linear in the "
    "PCA state (Holden 2019 sec. 6.3), not the linear method",
}


def method_names() -> dict[str, str]:
    """Each built-in method's registered name and former name -> the method."""
    from neural_rom.core import registry

    names = {m.name: m.name for m in registry.methods() if m.origin == ""}
    return {**names, **{old: new for old, new in FORMER_METHOD_NAMES.items() if new in names}}


def method_of(rel: Path) -> str | None:
    """The method whose package holds ``rel``: core/methods/<m>/..., training/<m>.py or
    training/<m>/...; None elsewhere."""
    p = rel.parts
    if p[:2] == ("core", "methods") and len(p) > 3:
        return p[2]
    if p[0] == "training" and len(p) > 1:
        return p[1].removesuffix(".py")
    return None


def method_namings(names: dict[str, str]) -> list[tuple[str, str, str]]:
    """(file, line, what) of every import of ``core.methods.<m>`` / ``training.<m>`` and every
    string constant (docstrings aside) equal to a name of ``names``, outside method m's own
    package."""
    found = []
    for f in package_files():
        rel = f.relative_to(ROOT)
        own = method_of(rel)
        for mod, line in resolved_imports(f):
            parts = mod.split(".")
            m = parts[2] if parts[:2] == ["core", "methods"] and len(parts) > 2 else None
            m = parts[1] if parts[0] == "training" and len(parts) > 1 else m
            if m in names and names[m] != own:
                found.append((rel.as_posix(), f"{line}", f"imports {mod}"))
        tree = ast.parse(f.read_text(), filename=str(f))
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Constant)
                and isinstance(n.value, str)
                and n.value in names
                and names[n.value] != own
                and id(n) not in docs
            ):
                found.append((rel.as_posix(), f"{n.lineno}", n.value))
    return found


def test_method_namings_are_seen(tmp_path, monkeypatch):
    (tmp_path / "addon").mkdir()
    (tmp_path / "training" / "shen").mkdir(parents=True)
    (tmp_path / "addon" / "x.py").write_text(
        '"""linear"""\nfrom ..core.methods import linear\nif m == "pca":\n    pass\n'
    )
    (tmp_path / "training" / "shen" / "t.py").write_text('a = "shen"\nb = "hoda"\nc = "snp"\n')
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    names = {"linear": "linear", "pca": "linear", "shen": "shen", "hoda": "shen", "snp": "snp"}
    assert sorted(method_namings(names)) == [
        ("addon/x.py", "2", "imports core.methods.linear"),
        ("addon/x.py", "3", "pca"),
        ("training/shen/t.py", "3", "snp"),
    ]


def test_r3_no_module_names_a_method_outside_its_package():
    # R3: a method is named (imported, or a string equal to its name or former name) only in
    # its own packages, core/methods/<m>/ and training/<m>; everything else asks the
    # registry. Every allow-list entry must still be needed (the list only shrinks).
    found = method_namings(method_names())
    bad = [f"{f}:{line}: {what}" for f, line, what in found if (f, what) not in R3_ALLOWED]
    stale = sorted(set(R3_ALLOWED) - {(f, what) for f, _, what in found})
    assert not bad, "a method named outside its package (ask the registry):\n" + "\n".join(bad)
    assert not stale, f"R3_ALLOWED entries no longer needed, delete them: {stale}"


def defines(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


def test_r5_methods_and_kinds_are_packages_of_their_own_parts():
    # R5: core/ holds packages only (and errors, _moved, __init__); each method package has
    # METHOD, runtime.py and schema.py; each data kind package has KIND.
    core = ROOT / "core"
    loose = sorted(p.name for p in core.glob("*.py"))
    assert loose == ["__init__.py", "_moved.py", "errors.py"], loose
    missing = []
    for m in sorted(p for p in (core / "methods").iterdir() if (p / "__init__.py").exists()):
        if not defines(m / "__init__.py", "METHOD"):
            missing.append(f"{m.name}: METHOD")
        missing += [f"{m.name}/{f}" for f in ("runtime.py", "schema.py") if not (m / f).exists()]
    for k in sorted(p for p in (core / "kinds").iterdir() if (p / "__init__.py").exists()):
        if not defines(k / "__init__.py", "KIND"):
            missing.append(f"kinds/{k.name}: KIND")
    assert not missing, missing


#: R6's shrink-only ratchet: modules over 800 lines that may stay (not grow) until split
LONG_MODULES = {"fem.py": 1238, "cache.py": 1202, "sim.py": 861, "subspace.py": 921,
                "scenarios.py": 874, "cubature.py": 834}  # fmt: skip


def test_r6_no_module_over_800_lines():
    long = {}
    for f in package_files():
        n = len(f.read_text().splitlines())
        if n > LONG_MODULES.get(f.name, 800):
            long[str(f.relative_to(ROOT))] = n
    assert not long, long
    assert all(n > 800 for n in LONG_MODULES.values())  # an entry under 800 is deleted


def test_r6_no_ui_module_over_800_lines():
    # R6, the ui part (on since WP E split the command line and the sidebar by stage).
    long = {}
    for f in sorted((ROOT / "ui").rglob("*.py")):
        n = len(f.read_text().splitlines())
        if n > 800:
            long[str(f.relative_to(ROOT))] = n
    assert not long, long


#: R7: the function-local imports of package modules that stay, by "file:imported name",
#: each with its reason (Blender's start-up time, an optional dependency, a layer above)
LOCAL_IMPORTS = {
    "ui/registration.py:addon.frames": "Blender start-up: the modules load at register(), not "
    "when Blender lists the extension, and a register() after a reload sees reloaded ones",
    "ui/registration.py:addon.prefs": "as addon.frames",
    "ui/registration.py:addon.props": "as addon.frames",
    "ui/registration.py:ui.cli": "as addon.frames",
    "ui/registration.py:ui.operators": "as addon.frames",
    "ui/registration.py:ui.panels": "as addon.frames",
    "ui/registration.py:ui.operators.jobs": "as addon.frames",
    "ui/cli/main.py:register": "the layer above: a plain script's first command registers the "
    "extension through the package root, whose registration imports the command line",
    "addon/io/export.py:core.data.onnx.export_onnx": "Blender start-up: register() loads no "
    "core.data.onnx (the ONNX export, which imports the optional onnx package)",
    "addon/io/export.py:core.data.pc2.write_pc2": "Blender start-up: register() loads no "
    "core.data.pc2 (only a PC2 export or import reads it)",
    "addon/kinds/family/family.py:core.data.pc2.read_pc2": "as addon/io/export.py's write_pc2",
    "addon/kinds/face/face.py:core.kinds.face.rig.load_face": "Blender start-up: register() "
    "loads no core.kinds.face.rig (only a face model's operators read the face file)",
    "addon/kinds/fem/bake.py:core.bake.prepare.prepare_body": "Blender start-up: register() "
    "loads no core.bake.prepare (only a bake's start prepares the body)",
    "addon/kinds/cloth/bake_job.py:addon.kinds.cloth.model": "the cloth bake worker's "
    "start-up: a background Blender imports this module for run(), which needs none of the "
    "Blender side's records (at module level they add 14 modules to its imports)",
    "addon/kinds/cloth/bake_job.py:addon.io.paths.cache_dir": "as addon.kinds.cloth.model",
    "addon/kinds/cloth/bake_job.py:addon.io.paths.load_path": "as addon.kinds.cloth.model",
    "addon/kinds/cloth/bake_job.py:addon.io.paths.scene_of": "as addon.kinds.cloth.model",
    "addon/kinds/cloth/bake_job.py:addon.io.paths.store_path": "as addon.kinds.cloth.model",
    "addon/kinds/cloth/bake_job.py:addon.kinds.fem.bake.forget": "as addon.kinds.cloth.model",
}


def local_imports(path: Path) -> list[tuple[str, int]]:
    """(imported name, line) of every import of a package module inside a function of a
    package file, resolved as :func:`resolved_imports` does (which names each by its line)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    inside = {
        node.lineno
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
        if isinstance(node, ast.Import | ast.ImportFrom)
    }
    return [(name, line) for name, line in resolved_imports(path) if line in inside]


def test_local_imports_are_seen(tmp_path, monkeypatch):
    fake = tmp_path / "ui" / "m.py"
    fake.parent.mkdir()
    fake.write_text(
        "from ..core import fem\n"
        "def f():\n    from ..addon import jobs\n    import json\n"
        "class A:\n    def g(self):\n        from .x import y\n"
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert local_imports(fake) == [("addon.jobs", 3), ("ui.x.y", 7)]


@pytest.mark.parametrize("layer", ["addon", "ui"])
def test_r7_function_local_imports_have_a_reason(layer):
    # R7: a package module imported inside a function (not at module level) hides an arrow
    # of the import graph; each that stays is listed in LOCAL_IMPORTS with its reason.
    found = {
        f"{f.relative_to(ROOT).as_posix()}:{name}": line
        for f in sorted((ROOT / layer).rglob("*.py"))
        for name, line in local_imports(f)
    }
    bad = sorted(f"{key} (line {line})" for key, line in found.items() if key not in LOCAL_IMPORTS)
    assert not bad, "function-local imports without a reason in LOCAL_IMPORTS:\n" + "\n".join(bad)
    stale = [k for k in LOCAL_IMPORTS if k.startswith(f"{layer}/") and k not in found]
    assert not stale, f"LOCAL_IMPORTS entries that no longer import locally: {stale}"


#: R4: calls and attributes that test an object's data kind
KIND_PREDICATES = {"is_face", "is_cloth", "cloth_modifier", "training_data_kind", "other_mesh"}


def kind_branches(path: Path, kind_names: set[str]) -> list[str]:
    """The places of a file that branch on a data kind: a comparison with a kind's name (or a
    ``KIND`` constant) as an operand, and a kind predicate in a condition (``if``, ``elif``,
    a conditional expression, ``while``, a comprehension's ``if``)."""
    tree = ast.parse(path.read_text(), filename=str(path))

    def names_kind(node) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in kind_names
        return getattr(node, "id", getattr(node, "attr", None)) == "KIND"

    def predicate(node) -> str | None:
        for sub in ast.walk(node):
            name = getattr(sub, "id", getattr(sub, "attr", None))
            if name in KIND_PREDICATES:
                return name
        return None

    out = {}  # line -> what, the first found on that line
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
            names_kind(x) for x in [node.left, *node.comparators]
        ):
            out.setdefault(node.lineno, ast.unparse(node))
        tests = []
        if isinstance(node, ast.If | ast.IfExp | ast.While):
            tests = [node.test]
        elif isinstance(node, ast.comprehension):
            tests = node.ifs
        for test in tests:
            found = predicate(test)
            if found:
                out.setdefault(test.lineno, f"{found} in {ast.unparse(test)}")
    return [f"{line}: {what}" for line, what in sorted(out.items())]


def test_kind_branches_are_seen(tmp_path):
    f = tmp_path / "m.py"
    f.write_text(
        "if obj.kind == 'face':\n    pass\n"
        "x = 1 if is_cloth(obj) else 2\n"
        "y = [o for o in objs if o.neural_rom.method().other_mesh]\n"
        "z = rec.kind == cloth.KIND\n"
        "ok = setting.kind == 'int' and data_kind(obj)\n"
    )
    assert [b.split(":")[0] for b in kind_branches(f, {"fem", "face", "cloth"})] == [
        "1", "3", "4", "5"
    ]  # fmt: skip


@pytest.mark.parametrize(
    "layer",
    ["addon", "ui"],
)
def test_r4_only_a_kinds_own_modules_branch_on_it(layer):
    # R4: code outside a data kind's own modules (addon/kinds/<k>/, ui/*/kinds/<k>.py) does
    # not branch on the kind: it asks the kind's record.
    from neural_rom.core import registry

    kind_names = {k.name for k in registry.kinds()}
    bad = [
        f"{f.relative_to(ROOT).as_posix()}:{b}"
        for f in sorted((ROOT / layer).rglob("*.py"))
        if "kinds" not in f.relative_to(ROOT).parts
        for b in kind_branches(f, kind_names)
    ]
    assert not bad, "kind branches outside the kinds' modules:\n" + "\n".join(bad)


def test_r8_only_the_frame_module_touches_handlers_and_frame_set():
    # R8: only addon/frames.py touches bpy.app.handlers; scene.frame_set only where Blender
    # is sampled (the io sampler, the animation reader, the background cloth bake) and where
    # the timeline moves on for the user (frames.advance: a poke's steps).
    handlers = {"addon/frames.py"}
    frame_set = {
        "addon/io/mesh.py",
        "addon/io/animation.py",
        "addon/kinds/cloth/bake_job.py",
        "addon/frames.py",
    }
    bad = []
    for f in package_files():
        rel = f.relative_to(ROOT).as_posix()
        text = f.read_text()
        if "bpy.app.handlers" in text and rel not in handlers:
            bad.append(f"{rel}: bpy.app.handlers")
        if ".frame_set(" in text and rel not in frame_set:
            bad.append(f"{rel}: frame_set")
    assert not bad, bad


def test_r9_the_engine_never_calls_back():
    # R9: core never calls back into Blender: no public function or method of the frame
    # engine (core.engine, but the replay of a bake: a job's progress and cancel hooks) takes
    # a Callable parameter.
    bad = []
    for f in sorted((ROOT / "core" / "engine").rglob("*.py")):
        if f.name == "replay.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(), filename=str(f))):
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
                args = node.args.args + node.args.kwonlyargs + node.args.posonlyargs
                for a in args:
                    if a.annotation is not None and "Callable" in ast.unparse(a.annotation):
                        bad.append(f"{f.relative_to(ROOT)}:{node.lineno}: {node.name}({a.arg})")
    assert not bad, bad


def test_r10_the_worker_is_a_bootstrap_and_every_job_resolves():
    # R10: worker.py at most 150 lines and no numpy; core.jobs.JOBS names each job's
    # "module:function", and each resolves.
    worker = ROOT / "worker.py"
    assert len(worker.read_text().splitlines()) <= 150
    assert "numpy" not in {top(m) for m, level in imports_of(worker) if level == 0}
    from neural_rom.core import jobs

    for kind, ref in jobs.JOBS.items():
        module, _, func = ref.partition(":")
        assert callable(getattr(importlib.import_module(f"neural_rom.{module}"), func)), kind


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
