"""bpy Operators (``neural_rom.<verb>``): thin wrappers over the stages in
:mod:`..addon` (tets, bakes, cloth, export, training, simulate, compare); the data kinds'
own (cloth, face) and model families' in ``kinds/``, the job runner's in ``jobs``."""

from . import bake, compare, interpreter, model, playback, poke, tets
from .kinds import cloth, face, family

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
