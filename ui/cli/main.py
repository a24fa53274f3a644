"""The command line's parser and entry point: one subparser per command, each added by its
stage's module (``add_parser(sub, common)``, ``run(args)``), in the order the help lists
them; :func:`main` parses, opens ``--file``, runs the command and saves with ``--save``."""

from __future__ import annotations

import argparse
import sys
import traceback

import bpy

from ...addon.prefs import job_python_override
from ...core.errors import JobCancelled, NeuralRomError
from ..kinds import cli_modules
from . import bake, compare, export, info, simulate, tets, train
from .common import (
    EXIT_CANCELLED,
    EXIT_CRASH,
    EXIT_USER_ERROR,
    PROG,
    ArgumentParser,
    Exit,
    common_parser,
    open_file,
    save_file,
)
from .kinds import cloth, face

#: the stages' modules, in the order the help lists their commands
STAGES = (info, tets, bake, cloth, export, train, simulate, face, compare)

_EPILOG = f"""\
exit codes: 0 ok, 1 crash (see the log named in the message), 2 user error,
3 cancelled (committed work is kept).

examples:
  {PROG} info
  {PROG} tetrahedralize --object Body --save
  {PROG} bake --object Body --seed 3 --variants 8 --shard 0/4 --save
  {PROG} cloth-bake --object Cape --frames 240 --variants 16
  {PROG} export-pc2 --object Body --out //cache/body.pc2
  {PROG} train --object Body --k 20 --device cuda --save
  {PROG} simulate --object Body --frames 1:250 --out //cache/body_reduced.pc2 --save
  {PROG} train --object PropA --with PropB --with PropC --method licrom --save
  {PROG} simulate --object PropD --model-of PropA --out //cache/propd.pc2 --save
  {PROG} compare --object Body --bake all --json //cache/body_compare.json
  {PROG} compare-methods --object Body --budget 900 --json //cache/methods.json --save
  {PROG} face-setup --object Skin --skull Skull --jaw Jaw --save
  {PROG} simulate --object Skin --drive markers --out //cache/skin.pc2 --save
"""


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description="Neural ROM: tetrahedralize, bake, train, simulate and export deformable "
        "objects headless.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=ArgumentParser)
    common = common_parser()  # --file, --object, --python and --save
    # and the commands of the kinds' records that are not a stage's (a plug-in kind's)
    for stage in (*STAGES, *(m for m in cli_modules() if m not in STAGES)):
        known = set(sub.choices)
        stage.add_parser(sub, common)
        for name in sub.choices.keys() - known:
            sub.choices[name].set_defaults(run=stage.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; returns the exit code (never raises, never exits).

    From a plain ``import bpy, neural_rom`` script (the PyPI ``bpy``) the extension is
    registered here on first use, so the objects' settings exist; it stays registered for
    the rest of the script, and ``registration`` unregisters it at exit.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if "neural_rom" not in bpy.types.Object.bl_rna.properties:
        # Called from a plain script, not through Blender's ``--command``: register the
        # extension as a script would, through the package's public register() (the
        # registration module is the layer above this one).
        from ... import register

        register()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except Exit as exc:
        if exc.message:
            print(exc.message, file=sys.stderr)
        return exc.code
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        if args.file:
            open_file(args.file)
    except NeuralRomError as exc:
        print(f"neural_rom: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    with job_python_override(getattr(args, "python", None)):
        code = _run(args)
    if getattr(args, "save", False):  # commands that change nothing have no --save
        # Also after a cancel or a failure: stages record on an object only what they
        # finished (paths, stats, committed frames), so the file is consistent.
        try:
            save_file()
        except NeuralRomError as exc:
            print(f"neural_rom: error: {exc}", file=sys.stderr)
            code = code or EXIT_USER_ERROR
    return code


def _run(args) -> int:
    try:
        return args.run(args)
    except JobCancelled as exc:
        print(f"neural_rom: cancelled: {exc}", file=sys.stderr)
        return EXIT_CANCELLED
    except NeuralRomError as exc:
        print(f"neural_rom: error: {exc}", file=sys.stderr)
        return EXIT_CRASH if getattr(exc, "crashed", False) else EXIT_USER_ERROR
    except Exception:  # noqa: BLE001 (a bug: exit code 1 with its traceback, Blender lives on)
        traceback.print_exc()
        print("neural_rom: internal error (traceback above): please report it", file=sys.stderr)
        return EXIT_CRASH


def cli_handler(argv: list[str]) -> int:
    """The ``neural_rom`` command registered with :func:`bpy.utils.register_cli_command`."""
    return main(argv)
