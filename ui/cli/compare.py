"""``compare`` (replay bakes with the trained model: its errors) and ``compare-methods``
(train every method the bakes allow and say which to use), as the panel's Compare buttons
do."""

from __future__ import annotations

import argparse
import json

import bpy

from ...addon import jobs
from ...addon.compare import bake as compare
from ...addon.compare import methods as methodcompare
from ...core import registry
from ...core.data.files import ensure_writable_dir, json_default, write_atomic
from ...core.jobs.compare_methods import table_text
from .common import (
    EXIT_OK,
    UserError,
    abspath,
    add_device_option,
    add_setting_options,
    command,
    given_settings,
    say,
    select_objects,
    target_parser,
)


def add_parser(sub, common) -> None:
    cmp = sub.add_parser(
        "compare",
        parents=[target_parser()],
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
    add_device_option(cm)
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
    add_setting_options(cm)


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


def run_compare(args) -> int:
    scene = bpy.context.scene
    json_path = abspath(args.json) if args.json else None
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
        say(f"comparing {name} ({method} model) with {words}: {listed}")
        for bake, role, spec in specs:
            got: list[dict] = []
            jobs.start_job(bpy.context, spec, owner=name, on_done=got.append)
            row = compare_row(name, bake, role, got[0])
            rows.append(row)
            say(
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
        _write_json(json_path, "bakes", rows)
    return EXIT_OK


def run_methods(args) -> int:
    if not (args.budget > 0):
        raise UserError(f"--budget {args.budget}: give a positive number of seconds")
    json_path = abspath(args.json) if args.json else None
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
        say(
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
            say(f"{name}: {method} kept from the last comparison")
        print(table_text(result["rows"], result["recommendation"]))
        if best is not None:
            say(f"{name}: its model is now the {best} model")
        elif args.use == "none":
            say(f"{name}: keeps its model (--use none)")
        tables.append(methodcompare.read_table(bpy.data.objects[name]))
    if json_path is not None:
        _write_json(json_path, "objects", tables)
    return EXIT_OK


def _write_json(path, key: str, items: list) -> None:
    """The ``--json`` file: this .blend's path and the items under ``key``."""
    text = json.dumps({"file": bpy.data.filepath, key: items}, indent=2, default=json_default)
    write_atomic(path, (text + "\n").encode("utf-8"))
    say(f"wrote {path}")


def run(args) -> int:
    return {"compare": run_compare, "compare-methods": run_methods}[args.command](args)
