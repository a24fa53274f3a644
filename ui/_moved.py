"""Old module paths of the UI layer, kept working after issue #29 put it in ui/.

Relative to the package root; the root ``__init__`` hands this table to
:func:`core._moved.install` (the same finder as core's old names): ``neural_rom.addon.cli``
is ``neural_rom.ui.cli`` (the farm templates, the README's headless use and scripts call
``neural_rom.addon.cli.main``), ``neural_rom.operators.bake`` is
``neural_rom.ui.operators.bake``, each the same module object. The kinds' panels and
operators moved on into ``ui/panels/kinds/`` and ``ui/operators/kinds/``
(``neural_rom.panels.cloth`` and ``neural_rom.ui.panels.cloth`` are
``neural_rom.ui.panels.kinds.cloth``).
"""

# move29: skip-file (the codemod leaves the old names of this table alone)
MOVED = {
    "addon.cli": "ui.cli",
    "addon.face_cli": "ui.cli.kinds.face",
    "addon.registration": "ui.registration",
    "operators": "ui.operators",
    "panels": "ui.panels",
    "ui.operators.cloth": "ui.operators.kinds.cloth",
    "ui.operators.face": "ui.operators.kinds.face",
    "ui.operators.family": "ui.operators.kinds.family",
    "ui.panels.cloth": "ui.panels.kinds.cloth",
    "ui.panels.face": "ui.panels.kinds.face",
    "ui.panels.family": "ui.panels.kinds.family",
}
