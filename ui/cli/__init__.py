"""Headless commands: ``blender --background file.blend --command neural_rom <subcommand>``.

Registered with :func:`bpy.utils.register_cli_command` (see ``registration.py``); the same
:func:`main` is callable from Python, which is how scripts using the PyPI ``bpy`` (and the
tests) run it: ``cli.main(["bake", "--file", "shot.blend", "--object", "Cube", "--seed",
"3", "--save"])`` returns the exit code.

Subcommands: ``info``, ``tetrahedralize``, ``bake``, ``cloth-bake``, ``export-pc2``,
``export-onnx``, ``train``, ``simulate``, ``compare``, ``compare-methods``, ``face-setup``,
``face-demo``, ``add-markers``; ``--help`` on each.
Exit codes: 0 ok, 1 crash (a bug or a dead worker: the message names its log), 2 user
error (the message, on stderr, says what to fix), 3 cancelled (what was committed before
the cancel is kept and recorded).

One module per stage, each with ``add_parser(sub, common)`` and ``run(args)``: ``info``,
``tets``, ``bake``, ``export`` (export-pc2, export-onnx), ``train``, ``simulate``,
``compare`` (compare, compare-methods), and the data kinds' own in ``kinds/`` (cloth:
cloth-bake; face: face-setup, add-markers, face-demo); ``common`` holds what they share
(the parent parsers, option types, method-setting options, object selection, ``--out``)
and ``main`` the parser and :func:`main`. Every stage goes through the same functions the
operators call (``addon/tets.py``, ``addon/bakes.py``, ``addon/export.py``,
``addon/training.py``, ``addon/compare.py``), so a farm bake and a bake from the panel are
the same bake.
"""

from .common import (
    EXIT_CANCELLED,
    EXIT_CRASH,
    EXIT_OK,
    EXIT_USER_ERROR,
    UserError,
    check_settings_of,
    given_settings,
    parse_frames,
    parse_shard,
    select_objects,
    setting_option,
)
from .compare import compare_row
from .main import build_parser, cli_handler, main

__all__ = [
    "EXIT_CANCELLED",
    "EXIT_CRASH",
    "EXIT_OK",
    "EXIT_USER_ERROR",
    "UserError",
    "build_parser",
    "check_settings_of",
    "cli_handler",
    "compare_row",
    "given_settings",
    "main",
    "parse_frames",
    "parse_shard",
    "select_objects",
    "setting_option",
]
