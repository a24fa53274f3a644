"""What the bakes record and take: a baked variant on disk, a scenario parameter, the cloth
bake's settings."""

from __future__ import annotations

import json

import bpy
from bpy.props import (
    BoolProperty,
    EnumProperty,
    FloatProperty,
    IntProperty,
    StringProperty,
)

from ..prefs import REL_PATH


class NEURAL_ROM_PG_scenario_param(bpy.types.PropertyGroup):
    """One scenario parameter; the value lives in the field of its type."""

    # name: the scenario key (PropertyGroup.name)
    value_type: EnumProperty(
        items=(
            ("FLOAT", "Float", ""),
            ("INT", "Integer", ""),
            ("BOOL", "Boolean", ""),
            ("STRING", "String", ""),
            ("JSON", "JSON", "Lists and other values, as JSON text"),
        )
    )
    float_value: FloatProperty(name="Value", precision=4)
    int_value: IntProperty(name="Value")
    bool_value: BoolProperty(name="Value")
    string_value: StringProperty(name="Value")

    @property
    def value_attr(self) -> str:
        return {
            "FLOAT": "float_value",
            "INT": "int_value",
            "BOOL": "bool_value",
        }.get(self.value_type, "string_value")

    def get(self):
        t = self.value_type
        if t == "FLOAT":
            return float(f"{self.float_value:.7g}")  # stored as float32: 0.15, not 0.150000006
        if t == "INT":
            return int(self.int_value)
        if t == "BOOL":
            return bool(self.bool_value)
        if t == "JSON":
            return json.loads(self.string_value)
        return self.string_value

    def set(self, value) -> None:
        if isinstance(value, bool):
            self.value_type, self.bool_value = "BOOL", value
        elif isinstance(value, int):
            self.value_type, self.int_value = "INT", value
        elif isinstance(value, float):
            self.value_type, self.float_value = "FLOAT", value
        elif isinstance(value, str):
            self.value_type, self.string_value = "STRING", value
        else:
            self.value_type, self.string_value = "JSON", json.dumps(value)


class NEURAL_ROM_PG_bake(bpy.types.PropertyGroup):
    """One baked variant on disk and what it was baked from."""

    # name: shown in the list
    path: StringProperty(
        name="Path", subtype="DIR_PATH", options=REL_PATH, description="The .nrbake directory"
    )
    variant: IntProperty(name="Variant")
    frames: IntProperty(name="Frames", description="Committed frames, the initial state included")
    frame_start: IntProperty(
        name="Start Frame", description="Scene frame of the bake's first frame"
    )
    # bakes pass 2 GiB easily; IntProperty is 32-bit
    nbytes: FloatProperty(name="Size", description="Size on disk, bytes")
    status: StringProperty(name="Status")
    scenario: StringProperty(name="Scenario")
    mesh_hash: StringProperty(description="Hash of the world-space tet mesh that was baked")
    tets_hash: StringProperty(description="Hash of the object's tet mesh when it was baked")
    source_hash: StringProperty(description="Hash of the object's mesh when it was baked")
    kind: StringProperty(
        name="Kind",
        default="fem",
        description="The training data it is (core.registry.BAKE_KINDS): fem or cloth",
    )
    motion: StringProperty(
        name="Motion",
        description="What moved its pins, when the bake drew them from the object's animation "
        "(the source and the variant's draws), else empty",
    )


class NEURAL_ROM_PG_cloth(bpy.types.PropertyGroup):
    """Settings of an object's Cloth Bake (Blender's own cloth solver, :mod:`.cloth`)."""

    frames: IntProperty(
        name="Frames",
        default=120,
        min=2,
        soft_max=2000,
        description="Frames per bake after the first",
    )
    variants: IntProperty(
        name="Variants",
        default=16,
        min=1,
        soft_max=64,
        description="Bakes, each with its own motion (the owner's drawn from its animation, "
        "or random keys; the free colliders' random: see Motion). The network "
        "learns only the motions its bakes show: 4 bakes of a poked sheet left it worse than "
        "its initial model alone, 20 made it 0.59x",
    )
    seed: IntProperty(name="Seed", default=0, min=0, description="Seed of the first variant")
    owner: StringProperty(
        name="Owner",
        description="The object the cloth hangs from, which the bakes move at random (empty: "
        "its top-most parent, or the cloth itself; '-': nothing moves)",
    )
    motion: EnumProperty(
        name="Motion",
        items=(
            ("auto", "Auto", "The owner's animation when it has one, else random keys"),
            (
                "animation",
                "Animation",
                "Each variant drawn from the owner's own animation (its action, NLA strips and "
                "other actions made for it), perturbed with the variant's seed: time warps, "
                "speed changes, stops and starts, stride and sway scales, turns",
            ),
            ("keys", "Random Keys", "The owner keyed to random places and turns (seeded)"),
            (
                "file",
                "As Animated",
                "Nothing keyed: the owner and the colliders move as the file animates them (a "
                "bake of your own shot, to compare a model with)",
            ),
        ),
        default="auto",
        description="How the bakes move the owner",
    )
    colliders: StringProperty(
        description="JSON [[name, kind], ...]: the colliders its cloth bakes recorded, in order"
    )
    drawn_from: StringProperty(
        description="The motions its last cloth bakes drew the owner's from (for the panel)"
    )
