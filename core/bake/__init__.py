"""Baking: run a training scenario in full space and stream it into a bake cache.

The Python API a pipeline TD uses::

    from neural_rom.core import bake, fem, mesher, surface
    V, F = surface.icosphere(0.5, 3)
    tets = mesher.tetrahedralize(V, F, target_edge_length=0.08)
    spec = bake.BakeSpec(material=fem.Material.preset("rubber").to_dict(),
                         scenario=bake.default_scenario("random_pokes"), frames=48, seed=1)
    path = bake.bake(tets, spec, "ball.nrbake")

Channels written per frame (frame 0 is the initial state): ``positions`` and
``velocities`` (n, 3) in m and m/s, ``forces`` (n, 3) external forces in N,
``pin_targets`` (k, 3) when there are pins, ``colliders`` (c, 4, 4) transforms when there
are colliders, and the scalars ``newton_iters``, ``substeps`` (steps actually taken,
retries included), ``converged`` and ``force_residual`` (the largest unbalanced force on a
free vertex at the end of the frame, a fraction of its weight: :class:`sim.StepReport`;
bakes made before it have no such channel). Internal forces for cubature training are recomputed
from positions with the material stored in the metadata.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..data.cache import BakeCache, BakeWriter
from ..data.files import ensure_writable_dir, json_default, mesh_hash
from ..errors import CacheError, JobCancelled, NeuralRomError, SimulationError
from ..physics import fem as _fem
from ..physics.colliders import ContactPoints, penalty_stiffness
from ..physics.sim import SimSettings, Simulation, boundary_vertices
from .scenarios import (
    SCENARIO_KINDS,
    ScenarioDriver,
    SceneContext,
    default_scenario,
    drop_height,
    validate_scenario,
)

__all__ = [
    "BakeSpec",
    "ResumePoint",
    "bake",
    "bake_variants",
    "impact_speed",
    "resume_point",
    "variant_path",
    "variant_spec",
    "variant_seed",
    "SCENARIO_KINDS",
    "default_scenario",
]

Progress = Callable[[int, int, dict], None]
Say = Callable[[str], None]


@dataclass
class BakeSpec:
    """Everything that defines a bake (JSON round trip with :meth:`to_dict` / :meth:`from_dict`).

    Attributes
    ----------
    material : dict
        :meth:`fem.Material.to_dict`.
    scenario : dict
        See :mod:`.scenarios`.
    frames : int
        Frames to simulate after the initial state.
    dt : float
        Seconds per frame.
    substeps : int
    gravity : (3,) float
        m/s^2 (Blender is Z-up).
    pinned : list of int
        Tet node indices held by Dirichlet constraints.
    pin_targets : (frames+1, k, 3) nested list or None
        Animated pin positions (m); None holds them at rest.
    damping : (alpha, beta)
        Rayleigh damping: alpha in 1/s (mass), beta in s (stiffness).
    colliders : list of dict
        ``{"kind", "radius", "half_length", "transforms": (frames+1) 4x4 matrices}``.
    seed : int
    variants : int
        How many randomized variants :func:`bake_variants` makes (seeds derived from ``seed``).
    newton_tol, max_newton_iters : Newton settings, see :class:`sim.SimSettings`.
    contact : dict or None
        The points that touch colliders (:meth:`colliders.ContactPoints.to_dict`): an
        embedded render surface's (:meth:`embedding.Embedding.contact_points`); None means
        the tet mesh's boundary vertices (a tet mesh that is the object).
    motion : dict or None
        Training motion drawn from the user's animation (:func:`core.motion.draw_pins`):
        ``{"sources", "pins", "perturbation"}`` on a bake of several variants, each of which
        (:func:`variant_spec`) gets its own pin targets and records what it drew (its
        ``source``, draws and ``track``) here instead; None: the pins follow
        ``pin_targets`` (the file's animation as it plays, or the rest).
    contact_stiffness : "auto", float or None
        Collider penalty stiffness, 1/s^2 (:func:`colliders.penalty_stiffness`). "auto" (the
        default) sizes it from the fastest impact the scenario can produce
        (:func:`impact_speed`), so that an impact sinks at most about 2 mm (less on objects
        under 1 m); None is the rest rule ``g / (1e-4 L)`` of bakes made before it, whose
        specs have no such key and keep it when resumed or replayed.
    """

    material: dict = field(default_factory=lambda: _fem.Material.preset("rubber").to_dict())
    scenario: dict = field(default_factory=lambda: default_scenario("gravity_drop"))
    frames: int = 48
    dt: float = 1.0 / 24.0
    substeps: int = 1
    gravity: tuple = (0.0, 0.0, -9.81)
    pinned: list = field(default_factory=list)
    pin_targets: list | None = None
    damping: tuple = (0.0, 0.0)
    colliders: list = field(default_factory=list)
    seed: int = 0
    variants: int = 1
    newton_tol: float = 1e-6
    max_newton_iters: int = 30
    contact: dict | None = None
    contact_stiffness: float | str | None = "auto"
    motion: dict | None = None

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        if self.motion is None:
            del d["motion"]  # specs of bakes made before drawn motion had none: resumable
        if self.contact is None:
            del d["contact"]  # specs of bakes made before contact points had none: resumable
        if self.contact_stiffness is None:
            del d["contact_stiffness"]  # the rest rule, as specs made before it had
        d["gravity"] = [float(g) for g in self.gravity]
        d["damping"] = [float(a) for a in self.damping]
        d["pinned"] = [int(i) for i in self.pinned]
        if self.pin_targets is not None:
            d["pin_targets"] = np.asarray(self.pin_targets, dtype=float).tolist()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> BakeSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise NeuralRomError(f"Unknown bake setting(s): {', '.join(sorted(unknown))}.")
        # a spec stored before the impact-sized stiffness keeps the rest rule it was baked with
        spec = cls(**{"contact_stiffness": None, **d})
        spec.gravity = tuple(spec.gravity)
        spec.damping = tuple(spec.damping)
        return spec

    def validate(self, n_vertices: int | None = None) -> None:
        """Raise a NeuralRomError naming the bad setting."""
        if int(self.frames) < 1:
            raise NeuralRomError(f"A bake needs at least one frame, got {self.frames}.")
        if not (self.dt > 0):
            raise NeuralRomError(f"dt must be positive, got {self.dt}.")
        if int(self.variants) < 1:
            raise NeuralRomError("variants must be at least 1.")
        _fem.Material.from_dict(self.material).validate()
        validate_scenario(self.scenario)
        k = self.contact_stiffness
        if not (k is None or k == "auto" or (isinstance(k, (int, float)) and k > 0)):
            raise NeuralRomError(
                f"contact_stiffness must be 'auto', a positive number (1/s^2) or None, got {k!r}."
            )
        if self.motion is not None and "sources" in self.motion:
            pins = np.asarray(self.motion.get("pins", []), dtype=float).reshape(-1, 3)
            if not self.pinned or len(pins) != len(self.pinned):
                raise NeuralRomError(
                    "A bake drawn from the animation moves its pins: it needs the pinned "
                    f"vertices' rest positions, one per pin ({len(self.pinned)} pins, "
                    f"{len(pins)} positions); pick a Pin Group or bake the scenario alone."
                )
        if n_vertices is not None and self.pinned:
            p = np.asarray(self.pinned)
            if p.min() < 0 or p.max() >= n_vertices:
                raise NeuralRomError(
                    f"Pinned vertex indices must lie in 0..{n_vertices - 1}; the pin group does not "
                    "match this tet mesh. Re-tetrahedralize, then re-bake."
                )

    def sim_settings(self) -> SimSettings:
        return SimSettings(
            dt=float(self.dt),
            substeps=int(self.substeps),
            gravity=tuple(float(g) for g in self.gravity),
            damping_alpha=float(self.damping[0]),
            damping_beta=float(self.damping[1]),
            newton_tol=float(self.newton_tol),
            max_newton_iters=int(self.max_newton_iters),
            # "auto" is resolved by setup_scenario, which knows the scenario
            contact_stiffness=None
            if self.contact_stiffness in (None, "auto")
            else float(self.contact_stiffness),
        )

    def contact_points(self, T, mass) -> ContactPoints:
        """The points that touch colliders in this bake: :attr:`contact`, or the boundary
        vertices of the tet mesh ``T`` (m, 4) with their lumped masses ``mass`` (n,), kg."""
        if self.contact is not None:
            return ContactPoints.from_dict(self.contact)
        surface = boundary_vertices(np.asarray(T, dtype=np.int64))
        return ContactPoints.at_vertices(surface, np.asarray(mass)[surface])


def variant_seed(seed: int, k: int) -> int:
    """Seed of variant ``k`` of a bake seeded ``seed`` (independent streams, reproducible)."""
    return int(np.random.SeedSequence([int(seed), int(k)]).generate_state(1)[0])


def variant_spec(spec: BakeSpec, k: int) -> BakeSpec:
    """The spec of variant ``k`` of ``spec``: its own seed, one variant, and when ``spec``
    draws its motion from the animation, its own pin targets (:func:`core.motion.draw_pins`)
    with what it drew in ``motion``."""
    sub = dataclasses.replace(spec, seed=variant_seed(spec.seed, k), variants=1)
    if spec.motion is not None and "sources" in spec.motion:
        from .motion import draw_pins

        targets, record = draw_pins(spec.motion, int(spec.frames), float(spec.dt), spec.seed, k)
        sub.pin_targets = targets.tolist()
        sub.motion = record
    return sub


def variant_path(out_dir: str | Path, name: str, k: int) -> Path:
    """Where :func:`bake_variants` writes variant ``k`` of the bake ``name``."""
    return Path(out_dir) / f"{name}_v{int(k):03d}.nrbake"


def setup_scenario(X, T, spec: BakeSpec):
    if spec.motion is not None and "sources" in spec.motion:
        raise NeuralRomError(
            "This spec draws each variant's motion from the animation: bake it with "
            "bake_variants (or take variant_spec(spec, k) for one variant)."
        )
    material = _fem.Material.from_dict(spec.material)
    settings = spec.sim_settings()
    pinned = np.asarray(spec.pinned, dtype=np.int64)
    contact = None if spec.contact is None else ContactPoints.from_dict(spec.contact)
    sim = Simulation(X, T, material, settings, pinned=pinned, contact=contact)
    ctx = SceneContext(
        X=sim.X,
        surface=boundary_vertices(sim.T),
        mass=sim.mass,
        pinned=sim.pinned,
        frames=int(spec.frames),
        dt=float(spec.dt),
        gravity=np.asarray(spec.gravity, dtype=float),
        colliders=list(spec.colliders),
        pin_targets=None if spec.pin_targets is None else np.asarray(spec.pin_targets, dtype=float),
        T=sim.T,
        material=material,
        bottom_z=None
        if contact is None
        else float(np.einsum("pa,pa->p", contact.weights, sim.X[contact.nodes, 2]).min()),
    )
    driver = ScenarioDriver(spec.scenario, ctx, int(spec.seed))
    if spec.contact_stiffness == "auto":
        g = float(np.linalg.norm(spec.gravity))
        P = sim.contact.positions(sim.X)
        size = float(np.linalg.norm(P.max(0) - P.min(0))) if len(P) else None
        sim.kappa = penalty_stiffness(sim.length_scale, g, impact_speed(sim, driver), size)
        sim.settings.contact_stiffness = sim.kappa
    return sim, driver


def replay_scenario(cache) -> tuple[Simulation, ScenarioDriver]:
    """The simulation and scenario of a bake, as :func:`setup_scenario` makes them from the
    spec the bake recorded, with every input the bake recorded put back: the initial
    positions and velocities, the contact stiffness, and per committed frame the external
    forces, pin targets and collider transforms. A replay (training's validation, Compare with Bake, the headless
    compare) thus steps what the bake stepped even when the scenario generator has changed
    since (new defaults, other random draws); a bake without a channel keeps the generated
    input for it.

    Raises
    ------
    CacheError
        The bake records another number of colliders than its scenario makes.
    """
    X, T = np.asarray(cache.X, dtype=float), np.asarray(cache.T)
    sim, driver = setup_scenario(X, T, BakeSpec.from_dict(cache.meta["spec"]))
    F = min(int(cache.n_frames), len(driver.forces))
    have = cache.channels
    kappa = cache.meta.get("contact_stiffness")
    if kappa is not None:  # the penalty the bake ran with (bakes before it: the rule's)
        sim.kappa = float(kappa)
        sim.settings.contact_stiffness = sim.kappa
    if F == 0:
        return sim, driver
    driver.x0 = np.array(cache.channel("positions")[0], dtype=np.float64)
    if "velocities" in have:
        driver.v0 = np.array(cache.channel("velocities")[0], dtype=np.float64)
    if "forces" in have:
        driver.forces[:F] = cache.channel("forces")[:F]
    if "pin_targets" in have and driver.pin_targets.shape[1:] == have["pin_targets"].shape:
        driver.pin_targets[:F] = cache.channel("pin_targets")[:F]
    if "colliders" in have:
        rec = np.asarray(cache.channel("colliders")[:F], dtype=np.float64)
        if rec.shape[1] != len(driver.collider_dicts):
            raise CacheError(
                f"bake {cache.path} records {rec.shape[1]} collider(s) but its scenario makes "
                f"{len(driver.collider_dicts)}; re-bake it."
            )
        for i, c in enumerate(driver.collider_dicts):
            track = np.array(rec[:, i])
            c["transforms"] = track.tolist()
            driver.collider_tracks[i] = track
    return sim, driver


def impact_speed(sim: Simulation, driver: ScenarioDriver) -> float:
    """The fastest a contact point of ``sim`` can arrive at a collider in the scenario of
    ``driver``, m/s: an upper estimate that sizes the penalty stiffness (``setup_scenario``).

    The sum of what can bring a point to a collider:

    - falling: the speed of a gravity drop from the highest it lifts any variant (the
      automatic height at its top, the largest downward push ``jitter``, the initial
      velocity and ``spin`` times the radius of the contact points), and the fall of this
      variant's lowest contact point to the lowest collider point under it, from its
      fastest starting speed (at most a free fall for the bake's duration);
    - pushes: the rigid speed the external forces (pokes, replayed forces) give the body,
      ``max_t |int_0^t sum_i f_i dt| / M``;
    - moving colliders and pins: their largest speed at the object's contact points.

    It depends on the spec and the mesh, not on the seed, except through the pushes and the
    generated colliders of this variant.
    """
    ctx = driver.ctx
    g_vec = np.asarray(ctx.gravity, dtype=float)
    g = float(np.linalg.norm(g_vec))
    dt = float(ctx.dt)
    P0 = sim.contact.positions(driver.x0)
    V0 = sim.contact.carry(driver.v0)
    fall = 0.0
    if g > 0 and len(P0):
        down = g_vec / g
        v_start = float(np.linalg.norm(V0, axis=1).max())
        parts = driver.spec["parts"] if driver.spec["kind"] == "composite" else [driver.spec]
        if not len(ctx.pinned):
            c = np.average(ctx.X, axis=0, weights=ctx.mass)
            radius = float(np.linalg.norm(sim.contact.positions(ctx.X) - c, axis=1).max())
            for p in parts:
                if p["kind"] != "gravity_drop":
                    continue
                height = float(p["height"]) if p["height"] >= 0 else drop_height(ctx)
                push = (
                    float(np.linalg.norm(p["initial_velocity"]))
                    + float(p["jitter"])
                    + abs(float(p["spin"])) * radius
                )
                fall = max(fall, float(np.sqrt(push**2 + 2.0 * g * height)))
        # this variant's lowest point falling to the lowest collider point
        lowest = float(np.min(-(P0 @ down)))  # height of the lowest point, against g
        floor = None
        for col in driver.colliders(0):
            A, t = col.transform[:3, :3], col.transform[:3, 3]
            if col.kind == "plane":
                n = A[:, 2] / max(float(np.linalg.norm(A[:, 2])), 1e-300)
                if float(n @ -down) < 1.0 - 1e-9:
                    continue  # a tilted plane reaches anywhere: sized by the drop alone
                z = float(t @ -down)
            else:
                z = float(t @ -down) - col.radius * float(np.linalg.norm(A, axis=0).max())
                if col.kind == "capsule":
                    z -= col.half_length * float(np.linalg.norm(A[:, 2]))
            floor = z if floor is None else min(floor, z)
        if floor is not None:
            drop = min(max(lowest - floor, 0.0), 0.5 * g * (ctx.frames * dt) ** 2)
            fall = max(fall, float(np.sqrt(v_start**2 + 2.0 * g * drop)))
    # pushes: the body's momentum from the external forces over time
    M = float(np.sum(ctx.mass))
    momentum = np.cumsum(driver.forces.sum(axis=1), axis=0) * dt
    push = float(np.linalg.norm(momentum, axis=1).max()) / M if M > 0 else 0.0
    # moving colliders and pins, at the contact points' rest bounding box
    lo, hi = P0.min(0), P0.max(0)
    corners = np.array([[x, y, z, 1.0] for x in (lo[0], hi[0]) for y in (lo[1], hi[1])
                        for z in (lo[2], hi[2])])  # fmt: skip
    moving = 0.0
    for track in driver.collider_tracks:
        if len(track) > 1:
            step = np.diff(track, axis=0)[:, :3, :] @ corners.T  # (f, 3, 8)
            moving = max(moving, float(np.linalg.norm(step, axis=1).max()) / dt)
    if len(ctx.pinned) and len(driver.pin_targets) > 1:
        pin_step = np.diff(driver.pin_targets, axis=0)
        moving = max(moving, float(np.linalg.norm(pin_step, axis=2).max()) / dt)
    return fall + push + moving


def _channels(n: int, k: int, c: int) -> dict:
    ch = {
        "positions": ((n, 3), "<f8"),
        "velocities": ((n, 3), "<f8"),
        "forces": ((n, 3), "<f8"),
        "newton_iters": ((), "<i4"),
        "substeps": ((), "<i4"),
        "converged": ((), "<i4"),
        "force_residual": ((), "<f8"),
    }
    if k:
        ch["pin_targets"] = ((k, 3), "<f8")
    if c:
        ch["colliders"] = ((c, 4, 4), "<f8")
    return ch


def _frame(sim: Simulation, driver: ScenarioDriver, frame: int, report=None) -> dict:
    out = {
        "positions": sim.x,
        "velocities": sim.v,
        "forces": driver.forces[frame],
        "newton_iters": np.int32(report.newton_iters if report else 0),
        "substeps": np.int32(report.substeps if report else 0),
        "converged": np.int32(1 if (report is None or report.converged) else 0),
        "force_residual": np.float64(report.force_residual if report else 0.0),
    }
    if len(sim.pinned):
        out["pin_targets"] = driver.pin_targets[frame]
    if driver.collider_dicts:
        out["colliders"] = driver.collider_matrices(frame)
    return out


@dataclass(frozen=True)
class ResumePoint:
    """What baking ``spec`` again at an existing path can keep (:func:`resume_point`).

    Attributes
    ----------
    action : {"new", "resume", "complete", "mismatch"}
        Nothing there; continue after ``frames`` committed frames; every frame is there;
        the bake there cannot be continued (``reason`` says why).
    frames : int
        Committed frames that stay (0 for "new" and "mismatch"); the next frame baked is
        frame ``frames``.
    total : int
        Frames of the whole bake (``spec.frames + 1``).
    reason : str
        Why, in words for a log; empty for "new".
    """

    action: str
    frames: int
    total: int
    reason: str = ""


def _as_json(d: dict) -> dict:
    return json.loads(json.dumps(d, default=json_default))


def resume_point(mesh, spec: BakeSpec, path: str | Path) -> ResumePoint:
    """Whether the bake at ``path`` can be continued to make ``spec`` on ``mesh``.

    It can when it is a readable bake of the same mesh (:func:`files.mesh_hash`) with the
    same spec (every :class:`BakeSpec` field, seed included): a bake is deterministic, so
    continuing after its last committed frame gives the frames an uninterrupted bake gives.
    """
    path = Path(path)
    total = int(spec.frames) + 1
    if not path.exists():
        return ResumePoint("new", 0, total)
    try:
        old = BakeCache.open(path)
    except CacheError as e:
        return ResumePoint("mismatch", 0, total, f"it is not a bake that can be continued ({e})")
    if old.mesh_hash != mesh_hash(np.asarray(mesh.X, np.float64), np.asarray(mesh.T, np.int64)):
        return ResumePoint(
            "mismatch",
            0,
            total,
            "it was baked on another tet mesh (the object was edited or re-tetrahedralized)",
        )
    stored = old.meta.get("spec")
    want = _as_json(spec.to_dict())
    if stored != want:
        changed = sorted(
            k for k in set(want) | set(stored or {}) if (stored or {}).get(k) != want.get(k)
        )
        return ResumePoint(
            "mismatch", 0, total, f"it was baked with other settings ({', '.join(changed)})"
        )
    n = int(old.n_frames)
    if n >= total:
        return ResumePoint("complete", n, total, f"it is complete ({n} frames)")
    why = f"{n} of {total} frames committed" + (
        f", stopped as {old.status}" if old.status != "in_progress" else ""
    )
    return ResumePoint("resume", n, total, why)


def bake(
    mesh,
    spec: BakeSpec,
    path: str | Path,
    *,
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
    overwrite: bool = False,
    resume: bool = False,
    say: Say | None = None,
) -> Path:
    """Simulate ``spec`` on ``mesh`` and stream every frame into the bake at ``path``.

    Parameters
    ----------
    mesh : TetMesh (anything with ``X`` (n, 3) and ``T`` (m, 4))
    spec : BakeSpec
    path : directory to write (``*.nrbake``)
    progress : callable(frames_done, frames_total, info), optional
        Called after each committed frame; ``info`` has ``newton_iters``, ``step_s``,
        ``eta_s``.
    should_cancel : callable() -> bool, optional
        Polled after each committed frame; True stops the bake with :class:`JobCancelled`.
        Every committed frame stays on disk and the bake reopens (status ``cancelled``).
    overwrite : replace an existing bake at ``path``.
    resume : continue a cancelled or crashed bake at ``path`` after its last committed
        frame (same mesh and spec, hence the same frames as an uninterrupted bake; see
        :func:`resume_point`); a complete one is kept as it is. A bake that cannot be
        continued is started over with ``overwrite``, else refused.
    say : callable(str), optional
        Told what happens to an existing bake (resumes at frame N, kept, started over).

    Returns
    -------
    Path of the bake.

    Raises
    ------
    NeuralRomError
        Bad settings; ``resume`` without ``overwrite`` on a bake that cannot be continued.
    WriteError
        The folder of ``path`` cannot be written.
    """
    X = np.asarray(mesh.X, dtype=np.float64)
    T = np.asarray(mesh.T, dtype=np.int64)
    spec.validate(len(X))
    path = Path(path)
    sim, driver = setup_scenario(X, T, spec)
    n, k, c = len(X), len(sim.pinned), len(driver.collider_dicts)
    metadata = {
        "spec": spec.to_dict(),
        "material": spec.material,
        "scenario": driver.spec,
        # what the scenario did, in words, and its ground plane (z, m; None: none), which
        # a reduced simulation of a model trained on this bake needs too
        "scenario_summary": driver.summary,
        "ground_z": driver.ground_z,
        "dt": float(spec.dt),
        "seed": int(spec.seed),
        "frames_planned": int(spec.frames) + 1,
        # the penalty stiffness the bake ran with (1/s^2): a model trained on it steps with it
        "contact_stiffness": float(sim.kappa),
    }
    plan = resume_point(mesh, spec, path) if resume else None
    total = int(spec.frames) + 1
    if plan is not None and plan.action == "complete":
        _say(say, f"{path.name} is kept: {plan.reason}")
        _report(progress, total, total, 0, 0.0, 0.0)
        return path
    if plan is not None and plan.action == "mismatch":
        if not overwrite:
            raise NeuralRomError(
                f"Cannot resume {path}: {plan.reason}. Bake it again from the start "
                "(overwrite, or Start Over / --restart)."
            )
        _say(say, f"{path.name} starts over: {plan.reason}")
    if plan is not None and plan.action == "resume":
        writer = BakeWriter.resume(path, expect_mesh_hash=mesh_hash(X, T))
        old = BakeCache.open(path)  # after the writer: frames committed while it waited count
        start = writer.frames
        _say(say, f"{path.name} resumes at frame {start} ({plan.reason})")
        if start > 0:
            last = start - 1
            sim.set_state(
                {
                    "x": old.channel("positions")[last],
                    "v": old.channel("velocities")[last],
                    # the Newton predictor's acceleration: as the uninterrupted bake had it
                    "v_prev": old.channel("velocities")[max(last - 1, 0)],
                    "frame": last,
                    "forces": driver.forces[last],
                    "pin_targets": driver.pin_targets[last],
                    "colliders": [cc.to_dict() for cc in driver.colliders(last)],
                }
            )
    else:
        writer = BakeWriter(
            path,
            X=X,
            T=T,
            channels=_channels(n, k, c),
            metadata=metadata,
            extra_arrays={"pinned": sim.pinned},
            overwrite=overwrite,
        )
        start = 0
    with writer:
        if start == 0:
            sim.reset(driver.x0, driver.v0)
            sim.forces = driver.forces[0].copy()
            sim.pin_targets = driver.pin_targets[0].copy()
            sim.colliders = driver.colliders(0)
            writer.append(**_frame(sim, driver, 0))
            start = 1
            _report(progress, 1, total, 0, 0.0, 0.0)
        t_start = time.perf_counter()
        for frame in range(start, total):
            if should_cancel is not None and should_cancel():
                raise JobCancelled(f"Bake cancelled after {frame} committed frames.")
            try:
                rep = sim.step(driver.inputs(frame))
            except SimulationError as e:
                raise SimulationError(f"{e} The bake keeps its {frame} committed frames.") from e
            row = _frame(sim, driver, frame, rep)
            # a bake resumed from before a channel existed keeps its own channels
            writer.append(**{k: v for k, v in row.items() if k in writer.channels})
            elapsed = time.perf_counter() - t_start
            done_here = frame - start + 1
            eta = elapsed / done_here * (total - frame - 1)
            _report(progress, frame + 1, total, rep.newton_iters, rep.wall_time, eta)
    return path


def _say(say: Say | None, message: str) -> None:
    if say is not None:
        say(message)


def _report(progress, done, total, iters, step_s, eta) -> None:
    if progress is not None:
        progress(
            done, total, {"newton_iters": int(iters), "step_s": float(step_s), "eta_s": float(eta)}
        )


def bake_variants(
    mesh,
    spec: BakeSpec,
    out_dir: str | Path,
    name: str,
    *,
    shard: tuple[int, int] = (0, 1),
    progress: Progress | None = None,
    should_cancel: Callable[[], bool] | None = None,
    overwrite: bool = False,
    resume: bool = False,
    say: Say | None = None,
) -> list[Path]:
    """Bake the randomized variants of ``spec`` that belong to ``shard``, one after another.

    Variant ``k`` (0 <= k < spec.variants) is written to ``out_dir / f"{name}_v{k:03d}.nrbake"``
    with seed :func:`variant_seed` ``(spec.seed, k)``; shard ``(i, N)`` bakes the variants
    with ``k % N == i``, so N farm jobs together bake every variant exactly once and
    :class:`cache.BakeDataset` opens them as one dataset. A variant depends on nothing but
    ``spec`` and ``k``: the worker bakes them in parallel processes (``worker.py``), with
    the same frames. ``progress`` counts frames over every variant; its ``info`` has
    ``variant``. ``overwrite``, ``resume`` and ``say`` are :func:`bake`'s, per variant.
    """
    i, N = int(shard[0]), int(shard[1])
    if N < 1 or not (0 <= i < N):
        raise NeuralRomError(f"Shard {i}/{N} is invalid: use i/N with 0 <= i < N.")
    out_dir = ensure_writable_dir(out_dir, "bakes")
    mine = [k for k in range(int(spec.variants)) if k % N == i]
    frames_each = int(spec.frames) + 1
    paths = []
    for j, k in enumerate(mine):
        sub = variant_spec(spec, k)

        def sub_progress(done, total, info, j=j, k=k):
            if progress is not None:
                info = dict(info, variant=k)
                progress(j * frames_each + done, len(mine) * frames_each, info)

        paths.append(
            bake(
                mesh,
                sub,
                variant_path(out_dir, name, k),
                progress=sub_progress,
                should_cancel=should_cancel,
                overwrite=overwrite,
                resume=resume,
                say=say,
            )
        )
    return paths
