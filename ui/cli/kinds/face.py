"""Headless commands of active faces (``face-setup``, ``face-demo``, ``add-markers``);
``train`` and ``simulate`` take a face as they take any object (``simulate --drive
markers`` picks what drives it)."""

from __future__ import annotations

import argparse

import bpy

from ....addon import jobs
from ....addon.kinds.face import face
from ....core.errors import NeuralRomError
from ....core.kinds.face.inputs import MARKER_LAYOUTS
from ..common import EXIT_OK, UserError, command, say, select_objects


def add_parser(sub, common) -> None:
    setup = command(
        sub,
        common,
        "face-setup",
        help="set up a face: a skin with shape keys over a skull and a jaw (a child process)",
        description=(
            "Build the face of each skin object (its shape keys are the sculpted expressions; "
            "'jaw20' in a key's name opens the jaw 20 degrees for it, 'heldout' keeps it out "
            "of training) over its skull and jaw (closed meshes; the jaw's origin is the hinge "
            "and its local X the hinge axis): the flesh lattice between skin and skull, skull "
            "nodes fixed, jaw nodes following the jaw. Then `train` fits it."
        ),
    )
    setup.add_argument("--skull", metavar="NAME", help="the skull mesh (default: the object's)")
    setup.add_argument("--jaw", metavar="NAME", help="the jaw mesh (default: the object's)")
    setup.add_argument(
        "--spacing",
        type=float,
        metavar="M",
        help="lattice cell edge in metres (default: the object's; 0: the skin's tallest side / 12)",
    )
    mk = command(
        sub,
        common,
        "add-markers",
        help="add marker empties on each face's skin (Add Markers)",
        description=(
            "Add marker empties bound to skin vertices of each face, placed by the layout "
            "(and 6 where the skin moves with the skull when the face's Head From Markers "
            "is on), in a collection '<skin> Markers'; a skin that has markers keeps them "
            "(delete them first to place a new set). Animate them, then `simulate --drive "
            "markers`."
        ),
    )
    mk.add_argument(
        "--layout",
        choices=[k.lower() for k, _, _ in MARKER_LAYOUTS],
        default="face",
        help="; ".join(f"{k.lower()}: {d}" for k, _, d in MARKER_LAYOUTS) + " (default face)",
    )
    mk.add_argument("--count", type=int, default=30, help="markers (default 30)")
    mk.add_argument("--seed", type=int, default=0, help="seed of the placement (default 0)")
    demo = sub.add_parser(
        "face-demo",
        parents=[common],
        help="add the procedural demo head (skin with simulated expressions, skull, jaw)",
        description="Add the procedural demo head, its expressions simulated in a child "
        "process from seeded muscle activations and jaw angles, its face set up.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    demo.add_argument("--name", default="Face", help="the skin object's name (default Face)")
    demo.add_argument("--keys", type=int, default=16, help="shape keys (default 16)")
    demo.add_argument("--held-out", type=int, default=4, help="keys held out (default 4)")
    demo.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    demo.add_argument("--size", choices=("small", "bench"), default="small")


def describe(obj) -> list[str]:
    """``info``'s line of a face: its file, lattice, skull and jaw, keys and drive."""
    face = obj.neural_rom.face
    return [
        f"face: {face.path}, {face.tets} tets, skull {getattr(face.skull, 'name', '-')}, "
        f"jaw {getattr(face.jaw, 'name', '-')}, {face.keys} shape keys ({face.held_out} held "
        f"out), drive {face.drive.lower()} (the jaw by "
        f"{'the markers' if face.jaw_drive == 'MARKERS' else 'its keys'}), solve "
        f"{face.solve.lower()}"
    ]


def training_data(obj, spec: dict) -> str:
    """What ``train`` says a face trains on: its shape keys."""
    f = obj.neural_rom.face
    return f"the face's {f.keys} shape keys ({f.held_out} held out)"


def fit_text(obj) -> str:
    """What ``train`` says a face's model measured: its fit to the held-out keys."""
    return "; ".join(line[0].lower() + line[1:] for line in face.fit_lines(obj))


def _mesh(name: str):
    obj = bpy.data.objects.get(name)
    if obj is None or obj.type != "MESH":
        raise UserError(f"no mesh object named {name!r}")
    return obj


def cmd_face_setup(args) -> int:
    scene = bpy.context.scene
    for obj in select_objects(args.objects):
        f = obj.neural_rom.face
        old = (f.skull, f.jaw)
        skull = _mesh(args.skull) if args.skull else f.skull
        jaw = _mesh(args.jaw) if args.jaw else f.jaw
        f.skull, f.jaw = skull, jaw
        name = obj.name
        recorded = []

        def on_done(result: dict, name: str = name, recorded: list = recorded) -> None:
            target = bpy.data.objects.get(name)
            if target is not None and face.on_setup_done(target, result):
                recorded.append(name)

        try:
            spec = face.make_setup_job(obj, scene, spacing=args.spacing)
            say(f"setting up the face of {name}: {len(spec['key_names'])} shape keys")
            try:
                jobs.start_job(bpy.context, spec, owner=name, on_done=on_done)
            finally:
                face.discard_job(spec)
        finally:
            if not recorded:  # refused, failed or cancelled: the picks go back (--save)
                f = bpy.data.objects[name].neural_rom.face
                f.skull, f.jaw = old
        f = bpy.data.objects[name].neural_rom.face
        say(
            f"{name}: {f.tets} tets ({f.used_spacing * 1000:.1f} mm), {f.skull_nodes} skull and "
            f"{f.jaw_nodes} jaw nodes, {f.keys} shape keys ({f.held_out} held out) -> {f.path}"
        )
    return EXIT_OK


def cmd_face_demo(args) -> int:
    if bpy.data.objects.get(args.name) is not None:
        raise UserError(f"an object named {args.name!r} exists: pass another --name")
    scene = bpy.context.scene
    spec = face.make_demo_job(
        scene,
        name=args.name,
        size=args.size,
        keys=args.keys,
        held_out=args.held_out,
        seed=args.seed,
    )

    def on_done(result: dict) -> None:
        if result and not result.get("cancelled"):
            face.build_demo_objects(scene, args.name, result)

    jobs.start_job(bpy.context, spec, owner=args.name, on_done=on_done)
    f = bpy.data.objects[args.name].neural_rom.face
    say(f"{args.name}: demo head, {f.tets} tets, {f.keys} shape keys ({f.held_out} held out)")
    return EXIT_OK


def cmd_add_markers(args) -> int:
    if args.count < 1:
        raise UserError(f"--count must be at least 1, not {args.count}")
    scene = bpy.context.scene
    objs = select_objects(args.objects)
    for obj in objs:
        if not face.is_face(obj):
            raise UserError(f"'{obj.name}' is not a face: run face-setup on it first")
    for obj in objs:
        try:
            made = face.add_markers(
                obj, scene, count=args.count, seed=args.seed, layout=args.layout.upper()
            )
        except NeuralRomError as e:
            raise UserError(str(e)) from e
        say(f"{obj.name}: added {len(made)} markers ({args.layout} layout)")
    return EXIT_OK


def run(args) -> int:
    return {
        "face-setup": cmd_face_setup,
        "face-demo": cmd_face_demo,
        "add-markers": cmd_add_markers,
    }[args.command](args)
