"""The frame inputs a method can take, and those a bake can be driven by."""

#: Frame inputs a method can take (:class:`core.engine.protocol.FrameInputs` fields, plus what
#: the model can do beyond one frame). A record lists the ones it takes in ``inputs`` and the ones a
#: frame must carry in ``requires``.
INPUTS = {
    "forces": "external forces per vertex (pokes, replayed forces)",
    "pin_targets": "animated pins (the pinned vertices follow their object's animation)",
    "colliders": "analytic colliders (planes, spheres, capsules)",
    "sliders": "latent sliders (one value per latent coordinate)",
    "markers": "marker targets (positions and weights) for inverse control",
    "reference_frame": "a driving reference frame (an object's or a bone's transform)",
    "other_mesh": "a mesh other than the one it was trained on (same object family)",
}

#: Inputs of bakes that a model must take to be trained on them at all (a model that keeps
#: its pins where they were while the bakes swing them learns shapes it cannot play back).
BAKE_INPUTS_NEEDED = frozenset({"pin_targets"})
