"""Headless commands: ``blender --background file.blend --command neural_rom <subcommand>``.

Registered with :func:`bpy.utils.register_cli_command` (see ``registration.py``); the same
:func:`main` is callable from Python, which is how scripts using the PyPI ``bpy`` (and the
tests) run it: ``cli.main(["bake", "--file", "shot.blend", "--object", "Cube", "--seed",
"3", "--save"])`` returns the exit code.

Subcommands: ``info``, ``tetrahedralize``, ``bake``, ``cloth-bake``, ``export-pc2``, ``train``,
``simulate``, ``compare``, ``compare-methods``, ``face-setup``, ``face-demo``, ``add-markers``
(:mod:`.face_cli`); ``--help`` on each.
Exit codes: 0 ok, 1 crash (a bug or a dead worker: the message names its log), 2 user
error (the message, on stderr, says what to fix), 3 cancelled (what was committed before
the cancel is kept and recorded).

Every stage goes through the same functions the operators call (``addon/tets.py``,
``addon/bakes.py``, ``addon/export.py``, ``addon/training.py``, ``addon/compare.py``),
so a farm bake and a bake from the panel are the same bake.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import textwrap
import traceback
from pathlib import Path

import bpy

from ...core.errors import JobCancelled, NeuralRomError

EXIT_OK, EXIT_CRASH, EXIT_USER_ERROR, EXIT_CANCELLED = 0, 1, 2, 3

PROG = "blender --background FILE.blend --command neural_rom"

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


class UserError(NeuralRomError):
    """A command-line mistake (unknown object, bad --shard, ...)."""


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so a bad argument never ends Blender."""

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            (sys.stderr if status else sys.stdout).write(message)
        raise _Exit(status)

    def error(self, message: str):
        self.print_usage(sys.stderr)
        raise _Exit(EXIT_USER_ERROR, f"{self.prog}: error: {message}")


class _Exit(Exception):
    def __init__(self, code: int, message: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` -> ``(i, N)`` with ``0 <= i < N``: this node bakes the variants
    ``k`` with ``k % N == i``."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not i/N: write the shard index and the shard count, "
            "e.g. --shard 0/4 (indices start at 0)"
        )
    i, n = int(match.group(1)), int(match.group(2))
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: the shard count N must be at least 1")
    if i >= n:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the shard index must be in 0..{n - 1} for {n} shards (indices start at 0)"
        )
    return i, n


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def _positive_int(text: str) -> int:
    value = _non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def command(sub, common, name: str, help: str, description: str, **kwargs):
    """A subcommand on ``sub`` with the shared options ``common`` and ``description``
    wrapped to 80 columns."""
    return sub.add_parser(
        name, parents=[common], help=help, description=textwrap.fill(description, 80), **kwargs
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(
        prog=PROG,
        description="Neural ROM: tetrahedralize, bake, train, simulate and export deformable "
        "objects headless.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_ArgumentParser)

    # what to work on; ``common`` adds --save for the commands that change the file
    target = _ArgumentParser(add_help=False)
    target.add_argument(
        "--file",
        metavar="PATH",
        help="open this .blend first (handy with the PyPI bpy; with Blender, pass the file "
        "before --command)",
    )
    target.add_argument(
        "--object",
        "-o",
        dest="objects",
        action="append",
        metavar="NAME",
        help="object to process (repeat for several); default: every object whose Neural "
        "ROM role is Deformable",
    )
    target.add_argument(
        "--python",
        metavar="PATH",
        help="interpreter that runs this command's jobs (bake, train, simulate, ...); "
        "default: Preferences > Neural ROM > Job Python, else $NEURAL_ROM_PYTHON, else this "
        "Python. A Python 3.11 + torch trains the learned methods for Blender 5",
    )
    common = _ArgumentParser(add_help=False, parents=[target])
    common.add_argument(
        "--save",
        action="store_true",
        help="save the .blend afterwards (the paths and stats recorded on the objects)",
    )

    sub.add_parser(
        "info",
        parents=[common],
        help="print each object's Neural ROM stages",
        description="Print the Neural ROM role and stage state (tets, bakes) of the objects.",
    )

    tet = sub.add_parser(
        "tetrahedralize",
        parents=[common],
        help="tetrahedralize objects into their cache directory",
        description="Tetrahedralize objects with their Neural ROM settings; the tets go to "
        "each object's cache directory.",
    )
    tet.add_argument(
        "--tet-size",
        type=float,
        metavar="M",
        help="target tet edge length, metres (overrides the object's setting)",
    )
    tet.add_argument(
        "--quality",
        type=float,
        metavar="Q",
        help="radius-edge ratio bound (overrides the object's setting)",
    )
    tet.add_argument(
        "--embedding",
        choices=("AUTO", "ALWAYS", "NEVER"),
        type=str.upper,
        help="simulate a cage around the mesh: AUTO when it is not closed, ALWAYS, or NEVER "
        "(overrides the object's setting)",
    )
    tet.add_argument(
        "--cage-resolution",
        type=_positive_int,
        metavar="N",
        help="cells along the longest side of the embedding cage",
    )

    bake = command(
        sub,
        common,
        "bake",
        help="bake training simulations (a child process per object)",
        # raw (for the scenario list below): wrapped here
        description=(
            "Bake full-space simulations of each object's scenario into its cache "
            "directory, one deterministic, seeded variant per file, the variants in parallel "
            "processes. A variant whose bake stopped early (cancelled, killed, crashed) resumes "
            "after its last committed frame when the mesh and the settings are the same, with "
            "the frames an uninterrupted bake gives; a complete one is kept; one baked with other "
            "settings or on another mesh starts over. Each object bakes its own scenario, "
            "frames and material (the panel's Training Scenario box); the scenarios and their "
            "defaults, sized from the object, are below. When the object is pinned and "
            "animated (itself, a parent, or the bone of an armature it hangs from), each "
            "variant's pins are drawn from that animation (--motion, default auto: the "
            "action and NLA strips from the scene's start frame on, and other actions made "
            "for the object), perturbed with the variant's seed: a time warp (0.6-1.5x speed "
            "with smooth changes), a stop and start in half the variants, a stretch played "
            "backwards in half, the swing's amplitude (0.6-1.4x) and travel (0.7-1.3x) "
            "scaled, a slow turn about the vertical; the scenario's pokes, pushes and colliders come on top. Variants are "
            "different motions, so a bake Train holds out is a motion no training bake "
            "contains. Each bake records what it drew (info lists it)."
        ),
        epilog=_scenarios_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bake.add_argument(
        "--seed",
        type=_non_negative_int,
        metavar="INT",
        help="base random seed (overrides the object's)",
    )
    bake.add_argument(
        "--variants",
        type=_positive_int,
        metavar="N",
        help="number of scenario variants (overrides the object's)",
    )
    bake.add_argument(
        "--motion",
        choices=("auto", "animation", "scenario"),
        help="how the pins move: 'animation' draws each variant from the object's animation, "
        "perturbed; 'scenario' follows the animation as it plays, the same in every variant; "
        "'auto' the first when the object is pinned and animated (default: the object's "
        "Motion setting, auto)",
    )
    bake.add_argument(
        "--shard",
        type=parse_shard,
        default=(0, 1),
        metavar="i/N",
        help="bake only variants k with k %% N == i (0 <= i < N), for farm managers; "
        "default 0/1 (all)",
    )
    bake.add_argument(
        "--out", metavar="DIR", help="write the bakes here instead of the object's cache directory"
    )
    bake.add_argument(
        "--restart",
        action="store_true",
        help="bake every variant from frame 0, replacing what is on disk, instead of resuming",
    )
    bake.add_argument(
        "--processes",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="variants baked at once, one process (and one BLAS thread) each; "
        "default 0: one per CPU core",
    )

    cloth = command(
        sub,
        common,
        "cloth-bake",
        help="bake Blender's own cloth under random collider and owner motion",
        description=(
            "Bake each object's Cloth modifier with Blender's cloth solver, in a background "
            "Blender, into .nrbake files for training (Subspace Neural Physics). The colliders "
            "are the scene's objects with a Collision modifier, each with the shape its Neural "
            "ROM settings give (sphere, capsule, plane; a sphere when its role is not "
            "Collider). The object the cloth hangs from (--owner: its top-most parent, or "
            "itself; a bone of an armature it is parented to) moves as --motion says: by "
            "default each variant is drawn from the owner's own animation in the file (its "
            "action and NLA strips, and other actions made for it), perturbed with the "
            "variant's seed (time warp, speed changes, stops and starts, stride and sway "
            "scales, turns), or, when it has none, keyed to random places and turns. "
            "Colliders that are the owner or hang from it move with it; the others get "
            "random keys. Each bake records which motion it drew from, and every frame is "
            "committed; a cancel keeps what was committed. Your file is not changed (the job bakes a copy); the bakes are "
            "recorded on the object (--save keeps that), as the panel's Cloth Bake does, and "
            "train, simulate and compare take them."
        ),
    )
    cloth.add_argument(
        "--frames",
        type=_positive_int,
        metavar="N",
        help="frames per variant after the first (default: the object's Cloth Bake "
        "setting, 120 on a new object)",
    )
    cloth.add_argument(
        "--variants",
        type=_positive_int,
        metavar="N",
        help="bakes, each with its own random motion (default: the object's, 16)",
    )
    cloth.add_argument(
        "--seed",
        type=_non_negative_int,
        metavar="INT",
        help="seed of the first variant (default: the object's, 0)",
    )
    cloth.add_argument(
        "--owner",
        metavar="NAME",
        help="the object the cloth hangs from, which the bake moves (default: the object's "
        "setting; empty there: its top-most parent, or itself; '-' moves nothing)",
    )
    cloth.add_argument(
        "--motion",
        choices=("auto", "animation", "keys", "file"),
        help="how the owner moves: 'animation' draws each variant from its own animation, "
        "perturbed; 'keys' random keys; 'auto' the first when it has one (default: the "
        "object's setting, auto); 'file' keys nothing: the shot as the file animates it",
    )
    cloth.add_argument(
        "--out", metavar="DIR", help="write the bakes here (default: the object's cache directory)"
    )
    cloth.add_argument("--overwrite", action="store_true", help="replace bakes that exist")
    cloth.add_argument(
        "--processes",
        type=_non_negative_int,
        default=0,
        metavar="N",
        help="background Blenders baking variants at once; default 0: one per CPU core",
    )

    pc2 = sub.add_parser(
        "export-pc2",
        parents=[common],
        help="export a bake as a PC2 point cache (and add a Mesh Cache modifier)",
        description="Write the object's bake, through its embedding, as a PC2 file of the "
        "render mesh in object space, and add or update a Mesh Cache modifier.",
    )
    pc2.add_argument(
        "--out",
        metavar="PATH",
        help="PC2 file (one object) or folder (<object>.pc2 each); default: the object's "
        "cache directory",
    )
    pc2.add_argument(
        "--bake", metavar="PATH", help="the .nrbake to export (default: the object's latest bake)"
    )

    onnx = sub.add_parser(
        "export-onnx",
        parents=[target],
        help="write the trained model as an ONNX graph for game engines and Houdini",
        description="Write each object's trained model as an ONNX file (opset 15): the "
        "network step of a Subspace Neural Physics model (state and external features -> "
        "next state, positions, normals), the decoder of an autoencoder or Shen model, the "
        "basis of a linear model. Prints its inputs and outputs (names, shapes, units). "
        "Needs the onnx package in this Python; the .blend is not changed.",
    )
    onnx.add_argument(
        "--out",
        metavar="PATH",
        help="ONNX file (one object) or folder (<object>.onnx each); default: the object's "
        "cache directory",
    )
    onnx.add_argument(
        "--precision",
        choices=("float32", "float64"),
        default="float32",
        help="the graph's float type; default float32, what the engines run",
    )

    from ...core import registry

    train = sub.add_parser(
        "train",
        parents=[common],
        help="train a reduced model on each object's bakes (a child process per object)",
        description="Train a reduced model of each object on all its bakes, with the object's "
        "settings of the method (overridden by the options); the model goes to the object's "
        "cache directory and is recorded on the object.",
        epilog=_methods_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    train.add_argument(
        "--method",
        choices=registry.names(),
        help="training method (overrides the object's); its settings are the object's for "
        "that method",
    )
    _add_device_option(train)
    train.add_argument(
        "--with",
        dest="family",
        action="append",
        metavar="NAME",
        help="also train on this object's bakes (repeat for several): one model of the --object "
        "and these variants of it, recorded on the --object; only for a method that runs on "
        "other meshes",
    )
    _add_setting_options(train)

    sim = sub.add_parser(
        "simulate",
        parents=[common],
        help="run the reduced model over a frame range and write a PC2 (and a Mesh Cache modifier)",
        description="Simulate each object with its trained model from rest at the scene's "
        "start frame, with the scene's animated colliders, and write the render mesh as a PC2 "
        "point cache in object space; a Mesh Cache modifier plays it.",
    )
    sim.add_argument(
        "--frames",
        type=parse_frames,
        metavar="START:END",
        help="frame range to write (inclusive); default: the scene's range",
    )
    sim.add_argument(
        "--out",
        metavar="PATH",
        help="PC2 file (one object) or folder (<object>_reduced.pc2 each); default: the "
        "object's cache directory",
    )
    use = sim.add_mutually_exclusive_group()
    use.add_argument(
        "--model",
        metavar="PATH",
        help="simulate with this model file instead of the object's own (a model that runs on "
        "other meshes, put on the object's tets without retraining; recorded with --save)",
    )
    use.add_argument(
        "--model-of",
        metavar="NAME",
        help="simulate with the model of this object (as --model)",
    )
    sim.add_argument(
        "--drive",
        choices=("sliders", "markers"),
        help="what drives a face: its latent sliders' animation or its markers' (default: "
        "the object's Drive setting)",
    )
    sim.add_argument(
        "--jaw",
        choices=("markers", "keyed"),
        help="what opens a face's jaw when markers drive it: the markers (its hinge angle "
        "solved each frame) or the jaw object's animation (default: the object's Jaw setting)",
    )
    sim.add_argument(
        "--head",
        choices=("markers", "fixed"),
        help="whether the markers move a face's head (its rigid motion solved each frame with "
        "the expression; the skin moves with it) or the head stays where the skin is "
        "(default: the object's Head From Markers setting)",
    )

    from .kinds import face as face_cli

    face_cli.add_parsers(sub, common, command)

    cmp = sub.add_parser(
        "compare",
        parents=[target],
        help="replay bakes with the trained model and print its errors against them",
        description="Replay bakes of each object with its trained model in a worker, as "
        "the panel's Compare with Bake does, and print per bake the distance of the render "
        "mesh's vertices from the bake over every frame (max, mean, rms; mm and % of the "
        "bounding-box diagonal at rest) and the time per reduced step: the model's "
        "dynamics. Beside them, the same errors of the model's closest shapes to the bake's "
        "frames (the linear PCA projection): the best its shapes can do. A replay far worse "
        "than its closest shapes is limited by the dynamics (a reduced object stiffer than "
        "the real one), not by the shapes. The .blend is not changed; the replay is kept "
        "in the object's cache directory (compare/<bake>.npz), as the panel's is.",
    )
    cmp.add_argument(
        "--bake",
        metavar="NAME",
        help="the bake to replay, by its name in the panel's list (e.g. random_pokes_s0_v001), "
        "or all; default: the bakes the model held out from training (every bake when it "
        "records none)",
    )
    cmp.add_argument(
        "--json",
        metavar="PATH",
        help="also write the numbers to this JSON file (metres, percent of the diagonal, "
        "milliseconds)",
    )

    cm = command(
        sub,
        common,
        "compare-methods",
        help="train every method the object's bakes allow and say which to use",
        description=(
            "Train every registered method on each object's bakes (one worker job: each "
            "method with the object's settings of it, its defaults unless changed, and its "
            "share of --budget as its time budget: the methods are spread over the cores, "
            "--processes trainings at once, and each gets a share in proportion to what it "
            "needs once every method's fixed cost is set aside), replay the bakes training held out "
            "with each model as compare does, and print one table: DOFs, training time, "
            "replay max and mean (mm and % of the bounding-box diagonal), the closest "
            "shapes' error, the closest shapes of a linear (PCA) model with as many DOFs, and "
            "ms per step; then which method to use and why. A method that cannot take the "
            "data is listed with the reason. Finished methods are kept (in the object's "
            "cache directory, compare_methods/): a cancelled comparison keeps them and a "
            "re-run resumes after them (--restart trains all again). The recommended "
            "method's model becomes the object's model (--use picks another row; --save "
            "keeps that). The memory column is the runtime's: the peak of loading the model "
            "and 10 steps, not the file's size. A method setting "
            "option applies to the methods that have it (e.g. --epochs 50 for a quick look)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cm.add_argument(
        "--budget",
        type=float,
        default=600.0,
        metavar="S",
        help="seconds of wall time for the whole comparison's training, planned across the "
        "methods and the cores (the replays come on top); default 600",
    )
    _add_device_option(cm)
    cm.add_argument("--restart", action="store_true", help="forget the finished methods")
    cm.add_argument(
        "--shot",
        metavar="BAKE",
        help="one of the object's bakes that is your own shot (e.g. baked with --motion "
        "scenario: the animation as it plays), by its name in the panel's list: no method "
        "trains on it, each replays it beside the held-out bakes",
    )
    cm.add_argument(
        "--method",
        dest="methods",
        action="append",
        choices=registry.names(),
        help="train only this method (repeat for several); the others are listed as not "
        "asked for; default: every method",
    )
    cm.add_argument(
        "--processes",
        type=int,
        default=0,
        metavar="N",
        help="trainings at once, each in its own process with one thread (0, the default: one "
        "per usable core; 1: one after another); on a GPU one at a time",
    )
    cm.add_argument(
        "--use",
        default="best",
        choices=("best", "none", *registry.names()),
        help="whose model becomes the object's model when the comparison ends: the "
        "recommended one (best, the default), a method of the table by name, or none (the "
        "object keeps its model); the table's rows stay in the cache either way",
    )
    cm.add_argument(
        "--json",
        metavar="PATH",
        help="also write the table to this JSON file (metres, percent, seconds, ms)",
    )
    _add_setting_options(cm)
    return parser


def _add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        type=str.lower,
        help="training device (overrides the add-on preference)",
    )


def _scenarios_epilog() -> str:
    """The scenarios with their default parameters, units and automatic sizes (from
    :func:`core.scenarios.defaults_help`, so the help says what the code does)."""
    from ...core.bake.scenarios import defaults_help

    return "scenarios (parameter = default unit: meaning):\n\n" + textwrap.indent(
        defaults_help(), "  "
    )


# ---------------------------------------------------------------------------------------
# Method settings as options: generated from the registry
# ---------------------------------------------------------------------------------------

_SETTING_DEST = "setting__"


def setting_option(name: str) -> str:
    """``--latent-dim`` for the setting ``latent_dim``."""
    return "--" + name.replace("_", "-")


def _settings_union() -> dict:
    """Setting name -> [(method, setting), ...] over every registered method, in menu order."""
    from ...core import registry

    union: dict[str, list] = {}
    for method in registry.methods():
        for setting in method.settings:
            union.setdefault(setting.name, []).append((method, setting))
    return union


def _typed(kind: str):
    def parse(text: str):
        try:
            return int(text) if kind == "int" else float(text)
        except ValueError:
            what = "an integer" if kind == "int" else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None

    parse.__name__ = kind  # argparse names the type in its messages
    return parse


def _add_setting_options(parser: argparse.ArgumentParser) -> None:
    """One option per setting of any registered method (``--k``, ``--hidden 100,100``, ...):
    the help is the setting's, with its unit and range, and the methods it belongs to when
    not every method has it."""
    from ...core import registry

    n_methods = len(registry.methods())
    group = parser.add_argument_group(
        "method settings",
        "override the object's settings of the method; an option the method does not have is "
        "refused (see the methods below)",
    )
    for name, pairs in _settings_union().items():
        setting = pairs[0][1]
        owners = [m.name for m, _ in pairs]
        only = f" [{', '.join(owners)}]" if len(owners) < n_methods else ""
        text = f"{setting.help}; {setting.range_text}{only}".replace("%", "%%")
        kw: dict = {"dest": _SETTING_DEST + name, "default": None, "help": text}
        if setting.kind == "bool":
            kw["action"] = argparse.BooleanOptionalAction
        elif setting.kind == "enum":
            kw["choices"] = list(dict.fromkeys(i[0] for _, st in pairs for i in st.items))
            if {"on", "off"} <= set(kw["choices"]):  # a tri-state that was a bool flag
                kw.update(nargs="?", const="on")
        elif setting.kind == "int_list":
            kw["metavar"] = "N,N"
        else:
            kw["type"] = _typed(setting.kind)
            kw["metavar"] = "N" if setting.kind == "int" else (setting.unit.upper() or "X")
        try:
            group.add_argument(setting_option(name), **kw)
        except argparse.ArgumentError:  # clashes with a fixed option (--file, --object, ...)
            continue


def _methods_epilog() -> str:
    from ...core import registry

    lines = ["methods (--method NAME; default: the one the object's panel says):"]
    for method in registry.methods():
        lines.append(f"  {method.name}: {method.label}")
        lines += textwrap.wrap(
            method.description, 84, initial_indent="      ", subsequent_indent="      "
        )
        options = ", ".join(setting_option(st.name) for st in method.settings)
        lines += textwrap.wrap(
            f"settings: {options}",
            84,
            initial_indent="      ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
        if method.needs_torch:
            lines.append("      trains with PyTorch (in the job interpreter)")
    lines.append("")
    lines.append("0 for a setting that can be automatic chooses it automatically.")
    return "\n".join(lines)


def given_settings(args) -> dict:
    """The method settings given on the command line, by setting name."""
    return {
        key[len(_SETTING_DEST) :]: value
        for key, value in vars(args).items()
        if key.startswith(_SETTING_DEST) and value is not None
    }


def check_settings_of(method, given: dict, obj_name: str) -> None:
    """Refuse options that are not settings of ``method``, naming its settings."""
    foreign = [name for name in given if name not in {st.name for st in method.settings}]
    if foreign:
        options = ", ".join(setting_option(n) for n in foreign)
        theirs = ", ".join(setting_option(st.name) for st in method.settings)
        raise UserError(
            f"{options}: not a setting of the {method.label} method ({method.name}), which "
            f"'{obj_name}' trains; its settings are {theirs} (or pick another --method)"
        )


def parse_frames(text: str) -> tuple[int, int]:
    """``"START:END"`` -> ``(start, end)`` with ``start <= end``."""
    match = re.fullmatch(r"\s*(-?\d+)\s*:\s*(-?\d+)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not START:END: write the first and last frame, e.g. --frames 1:250"
        )
    a, b = int(match.group(1)), int(match.group(2))
    if b < a:
        raise argparse.ArgumentTypeError(f"{text!r}: the end frame must not be before the start")
    return a, b


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def _out(message: str) -> None:
    print(f"neural_rom: {message}", flush=True)


def _abspath(path: str) -> Path:
    return Path(bpy.path.abspath(path)).expanduser()


def _is_deformable(obj) -> bool:
    settings = getattr(obj, "neural_rom", None)
    role = getattr(settings, "role", "") if settings is not None else ""
    return str(role).upper() == "DEFORMABLE"


def select_objects(names: list[str] | None) -> list:
    """The objects named (in order, each once), or every Deformable one."""
    if names:
        out = []
        for name in dict.fromkeys(names):
            obj = bpy.data.objects.get(name)
            if obj is None:
                known = ", ".join(sorted(o.name for o in bpy.data.objects)[:20]) or "none"
                raise UserError(f"no object named {name!r} in {_file_label()} (objects: {known})")
            out.append(obj)
        return out
    out = [obj for obj in bpy.data.objects if _is_deformable(obj)]
    if not out:
        raise UserError(
            f"no object in {_file_label()} has the Neural ROM role Deformable: pass "
            "--object NAME, or set the role in the Neural ROM sidebar"
        )
    return out


def _file_label() -> str:
    return bpy.data.filepath or "the unsaved file"


def _open_file(path: str) -> None:
    blend = Path(path).expanduser().resolve()
    if not blend.is_file():
        raise UserError(f"--file {path}: no such .blend file")
    try:
        bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    except RuntimeError as exc:
        raise UserError(f"--file {path}: Blender could not open it ({exc})") from exc


def _save_file() -> None:
    if not bpy.data.filepath:
        raise UserError("--save: the file has never been saved; pass --file PATH.blend")
    bpy.ops.wm.save_mainfile()
    _out(f"saved {bpy.data.filepath}")


def _describe(obj) -> list[str]:
    """``key: value`` lines of the object's Neural ROM properties that are set and apply to
    it (:meth:`.props.NEURAL_ROM_PG_object.applies`: no FEM settings for a cloth or a face,
    a collider's only for a collider); hidden bookkeeping (a job in flight, the method's
    name behind the menu) is left out."""
    settings = getattr(obj, "neural_rom", None)
    if settings is None:
        return []
    lines = []
    for prop in settings.bl_rna.properties:
        key = prop.identifier
        if key in ("rna_type", "name") or prop.is_hidden or not settings.applies(key):
            continue
        try:
            value = getattr(settings, key)
        except AttributeError:
            continue
        if prop.type == "COLLECTION":
            items = list(value)
            if items:
                names = ", ".join(getattr(i, "name", "") or str(n) for n, i in enumerate(items))
                lines.append(f"{key}: {len(items)} ({names})")
            continue
        if prop.type == "POINTER":
            continue
        if hasattr(value, "__len__") and not isinstance(value, str):
            value = tuple(value)
        if value in ("", None):
            continue
        lines.append(f"{key}: {value}")
    if settings.role != "COLLIDER" and settings.training_data_kind() == "cloth":
        c = settings.cloth
        lines.append(
            f"cloth bake: {c.variants} variants of {c.frames} frames, seed {c.seed}, owner "
            f"{c.owner or '(auto: its top-most parent, or itself)'}"
        )
    face = getattr(settings, "face", None)
    if face is not None and face.path:
        lines.append(
            f"face: {face.path}, {face.tets} tets, skull {getattr(face.skull, 'name', '-')}, "
            f"jaw {getattr(face.jaw, 'name', '-')}, {face.keys} shape keys ({face.held_out} held "
            f"out), drive {face.drive.lower()} (the jaw by "
            f"{'the markers' if face.jaw_drive == 'MARKERS' else 'its keys'}), solve "
            f"{face.solve.lower()}"
        )
    if settings.role != "COLLIDER":
        method = settings.method()
        values = settings.method_values(method)
        if values:
            lines.append(
                f"{method.name} settings: " + ", ".join(f"{k}={v}" for k, v in values.items())
            )
    return lines


# ---------------------------------------------------------------------------------------
# Subcommands
# ---------------------------------------------------------------------------------------


def cmd_info(args) -> int:
    names = args.objects
    objects = select_objects(names) if names else list(bpy.data.objects)
    _out(f"file: {_file_label()}")
    for obj in objects:
        role = getattr(getattr(obj, "neural_rom", None), "role", "n/a")
        print(f"{obj.name} ({obj.type}) role: {role}")
        if _is_deformable(obj) or names:
            for line in _describe(obj):
                if not line.startswith("role:"):
                    print(f"    {line}")
    return EXIT_OK


def cmd_tetrahedralize(args) -> int:
    from ...addon.kinds.fem import tets

    settings = {}
    if args.tet_size is not None:
        settings["tet_size"] = args.tet_size
    if args.quality is not None:
        settings["tet_quality"] = args.quality
    if args.embedding is not None:
        settings["embedding"] = args.embedding
    if args.cage_resolution is not None:
        settings["cage_resolution"] = args.cage_resolution
    for obj in select_objects(args.objects):
        _out(f"tetrahedralizing {obj.name} in a worker")
        info = tets.tetrahedralize_object(obj, settings=settings or None) or {}
        quality = info.get("quality") or {}
        extra = ""
        if isinstance(quality, dict) and "min_dihedral_deg" in quality:
            extra = f", min dihedral {quality['min_dihedral_deg']:.1f} deg"
        _out(f"{obj.name}: {info.get('n_tets', '?')} tets{extra} -> {info.get('path', '?')}")
    return EXIT_OK


def cmd_bake(args) -> int:
    from ...addon import jobs
    from ...addon.io.paths import cache_dir, load_path
    from ...addon.kinds.fem import bake as bakes

    scene = bpy.context.scene
    for obj in select_objects(args.objects):
        spec = bakes.make_bake_job(
            obj,
            scene,
            seed=args.seed,
            variants=args.variants,
            restart=args.restart,
            processes=args.processes,
            motion=args.motion,
        )
        spec["shard"] = list(args.shard)
        for warning in spec.get("warnings") or ():
            print(f"neural_rom: warning: {obj.name}: {warning}", file=sys.stderr)
        if args.out:
            spec["out_dir"] = str(_abspath(args.out))
        i, n = args.shard
        _out(
            f"baking {obj.name}: variants {spec.get('spec', {}).get('variants', '?')}, "
            f"shard {i}/{n}, seed {spec.get('spec', {}).get('seed', '?')} -> {spec.get('out_dir')}"
            + (" (restart)" if args.restart else "")
        )
        name = obj.name

        def on_done(result: dict, name: str = name) -> None:
            for path, frame in sorted((result.get("resumed") or {}).items()):
                _out(f"{name}: {Path(path).name} resumed at frame {frame}")
            for path in result.get("kept") or []:
                _out(f"{name}: {Path(path).name} was complete and is kept")
            target = bpy.data.objects.get(name)
            if target is not None:
                written = {Path(p).resolve() for p in bakes.on_bake_done(target, result)}
                for rec in target.neural_rom.bakes:
                    if rec.motion and load_path(rec.path).resolve() in written:
                        _out(f"{name}: {rec.name}: pins drawn from {rec.motion}")
                picture = cache_dir(target) / bakes.VARIANTS_PICTURE
                if written and any(r.motion for r in target.neural_rom.bakes) and picture.is_file():
                    _out(f"{name}: the variants' motions drawn in {picture}")

        jobs.start_job(bpy.context, spec, owner=obj.name, on_done=on_done)
    return EXIT_OK


def cmd_cloth_bake(args) -> int:
    from ...addon import jobs
    from ...addon.kinds.cloth import bake_job as clothbake
    from ...addon.kinds.cloth import model as cloth

    scene = bpy.context.scene
    objects = select_objects(args.objects)
    for obj in objects:  # every object checked before any job starts
        if cloth.cloth_modifier(obj) is None:
            raise UserError(
                f"'{obj.name}' has no Cloth modifier: add one (Physics > Cloth), or bake it "
                "with the bake command instead"
            )
    for obj in objects:
        spec = clothbake.make_cloth_bake_job(
            obj,
            scene,
            frames=args.frames,
            variants=args.variants,
            seed=args.seed,
            owner=args.owner,
            motion=args.motion,
            out_dir=_abspath(args.out) if args.out else None,
            overwrite=args.overwrite,
            processes=args.processes,
        )
        _out(
            f"cloth-baking {obj.name}: {spec['variants']} variants of {spec['frames']} frames, "
            f"seed {spec['seed']} -> {spec['out_dir']}"
        )

        def on_done(result: dict, name: str = obj.name) -> None:
            for path in result.get("paths") or []:
                _out(f"{name}: {Path(path).name} ({result['frames'][path]} frames)")
            target = bpy.data.objects.get(name)
            if target is not None:
                clothbake.on_cloth_bake_done(target, result)
                drawn = target.neural_rom.cloth.drawn_from
                if drawn:
                    _out(f"{name}: the owner's motion drawn from {drawn}")

        jobs.start_job(bpy.context, spec, owner=obj.name, on_done=on_done)
    return EXIT_OK


def cmd_export_pc2(args) -> int:
    from ...addon.io import export

    objects = select_objects(args.objects)
    out = _abspath(args.out) if args.out else None
    if out is not None and len(objects) > 1 and out.suffix.lower() == ".pc2":
        raise UserError("--out names one .pc2 file but several objects are exported: pass a folder")
    bake_path = str(_abspath(args.bake)) if args.bake else None
    for obj in objects:
        if out is None:
            path = None  # the stage's default: <cache dir>/<object>.pc2
        elif out.suffix.lower() == ".pc2":
            path = out
        else:
            path = out / f"{bpy.path.clean_name(obj.name)}.pc2"
        written = export.export_pc2(obj, path, bake_path=bake_path)
        _out(f"{obj.name}: wrote {written}")
    return EXIT_OK


def cmd_export_onnx(args) -> int:
    from ...addon.io import export

    objects = select_objects(args.objects)
    out = _abspath(args.out) if args.out else None
    if out is not None and len(objects) > 1 and out.suffix.lower() == ".onnx":
        raise UserError(
            "--out names one .onnx file but several objects are exported: pass a folder"
        )
    for obj in objects:
        if out is not None and out.suffix.lower() != ".onnx":
            path = out / f"{bpy.path.clean_name(obj.name)}.onnx"
        else:
            path = out
        info = export.export_onnx(obj, bpy.context.scene, path, precision=args.precision)
        _out(
            f"{obj.name}: wrote {info['path']} ({info['method']} model, ONNX opset "
            f"{info['opset']}, {info['precision']})"
        )
        for what in ("inputs", "outputs"):
            for v in info[what]:
                shape = " x ".join(str(d) for d in v["shape"])
                print(f"    {what[:-1]} {v['name']} ({shape}): {v['doc']}")
    return EXIT_OK


def cmd_train(args) -> int:
    from ...addon import jobs, training
    from ...core import registry

    given = given_settings(args)
    objects = select_objects(args.objects)
    others = []
    if args.family:
        if len(objects) != 1:
            raise UserError(
                "--with trains one model of one object with others' bakes: name that object "
                "with one --object"
            )
        others = select_objects(args.family)
    for obj in objects:  # every object's method and settings checked before any job starts
        method = registry.get(args.method) if args.method else obj.neural_rom.method()
        check_settings_of(method, given, obj.name)
        training.training_settings(obj, method, given)
    for obj in objects:
        if others:
            from ...addon.kinds.family.family import make_family_train_job

            spec = make_family_train_job(
                obj,
                bpy.context.scene,
                others,
                method=args.method,
                settings=given,
                device=args.device,
            )
        else:
            spec = training.make_train_job(
                obj, bpy.context.scene, method=args.method, settings=given, device=args.device
            )
        if obj.neural_rom.training_data_kind() == "face":
            f = obj.neural_rom.face
            data = f"the face's {f.keys} shape keys ({f.held_out} held out)"
        else:
            data = f"{len(spec['bakes'])} bake(s)"
        _out(f"training {obj.name}: {spec['method']} on {data} -> {spec['out']}")
        name = obj.name

        def on_done(result: dict, name: str = name) -> None:
            target = bpy.data.objects.get(name)
            if target is not None:
                training.on_train_done(target, result)

        jobs.start_job(bpy.context, spec, owner=name, on_done=on_done)
        target = bpy.data.objects[name]
        m = target.neural_rom.model
        if m.kind == "face":  # fitted to shape keys: what the held-out keys measured
            from ...addon.kinds.face.face import fit_lines

            fit = "; ".join(line[0].lower() + line[1:] for line in fit_lines(target))
        else:
            fit = training.error_summary(m)
        _out(f"{name}: {training.model_size(m)}, {fit}, {m.train_seconds:.1f} s on {m.device}")
        if m.choice:
            _out(f"{name}: {m.choice} Model file: {m.path}")
    return EXIT_OK


def cmd_simulate(args) -> int:
    from ...addon.io import export

    objects = select_objects(args.objects)
    out = _abspath(args.out) if args.out else None
    if out is not None and len(objects) > 1 and out.suffix.lower() == ".pc2":
        raise UserError(
            "--out names one .pc2 file but several objects are simulated: pass a folder"
        )
    start, end = args.frames if args.frames else (None, None)
    if args.model or args.model_of:
        from ...addon.kinds.family import family

        source = select_objects([args.model_of])[0] if args.model_of else None
        for obj in objects:  # every object gets the model before any is simulated
            if obj is source:
                continue
            info = family.apply_model(
                obj,
                bpy.context.scene,
                _abspath(args.model) if args.model else None,
                source=source,
            )
            where = family.domain_text(obj.neural_rom.model)
            _out(f"{obj.name}: uses {info['path']}" + (f", {where}" if where else ""))
            if info["warning"]:
                print(f"neural_rom: warning: {obj.name}: {info['warning']}", file=sys.stderr)
    for obj in objects:
        if args.drive:
            if not obj.neural_rom.face.path:
                raise UserError(f"--drive: '{obj.name}' is not a face (run face-setup)")
            obj.neural_rom.face.drive = args.drive.upper()
        if args.jaw:
            if not obj.neural_rom.face.path:
                raise UserError(f"--jaw: '{obj.name}' is not a face (run face-setup)")
            obj.neural_rom.face.jaw_drive = args.jaw.upper()
        if args.head:
            if not obj.neural_rom.face.path:
                raise UserError(f"--head: '{obj.name}' is not a face (run face-setup)")
            obj.neural_rom.face.head_from_markers = args.head == "markers"
        if out is None:
            path = None
        elif out.suffix.lower() == ".pc2":
            path = out
        else:
            path = out / f"{bpy.path.clean_name(obj.name)}_reduced.pc2"
        written, stats = export.export_simulation_pc2(
            obj, path, frame_start=start, frame_end=end, scene=bpy.context.scene
        )
        _out(
            f"{obj.name}: wrote {stats['frames']} frames to {written} "
            f"({stats['step_ms']:.2f} ms per step)"
        )
    return EXIT_OK


def _percent(value: float | None, diagonal: float) -> float | None:
    return None if value is None or diagonal <= 0 else 100.0 * value / diagonal


def compare_row(obj_name: str, bake: str, role: str | None, result: dict) -> dict:
    """One compared bake as the ``--json`` file lists it, from the compare job's result
    (:func:`..core.comparejob.compare_with_bake`): errors in metres and in percent of the
    render mesh's bounding-box diagonal at rest, of the replay (``*_error_*``) and of the
    model's closest shapes (``closest_shape_*``, None when the model has none)."""
    d = float(result["diagonal"])
    row = {
        "object": obj_name,
        "bake": bake,
        "role": role,
        "frames": int(result["frames"]),
        "diagonal_m": d,
        "step_ms": float(result["step_ms"]),
    }
    for stat in ("max", "mean", "rms"):
        row[f"{stat}_error_m"] = float(result[stat])
        row[f"{stat}_error_pct"] = _percent(row[f"{stat}_error_m"], d)
    for stat in ("max", "mean", "rms"):
        value = result.get(f"closest_{stat}")
        row[f"closest_shape_{stat}_error_m"] = None if value is None else float(value)
        row[f"closest_shape_{stat}_error_pct"] = _percent(value, d)
    row["result"] = str(result["path"])
    return row


def _error_line(row: dict, prefix: str) -> str:
    parts = []
    for stat in ("max", "mean", "rms"):
        m, pct = row[f"{prefix}{stat}_error_m"], row[f"{prefix}{stat}_error_pct"]
        parts.append(f"{stat} {m * 1000:.4g} mm" + ("" if pct is None else f" ({pct:.3g}%)"))
    return ", ".join(parts)


def cmd_compare(args) -> int:
    from ...addon import jobs
    from ...addon.compare import bake as compare
    from ...core.data.files import ensure_writable_dir, json_default, write_atomic

    scene = bpy.context.scene
    json_path = _abspath(args.json) if args.json else None
    plans = []
    # every check before the first job: a refusal changes nothing
    for obj in select_objects(args.objects):
        picked, words = compare.bakes_to_compare(obj, scene, args.bake)
        specs = [
            (rec.name, role, compare.make_compare_job(obj, scene, bake_path=rec.path, show=False))
            for rec, role in picked
        ]
        plans.append((obj.name, obj.neural_rom.model.method, words, specs))
    if json_path is not None:
        ensure_writable_dir(json_path.parent, "the --json file")
    rows = []
    for name, method, words, specs in plans:
        listed = ", ".join(bake for bake, _, _ in specs)
        _out(f"comparing {name} ({method} model) with {words}: {listed}")
        for bake, role, spec in specs:
            got: list[dict] = []
            jobs.start_job(bpy.context, spec, owner=name, on_done=got.append)
            row = compare_row(name, bake, role, got[0])
            rows.append(row)
            _out(
                f"{name}: bake {bake}"
                + (f" ({role})" if role else "")
                + f", {row['frames']} frames, diagonal {row['diagonal_m']:.4g} m, "
                f"{row['step_ms']:.3g} ms per step"
            )
            print(f"    dynamics (the model's replay): {_error_line(row, '')}")
            if row["closest_shape_max_error_m"] is None:
                print("    shapes: the model has no closest shapes")
            else:
                shapes = _error_line(row, "closest_shape_")
                print(f"    shapes (closest shapes, linear PCA projection): {shapes}")
    if json_path is not None:
        text = json.dumps(
            {"file": bpy.data.filepath, "bakes": rows}, indent=2, default=json_default
        )
        write_atomic(json_path, (text + "\n").encode("utf-8"))
        _out(f"wrote {json_path}")
    return EXIT_OK


def cmd_compare_methods(args) -> int:
    from ...addon import jobs
    from ...addon.compare import methods as methodcompare
    from ...core.data.files import ensure_writable_dir, json_default, write_atomic
    from ...core.jobs.compare_methods import table_text

    if not (args.budget > 0):
        raise UserError(f"--budget {args.budget}: give a positive number of seconds")
    json_path = _abspath(args.json) if args.json else None
    if json_path is not None:
        ensure_writable_dir(json_path.parent, "the --json file")
    given = given_settings(args)
    plans = [  # every object planned before the first job: a refusal changes nothing
        (
            obj.name,
            methodcompare.make_compare_methods_job(
                obj,
                bpy.context.scene,
                budget_s=args.budget,
                settings=given,
                device=args.device,
                restart=args.restart,
                only=args.methods,
                shot=args.shot,
                processes=args.processes,
                use=args.use,
            ),
        )
        for obj in select_objects(args.objects)
    ]
    tables = []
    for name, spec in plans:
        runs = [e for e in spec["methods"] if e["status"] == "run"]
        shares = ", ".join(
            f"{e['method']} {e['share_s']:.0f} s"
            + (f" (lane {e['lane'] + 1})" if spec["lanes"] > 1 else "")
            for e in runs
        )
        _out(
            f"comparing methods on {name} in {spec['lanes']} process(es) at once, "
            f"{args.budget:g} s planned: {shares or 'none'}"
        )
        got: list[dict] = []
        jobs.start_job(bpy.context, spec, owner=name, on_done=got.append)
        result = got[0]
        best = methodcompare.on_compare_methods_done(
            bpy.data.objects[name], spec, result, use=args.use
        )
        for method in result.get("kept") or []:
            _out(f"{name}: {method} kept from the last comparison")
        print(table_text(result["rows"], result["recommendation"]))
        if best is not None:
            _out(f"{name}: its model is now the {best} model")
        elif args.use == "none":
            _out(f"{name}: keeps its model (--use none)")
        tables.append(methodcompare.read_table(bpy.data.objects[name]))
    if json_path is not None:
        text = json.dumps(
            {"file": bpy.data.filepath, "objects": tables}, indent=2, default=json_default
        )
        write_atomic(json_path, (text + "\n").encode("utf-8"))
        _out(f"wrote {json_path}")
    return EXIT_OK


def cmd_face(args) -> int:
    from types import SimpleNamespace

    from .kinds import face as face_cli

    helpers = SimpleNamespace(select_objects=select_objects, say=_out, UserError=UserError)
    return face_cli.run(args, helpers)


COMMANDS = {
    "info": cmd_info,
    "tetrahedralize": cmd_tetrahedralize,
    "bake": cmd_bake,
    "cloth-bake": cmd_cloth_bake,
    "export-pc2": cmd_export_pc2,
    "export-onnx": cmd_export_onnx,
    "train": cmd_train,
    "simulate": cmd_simulate,
    "compare": cmd_compare,
    "compare-methods": cmd_compare_methods,
    "face-setup": cmd_face,
    "face-demo": cmd_face,
    "add-markers": cmd_face,
}


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
    except _Exit as exc:
        if exc.message:
            print(exc.message, file=sys.stderr)
        return exc.code
    if args.command is None:
        parser.print_help()
        return EXIT_USER_ERROR
    try:
        if args.file:
            _open_file(args.file)
    except NeuralRomError as exc:
        print(f"neural_rom: error: {exc}", file=sys.stderr)
        return EXIT_USER_ERROR
    from ...addon.prefs import job_python_override

    with job_python_override(getattr(args, "python", None)):
        code = _run(args)
    if getattr(args, "save", False):  # commands that change nothing have no --save
        # Also after a cancel or a failure: stages record on an object only what they
        # finished (paths, stats, committed frames), so the file is consistent.
        try:
            _save_file()
        except NeuralRomError as exc:
            print(f"neural_rom: error: {exc}", file=sys.stderr)
            code = code or EXIT_USER_ERROR
    return code


def _run(args) -> int:
    try:
        return COMMANDS[args.command](args)
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
