"""The trained reduced model of an object (``Object.neural_rom.model``)."""

from __future__ import annotations

import bpy
from bpy.props import (
    FloatProperty,
    IntProperty,
    StringProperty,
)

from ..prefs import REL_PATH


class NEURAL_ROM_PG_model(bpy.types.PropertyGroup):
    """The trained reduced model of an object and what it was trained from."""

    path: StringProperty(
        name="Model", subtype="FILE_PATH", options=REL_PATH, description="The .nrmodel file"
    )
    method: StringProperty(name="Method")
    k: IntProperty(name="DOFs", description="Reduced degrees of freedom (basis size)")
    cubature: IntProperty(name="Cubature", description="Cubature elements")
    val_error: FloatProperty(
        name="Held-out Shape Error (m)",
        description="Largest vertex error of the model's shapes (reconstruction or "
        "projection, no dynamics) on held-out bakes, metres",
    )
    rollout_error: FloatProperty(
        name="Rollout Error (m)",
        description="Largest vertex error of the reduced simulation replaying a held-out "
        "bake (-1: no held-out bake), metres",
        default=-1.0,
    )
    projection_error: FloatProperty(
        name="Closest-Shape Error (m)",
        description="Largest vertex error of the model's closest shapes to the same held-out "
        "frames: the best the model can represent (-1: unknown), metres",
        default=-1.0,
    )
    rollout_mean_error: FloatProperty(
        name="Rollout Mean Error (m)",
        description="Mean vertex error (over every frame and vertex) of that replay (-1: "
        "unknown), metres",
        default=-1.0,
    )
    projection_mean_error: FloatProperty(
        name="Closest-Shape Mean Error (m)",
        description="Mean vertex error of the closest shapes to the same frames (-1: "
        "unknown), metres",
        default=-1.0,
    )
    step_ms: FloatProperty(name="Step (ms)", description="Reduced step time in training")
    choice: StringProperty(
        name="Choice",
        description="Why the training kept this model over another it compared it with "
        "(one sentence with both replay errors; empty when it compared none)",
    )
    train_seconds: FloatProperty(name="Training Time (s)")
    device: StringProperty(name="Device")
    mesh_hash: StringProperty(description="Hash of the world-space tet mesh it was trained on")
    tets_hash: StringProperty(description="Hash of the object's tet mesh when it was trained")
    source_hash: StringProperty(description="Hash of the object's mesh when it was trained")
    bakes: IntProperty(name="Bakes", description="Bakes it was trained on")
    kind: StringProperty(
        default="fem", description="The training data it learnt from: fem or cloth bakes"
    )
    # a model that runs on other meshes of its family (addon/family.py)
    family: StringProperty(description="The other objects whose bakes it was trained on")
    applied_from: StringProperty(
        description="The object (or file) whose model this object uses (empty: its own)"
    )
    domain_outside: FloatProperty(
        description="Share of the tet nodes outside the model's training domain (-1: unknown)",
        default=-1.0,
    )
    domain_distance: FloatProperty(description="Largest distance outside the domain, metres")
    domain_warning: StringProperty(description="The out-of-domain warning, if any")
