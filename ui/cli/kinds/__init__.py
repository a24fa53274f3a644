"""The command line's side of the data kinds: a kind with commands or words of its own has a
module here, named after it (cloth: cloth-bake; face: face-setup, add-markers, face-demo).
The stage commands ask it for what is the kind's (:func:`hook`): ``describe(obj)``, the
lines ``info`` adds; ``training_data(obj, spec)``, what ``train`` says it trains on;
``fit_text(obj)``, what ``train`` says the model measured. A kind without a module, or a
module without the hook, gets the stage's own words."""

from __future__ import annotations

from ... import kinds


def hook(kind: str, name: str):
    """The function ``name`` of the kind's module here, or None when it has none."""
    return kinds.hook(__name__, kind, name)
