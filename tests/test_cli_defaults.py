"""Issue 10, "a user's own asset with the defaults", through the headless CLI.

``bake --help`` states the scenario defaults the code has (the values are read from
``core.scenarios`` and ``core.fem`` here, not copied), and a boot of the user's own making,
a shape no other test uses, goes tetrahedralize -> bake -> train -> simulate with the
defaults only, as a user runs it (``cli.main`` with the PyPI bpy). The asset test bounds the
physics a user sees on the render surface: how far the default drop moves it, where it
comes to rest against the ground, how much any tet edge stretches, how closely the trained
model replays the held-out bake, and the reduced PC2.
"""

from __future__ import annotations

import numpy as np
import pytest

from .blender_fixtures import addon  # noqa: F401 (pytest fixture)


def cli():
    from neural_rom.ui import cli

    return cli


# ---------------------------------------------------------------------------------------
# bake --help states the defaults the code has
# ---------------------------------------------------------------------------------------


def preset_drops() -> list[str]:
    """The automatic drop height of each material preset as the help writes it ("rubber
    1.04 m", ...), computed from the presets' E and density and the rule's strain."""
    from neural_rom.core.bake.scenarios import DROP_STRAIN
    from neural_rom.core.physics.fem import PRESETS

    claims = []
    for name, p in PRESETS.items():
        H = p["youngs_modulus"] * DROP_STRAIN**2 / (2 * p["density"] * 9.81)
        shown = (
            f"{H:.2f} m" if H >= 1 else (f"{100 * H:.1f} cm" if H >= 0.01 else f"{1000 * H:.1f} mm")
        )
        claims.append(f"{name.replace('_', '-')} {shown}")
    return claims


def test_bake_help_states_the_scenario_defaults_of_the_code(capsys):
    from neural_rom.core.bake import scenarios as sc

    assert cli().main(["bake", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # unwrapped

    drop = sc.default_scenario("gravity_drop")
    pokes = sc.default_scenario("random_pokes")
    keyed = sc.default_scenario("keyframed_colliders")
    diag = "of the bounding-box diagonal"
    for kind in sc.SCENARIO_KINDS:
        assert kind in text
    # every parameter of every kind, with its default
    for kind in sc.SCENARIO_KINDS:
        for key, value in sc.default_scenario(kind).items():
            if key == "kind":
                continue
            if isinstance(value, bool):
                shown = "on" if value else "off"
            elif isinstance(value, list):
                shown = "[" + ", ".join(f"{v:g}" for v in value) + "]"
            elif isinstance(value, str):
                shown = repr(value)
            else:
                shown = f"{value:g}"
            assert f"{key} = {shown}" in text, (kind, key)
    # the units of the numbers
    assert f"height = {drop['height']:g} m:" in text
    assert f"jitter = {drop['jitter']:g} m/s:" in text
    assert f"spin = {drop['spin']:g} rad/s:" in text
    assert f"duration = {pokes['duration']:g} s:" in text
    assert f"force = {pokes['force']:g} N:" in text
    assert f"strength = {pokes['strength']:g} body weights:" in text
    assert f"radius = {pokes['radius']:g} {diag}" in text
    assert f"radius = {keyed['radius']:g} {diag}" in text
    assert f"reach = {keyed['reach']:g} {diag}" in text
    assert f"about {100 * pokes['strain']:.0f}% strain" in text
    assert f"displacement = {pokes['displacement']:g} {diag}" in text
    assert f"to move it by {pokes['displacement']:g} of its diagonal" in text
    assert f"Pokes the object {pokes['count']} times" in text
    assert f"random downward push up to {drop['jitter']:g} m/s per variant" in text

    # the automatic drop: its rule and its constants, and what it gives for each preset
    assert f"eps = {sc.DROP_STRAIN:g}" in text
    assert f"compress the object by about {100 * sc.DROP_STRAIN:.0f}%" in text
    lo, hi = sc.DROP_HEIGHT_DIAGONALS
    assert f"within {lo:g} to {hi:g} bounding-box diagonals" in text
    assert f"within the first {100 * sc.DROP_LANDS_WITHIN:.0f}% of the bake" in text
    assert sc.DROP_VARIANT_SHARE == (0.5, 1.0) and "drops from half to all of it" in text
    for claim in preset_drops():
        assert claim in text, claim
    # the ground is where the render surface rests, not "the rest bottom" of the tets
    assert "ground plane at the lowest rest point of the surface that touches colliders" in text
    assert "render surface when the object is simulated through an embedding cage" in text
    assert "rest bottom" not in text


def test_the_readme_states_the_same_defaults():
    from pathlib import Path

    from neural_rom.core.bake import scenarios as sc

    readme = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    drop = sc.default_scenario("gravity_drop")
    pokes = sc.default_scenario("random_pokes")
    keyed = sc.default_scenario("keyframed_colliders")
    lo, hi = sc.DROP_HEIGHT_DIAGONALS
    for claim in (
        f"*Height* {drop['height']:g} (automatic",
        f"with ε = {sc.DROP_STRAIN:g}",
        f"about {100 * sc.DROP_STRAIN:.0f}%",
        f"kept within {lo:g} to {hi:g} bounding-box diagonals",
        f"within the first {100 * sc.DROP_LANDS_WITHIN:.0f}% of the bake",
        f"*Jitter* {drop['jitter']:g} m/s",
        "ground plane at the lowest rest point of its render surface",
        f"*count* {pokes['count']} pokes",
        f"*radius* {pokes['radius']:g} of the diagonal",
        f"*duration* {pokes['duration']:g} s",
        f"*strain* {pokes['strain']:g} ({100 * pokes['strain']:.0f}%)",
        f"*displacement* {pokes['displacement']:g} of the diagonal",
        f"*radius* {keyed['radius']:g} of the diagonal",
        f"*keys* {keyed['keys']} random keys",
        f"*reach* {keyed['reach']:g} of the diagonal",
        f"*pin amplitude* {keyed['pin_amplitude']:g} of the diagonal",
        *preset_drops(),
    ):
        assert claim in readme, claim


def test_the_automatic_drop_does_what_the_help_says():
    """The help's rule is the code's: a big rubber block (no clamp by its size) in a 2 s bake
    drops from half to all of ``E eps^2 / (2 rho g)`` = 1.04 m per variant, onto a ground
    at its rest bottom."""
    from neural_rom.core.bake import scenarios as sc
    from neural_rom.core.physics.fem import Material

    g = np.array([0.0, 0.0, -9.81])
    X = np.array([[x, y, z] for x in (0, 2) for y in (0, 2) for z in (0, 2)], float) + [0, 0, 0.3]
    rubber = Material.preset("rubber")
    H = sc.material_drop_height(rubber.youngs_modulus, rubber.density)
    assert H == pytest.approx(1.0e6 * 0.15**2 / (2 * 1100 * 9.81))
    heights = []
    for seed in range(12):
        ctx = sc.SceneContext(
            X=X, surface=np.arange(8), mass=np.ones(8), pinned=np.zeros(0, int), frames=48,
            dt=1 / 24, gravity=g, colliders=[], material=rubber,
        )  # fmt: skip
        assert sc.drop_height(ctx) == pytest.approx(H)
        driver = sc.ScenarioDriver(sc.default_scenario("gravity_drop"), ctx, seed)
        heights.append(float(driver.x0[:, 2].min() - X[:, 2].min()))
        assert driver.ground_z == pytest.approx(0.3)
        assert np.all(driver.v0[:, 2] <= 0) and np.all(driver.v0[:, 2] >= -1.0)
    assert H * 0.5 <= min(heights) and max(heights) <= H
    # a 1 s bake cuts it to a fall that lands in its first 40%: 0.5 g (0.4 s)^2 = 0.78 m
    ctx.frames = 24
    assert sc.drop_height(ctx) == pytest.approx(0.5 * 9.81 * 0.4**2)


def test_the_poke_sizing_does_what_the_help_says():
    """The help's rule is the code's: each strain-sized poke, solved on the linearized body
    (rest Hessian, pins held), reaches 'strain' or 'displacement' diagonals, whichever comes
    first, and passes neither; a slender pinned bar (1 x 0.1 x 0.1 m) is held to the
    displacement, a compact pinned block (0.3 m) to the strain; no force lands on a pin."""
    import scipy.sparse.linalg as spla
    from neural_rom.core.bake import scenarios as sc
    from neural_rom.core.geometry.grid import grid_tetmesh
    from neural_rom.core.physics.fem import Material, TetFEM, deformation_gradient, mass_matrix
    from neural_rom.core.physics.sim import boundary_vertices

    pokes = sc.default_scenario("random_pokes")
    pokes["count"] = 1
    rubber = Material.preset("rubber")
    held = {}
    for name, size, cells in (
        ("bar", (1.0, 0.1, 0.1), (10, 1, 1)),
        ("block", (0.3,) * 3, (3,) * 3),
    ):
        X, T = grid_tetmesh(size, cells)
        pinned = np.flatnonzero(X[:, 0] < 1e-9)
        free = np.ones(X.size, bool)
        free[(3 * pinned[:, None] + np.arange(3)).ravel()] = False
        fem = TetFEM(X, T, rubber)
        solve = spla.factorized(fem.hessian(X, project=True).tocsc()[free][:, free])
        diag = float(np.linalg.norm(X.max(0) - X.min(0)))
        held[name] = []
        for seed in range(6):
            # 1 ms frames: the sampled sin^2 pulse peaks within 1e-4 of its size
            ctx = sc.SceneContext(
                X=X, surface=boundary_vertices(T), mass=mass_matrix(X, T, rubber.density),
                pinned=pinned, frames=1000, dt=1e-3, gravity=np.array([0, 0, -9.81]),
                colliders=[], T=T, material=rubber,
            )  # fmt: skip
            forces = sc.ScenarioDriver(pokes, ctx, seed).forces
            assert not forces[:, pinned].any()
            peak = forces[np.argmax(np.abs(forces).sum(axis=(1, 2)))]
            u = np.zeros(X.size)
            u[free] = solve(peak.ravel()[free])
            u = u.reshape(-1, 3)
            G = deformation_gradient(X + u, T, fem.Dm_inv) - np.eye(3)
            strain = float(np.abs(np.linalg.eigvalsh(0.5 * (G + G.transpose(0, 2, 1)))).max())
            moved = float(np.linalg.norm(u, axis=1).max()) / diag
            assert strain < pokes["strain"] * 1.001 and moved < pokes["displacement"] * 1.001
            # the one it reached
            assert max(strain / pokes["strain"], moved / pokes["displacement"]) > 0.999
            held[name].append(moved > pokes["displacement"] * 0.999)
    assert all(held["bar"]) and not any(held["block"]), held


# ---------------------------------------------------------------------------------------
# A user's own asset, default settings, through the CLI
# ---------------------------------------------------------------------------------------


def make_boot(bpy, name: str = "Boot"):
    """A boot of five 0.2 m cubes, made from bmesh primitives: a cube extruded twice along
    +X (the foot, 0.6 m long) and twice up from the heel (the leg, 0.6 m tall), subdivided
    once: closed, manifold, not convex, all quads, 90 vertices; its sole at local z = 0."""
    import bmesh
    from mathutils import Matrix, Vector

    bm = bmesh.new()
    bmesh.ops.create_cube(bm, size=0.2, matrix=Matrix.Translation((0.1, 0.0, 0.1)))

    def extrude(face, axis: int) -> None:
        """Push ``face`` out one cube along +axis (the face itself goes: no inner wall)."""
        new = bmesh.ops.extrude_face_region(bm, geom=[face])["geom"]
        bmesh.ops.delete(bm, geom=[face], context="FACES_ONLY")
        step = Vector((0.0, 0.0, 0.0))
        step[axis] = 0.2
        verts = [v for v in new if isinstance(v, bmesh.types.BMVert)]
        bmesh.ops.translate(bm, vec=step, verts=verts)
        bm.normal_update()

    def outermost(axis: int, where=lambda c: True):
        faces = [f for f in bm.faces if f.normal[axis] > 0.99 and where(f.calc_center_median())]
        return max(faces, key=lambda f: f.calc_center_median()[axis])

    extrude(outermost(0), 0)
    extrude(outermost(0), 0)
    extrude(outermost(2, lambda c: c.x < 0.2), 2)  # the leg rises from the heel
    extrude(outermost(2, lambda c: c.x < 0.2), 2)
    bmesh.ops.subdivide_edges(bm, edges=bm.edges[:], cuts=1, use_grid_fill=True)
    bmesh.ops.recalc_face_normals(bm, faces=bm.faces[:])
    mesh = bpy.data.meshes.new(name)
    bm.to_mesh(mesh)
    bm.free()
    obj = bpy.data.objects.new(name, mesh)
    bpy.context.scene.collection.objects.link(obj)
    return obj


def world(points: np.ndarray, matrix) -> np.ndarray:
    """(..., 3) object-space points -> world space under a 4x4 ``matrix``."""
    M = np.asarray(matrix, dtype=float)
    return points @ M[:3, :3].T + M[:3, 3]


def edge_stretch(cache) -> tuple[float, float]:
    """Smallest and largest length / rest length of any tet edge over a bake's frames."""
    X, T = np.asarray(cache.X), np.asarray(cache.T)
    pairs = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
    e = np.unique(np.sort(np.concatenate([T[:, list(p)] for p in pairs]), axis=1), axis=0)
    P = np.asarray(cache.channel("positions"))
    ratio = np.linalg.norm(P[:, e[:, 0]] - P[:, e[:, 1]], axis=-1) / np.linalg.norm(
        X[e[:, 0]] - X[e[:, 1]], axis=-1
    )
    return float(ratio.min()), float(ratio.max())


def test_a_users_boot_with_the_defaults_through_the_cli(addon, tmp_path, capsys):
    """Measured on a 2-core machine (17-21 s), with the contact of ba2501b (the rest-rule
    penalty) and then with the impact-sized penalty being written beside this test:
    1115-1211 tets, 90 render vertices, world bounding diagonal 0.99 m (the boot is
    turned); the three drops fall 0.50, 0.83 and 0.97 diagonals; the render surface sinks
    10.0-17.4 mm (rest rule) or 0.4-0.6 mm (impact-sized) below the ground at impact and
    rests 1.9 or 0.06 mm below it, moving under 0.7 mm/s over the last half second; tet
    edges stay within 0.94-1.03 of their rest length (rubber, sized for ~15% compression);
    a linear model of 2 modes and 1 cubature element replays the held-out bake within
    8.3-9.3 mm (0.84-0.94% of the diagonal); the reduced run from rest sits on the ground
    (1.2-2.2 mm below it, at most 3.7-5.5 mm from rest)."""
    import collections

    from neural_rom.core.data.cache import BakeCache
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.data.pc2 import read_pc2

    bpy = addon.bpy
    obj = make_boot(bpy)
    edge_use = collections.Counter(k for p in obj.data.polygons for k in p.edge_keys)
    assert set(edge_use.values()) == {2}, "closed and manifold: tetrahedralized directly"
    # placed as a user would: lifted, turned, not at the origin (the bake is in world space)
    obj.location = (0.3, -0.2, 0.5)
    obj.rotation_euler = (0.0, 0.0, 0.6)
    obj.neural_rom.role = "DEFORMABLE"  # the one setting a user must make
    blend = tmp_path / "boot.blend"
    bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    bpy.ops.wm.read_factory_settings(use_empty=True)  # the CLI opens the file itself

    run = ["--file", str(blend), "--save"]
    assert cli().main(["tetrahedralize", *run]) == 0
    # three variants: the default is one, and Train holds whole bakes out to check the model
    assert cli().main(["bake", "--variants", "3", *run]) == 0
    assert cli().main(["train", "--method", "linear", *run]) == 0
    assert cli().main(["simulate", "--out", "//boot_rom.pc2", *run]) == 0
    out = capsys.readouterr()
    assert "error" not in out.err and "warning" not in out.out.lower(), out

    bpy.ops.wm.open_mainfile(filepath=str(blend))
    obj = bpy.data.objects["Boot"]
    s = obj.neural_rom
    assert 500 < s.tets_count < 3000, "the default tet size gives a few thousand at most"
    M = np.array(obj.matrix_world)
    rest = world(np.array([v.co for v in obj.data.vertices]), M)  # the render surface
    n_render = len(rest)
    diag = float(np.linalg.norm(rest.max(0) - rest.min(0)))
    fps = bpy.context.scene.render.fps
    scene_frames = bpy.context.scene.frame_end - bpy.context.scene.frame_start + 1
    frames = s.frames  # 48, the default
    assert [(b.status, b.frames) for b in s.bakes] == [("complete", frames + 1)] * 3
    bakes = [bpy.path.abspath(b.path) for b in s.bakes]
    model_path = bpy.path.abspath(s.model.path)
    # (the commands below reopen the file: ``obj`` and ``s`` are gone)

    for k, path in enumerate(bakes):
        cache = BakeCache.open(path)
        ground = cache.meta["ground_z"]
        # the ground is where the render surface rests
        assert ground == pytest.approx(rest[:, 2].min(), abs=1e-6)
        # the bake as the user exports it: the render surface, back in world space
        pc2 = tmp_path / f"bake{k}.pc2"
        argv = ["export-pc2", "--file", str(blend), "--bake", path, "--out", str(pc2)]
        assert cli().main(argv) == 0
        P = world(read_pc2(pc2)[0].astype(float), M)  # (frames, render vertices, 3)
        bottom = P[..., 2].min(1)
        # the default drop moves it: by construction at least half a diagonal (0.50-0.97)
        assert bottom[0] - bottom[-1] > 0.45 * diag
        # never far into the ground: at most 17.4 mm at impact (1.75% of the diagonal)
        assert ground - bottom.min() < 0.025 * diag
        # comes to rest on it: at most 1.9 mm below at the end, still (<= 0.7 mm/s)
        assert abs(bottom[-1] - ground) < 0.005 * diag
        assert np.abs(np.diff(P[-13:], axis=0)).max() * fps < 0.01
        # no edge stretches or shrinks absurdly: 0.94-1.03 measured
        lo, hi = edge_stretch(cache)
        assert 0.85 < lo and hi < 1.15, (lo, hi)

    # the trained model replays the held-out bake closely: 0.84-0.94% of the diagonal
    metrics = load_model(model_path).metadata["metrics"]
    roll = metrics["rollout"]
    assert roll["frames"] == frames
    assert roll["max_error_rel"] < 0.02, roll

    # the reduced simulation, written for the scene's frames, from rest on the ground
    reduced, start, _ = read_pc2(tmp_path / "boot_rom.pc2")
    assert reduced.shape == (scene_frames, n_render, 3) and start == 1
    assert np.isfinite(reduced).all()
    R = world(reduced.astype(float), M)
    assert ground - R[..., 2].min() < 0.005 * diag  # 1.2-2.2 mm below measured
    assert np.linalg.norm(R - rest, axis=-1).max() < 0.01 * diag  # 3.7-5.5 mm measured
