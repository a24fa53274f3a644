"""``tetrahedralize``: each object's tets into its cache directory, in a worker, as the
panel's Tetrahedralize does."""

from __future__ import annotations

from ...addon.kinds.fem import tets
from .common import EXIT_OK, options_given, positive_int, say, select_objects

#: option dest -> the object's setting it overrides
SETTINGS = {
    "tet_size": "tet_size",
    "quality": "tet_quality",
    "embedding": "embedding",
    "cage_resolution": "cage_resolution",
}


def add_parser(sub, common) -> None:
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
        type=positive_int,
        metavar="N",
        help="cells along the longest side of the embedding cage",
    )


def run(args) -> int:
    settings = options_given(args, SETTINGS)
    for obj in select_objects(args.objects):
        say(f"tetrahedralizing {obj.name} in a worker")
        info = tets.tetrahedralize_object(obj, settings=settings or None) or {}
        quality = info.get("quality") or {}
        extra = ""
        if isinstance(quality, dict) and "min_dihedral_deg" in quality:
            extra = f", min dihedral {quality['min_dihedral_deg']:.1f} deg"
        say(f"{obj.name}: {info.get('n_tets', '?')} tets{extra} -> {info.get('path', '?')}")
    return EXIT_OK
