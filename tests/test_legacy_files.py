"""Files that users' disks hold, written before the redesign of #29 (tests/data/legacy/,
made once by its make_legacy.py; never regenerated to make a test pass): every model file
loads by the method it names and replays its 8 stored frames, the bakes, tet mesh and face
file open, and the .blend saved by Blender 4.5 reads back every stored property value.

Imports go through the pre-#29 module paths on purpose: after the move they are aliases,
and this module checks them too. The replays are torch-free (core only), so they also run on
Blender 5's line (Python 3.13, numpy 2, no torch).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from neural_rom.core.bake import replay_scenario
from neural_rom.core.data.cache import BakeCache
from neural_rom.core.data.meshfile import read_tetmesh
from neural_rom.core.data.modelfile import read_method
from neural_rom.core.engine.replay import replay_bake
from neural_rom.core.kinds.cloth.source import replay_cloth_bake
from neural_rom.core.kinds.face.rig import load_face
from neural_rom.core.methods.active import play
from neural_rom.core.registry import get, load_simulator, names

LEGACY = Path(__file__).parent / "data" / "legacy"
FEM_MODELS = ("linear", "autoencoder", "shen", "snp", "licrom")
# Largest vertex distance allowed between a replay and its stored frames (m); the frames
# move up to 0.29 m. Measured (AMD EPYC, OpenBLAS): 0 at 1 and at 2 BLAS threads with the
# numpy 1.26 that made them; under OpenBLAS's other kernels (OPENBLAS_CORETYPE Haswell,
# SkylakeX, Sandybridge, Nehalem, Prescott) and numpy 2.5, up to 6e-14 m for every model but
# the autoencoder, whose L-BFGS steps (tolerance 1e-8) land up to 2.7e-10 m apart. 1e-8 m
# leaves 37x that; a changed loader, array or step moves the frames by millimetres.
TOLERANCE_M = 1e-8
RENAMED = (
    "users' model files, bakes and .blend files store these names; a stored name, array or "
    "default that changed breaks files already on disk (keep the old one readable)"
)


@pytest.fixture(scope="module")
def expected():
    with np.load(LEGACY / "expected.npz") as f:
        return dict(f)


@pytest.fixture(scope="module")
def bar():
    """The legacy bar's tet mesh and its bake (a sphere, pokes and moving pins)."""
    tets = read_tetmesh(LEGACY / "bar" / "tets.npz")
    cache = BakeCache.open(LEGACY / "bar" / "bar_v000.nrbake", expect_mesh_hash=tets.hash())
    return tets, cache


def check_replay(got: np.ndarray, want: np.ndarray, name: str) -> None:
    assert got.shape == want.shape, f"{name}: replay has shape {got.shape}, stored {want.shape}"
    gap = float(np.linalg.norm(got - want, axis=-1).max())
    assert gap <= TOLERANCE_M, (
        f"the legacy {name} model replays its bake {gap:.3g} m away from the frames stored "
        f"when it was made (allowed {TOLERANCE_M:g} m): loading or stepping a model file "
        f"changed; {RENAMED}"
    )


def test_every_legacy_model_names_a_registered_method():
    stored = {p.stem: read_method(p) for p in sorted((LEGACY / "models").glob("*.nrmodel"))}
    gone = {f: m for f, m in stored.items() if m not in names()}
    assert not gone, f"legacy models name methods no longer registered: {gone}; {RENAMED}"
    assert set(stored.values()) == {*FEM_MODELS, "active"}


@pytest.mark.parametrize("name", FEM_MODELS)
def test_a_legacy_fem_model_replays_its_stored_frames(name, bar, expected):
    tets, cache = bar
    # a model that runs on other meshes (LiCROM) is put on the bar, as Simulate does
    mesh = (tets.X, tets.T) if get(name).other_mesh else None
    path = LEGACY / "models" / f"{name}.nrmodel"
    sim, _ = load_simulator(path, expect_mesh_hash=tets.hash(), mesh=mesh)
    check_replay(replay_bake(sim, cache, replay_scenario(cache)[1]), expected[name], name)


def test_the_legacy_cloth_model_replays_the_cloth_bake(expected):
    sim, _ = load_simulator(LEGACY / "models" / "snp_cloth.nrmodel")
    cache = BakeCache.open(next((LEGACY / "cloth").glob("*.nrbake")))
    check_replay(replay_cloth_bake(sim, cache), expected["snp_cloth"], "snp (cloth)")


def test_the_legacy_face_model_plays_its_stored_sliders(expected):
    rig, keys = load_face(LEGACY / "face" / "face.npz")
    sim, _ = load_simulator(
        LEGACY / "models" / "active.nrmodel", expect_mesh_hash=rig.mesh().hash()
    )
    skin, _ = play(sim, sliders=expected["active_sliders"])
    check_replay(skin, expected["active"], "active face")
    assert keys is not None and len(keys.positions) == 5


# ------------------------------------------------------------------------------------------
# The .blend saved by Blender 4.5


def _resolve(bpy, path: str):
    """``"Body:neural_rom.bakes[0].kind"`` -> that value (ID pointers by name)."""
    owner, _, attrs = path.partition(":")
    value = bpy.context.scene if owner == "Scene" else bpy.data.objects[owner]
    for part in attrs.split("."):
        name, index = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", part).groups()
        value = getattr(value, name)
        if index is not None:
            value = value[int(index)]
    return getattr(value, "name", value) if isinstance(value, bpy.types.ID) else value


def test_the_legacy_blend_reads_back_every_stored_value():
    """Every property of a deformable, a collider, a cloth, a face object and the scene
    (set to non-default values, ``method_settings.*`` included) reads back as stored."""
    pytest.importorskip("bpy", reason="reading a .blend needs the PyPI bpy (scripts/setup_env.sh)")
    from .blender_fixtures import registered

    stored = json.loads((LEGACY / "scene_values.json").read_text(encoding="utf-8"))["values"]
    with registered() as ns:
        ns.bpy.ops.wm.open_mainfile(filepath=str(LEGACY / "scene.blend"))
        changed = []
        for path, want in stored.items():
            try:
                got = _resolve(ns.bpy, path)
            except (AttributeError, KeyError, IndexError) as exc:
                changed.append(f"{path}: gone ({exc})")
                continue
            if got != want:
                changed.append(f"{path}: stored {want!r}, read {got!r}")
    assert not changed, (
        f"{len(changed)} of {len(stored)} properties of the Blender 4.5 file read back "
        f"otherwise (a property name, an enum's items or their order changed, or a migration "
        f"is missing): {changed[:20]}; {RENAMED}"
    )
