"""``bake``: full-space training simulations of each object's scenario (a worker per
object, the variants in parallel processes), as the panel's Bake does."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import bpy

from ...addon import jobs
from ...addon.io.paths import cache_dir, load_path
from ...addon.kinds.fem import bake as bakes
from ...core.bake.scenarios import defaults_help
from .common import (
    EXIT_OK,
    abspath,
    command,
    non_negative_int,
    parse_shard,
    positive_int,
    say,
    select_objects,
)


def add_parser(sub, common) -> None:
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
        type=non_negative_int,
        metavar="INT",
        help="base random seed (overrides the object's)",
    )
    bake.add_argument(
        "--variants",
        type=positive_int,
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
        type=non_negative_int,
        default=0,
        metavar="N",
        help="variants baked at once, one process (and one BLAS thread) each; "
        "default 0: one per CPU core",
    )


def _scenarios_epilog() -> str:
    """The scenarios with their default parameters, units and automatic sizes (from
    :func:`core.scenarios.defaults_help`, so the help says what the code does)."""
    return "scenarios (parameter = default unit: meaning):\n\n" + textwrap.indent(
        defaults_help(), "  "
    )


def run(args) -> int:
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
            spec["out_dir"] = str(abspath(args.out))
        i, n = args.shard
        say(
            f"baking {obj.name}: variants {spec.get('spec', {}).get('variants', '?')}, "
            f"shard {i}/{n}, seed {spec.get('spec', {}).get('seed', '?')} -> {spec.get('out_dir')}"
            + (" (restart)" if args.restart else "")
        )
        name = obj.name

        def on_done(result: dict, name: str = name) -> None:
            for path, frame in sorted((result.get("resumed") or {}).items()):
                say(f"{name}: {Path(path).name} resumed at frame {frame}")
            for path in result.get("kept") or []:
                say(f"{name}: {Path(path).name} was complete and is kept")
            target = bpy.data.objects.get(name)
            if target is not None:
                written = {Path(p).resolve() for p in bakes.on_bake_done(target, result)}
                for rec in target.neural_rom.bakes:
                    if rec.motion and load_path(rec.path).resolve() in written:
                        say(f"{name}: {rec.name}: pins drawn from {rec.motion}")
                picture = cache_dir(target) / bakes.VARIANTS_PICTURE
                if written and any(r.motion for r in target.neural_rom.bakes) and picture.is_file():
                    say(f"{name}: the variants' motions drawn in {picture}")

        jobs.start_job(bpy.context, spec, owner=obj.name, on_done=on_done)
    return EXIT_OK
