"""``simulate``: the trained model over a frame range, written as a PC2 point cache (and a
Mesh Cache modifier), as playing the timeline with Simulate on does."""

from __future__ import annotations

import sys

import bpy

from ...addon.io import export
from ...addon.kinds.family import family
from .common import EXIT_OK, UserError, abspath, out_paths, parse_frames, say, select_objects


def add_parser(sub, common) -> None:
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


def run(args) -> int:
    objects = select_objects(args.objects)
    paths = out_paths(args.out, objects, ".pc2", "simulated", "_reduced.pc2")
    start, end = args.frames if args.frames else (None, None)
    if args.model or args.model_of:
        source = select_objects([args.model_of])[0] if args.model_of else None
        for obj in objects:  # every object gets the model before any is simulated
            if obj is source:
                continue
            info = family.apply_model(
                obj,
                bpy.context.scene,
                abspath(args.model) if args.model else None,
                source=source,
            )
            where = family.domain_text(obj.neural_rom.model)
            say(f"{obj.name}: uses {info['path']}" + (f", {where}" if where else ""))
            if info["warning"]:
                print(f"neural_rom: warning: {obj.name}: {info['warning']}", file=sys.stderr)
    for obj, path in zip(objects, paths, strict=True):
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
        written, stats = export.export_simulation_pc2(
            obj, path, frame_start=start, frame_end=end, scene=bpy.context.scene
        )
        say(
            f"{obj.name}: wrote {stats['frames']} frames to {written} "
            f"({stats['step_ms']:.2f} ms per step)"
        )
    return EXIT_OK
