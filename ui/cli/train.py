"""``train``: a reduced model of each object on its bakes (a worker per object), as the
panel's Train does; ``--with`` trains one model of a family of objects."""

from __future__ import annotations

import argparse
import textwrap

import bpy

from ...addon import jobs, training
from ...addon.kinds.family.family import make_family_train_job
from ...core import registry
from . import kinds
from .common import (
    EXIT_OK,
    UserError,
    add_device_option,
    add_setting_options,
    check_settings_of,
    given_settings,
    say,
    select_objects,
    setting_option,
)


def add_parser(sub, common) -> None:
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
    add_device_option(train)
    train.add_argument(
        "--with",
        dest="family",
        action="append",
        metavar="NAME",
        help="also train on this object's bakes (repeat for several): one model of the --object "
        "and these variants of it, recorded on the --object; only for a method that runs on "
        "other meshes",
    )
    add_setting_options(train)


def _methods_epilog() -> str:

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


def run(args) -> int:
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
        data_of_kind = kinds.hook(obj.neural_rom.training_data_kind(), "training_data")
        data = data_of_kind(obj, spec) if data_of_kind else f"{len(spec['bakes'])} bake(s)"
        say(f"training {obj.name}: {spec['method']} on {data} -> {spec['out']}")
        name = obj.name

        def on_done(result: dict, name: str = name) -> None:
            target = bpy.data.objects.get(name)
            if target is not None:
                training.on_train_done(target, result)

        jobs.start_job(bpy.context, spec, owner=name, on_done=on_done)
        target = bpy.data.objects[name]
        m = target.neural_rom.model
        fit_of_kind = kinds.hook(m.kind, "fit_text")  # a face: its held-out keys' fit
        fit = fit_of_kind(target) if fit_of_kind else training.error_summary(m)
        say(f"{name}: {training.model_size(m)}, {fit}, {m.train_seconds:.1f} s on {m.device}")
        if m.choice:
            say(f"{name}: {m.choice} Model file: {m.path}")
    return EXIT_OK
