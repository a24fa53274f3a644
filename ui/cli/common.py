"""What every command of the command line shares: the exit codes, the parser class that
never exits, the parent parsers (``--file``, ``--object``, ``--python``; ``--save``), the
option types, the method-setting options generated from the registry, and the helpers that
pick objects, resolve ``--out`` and open and save the file."""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path

import bpy

from ...core import registry
from ...core.errors import NeuralRomError

EXIT_OK, EXIT_CRASH, EXIT_USER_ERROR, EXIT_CANCELLED = 0, 1, 2, 3

PROG = "blender --background FILE.blend --command neural_rom"


class UserError(NeuralRomError):
    """A command-line mistake (unknown object, bad --shard, ...)."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so a bad argument never ends Blender."""

    def exit(self, status: int = 0, message: str | None = None):
        if message:
            (sys.stderr if status else sys.stdout).write(message)
        raise Exit(status)

    def error(self, message: str):
        self.print_usage(sys.stderr)
        raise Exit(EXIT_USER_ERROR, f"{self.prog}: error: {message}")


class Exit(Exception):
    """Raised by :class:`ArgumentParser` where argparse would end the process."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message


def target_parser() -> ArgumentParser:
    """The parent parser of every command: what to work on (``--file``, ``--object``) and
    the interpreter of its jobs (``--python``)."""
    target = ArgumentParser(add_help=False)
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
    return target


def common_parser() -> ArgumentParser:
    """:func:`target_parser` and ``--save``, for the commands that change the file."""
    common = ArgumentParser(add_help=False, parents=[target_parser()])
    common.add_argument(
        "--save",
        action="store_true",
        help="save the .blend afterwards (the paths and stats recorded on the objects)",
    )
    return common


def command(sub, common, name: str, help: str, description: str, **kwargs):
    """A subcommand on ``sub`` with the shared options ``common`` and ``description``
    wrapped to 80 columns."""
    return sub.add_parser(
        name, parents=[common], help=help, description=textwrap.fill(description, 80), **kwargs
    )


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


# the stage modules' names; the functions keep theirs, which the stored CLI surface records
non_negative_int, positive_int = _non_negative_int, _positive_int


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


def add_device_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        type=str.lower,
        help="training device (overrides the add-on preference)",
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


def add_setting_options(parser: argparse.ArgumentParser) -> None:
    """One option per setting of any registered method (``--k``, ``--hidden 100,100``, ...):
    the help is the setting's, with its unit and range, and the methods it belongs to when
    not every method has it."""
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


# ---------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"neural_rom: {message}", flush=True)


def abspath(path: str) -> Path:
    return Path(bpy.path.abspath(path)).expanduser()


def is_deformable(obj) -> bool:
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
                raise UserError(f"no object named {name!r} in {file_label()} (objects: {known})")
            out.append(obj)
        return out
    out = [obj for obj in bpy.data.objects if is_deformable(obj)]
    if not out:
        raise UserError(
            f"no object in {file_label()} has the Neural ROM role Deformable: pass "
            "--object NAME, or set the role in the Neural ROM sidebar"
        )
    return out


def file_label() -> str:
    return bpy.data.filepath or "the unsaved file"


def open_file(path: str) -> None:
    blend = Path(path).expanduser().resolve()
    if not blend.is_file():
        raise UserError(f"--file {path}: no such .blend file")
    try:
        bpy.ops.wm.open_mainfile(filepath=str(blend), load_ui=False)
    except RuntimeError as exc:
        raise UserError(f"--file {path}: Blender could not open it ({exc})") from exc


def save_file() -> None:
    if not bpy.data.filepath:
        raise UserError("--save: the file has never been saved; pass --file PATH.blend")
    bpy.ops.wm.save_mainfile()
    say(f"saved {bpy.data.filepath}")


def out_paths(out: str | None, objects: list, suffix: str, done: str, name: str) -> list:
    """Per object, the file ``--out`` names: None without it (the stage's default), the file
    itself when it ends in ``suffix`` (refused for several objects, which would overwrite
    each other), else ``<folder>/<object><name>``."""
    if not out:
        return [None] * len(objects)
    path = abspath(out)
    if path.suffix.lower() != suffix:
        return [path / f"{bpy.path.clean_name(obj.name)}{name}" for obj in objects]
    if len(objects) > 1:
        raise UserError(
            f"--out names one {suffix} file but several objects are {done}: pass a folder"
        )
    return [path] * len(objects)


def options_given(args, settings: dict[str, str]) -> dict:
    """The object settings the options override: ``{option dest: setting name}`` ->
    ``{setting name: value}`` for the options given."""
    return {
        setting: getattr(args, dest)
        for dest, setting in settings.items()
        if getattr(args, dest) is not None
    }
