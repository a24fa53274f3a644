"""``cloth-bake``: Blender's own cloth baked in a background Blender for training (the cloth
kind's data job), as the panel's Cloth Bake does."""

from __future__ import annotations

from pathlib import Path

import bpy

from ....addon import jobs
from ....addon.kinds.cloth import bake_job as clothbake
from ....addon.kinds.cloth import model as cloth
from ..common import (
    EXIT_OK,
    UserError,
    abspath,
    command,
    non_negative_int,
    positive_int,
    say,
    select_objects,
)


def add_parser(sub, common) -> None:
    cb = command(
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
    cb.add_argument(
        "--frames",
        type=positive_int,
        metavar="N",
        help="frames per variant after the first (default: the object's Cloth Bake "
        "setting, 120 on a new object)",
    )
    cb.add_argument(
        "--variants",
        type=positive_int,
        metavar="N",
        help="bakes, each with its own random motion (default: the object's, 16)",
    )
    cb.add_argument(
        "--seed",
        type=non_negative_int,
        metavar="INT",
        help="seed of the first variant (default: the object's, 0)",
    )
    cb.add_argument(
        "--owner",
        metavar="NAME",
        help="the object the cloth hangs from, which the bake moves (default: the object's "
        "setting; empty there: its top-most parent, or itself; '-' moves nothing)",
    )
    cb.add_argument(
        "--motion",
        choices=("auto", "animation", "keys", "file"),
        help="how the owner moves: 'animation' draws each variant from its own animation, "
        "perturbed; 'keys' random keys; 'auto' the first when it has one (default: the "
        "object's setting, auto); 'file' keys nothing: the shot as the file animates it",
    )
    cb.add_argument(
        "--out", metavar="DIR", help="write the bakes here (default: the object's cache directory)"
    )
    cb.add_argument("--overwrite", action="store_true", help="replace bakes that exist")
    cb.add_argument(
        "--processes",
        type=non_negative_int,
        default=0,
        metavar="N",
        help="background Blenders baking variants at once; default 0: one per CPU core",
    )


def describe(obj) -> list[str]:
    """``info``'s lines of a cloth: its Cloth Bake settings (none for a collider)."""
    s = obj.neural_rom
    if s.role == "COLLIDER":
        return []
    c = s.cloth
    return [
        f"cloth bake: {c.variants} variants of {c.frames} frames, seed {c.seed}, owner "
        f"{c.owner or '(auto: its top-most parent, or itself)'}"
    ]


def run(args) -> int:
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
            out_dir=abspath(args.out) if args.out else None,
            overwrite=args.overwrite,
            processes=args.processes,
        )
        say(
            f"cloth-baking {obj.name}: {spec['variants']} variants of {spec['frames']} frames, "
            f"seed {spec['seed']} -> {spec['out_dir']}"
        )

        def on_done(result: dict, name: str = obj.name) -> None:
            for path in result.get("paths") or []:
                say(f"{name}: {Path(path).name} ({result['frames'][path]} frames)")
            target = bpy.data.objects.get(name)
            if target is not None:
                clothbake.on_cloth_bake_done(target, result)
                drawn = target.neural_rom.cloth.drawn_from
                if drawn:
                    say(f"{name}: the owner's motion drawn from {drawn}")

        jobs.start_job(bpy.context, spec, owner=obj.name, on_done=on_done)
    return EXIT_OK
