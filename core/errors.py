"""Errors raised by Neural ROM. Every message says what is wrong and how to fix it."""


class NeuralRomError(Exception):
    """Base class of every error a user can act on."""


class MeshError(NeuralRomError):
    """The input surface or tet mesh cannot be used (open, non-manifold, degenerate, ...)."""


class MaterialError(NeuralRomError):
    """Material parameters are out of their physical range."""


class SimulationError(NeuralRomError):
    """A step diverged or could not converge even after retries."""


class CacheError(NeuralRomError):
    """A bake cache or model file is stale, truncated, foreign or of another schema."""


class JobCancelled(NeuralRomError):
    """A long job stopped at a safe point because the user asked it to."""


class WriteError(NeuralRomError, OSError):
    """A folder or file a job must write cannot be written (a read-only folder, no
    permission, a full disk, a file where a folder should be).

    Also an :class:`OSError`, so code that catches write failures as ``OSError`` still does.
    """
