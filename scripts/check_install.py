"""Install a built extension zip into this Python's PyPI ``bpy`` as Blender's **Install from
Disk** does, enable it, and take a small scene through it headless: tetrahedralize, bake,
train (linear) and simulate, with the installed copy and its bundled wheels.

Usage::

    .venv/bin/python scripts/check_install.py dist/neural_rom-0.1.0-linux_x64.zip
    .venv313/bin/python scripts/check_install.py ZIP [--workdir DIR] [--scene FILE.blend]

Run it with the Python of a ``bpy`` environment (4.2, 4.5, 5.2, 5.3). Blender's user folders
go to ``<workdir>/home`` (``BLENDER_USER_RESOURCES``), so the user's own are not touched.
The install is Blender's operator (``extensions.package_install_files``): it extracts the
zip into ``extensions/user_default/neural_rom``, installs the wheels of this Python into
``extensions/.local/lib/python3.X/site-packages`` and enables the add-on. What the wheels
bring (scipy, tetgen, pyamg, meshio, ...) is then imported from there only, here and in the
job workers (whose ``PYTHONPATH`` puts that folder first), even where this Python has its
own copies. Jobs run with this Python (``NEURAL_ROM_PYTHON`` is cleared).

Without ``--scene`` the scene is a small ball (0.3 m tets, two 6-frame bakes, a 3-DOF
linear model, 8 simulated frames). ``--scene FILE.blend`` takes a copy of your file instead
(its Deformable objects, their own settings): tetrahedralize, bake, train, simulate and
compare (the held-out replay).

Prints one JSON line (``check_install: {...}``): the versions, what was installed, and the
numbers of each stage; exit code 0 when every stage passed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import io
import json
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGE = "bl_ext.user_default.neural_rom"


def wheel_modules(zip_path: Path) -> set[str]:
    """Top-level module names the zip's wheels install (``scipy``, ``markdown_it``, ...)."""
    names = set()
    with zipfile.ZipFile(zip_path) as zf:
        for entry in zf.namelist():
            if entry.startswith("wheels/") and entry.endswith(".whl"):
                with zipfile.ZipFile(io.BytesIO(zf.read(entry))) as wheel:
                    for name in wheel.namelist():
                        top = name.split("/")[0]
                        if not top.endswith((".dist-info", ".data", ".libs")):
                            names.add(top.removesuffix(".py"))
    return names


class OnlyFrom:
    """An import hook: the top-level modules ``names`` come from ``site`` or not at all."""

    def __init__(self, site: Path, names: set[str]):
        self.site, self.names = str(site), names

    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in self.names:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, [self.site])
        if spec is None:
            raise ModuleNotFoundError(f"{name} is not installed in {self.site}", name=name)
        return spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("zip", type=Path, help="the extension zip (scripts/build_extension.py)")
    parser.add_argument(
        "--workdir", type=Path, help="folder for Blender's user files and the scene"
    )
    parser.add_argument(
        "--scene", type=Path, help="a .blend to check (a copy of it) instead of the ball"
    )
    args = parser.parse_args(argv)
    zip_path = args.zip.resolve()
    work = (args.workdir or Path(tempfile.mkdtemp(prefix="neural_rom_install_"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    home = work / "home"
    os.environ["BLENDER_USER_RESOURCES"] = str(home)  # read when bpy is imported
    os.environ.pop("NEURAL_ROM_PYTHON", None)
    site = home / "extensions" / ".local" / "lib"
    site = site / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    bundled = wheel_modules(zip_path)
    stale = sorted(n for n in bundled if n in sys.modules)
    if stale:
        raise SystemExit(f"error: {', '.join(stale)} imported before the install")
    sys.meta_path.insert(0, OnlyFrom(site, bundled))

    import bpy
    import numpy as np

    report: dict = {"bpy": bpy.app.version_string, "python": sys.version.split()[0]}
    report["numpy"] = np.__version__
    result = bpy.ops.extensions.package_install_files(
        filepath=str(zip_path), repo="user_default", enable_on_install=True
    )
    enabled = PACKAGE in {a.module for a in bpy.context.preferences.addons}
    report["install"] = sorted(result)
    report["enabled"] = enabled
    if result != {"FINISHED"} or not enabled:
        print("check_install: " + json.dumps(report))
        return 1
    report["wheels_installed"] = sorted(p.name for p in site.glob("*.dist-info"))
    import scipy

    report["scipy"] = scipy.__version__
    report["scipy_from_wheels"] = Path(scipy.__file__).is_relative_to(site)
    nr = importlib.import_module(PACKAGE)
    cli = nr.addon.cli
    # the flat module names of before issue #29's nesting, under bl_ext: the same objects
    moved = {
        f"core.{old}": f"core.{new}"
        for old, new in importlib.import_module(f"{PACKAGE}.core._moved").MOVED.items()
    }
    moved.update(importlib.import_module(f"{PACKAGE}.ui._moved").MOVED)
    moved.update(importlib.import_module(f"{PACKAGE}.addon._moved").MOVED)
    report["old_paths_same"] = all(
        importlib.import_module(f"{PACKAGE}.{old}") is importlib.import_module(f"{PACKAGE}.{new}")
        for old, new in moved.items()
    )
    report["old_paths"] = len(moved)

    if args.scene is not None:
        return check_scene(bpy, cli, args.scene.resolve(), work, report)
    bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0.0, 0.0, 1.0))
    obj = bpy.context.object
    obj.name = "Ball"
    obj.neural_rom.role = "DEFORMABLE"
    obj.neural_rom.tet_size = 0.3
    obj.neural_rom.frames = 6
    bpy.context.scene.frame_end = 8
    blend = work / "ball.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    pc2 = work / "ball_reduced.pc2"
    steps = [
        ["tetrahedralize", "--save"],
        ["bake", "--variants", "2", "--seed", "1", "--save"],
        ["train", "--method", "linear", "--k", "3", "--max-cubature", "20", "--device", "cpu",
         "--save"],
        ["simulate", "--out", str(pc2), "--save"],
    ]  # fmt: skip
    if run_steps(cli, steps, report):
        bpy.ops.wm.open_mainfile(filepath=str(blend))
        s = bpy.data.objects["Ball"].neural_rom
        report["tets"] = int(s.tets_count)
        report["bakes"] = [(b.frames, b.status) for b in s.bakes]
        report["k"] = int(s.model.k)
        from importlib import import_module

        frames, start, _ = import_module(f"{PACKAGE}.core.pc2").read_pc2(pc2)
        report["simulated_frames"] = int(frames.shape[0])
        report["max_motion_m"] = float(np.abs(frames - frames[0]).max())
        report["finite"] = bool(np.isfinite(frames).all())
        report["last_frame_sum"] = float(frames[-1].astype(np.float64).sum())
    print("check_install: " + json.dumps(report))
    return 0 if report["exit_codes"] == [0] * len(steps) else 1


def run_steps(cli, steps: list[list[str]], report: dict) -> bool:
    """Run the CLI commands ``steps`` until one fails; their exit codes go into ``report``.
    True when all passed."""
    codes = report["exit_codes"] = []
    for step in steps:
        codes.append(cli.main(step))
        if codes[-1] != 0:
            return False
    return True


def check_scene(bpy, cli, scene: Path, work: Path, report: dict) -> int:
    """Tetrahedralize, bake, train, simulate and compare a copy of ``scene`` with its own
    settings; the numbers of each Deformable object go into ``report``."""
    blend = work / scene.name
    shutil.copyfile(scene, blend)
    bpy.ops.wm.open_mainfile(filepath=str(blend))
    steps = [
        ["tetrahedralize", "--save"],
        ["bake", "--save"],
        ["train", "--save"],
        ["simulate", "--out", str(work / "simulated"), "--save"],
        ["compare", "--json", str(work / "compare.json")],
    ]
    if run_steps(cli, steps, report):
        bpy.ops.wm.open_mainfile(filepath=str(blend))
        found = json.loads((work / "compare.json").read_text())
        rows = found["bakes"]
        for obj in bpy.data.objects:
            s = obj.neural_rom
            if s.role == "DEFORMABLE":
                report[obj.name] = {
                    "tets": int(s.tets_count),
                    "bakes": [(b.frames, b.status) for b in s.bakes],
                    "method": s.model.method,
                    "k": int(s.model.k),
                    "compare": [r for r in rows if r.get("object") == obj.name],
                }
    print("check_install: " + json.dumps(report))
    return 0 if report["exit_codes"] == [0] * len(steps) else 1


if __name__ == "__main__":
    sys.exit(main())
