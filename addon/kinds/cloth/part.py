"""The cloth kind's part of the one Driver (:mod:`...driver`)."""

from __future__ import annotations

import bpy

from ....core.engine.engine import Engine
from ....core.engine.track import FrameReader
from ....core.errors import CacheError
from ....core.kinds.cloth.adapter import ClothAdapter
from ....core.registry import load_simulator
from ...driver import Driver, FramePart
from . import model as cloth


class ClothPart(FramePart):
    """A cloth model: the mesh's own vertices (no tets), the colliders its bakes recorded,
    its world matrix as the reference frame (:mod:`.kinds.cloth.model`)."""

    name = "cloth"

    @staticmethod
    def claims(obj: bpy.types.Object) -> bool:
        return obj.neural_rom.model.kind == "cloth"

    @staticmethod
    def colliders(obj: bpy.types.Object, scene) -> list[bpy.types.Object]:
        """The ones its cloth bakes recorded (:func:`.model.colliders`)."""
        return cloth.colliders(obj)

    def check(self, obj, scene) -> tuple:
        return (*cloth.check_model(obj), None)  # the mesh's own vertices: no tets

    def track(self, obj, colliders: list, mats, frame0: int):
        """Its colliders as its bakes recorded them, its own reference frame
        (:func:`.model.track`)."""
        return cloth.track(obj, colliders, mats, frame0)

    def load(self, obj, scene) -> tuple:
        path, mesh_hash = cloth.check_model(obj)
        try:
            sim, model = load_simulator(path, expect_mesh_hash=mesh_hash)
        except CacheError as e:
            raise CacheError(f"The model of '{obj.name}' cannot drive it: {e}.") from e
        n = len(sim.rest_positions())
        if n != len(obj.data.vertices):
            raise CacheError(
                f"The model of '{obj.name}' has {n} vertices but the mesh "
                f"{len(obj.data.vertices)}; cloth-bake it again and re-train."
            )
        adapter = ClothAdapter.for_model(sim, model, (None, n, None))
        return sim, model, None, Engine(sim, adapter, int(scene.frame_start))

    def reader(self, d: Driver, obj, colliders: list) -> FrameReader:
        """:meth:`FramePart.reader` of a cloth: :func:`.cloth.track`'s (the colliders as its
        bakes recorded them), kept while the recording and the colliders' names stay (their
        kinds follow from these)."""
        key = (obj.neural_rom.cloth.colliders, tuple(col.name for col in colliders))
        if d.read_key != key:
            d.read_key = key
            d.engine.adapter.reader_for(cloth.baked_kinds(obj, colliders), list(key[1]))
        return d.engine.adapter.reader

    @staticmethod
    def friction(colliders: list) -> None:
        return None  # a cloth bake records none
