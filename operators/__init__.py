"""bpy Operators (``neural_rom.<verb>``): thin wrappers over the stages in
:mod:`..addon` (tets, bakes, export, training, simulate, compare)."""

from . import bake, compare, face, family, interpreter, model, playback, poke, tets

CLASSES = (
    *interpreter.CLASSES,
    *tets.CLASSES,
    *bake.CLASSES,
    *playback.CLASSES,
    *model.CLASSES,
    *family.CLASSES,
    *compare.CLASSES,
    *poke.CLASSES,
    *face.CLASSES,
)
