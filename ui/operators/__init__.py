"""bpy Operators (``neural_rom.<verb>``): thin wrappers over the stages in
:mod:`..addon` (tets, bakes, cloth, export, training, simulate, compare)."""

from . import bake, cloth, compare, face, family, interpreter, model, playback, poke, tets

CLASSES = (
    *interpreter.CLASSES,
    *tets.CLASSES,
    *bake.CLASSES,
    *cloth.CLASSES,
    *playback.CLASSES,
    *model.CLASSES,
    *family.CLASSES,
    *compare.CLASSES,
    *poke.CLASSES,
    *face.CLASSES,
)
