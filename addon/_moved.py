"""Old module paths of the add-on, kept working after issue #29 put it in folders by concept.

Relative to the package root, as :mod:`..ui._moved`; the root ``__init__`` hands both tables
to :func:`core._moved.install` (one finder): ``neural_rom.addon.blender_mesh`` is
``neural_rom.addon.io.mesh``, ``neural_rom.addon.cloth`` is
``neural_rom.addon.kinds.cloth.model``, each the same module object, so scripts, plug-ins and
monkeypatches through an old name keep working.

``addon.compare`` became a package (``addon/compare/``: ``bake`` and ``methods``), so it has
no entry here: its old names read through the package from ``addon.compare.bake``.
"""

# move29: skip-file (the codemod leaves the old names of this table alone)
MOVED = {
    "addon.blender_mesh": "addon.io.mesh",
    "addon.animation": "addon.io.animation",
    "addon.paths": "addon.io.paths",
    "addon.export": "addon.io.export",
    "addon.bakes": "addon.kinds.fem.bake",
    "addon.tets": "addon.kinds.fem.tets",
    "addon.preview": "addon.kinds.fem.preview",
    "addon.cloth": "addon.kinds.cloth.model",
    "addon.clothbake": "addon.kinds.cloth.bake_job",
    "addon.face": "addon.kinds.face.face",
    "addon.face_props": "addon.kinds.face.props",
    "addon.family": "addon.kinds.family.family",
    "addon.reference": "addon.kinds.family.reference",
    "addon.methodcompare": "addon.compare.methods",
    "addon.playback": "addon.frames",
}
