"""The sidebar's side of the data kinds: a kind's own boxes live in a module named after it
(cloth: Cloth Bake; face: Face; family: the family rows of the Reduced Model and Simulate
boxes). The stage panels ask it (:func:`stages`, :func:`data_step`) what is the kind's:
``STAGES``, the stage boxes it shows (a kind without the list shows every one; the boxes
that show whatever the kind, when there are bakes or a model, are not listed), and
``DATA_STEP``, the button that makes its training data."""

from __future__ import annotations

from ... import kinds


def stages(kind: str) -> tuple | None:
    """The stage boxes the kind shows, or None: every one."""
    return kinds.hook(__name__, kind, "STAGES")


def data_step(kind: str) -> str:
    """The button that makes the kind's training data ("Bake" for a kind that does not say)."""
    return kinds.hook(__name__, kind, "DATA_STEP", "Bake")
