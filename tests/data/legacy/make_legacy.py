"""Make the legacy fixtures: files and surfaces written by Neural ROM before the redesign of
issue #29 (docs/dev/redesign-29-plan.md, P0 step 1), which the tests read back unchanged.

Run ONCE, on the pre-move tree, and commit what it writes next to this file; the files are
then what users' disks hold, not something to regenerate when a test fails::

    .venv/bin/python tests/data/legacy/make_legacy.py            # everything (about 30 s)
    .venv/bin/python tests/data/legacy/make_legacy.py --surfaces # only the two JSON surfaces

``--surfaces`` rewrites ``registry_records.json`` and ``cli_surface.json`` alone: the one
legitimate reason is a deliberate addition (a new method, setting, command or option) or a
reworded help text, said in the commit; the model files, bakes and the .blend stay.

What it writes (deterministic numbers: seeds, CPU, one BLAS and torch thread; the bakes'
ids and times are the only things that differ between two runs):

- ``bar/tets.npz``: a 153-node bar (0.5 x 0.1 x 0.1 m, 384 tets), ``core.meshfile``.
- ``bar/bar_v000.nrbake``: the first of 4 FEM bakes of 7 frames the models train on (pokes,
  a keyframed sphere and moving pins: every frame input a replay carries); the other three
  are not kept (1.5 MB for everything).
- ``cloth/sheet_000.nrbake``: the first of 2 cloth bakes of a 6 x 6 sheet hung from its top
  row (Blender's cloth, the add-on's cloth-bake job in a background bpy).
- ``face/face.npz``: a small procedural face (``core.face``: 273 nodes, 912 tets) with 5 keys.
- ``models/<method>.nrmodel``: one tiny model per registered method (seconds each).
- ``expected.npz``: for each model, 8 frames replayed from it (``<method>``, (8, n, 3) m):
  FEM methods replay bake 0 (``core.compare.replay_bake``), ``snp_cloth`` the cloth bake
  (its colliders and reference frame), ``active`` plays the 8 slider frames
  ``active_sliders``.
- ``registry_records.json``, ``cli_surface.json``: see ``tests/legacy_surfaces.py``.
- ``scene.blend`` (bpy 4.5, compressed) and ``scene_values.json``: see ``make_blend``.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))  # tests/ (its scenes, fixtures and surfaces)
FRAMES = 7  # a bake of 7 steps has 8 frames, frame 0 the rest state
DT = 1.0 / 24.0

#: each method's settings: the defaults but small (seconds of training on one core)
TINY = {
    "linear": {"k": 6, "max_cubature": 40, "cubature_poses": 20},
    "autoencoder": {
        "k": 8,
        "latent_dim": 3,
        "hidden": [16],
        "epochs": 40,
        "patience": 40,
        "pca_fallback": False,  # an autoencoder model file, even where PCA does as well
        "keep_linear": False,
        "max_cubature": 40,
        "cubature_poses": 20,
    },
    "shen": {
        "k": 8,
        "n_p": 2,
        "latent_dim": 3,
        "hidden": [8, 8],
        "epochs": 30,
        "linear_warmup": 5,
        "max_cubature": 40,
        "cubature_poses": 20,
    },
    "snp": {"k": 6, "layers": 2, "width": 16, "window": 4, "epochs": 5, "batch_size": 4},
    "licrom": {
        "latent_dim": 4,
        "hidden": [16, 16],
        "epochs": 20,
        "points_per_frame": 128,
        "encoder_points": 64,
        "cubature_vertices": 30,
        "cubature_poses": 4,
        "static_derivatives": "off",
    },
    "active": {"latent_dim": 2, "warm_epochs": 40, "epochs": 1, "basis": 6, "hidden": [8]},
}


def bar():
    from neural_rom.core.geometry.grid import grid_tetmesh

    X, T = grid_tetmesh((0.5, 0.1, 0.1), (16, 2, 2))
    return X, T


def bake_spec(X):
    from neural_rom.core import bake
    from neural_rom.core.physics.fem import Material

    return bake.BakeSpec(
        material=Material(youngs_modulus=1e6, poisson_ratio=0.35, density=1000.0).to_dict(),
        scenario={
            "kind": "composite",
            "parts": [
                {"kind": "random_pokes", "count": 2, "strength": 1.0, "duration": 0.1},
                {
                    "kind": "keyframed_colliders",
                    "keys": 2,
                    "move_pins": True,
                    "pin_amplitude": 0.02,
                },
            ],
        },
        frames=FRAMES,
        dt=DT,
        pinned=np.flatnonzero(X[:, 0] < 1e-9).tolist(),
        damping=(0.5, 0.0),
        seed=29,
        variants=4,
    )


def make_bar(out: Path) -> list[Path]:
    from neural_rom.core import bake
    from neural_rom.core.data.meshfile import write_tetmesh
    from neural_rom.core.geometry.tetmesh import TetMesh

    X, T = bar()
    (out / "bar").mkdir(parents=True)
    write_tetmesh(out / "bar" / "tets.npz", TetMesh(X, T))
    return bake.bake_variants(SimpleNamespace(X=X, T=T), bake_spec(X), out / "bar" / "bakes", "bar")


def fem_replay(model_path: Path, bake_path: Path, tets_path: Path) -> np.ndarray:
    """The (8, n, 3) replay of a bake by a model file, as Compare with Bake replays it."""
    from neural_rom.core.bake import replay_scenario
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.data.meshfile import read_tetmesh
    from neural_rom.core.data.modelfile import read_method
    from neural_rom.core.engine.replay import replay_bake
    from neural_rom.core.registry import get, load_simulator

    tets = read_tetmesh(tets_path)
    cache = BakeCache.open(bake_path, expect_mesh_hash=tets.hash())
    # a model that runs on other meshes (LiCROM) is put on the bar, as Simulate does
    mesh = (tets.X, tets.T) if get(read_method(model_path)).other_mesh else None
    sim, _ = load_simulator(model_path, expect_mesh_hash=tets.hash(), mesh=mesh)
    return replay_bake(sim, cache, replay_scenario(cache)[1])


def face_sliders(model) -> np.ndarray:
    """8 slider frames: from the rest code along the trained codes and back."""
    codes = np.asarray(model.arrays["codes"])
    t = np.linspace(0.0, 1.0, 8)[:, None]
    return (1 - t) * codes[0] + t * codes[-1]


def face_replay(model_path: Path) -> tuple[np.ndarray, np.ndarray]:
    """The skin (8, s, 3) played by :func:`face_sliders`, and the sliders."""
    from neural_rom.core.methods.active import play
    from neural_rom.core.registry import load_simulator

    sim, model = load_simulator(model_path)
    sliders = face_sliders(model)
    return play(sim, sliders=sliders)[0], sliders


def make_face(out: Path):
    from neural_rom.core.kinds.face.rig import (
        demo_muscles,
        ellipsoid_mesh,
        face_rig,
        make_shape_keys,
        save_face,
    )

    # the demo head (core.face.demo_head) coarser: 273 nodes, 912 tets, 162 skin vertices
    rig = face_rig(
        ellipsoid_mesh((0, 0, 0), (0.075, 0.09, 0.105), 2),
        ellipsoid_mesh((0, 0.006, 0.026), (0.06, 0.07, 0.066), 2),
        ellipsoid_mesh((0, 0.0, -0.066), (0.046, 0.046, 0.016), 2),
        jaw_pivot=(0, 0.035, -0.045),
        jaw_axis=(1.0, 0, 0),
        spacing=0.034,
        muscles=demo_muscles(),
    )
    keys = make_shape_keys(rig, 5, held_out=1, seed=29)
    (out / "face").mkdir()
    return save_face(out / "face" / "face.npz", rig, keys)


def make_cloth(work: Path) -> list[Path]:
    """Two cloth bakes of a 6 x 6 sheet hung from its top row, a ball near it (the worker's
    cloth-bake job, Blender's cloth in a background bpy), in ``work``."""
    from neural_rom.core import jobs

    from tests.cloth_scenes import build_sheet

    blend = build_sheet(work / "sheet.blend", n=6)
    spec = {
        "kind": "cloth_bake",
        "blend": str(blend),
        "object": "Sheet",
        "out_dir": str(work / "cloth"),
        "name": "sheet",
        "frames": FRAMES,
        "variants": 2,
        "seed": 29,
        "owner": "-",
        "collider_box": [[-0.6, -0.45, 0.4], [0.6, 0.05, 1.6]],
        "processes": 1,
    }
    job = jobs.Job.start(spec, sys.executable, work / "logs", check_python=False)
    job.wait(timeout=600)
    if job.state != jobs.DONE:
        raise SystemExit(f"cloth bake failed: {job.message}")
    return [Path(p) for p in job.result["paths"]]


def cloth_replay(model_path: Path, bake_path: Path) -> np.ndarray:
    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.kinds.cloth.source import replay_cloth_bake
    from neural_rom.core.registry import load_simulator

    sim, _ = load_simulator(model_path)
    return replay_cloth_bake(sim, BakeCache.open(bake_path))


def train(name: str, data, out: Path, work: Path) -> dict:
    from neural_rom.core import registry

    method = registry.get(name)
    return method.trainer_function()(
        data,
        out,
        method.validate(TINY.get(name.split("_")[0], {})),
        checkpoint_dir=work / f"ckpt_{out.stem}",
    )


def make_models(out: Path, bakes: list[Path], face: Path, cloth: list[Path]) -> dict:
    import torch

    torch.manual_seed(0)
    torch.set_num_threads(1)
    from neural_rom.core import registry

    (out / "models").mkdir()
    expected = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in registry.methods():
            path = out / "models" / f"{method.name}.nrmodel"
            if "fem" in method.trains_on:
                train(method.name, [str(p) for p in bakes], path, Path(tmp))
                expected[method.name] = fem_replay(path, bakes[0], bakes[0].parents[1] / "tets.npz")
            elif "face" in method.trains_on:
                train(method.name, str(face), path, Path(tmp))
                expected[method.name], expected["active_sliders"] = face_replay(path)
            else:
                raise SystemExit(f"no legacy data for {method.name}: add it to make_legacy.py")
            print(method.name, path.stat().st_size, "bytes", flush=True)
            if "cloth" in method.trains_on:
                path = out / "models" / f"{method.name}_cloth.nrmodel"
                train(method.name, [str(p) for p in cloth], path, Path(tmp))
                expected[path.stem] = cloth_replay(path, cloth[0])
                print(path.stem, path.stat().st_size, "bytes", flush=True)
    return expected


#: per object: (role, training data kind, model method); the stored names that say what the
#: object is (``face.path`` only on the face, ``bakes[].kind``/``model.kind``) are set to
#: what the add-on writes, the rest to non-default values by :func:`_fill`
OBJECTS = {
    "Body": ("DEFORMABLE", "fem", "licrom"),
    "Ball": ("COLLIDER", "fem", "linear"),
    "Cape": ("NONE", "cloth", "snp"),
    "Face": ("NONE", "face", "active"),
}


def _new_value(prop, path: str):
    """A valid value of ``prop`` other than its default, or None when there is none to
    choose (a dynamic enum, an ID pointer)."""
    t = prop.type
    if t == "BOOLEAN":
        return not prop.default
    if t == "INT":
        lo, hi, d = prop.hard_min, prop.hard_max, prop.default
        return d + 3 if d + 3 <= hi else max(lo, d - 1)
    if t == "FLOAT":
        lo, hi, d = prop.hard_min, prop.hard_max, prop.default
        v = d * 1.25 + 0.0625
        return v if lo <= v <= hi else (d + lo) / 2 if d > lo else (d + hi) / 2
    if t == "STRING":
        if "method_settings" in path and prop.identifier != "name":
            return "7, 5"  # an int_list setting, as the panel writes it
        if prop.subtype in ("FILE_PATH", "DIR_PATH"):
            return f"//legacy/{prop.identifier}"
        return f"legacy {prop.identifier}"
    if t == "ENUM" and not prop.is_enum_flag:
        items = [i.identifier for i in prop.enum_items]
        others = [i for i in items if i != prop.default]
        return others[-1] if others else None  # the last item: a reorder or insert shows
    return None


def _fill(struct, path: str, skip: set) -> None:
    """Set every property of ``struct`` (recursing into groups and one item of each
    collection) to :func:`_new_value`, in declaration order."""
    import bpy

    for prop in struct.bl_rna.properties:
        name = prop.identifier
        here = f"{path}.{name}"
        if name == "rna_type" or here in skip:
            continue
        if prop.type == "POINTER" and isinstance(getattr(struct, name), bpy.types.PropertyGroup):
            _fill(getattr(struct, name), here, skip)
        elif prop.type == "COLLECTION":
            coll = getattr(struct, name)
            if len(coll) == 0:
                coll.add()
            for i, item in enumerate(coll):
                _fill(item, f"{here}[{i}]", skip)
        elif not prop.is_readonly and getattr(prop, "array_length", 0) == 0:
            value = _new_value(prop, here)
            if value is not None:
                setattr(struct, name, value)


def _read(struct, path: str, out: dict, defaults: dict) -> None:
    """Every stored value under ``struct`` as ``{path: value}`` (enums by identifier; ID
    pointers by name), and in ``defaults`` the default of each."""
    import bpy

    for prop in struct.bl_rna.properties:
        name = prop.identifier
        here = f"{path}.{name}"
        if name == "rna_type":
            continue
        value = getattr(struct, name)
        if prop.type == "POINTER" and isinstance(value, bpy.types.PropertyGroup):
            _read(value, here, out, defaults)
        elif prop.type == "COLLECTION":
            for i, item in enumerate(value):
                _read(item, f"{here}[{i}]", out, defaults)
        elif prop.type == "POINTER":
            out[here] = None if value is None else value.name
        elif getattr(prop, "array_length", 0) == 0:
            out[here] = value
            defaults[here] = getattr(prop, "default", None)


def make_blend(out: Path, sizes: dict) -> None:
    """``scene.blend`` (compressed) and ``scene_values.json``: the objects of
    :data:`OBJECTS` with the add-on's properties filled, and every stored value read back."""
    from tests.blender_fixtures import registered

    with registered() as ns:
        bpy = ns.bpy
        scene = bpy.context.scene
        bpy.ops.mesh.primitive_cube_add(size=0.4, location=(0, 0, 1))
        bpy.ops.mesh.primitive_uv_sphere_add(radius=0.2, segments=8, ring_count=4)
        bpy.ops.mesh.primitive_grid_add(x_subdivisions=4, y_subdivisions=4, size=1)
        bpy.context.active_object.modifiers.new("Cloth", "CLOTH")
        bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=1, radius=0.1)
        bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=1, radius=0.08, location=(0, 0, 0.01))
        bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=1, radius=0.05, location=(0, 0, -0.05))
        names = [*OBJECTS, "Skull", "Jaw"]
        for obj, name in zip(list(scene.objects), names, strict=True):
            obj.name = name
        for name, (role, kind, method) in OBJECTS.items():
            s = bpy.data.objects[name].neural_rom
            skip = {".model_method"}  # stored as model_method_name
            if kind == "face":
                skip |= {".bakes"}  # a face has no bakes
            _fill(s, "", skip)
            s.role = role
            s.model_method_name = method
            s.model.method = method
            s.model.kind = kind
            for b in s.bakes:
                b.kind = kind
            s.face.path = "//face/face.npz" if kind == "face" else ""
            s.face.skull = bpy.data.objects["Skull"] if kind == "face" else None
            s.face.jaw = bpy.data.objects["Jaw"] if kind == "face" else None
            s.pending_bake = json.dumps({"kind": kind, "out_dir": "//legacy", "name": "x"})
            s.pending_train = json.dumps({"method": method, "kind": kind, "bakes": 1})
        _fill(scene.neural_rom_scene, "", set())
        values, defaults = {}, {}
        for name in OBJECTS:
            _read(bpy.data.objects[name].neural_rom, f"{name}:neural_rom", values, defaults)
        _read(scene.neural_rom_scene, "Scene:neural_rom_scene", values, defaults)
        left = sorted(k for k, v in values.items() if v == defaults.get(k, object()))
        path = out / "scene.blend"
        bpy.ops.wm.save_as_mainfile(filepath=str(path), compress=True, copy=True)
    write_json(out / "scene_values.json", {"bpy": bpy.app.version_string, "values": values})
    print(len(values), "values;", len(left), "at their default:", left)
    sizes["scene.blend"] = path.stat().st_size


def write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=0, sort_keys=True) + "\n", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--surfaces", action="store_true", help="only the two JSON surfaces")
    ap.add_argument("--blend", action="store_true", help="only the .blend (development)")
    ap.add_argument("--out", default=str(HERE), help="folder to write (default: next to me)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import bpy  # noqa: F401 (the CLI surface needs the add-on's modules)

    from tests.legacy_surfaces import cli_surface, registry_records

    write_json(out / "registry_records.json", registry_records())
    write_json(out / "cli_surface.json", cli_surface())
    if args.surfaces:
        return 0
    make_blend(out, {})
    if args.blend:
        return 0
    for old in ("bar", "face", "cloth", "models", "expected.npz"):
        shutil.rmtree(out / old, ignore_errors=True)
        (out / old).unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        bakes = make_bar(work)
        face = make_face(out)
        cloth = make_cloth(work)
        expected = make_models(out, bakes, face, cloth)
        # only the replayed bakes are kept (a legacy bake of each kind)
        shutil.copytree(work / "bar" / "bakes" / bakes[0].name, out / "bar" / bakes[0].name)
        shutil.copy(work / "bar" / "tets.npz", out / "bar" / "tets.npz")
        shutil.copytree(cloth[0], out / "cloth" / cloth[0].name)
    np.savez_compressed(out / "expected.npz", **expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
