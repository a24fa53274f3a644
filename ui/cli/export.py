"""``export-pc2`` (a bake as a point cache) and ``export-onnx`` (a trained model as an ONNX
graph), as the panel's Export buttons do."""

from __future__ import annotations

import bpy

from ...addon.io import export
from .common import EXIT_OK, abspath, out_paths, say, select_objects, target_parser


def add_parser(sub, common) -> None:
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
        parents=[target_parser()],
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


def run_pc2(args) -> int:
    objects = select_objects(args.objects)
    paths = out_paths(args.out, objects, ".pc2", "exported", ".pc2")
    bake_path = str(abspath(args.bake)) if args.bake else None
    for obj, path in zip(objects, paths, strict=True):  # None: <cache dir>/<object>.pc2
        written = export.export_pc2(obj, path, bake_path=bake_path)
        say(f"{obj.name}: wrote {written}")
    return EXIT_OK


def run_onnx(args) -> int:
    objects = select_objects(args.objects)
    paths = out_paths(args.out, objects, ".onnx", "exported", ".onnx")
    for obj, path in zip(objects, paths, strict=True):
        info = export.export_onnx(obj, bpy.context.scene, path, precision=args.precision)
        say(
            f"{obj.name}: wrote {info['path']} ({info['method']} model, ONNX opset "
            f"{info['opset']}, {info['precision']})"
        )
        for what in ("inputs", "outputs"):
            for v in info[what]:
                shape = " x ".join(str(d) for d in v["shape"])
                print(f"    {what[:-1]} {v['name']} ({shape}): {v['doc']}")
    return EXIT_OK


def run(args) -> int:
    return {"export-pc2": run_pc2, "export-onnx": run_onnx}[args.command](args)
