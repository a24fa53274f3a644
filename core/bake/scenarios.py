"""Training scenarios: what happens to the object during a bake.

A scenario is a JSON-able dict ``{"kind": ..., <parameters>}``; :func:`default_scenario`
lists every parameter with its default. Scenarios are deterministic given the bake seed,
and compose: ``{"kind": "composite", "parts": [spec, spec, ...]}`` sums the forces and
merges the colliders and pin motions of its parts.

Kinds
-----
gravity_drop
    The object starts lifted by ``height`` (m; -1 sizes it from the material, see below),
    optionally randomly rotated (``random_rotation``), with an initial velocity plus a random
    downward one of up to ``jitter`` m/s per variant, and falls onto a ground plane
    (``ground``) at the lowest rest point of the surface that touches colliders: the render
    surface when the object is simulated through an embedding cage (``bottom_z``), else the
    tet mesh's. A pinned object is not lifted and has no ground: it sags and swings.
random_pokes
    Scripted random forces on random surface regions (Shen et al. 2021, section 6.1): a
    random surface vertex, its neighbours within ``radius``, a random direction, a smooth
    force pulse for ``duration`` s whose size reaches a largest strain of about ``strain`` or
    a largest displacement of ``displacement`` bounding-box diagonals, whichever it reaches
    first (or ``force`` newtons, or ``strength`` body weights, when > 0). Pokes land on the
    free surface: a force on a pinned vertex does nothing.

Sizing from the object
----------------------
Defaults are physical whatever the object's size and material. The automatic drop height
makes the impact's kinetic energy ``m g H`` the strain energy of a uniform compression
``E eps^2 V / 2`` at ``eps = 0.15`` (:data:`DROP_STRAIN`): ``H = E eps^2 / (2 rho g)``
(rubber: 1.04 m, flesh: 3 cm; :func:`material_drop_height`), clamped to [0.1, 1]
bounding-box diagonals (:data:`DROP_HEIGHT_DIAGONALS`) and to a fall that lands within the
first 40% of the bake (:data:`DROP_LANDS_WITHIN`; rubber's 1.04 m is cut to 0.78 m for a
1 s bake), and each variant drops from between half and all of it
(:data:`DROP_VARIANT_SHARE`). A poke's force is calibrated on the linearized
body: the rest Hessian ``K`` is solved for a unit total force on the poke's region (pins
held; a free body's poke balanced by its rigid acceleration), and the force is the target
strain over the largest linear strain ``|sym(grad u)|``, or the target displacement
(``displacement`` diagonals) over the largest linear displacement ``|u|`` when that is
smaller. ``F ~ E eps A`` fits a chunky body but not a bending tentacle; the solve fits
both. A dynamic version, ``K + (pi/d)^2 M``, let the pulse's momentum through: a pinned
2 m rubber tentacle swung 3.7 m with 97-153 Newton iterations a frame, against 1.4
largest stretch and at most 56 iterations static (``tests/test_own_assets.py``).

A strain alone is the wrong size for a slender pinned body: a cantilever's root strain is
about ``3 r w / L^2`` for a tip deflection ``w``, so 20% strain at the root of that
tentacle (``r`` 0.12 m, ``L`` 2 m) is a 2.2 m static deflection, longer than the tentacle.
Its 8 bakes of 4 strain-sized pokes moved it 0.30-2.11 m beyond its sag under gravity
(which alone moves the tip 1.86 m: soft rubber 2 m long does not hold itself up), the
worst frame of a bake took up to 55 Newton iterations, and a linear model trained on 7
replayed the 8th to 8.5-25% of the diagonal (leave-one-out, the automatic number of
modes). With the displacement held to 0.2 diagonals (0.41 m) the pokes move it
0.18-0.43 m beyond the sag, the worst frame of a bake takes 6-9 iterations, and the
held-out replay is 3.9-12.7%; 0.15 and 0.25 diagonals gave 0.14-0.32 m, 2.3-10% and
0.21-0.53 m, 3.0-14.4%. Compact bodies reach the strain first (a torus and a cube, free,
in rubber and in flesh: none of 24 pokes held to the displacement), so the cap leaves them
as they were.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from ..engine.protocol import FrameInputs
from ..errors import NeuralRomError
from ..physics.colliders import Collider, colliders_from_dicts
from ..physics.poke import poke_weights, share

SCENARIO_KINDS = ("gravity_drop", "random_pokes", "keyframed_colliders", "replay_forces")

# The automatic drop (gravity_drop's height -1; see "Sizing from the object" above).
DROP_STRAIN = 0.15  # uniform compression whose strain energy equals the impact's energy
DROP_HEIGHT_DIAGONALS = (0.1, 1.0)  # bounds of the height, bounding-box diagonals
DROP_LANDS_WITHIN = 0.4  # share of the bake by which the fall from rest lands
DROP_VARIANT_SHARE = (0.5, 1.0)  # each variant drops from this share of the sized height
# keyframed_colliders' presses start and end this many bounding-box diagonals clear of
# the surface, so that the sphere comes in along the normal, not sideways across the surface
PRESS_CLEARANCE = 0.05

_DEFAULTS: dict[str, dict] = {
    "gravity_drop": {
        "height": -1.0,
        "random_rotation": False,
        "initial_velocity": [0.0, 0.0, 0.0],
        "jitter": 1.0,
        "spin": 0.0,
        "ground": True,
    },
    "random_pokes": {
        "count": 4,
        "radius": 0.15,
        "strain": 0.2,
        "displacement": 0.2,
        "strength": 0.0,
        "force": 0.0,
        "duration": 0.5,
        "ground": False,
    },
    "keyframed_colliders": {
        "keys": 4,
        "radius": 0.25,
        "reach": 0.6,
        "move_pins": False,
        "pin_amplitude": 0.2,
        "press": 0.0,
        "speed": 0.0,
        "hold": 0.0,
        "slide": 0.0,
        "ground": False,
    },
    "replay_forces": {
        "source": "",
        "scale": 1.0,
        "ground": False,
    },
}

_DIAG = "of the bounding-box diagonal"
_GROUND = (
    "",
    "a ground plane at the lowest rest point of the surface that touches colliders (the "
    "render surface when the object is simulated through an embedding cage)",
)

#: Each parameter's unit ("" when it has none) and meaning, by scenario kind: the one
#: description of the parameters (``bake --help`` lists them with their defaults).
PARAMETER_HELP: dict[str, dict[str, tuple[str, str]]] = {
    "gravity_drop": {
        "height": (
            "m",
            "the object's bottom starts this high above where it rests; -1: the automatic height",
        ),
        "random_rotation": ("", "start in a random orientation (a linear model cannot follow)"),
        "initial_velocity": ("m/s", "initial velocity [x, y, z]"),
        "jitter": ("m/s", "plus a random downward push of up to this, different in each variant"),
        "spin": ("rad/s", "initial spin about a random axis"),
        "ground": (_GROUND[0], _GROUND[1] + "; none under a pinned object, which hangs"),
    },
    "random_pokes": {
        "count": ("", "pokes per bake, one in each equal share of the frames"),
        "radius": (_DIAG, "radius of the poked region around a random surface vertex"),
        "strain": (
            "",
            "largest strain each poke reaches on the linearized body (0.2 = 20%) unless it "
            "reaches 'displacement' first; used when strength and force are 0",
        ),
        "displacement": (
            _DIAG,
            "largest displacement each poke reaches on the linearized body unless it reaches "
            "'strain' first (0: no limit); used when strength and force are 0",
        ),
        "strength": ("body weights", "total force of each poke in body weights (m g) when > 0"),
        "force": ("N", "total force of each poke when > 0 (before strength and strain)"),
        "duration": (
            "s",
            "length of each poke's smooth sin^2 pulse, at most its share of the bake",
        ),
        "ground": _GROUND,
    },
    "keyframed_colliders": {
        "keys": ("", "random keyframes per bake"),
        "radius": (_DIAG, "radius of the generated sphere (when the scene has no Collider)"),
        "reach": (_DIAG, "how far the keys wander beyond the object's bounding box"),
        "move_pins": ("", "the pinned vertices follow random rigid translations too"),
        "pin_amplitude": (_DIAG, "largest pin translation"),
        "press": (
            _DIAG,
            "when > 0, each key is a press: the sphere comes in along the surface normal of a "
            "random free spot (not facing the pins) and sinks into the rest surface by half to "
            "all of this, then backs out; 'keys' counts the presses",
        ),
        "speed": (
            "m/s",
            "when > 0, the keys are timed so the sphere moves at most this fast (the keys that "
            "do not fit in the bake are dropped); 0: random key frames",
        ),
        "hold": ("s", "with 'press': how long the sphere rests at each press"),
        "slide": (
            _DIAG,
            "with 'press': the pressed sphere then slides, at the same depth, to a spot up to "
            "this far away on the same side",
        ),
        "ground": _GROUND,
    },
    "replay_forces": {
        "source": ("", "a bake (.nrbake) with recorded forces, or an .npz with X and forces"),
        "scale": ("", "multiplier on the replayed forces"),
        "ground": _GROUND,
    },
}


def default_scenario(kind: str) -> dict:
    """The parameters of a scenario kind, with their defaults (a fresh copy)."""
    if kind not in _DEFAULTS:
        raise NeuralRomError(
            f"Unknown scenario {kind!r}; choose one of {', '.join(SCENARIO_KINDS)} or 'composite'."
        )
    return {"kind": kind, **copy.deepcopy(_DEFAULTS[kind])}


def validate_scenario(spec: dict) -> dict:
    """A complete scenario dict (defaults filled in); errors name unknown kinds and keys."""
    if not isinstance(spec, dict) or "kind" not in spec:
        raise NeuralRomError("A scenario is a dict with a 'kind' key.")
    if spec["kind"] == "composite":
        parts = spec.get("parts") or []
        if not parts:
            raise NeuralRomError("A composite scenario needs a non-empty 'parts' list.")
        return {"kind": "composite", "parts": [validate_scenario(p) for p in parts]}
    full = default_scenario(spec["kind"])
    unknown = set(spec) - set(full)
    if unknown:
        raise NeuralRomError(
            f"Scenario {spec['kind']!r} has no parameter(s) {', '.join(sorted(unknown))}; "
            f"valid: {', '.join(k for k in full if k != 'kind')}."
        )
    full.update(copy.deepcopy(spec))
    return full


@dataclass
class SceneContext:
    """What a scenario needs to know about the object (all world space, SI)."""

    X: np.ndarray  # (n, 3) rest positions
    surface: np.ndarray  # (s,) surface vertex indices
    mass: np.ndarray  # (n,) lumped masses, kg
    pinned: np.ndarray  # (k,) pinned vertex indices
    frames: int
    dt: float
    gravity: np.ndarray  # (3,)
    colliders: list[dict]  # scene colliders, each with per-frame "transforms"
    pin_targets: np.ndarray | None = None  # (frames+1, k, 3) animated pins from the scene
    T: np.ndarray | None = None  # (m, 4) tets: with material, pokes are sized to a strain
    material: object = None  # fem.Material; None: pokes of 2 body weights, drop of 0.1 diag
    # lowest rest height of the points that touch colliders (m): with an embedding cage, the
    # render surface's, which is where the ground belongs; None: the lowest tet node
    bottom_z: float | None = None


class ScenarioDriver:
    """Per-frame inputs of a scenario. Deterministic: same spec, context and seed, same inputs.

    Frame 0 is the initial state; frames 1..frames are stepped.
    """

    def __init__(self, spec: dict, ctx: SceneContext, seed: int) -> None:
        self.spec = validate_scenario(spec)
        self.ctx = ctx
        n = len(ctx.X)
        F = ctx.frames
        rng = np.random.default_rng(seed)
        self.forces = np.zeros((F + 1, n, 3))
        k = len(ctx.pinned)
        if ctx.pin_targets is not None:
            pins = np.asarray(ctx.pin_targets, dtype=np.float64).reshape(-1, k, 3)
            idx = np.minimum(np.arange(F + 1), len(pins) - 1)
            self.pin_targets = pins[idx].copy()
        else:
            self.pin_targets = np.broadcast_to(ctx.X[ctx.pinned], (F + 1, k, 3)).copy()
        self.collider_dicts: list[dict] = [dict(c) for c in ctx.colliders]
        self.x0 = ctx.X.copy()
        self.v0 = np.zeros_like(ctx.X)
        self._ground = False
        self.summary: list[str] = []  # what the scenario does, in words, with its numbers
        self.ground_z: float | None = None  # height of the scenario's ground plane, m
        parts = self.spec["parts"] if self.spec["kind"] == "composite" else [self.spec]
        for part in parts:
            getattr(self, "_" + part["kind"])(part, rng)
            # a pinned object hangs: a ground at its rest bottom would hold it up
            hangs = part["kind"] == "gravity_drop" and len(ctx.pinned) > 0
            self._ground |= bool(part.get("ground", False)) and not hangs
        if self._ground:
            zmin = float(ctx.X[:, 2].min()) if ctx.bottom_z is None else float(ctx.bottom_z)
            self.ground_z = zmin
            M = np.eye(4)
            M[2, 3] = zmin
            self.collider_dicts.append({"kind": "plane", "transforms": [M.tolist()]})
        self.collider_tracks = [
            np.asarray(c.get("transforms", [np.eye(4)]), dtype=np.float64).reshape(-1, 4, 4)
            for c in self.collider_dicts
        ]

    # ------------------------------------------------------------------------- public
    def inputs(self, frame: int) -> FrameInputs:
        """External forces, pin targets and colliders at the end of ``frame``."""
        return FrameInputs(
            forces=self.forces[frame],
            pin_targets=self.pin_targets[frame],
            colliders=self.colliders(frame),
        )

    def colliders(self, frame: int) -> list[Collider]:
        return colliders_from_dicts(self.collider_dicts, frame)

    def collider_matrices(self, frame: int) -> np.ndarray:
        """(c, 4, 4) collider transforms at ``frame``: recorded in the bake, a network input later."""
        if not self.collider_tracks:
            return np.zeros((0, 4, 4))
        return np.stack([t[min(frame, len(t) - 1)] for t in self.collider_tracks])

    # ---------------------------------------------------------------------- scenarios
    def _gravity_drop(self, p: dict, rng: np.random.Generator) -> None:
        ctx = self.ctx
        X = ctx.X
        pinned = len(ctx.pinned) > 0
        c = np.average(X, axis=0, weights=ctx.mass)
        R = _random_rotation(rng) if (p["random_rotation"] and not pinned) else np.eye(3)
        height = 0.0 if pinned else float(p["height"])
        if height < 0:  # automatic: between half and all of the sized height, per variant
            height = drop_height(ctx) * rng.uniform(*DROP_VARIANT_SHARE)
        x0 = (X - c) @ R.T + c
        # the rotated object's bottom starts ``height`` above the rest bottom (the ground)
        lift = np.array([0.0, 0.0, height + float(X[:, 2].min() - x0[:, 2].min())])
        x0 = x0 + lift
        free = np.ones(len(X), dtype=bool)
        free[ctx.pinned] = False
        self.x0[free] = x0[free]
        v = np.broadcast_to(np.asarray(p["initial_velocity"], dtype=float), X.shape).copy()
        jitter = float(p["jitter"])
        if jitter > 0:
            # downward only: variants that differ along directions a linear model of a few
            # bakes spans (a sideways push in a random direction is a new mode per variant)
            v[:, 2] -= jitter * rng.uniform(0.0, 1.0)
        if pinned:
            self.summary.append(
                f"hangs from its pins and sags under gravity, starting with a random downward "
                f"push up to {jitter:g} m/s"
            )
        else:
            ground = " onto a ground plane" if p["ground"] else ""
            turn = ", randomly rotated," if p["random_rotation"] else ""
            self.summary.append(
                f"drops from {height:.2f} m{turn}{ground}, with a random downward push up "
                f"to {jitter:g} m/s"
            )
        if p["spin"]:
            axis = rng.normal(size=3)
            axis /= np.linalg.norm(axis)
            v += np.cross(float(p["spin"]) * axis, x0 - (c + lift))
        self.v0[free] = v[free]

    def _random_pokes(self, p: dict, rng: np.random.Generator) -> None:
        ctx = self.ctx
        F, dt = ctx.frames, ctx.dt
        count = int(p["count"])
        if count < 1:
            return
        diag = _diagonal(ctx.X)
        radius = float(p["radius"]) * diag
        t = np.arange(F + 1) * dt
        window = (F * dt) / count
        duration = min(float(p["duration"]), max(window, dt))
        by_strain = not (p["force"] > 0 or p["strength"] > 0)
        g = float(np.linalg.norm(ctx.gravity)) or 9.81
        calibrate = _PokeCalibration(ctx, duration) if by_strain else None
        reach = float(p["displacement"]) * diag
        # a force on a held vertex does nothing (and a region of held vertices alone has no
        # strain to size a force by): pokes land on the free surface
        surface = ctx.surface[~np.isin(ctx.surface, ctx.pinned)]
        if len(surface) == 0:
            return
        forces, capped = [], 0
        for i in range(count):
            centre = surface[rng.integers(len(surface))]
            # the one poke model (core.poke): a region weighted by mass, a prescribed total
            # force (a sin^2 pulse along a random direction) spread by weight
            idx, w = poke_weights(ctx.X, ctx.X[centre], radius, candidates=surface, mass=ctx.mass)
            direction = rng.normal(size=3)
            direction /= np.linalg.norm(direction)
            start = (i + rng.uniform(0.0, 0.5)) * window
            if calibrate is not None:
                # the smaller of the two sizes: a slender body bends far before it strains
                strain, moved = calibrate.per_newton(idx, w, direction)
                magnitude = float(p["strain"]) / strain
                if reach > 0 and moved * magnitude > reach:
                    magnitude, capped = reach / moved, capped + 1
            elif p["force"] > 0:
                magnitude = float(p["force"])
            else:
                magnitude = float(p["strength"]) * float(ctx.mass.sum()) * g
            forces.append(magnitude)
            s = np.clip((t - start) / duration, 0.0, 1.0)
            envelope = np.sin(np.pi * s) ** 2
            self.forces[:, idx, :] += share(w, envelope[:, None] * magnitude * direction)
        size = (
            f"each reaching about {100 * float(p['strain']):.0f}% strain or a displacement of "
            f"{reach:.2f} m, whichever comes first ({capped} of {count} held to the displacement; "
            f"{min(forces):.3g} to {max(forces):.3g} N)"
            if by_strain
            else f"each with {forces[0]:.3g} N"
        )
        self.summary.append(
            f"is poked {count} times for {duration:.2f} s, {size}, on random spots of "
            f"{radius:.2f} m radius"
        )

    def _keyframed_colliders(self, p: dict, rng: np.random.Generator) -> None:
        ctx = self.ctx
        F = ctx.frames
        diag = _diagonal(ctx.X)
        lo, hi = ctx.X.min(0), ctx.X.max(0)
        centre = 0.5 * (lo + hi)
        reach = float(p["reach"]) * diag
        n_keys = max(1, int(p["keys"]))
        if not ctx.colliders and (p["press"] > 0 or p["speed"] > 0):
            radius = float(p["radius"]) * diag
            start = centre + np.array([0.0, 0.0, 0.5 * (hi - lo)[2] + radius + 0.05 * diag])
            if p["press"] > 0:
                keys, holds = self._press_keys(p, rng, start, radius)
            else:
                keys = [start] + [
                    centre + rng.uniform(-1.0, 1.0, size=3) * (0.5 * (hi - lo) + reach)
                    for _ in range(n_keys)
                ]
                holds = [0.0] * len(keys)
            key_frames, values = _time_keys(
                np.array(keys), np.array(holds), float(p["speed"]), F, ctx.dt, rng
            )
            path = _smooth_keys(key_frames, values, F)
            self._add_sphere(path, radius)
            speed = np.linalg.norm(np.diff(path, axis=0), axis=1).max(initial=0.0) / ctx.dt
            self.summary.append(
                f"is pressed by a sphere of {radius:.3f} m radius through {len(key_frames) - 1} "
                f"keys, at up to {speed:.2f} m/s"
                if p["press"] > 0
                else f"is met by a sphere of {radius:.3f} m radius moving through "
                f"{len(key_frames) - 1} keys at up to {speed:.2f} m/s"
            )
        elif not ctx.colliders:
            radius = float(p["radius"]) * diag
            key_frames = np.sort(
                rng.choice(np.arange(1, F + 1), size=min(n_keys, F), replace=False)
            )
            key_frames = np.concatenate([[0], key_frames])
            # start clear of the object, then wander through and around it
            start = centre + np.array([0.0, 0.0, 0.5 * (hi - lo)[2] + radius + 0.05 * diag])
            keys = [start] + [
                centre + rng.uniform(-1.0, 1.0, size=3) * (0.5 * (hi - lo) + reach)
                for _ in key_frames[1:]
            ]
            self._add_sphere(_smooth_keys(key_frames, np.array(keys), F), radius)
        if p["move_pins"] and len(ctx.pinned):
            key_frames = np.concatenate(
                [[0], np.sort(rng.choice(np.arange(1, F + 1), size=min(n_keys, F), replace=False))]
            )
            amp = float(p["pin_amplitude"]) * diag
            offs = np.vstack([np.zeros(3), rng.uniform(-amp, amp, size=(len(key_frames) - 1, 3))])
            self.pin_targets += _smooth_keys(key_frames, offs, F)[:, None, :]

    def _add_sphere(self, path: np.ndarray, radius: float) -> None:
        """A generated sphere collider whose centre follows ``path`` (F+1, 3)."""
        mats = np.tile(np.eye(4), (len(path), 1, 1))
        mats[:, :3, 3] = path
        self.collider_dicts.append(
            {"kind": "sphere", "radius": radius, "half_length": 0.0, "transforms": mats.tolist()}
        )

    def _press_keys(
        self, p: dict, rng: np.random.Generator, start: np.ndarray, radius: float
    ) -> tuple[list, list]:
        """The sphere's key positions (and rest times, s) for ``keys`` presses: per press, a
        point :data:`PRESS_CLEARANCE` diagonals clear of a random free surface spot along its
        outward normal, the sphere sunk into the rest surface there (by half to all of
        ``press`` diagonals), optionally slid to a spot nearby on the same side, and backed
        out along the normal; between presses it goes around the object, never through it."""
        ctx = self.ctx
        X = ctx.X
        diag = _diagonal(X)
        normals = _surface_normals(X, ctx.T, ctx.surface)
        spots = ctx.surface[~np.isin(ctx.surface, ctx.pinned)]
        if len(ctx.pinned):
            # a press from the side of the pins would crush the sphere into the clamp
            towards = X[ctx.pinned].mean(0) - X.mean(0)
            if np.linalg.norm(towards) > 1e-9 * diag:
                towards /= np.linalg.norm(towards)
                facing = spots[normals[spots] @ towards < 0.5]
                spots = facing if len(facing) else spots
        if len(spots) == 0:
            raise NeuralRomError(
                "keyframed_colliders with 'press' needs a free surface vertex to press; "
                "every surface vertex is pinned."
            )
        clear = radius + PRESS_CLEARANCE * diag
        tree = cKDTree(X)
        keys, holds = [start], [0.0]
        for _ in range(max(1, int(p["keys"]))):
            s = spots[rng.integers(len(spots))]
            depth = float(p["press"]) * diag * rng.uniform(0.5, 1.0)
            approach = X[s] + normals[s] * clear
            for point in _around(keys[-1], approach, X, tree, radius):
                keys.append(point)
                holds.append(0.0)
            keys += [approach, X[s] + normals[s] * (radius - depth)]
            holds += [0.0, float(p["hold"])]
            if p["slide"] > 0:
                near = spots[
                    (np.linalg.norm(X[spots] - X[s], axis=1) <= float(p["slide"]) * diag)
                    & (normals[spots] @ normals[s] > 0.9)
                ]
                s = near[rng.integers(len(near))]  # s itself is near
                keys.append(X[s] + normals[s] * (radius - depth))
                holds.append(float(p["hold"]))
            keys.append(X[s] + normals[s] * clear)
            holds.append(0.0)
        return keys, holds

    def _replay_forces(self, p: dict, rng: np.random.Generator) -> None:
        src_X, src_F = _load_force_source(p["source"])
        ctx = self.ctx
        nearest = cKDTree(src_X).query(ctx.X)[1]
        # spread each source force over the target vertices nearest to it, by mass
        share = ctx.mass / np.bincount(nearest, weights=ctx.mass, minlength=len(src_X))[nearest]
        frames = min(len(src_F), ctx.frames + 1)
        self.forces[:frames] += (
            float(p["scale"]) * src_F[:frames, nearest, :] * share[None, :, None]
        )


def material_drop_height(
    youngs_modulus: float, density: float, g: float = 9.81, strain: float = DROP_STRAIN
) -> float:
    """``H = E eps^2 / (2 rho g)``, metres: the fall whose impact energy ``m g H`` is the strain
    energy ``E eps^2 V / 2`` of a uniform compression ``eps`` (before :func:`drop_height`'s
    clamps). ``youngs_modulus`` in Pa, ``density`` in kg/m^3, ``g`` in m/s^2."""
    return float(youngs_modulus) * strain**2 / (2.0 * float(density) * g)


def drop_height(ctx: SceneContext, strain: float = DROP_STRAIN) -> float:
    """The automatic drop height, metres: :func:`material_drop_height`, within
    :data:`DROP_HEIGHT_DIAGONALS` bounding-box diagonals and low enough that a fall from rest
    lands within the first :data:`DROP_LANDS_WITHIN` of the bake."""
    diag = _diagonal(ctx.X)
    g = float(np.linalg.norm(ctx.gravity)) or 9.81
    lo, hi = DROP_HEIGHT_DIAGONALS[0] * diag, DROP_HEIGHT_DIAGONALS[1] * diag
    if ctx.material is None:
        H = lo
    else:
        E = float(np.mean(ctx.material.youngs_modulus))
        rho = float(np.mean(ctx.material.density))
        H = material_drop_height(E, rho, g, strain)
    fall = DROP_LANDS_WITHIN * ctx.frames * ctx.dt
    return float(min(max(H, lo), hi, 0.5 * g * fall**2))


class _PokeCalibration:
    """Largest linear strain per newton of a poke (see the module docstring).

    Static: ``K u = f`` with the rest Hessian ``K``, pinned vertices held. A free body's
    poke is balanced by its rigid acceleration (d'Alembert: ``f_i - m_i (a + alpha x r_i)``),
    and a tiny ``delta M`` fixes its rigid motions, which have no linear strain. Factorized
    once per bake.
    """

    def __init__(self, ctx: SceneContext, duration: float) -> None:
        import scipy.sparse as sp
        import scipy.sparse.linalg as spla

        from ..physics.fem import TetFEM

        self.ctx = ctx
        if ctx.material is None or ctx.T is None:
            self.solve = None
            return
        fem = TetFEM(ctx.X, ctx.T, ctx.material)
        n = len(ctx.X)
        K = fem.hessian(ctx.X, project=True)
        delta = 1e-8 * float(K.diagonal().mean()) / float(ctx.mass.mean())
        A = (K + sp.diags(np.repeat(delta * ctx.mass, 3))).tocsc()
        free = np.ones(3 * n, dtype=bool)
        free[(3 * np.asarray(ctx.pinned)[:, None] + np.arange(3)).ravel()] = False
        self.free = free
        self.solve = spla.factorized(A[free][:, free].tocsc())
        self.fem = fem
        m = ctx.mass
        self.c = np.average(ctx.X, axis=0, weights=m)
        r = ctx.X - self.c
        self.J = np.einsum("i,ij,ik->jk", m, r, r)
        self.J = np.trace(self.J) * np.eye(3) - self.J

    def per_newton(
        self, idx: np.ndarray, w: np.ndarray, direction: np.ndarray
    ) -> tuple[float, float]:
        """Largest linear strain and largest displacement (m) of a poke of one newton on
        ``idx`` with weights ``w`` along ``direction``; the displacement is 0 without a
        material (then nothing caps it)."""
        ctx = self.ctx
        if self.solve is None:  # no material: the old rule, two body weights
            g = float(np.linalg.norm(ctx.gravity)) or 9.81
            return 0.2 / (2.0 * float(ctx.mass.sum()) * g), 0.0
        f = np.zeros((len(ctx.X), 3))
        f[idx] = share(w, direction)
        if len(ctx.pinned) == 0:  # balanced by the rigid acceleration it gives
            m = ctx.mass
            r = ctx.X - self.c
            a = f.sum(0) / m.sum()
            alpha = np.linalg.solve(self.J, np.cross(r, f).sum(0))
            f = f - m[:, None] * (a + np.cross(alpha, r))
        u = np.zeros(3 * len(ctx.X))
        u[self.free] = self.solve(f.ravel()[self.free])
        from ..physics.fem import deformation_gradient

        G = deformation_gradient(ctx.X + u.reshape(-1, 3), self.fem.T, self.fem.Dm_inv)
        G = G - np.eye(3)
        eps = np.linalg.eigvalsh(0.5 * (G + G.transpose(0, 2, 1)))  # (m, 3)
        reach = float(np.linalg.norm(u.reshape(-1, 3), axis=1).max())
        return float(np.abs(eps).max()) or 1e-12, reach


def describe(spec: dict) -> str:
    """What a scenario does, in words, before the object is known (the panel, ``--help``)."""
    spec = validate_scenario(spec)
    if spec["kind"] == "composite":
        return "; ".join(describe(p) for p in spec["parts"])
    k = spec["kind"]
    ground = (
        " onto a ground plane at the lowest point of its rest surface" if spec["ground"] else ""
    )
    if k == "gravity_drop":
        h = spec["height"]
        lo, hi = DROP_VARIANT_SHARE
        height = (
            f"a height sized from its size and material (each variant from {_share(lo)} to "
            f"{_share(hi)} of it)"
            if h < 0
            else f"{h:g} m"
        )
        turn = ", randomly rotated," if spec["random_rotation"] else ""
        return (
            f"Drops the object from {height}{turn}{ground}, with a random downward push up "
            f"to {spec['jitter']:g} m/s per variant; a pinned object hangs and sags instead "
            "(no ground)."
        )
    if k == "random_pokes":
        size = (
            f"each strong enough to reach about {100 * spec['strain']:.0f}% strain or to move "
            f"it by {spec['displacement']:g} of its diagonal, whichever comes first"
            if not (spec["force"] > 0 or spec["strength"] > 0)
            else (
                f"each {spec['force']:g} N"
                if spec["force"] > 0
                else f"each {spec['strength']:g} times its weight"
            )
        )
        return (
            f"Pokes the object {spec['count']} times at random spots, {spec['duration']:g} s "
            f"each, {size}{ground}."
        )
    if k == "keyframed_colliders":
        pace = f" at up to {spec['speed']:g} m/s" if spec["speed"] > 0 else ""
        if spec["press"] > 0:
            rest = f", resting {spec['hold']:g} s" if spec["hold"] > 0 else ""
            slide = (
                f", sliding up to {spec['slide']:g} of its diagonal" if spec["slide"] > 0 else ""
            )
            what = (
                f"Presses a sphere {spec['keys']} times into random free spots of the object's "
                f"surface, up to {spec['press']:g} of its diagonal deep{pace}{rest}{slide}"
            )
        else:
            what = f"Moves a sphere through {spec['keys']} random keys around and through the object{pace}"
        return (
            what
            + " (the scene's Collider objects, with their own animation, when there are any)"
            + (", and the pins too" if spec["move_pins"] else "")
            + f"{ground}."
        )
    return f"Replays forces recorded on another bake onto this mesh{ground}."


def defaults_help() -> str:
    """Every scenario kind, what it does with its defaults and each parameter's default, unit
    and meaning, and how the automatic sizes follow from the object (``bake --help``)."""
    from ..physics.fem import PRESETS

    heights = {
        n: material_drop_height(p["youngs_modulus"], p["density"]) for n, p in PRESETS.items()
    }
    drops = ", ".join(f"{n.replace('_', '-')} {_metres(h)}" for n, h in heights.items())
    lo, hi = DROP_HEIGHT_DIAGONALS
    sizing = {
        "gravity_drop": (
            f"The automatic height (height -1) is H = E eps^2 / (2 rho g) with eps = "
            f"{DROP_STRAIN:g}: the impact's energy would compress the object by about "
            f"{100 * DROP_STRAIN:.0f}% (E: Young's modulus, rho: density, g: gravity, "
            f"9.81 m/s^2; {drops}), kept within {lo:g} to {hi:g} bounding-box diagonals and "
            f"low enough that the fall lands within the first {100 * DROP_LANDS_WITHIN:.0f}% of the bake; "
            f"each variant drops from {_share(DROP_VARIANT_SHARE[0])} to "
            f"{_share(DROP_VARIANT_SHARE[1])} of it."
        ),
        "random_pokes": (
            "A poke's force is sized on the linearized body (the rest stiffness solved for the "
            "poke, pins held, a free body's poke balanced by its rigid acceleration) so that "
            "its largest strain is 'strain', or its largest displacement 'displacement' "
            "bounding-box diagonals when that comes first: a slender pinned body (a tentacle, "
            "a tail) bends far before it strains, a compact one strains first. Pokes land on "
            "the free surface, never on pinned vertices."
        ),
    }
    blocks = []
    for kind in SCENARIO_KINDS:
        default = default_scenario(kind)
        title = kind + (" (the default scenario)" if kind == SCENARIO_KINDS[0] else "")
        lines = [title, *_wrap(describe(default) + " " + sizing.get(kind, ""), "  ")]
        for key, (unit, text) in PARAMETER_HELP[kind].items():
            value = _value_text(default[key])
            lines += _wrap(f"{key} = {value}{' ' + unit if unit else ''}: {text}", "    ", "      ")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _value_text(value) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:g}"


def _share(x: float) -> str:
    return {0.5: "half", 1.0: "all"}.get(float(x), f"{x:g}")


def _metres(h: float) -> str:
    return f"{h:.2f} m" if h >= 1 else (f"{100 * h:.1f} cm" if h >= 0.01 else f"{1000 * h:.1f} mm")


def _wrap(text: str, indent: str, subsequent: str | None = None) -> list[str]:
    import textwrap

    return textwrap.wrap(
        text.strip(), width=88, initial_indent=indent, subsequent_indent=subsequent or indent
    )


def _diagonal(X: np.ndarray) -> float:
    d = float(np.linalg.norm(X.max(0) - X.min(0)))
    return d if d > 0 else 1.0


def _random_rotation(rng: np.random.Generator) -> np.ndarray:
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    w, x, y, z = q
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
            [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
            [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
        ]
    )


def _smooth_keys(key_frames: np.ndarray, values: np.ndarray, F: int) -> np.ndarray:
    """Per-frame values (F+1, 3) that ease (smoothstep) from key to key and hold after the last."""
    out = np.empty((F + 1, values.shape[1]))
    f = np.arange(F + 1)
    seg = np.clip(np.searchsorted(key_frames, f, side="right") - 1, 0, len(key_frames) - 1)
    nxt = np.minimum(seg + 1, len(key_frames) - 1)
    span = np.maximum(key_frames[nxt] - key_frames[seg], 1)
    s = np.clip((f - key_frames[seg]) / span, 0.0, 1.0)
    s = s * s * (3 - 2 * s)
    out[:] = (1 - s)[:, None] * values[seg] + s[:, None] * values[nxt]
    return out


def _surface_normals(X: np.ndarray, T: np.ndarray | None, surface: np.ndarray) -> np.ndarray:
    """(n, 3) unit outward normals at the surface vertices (area-weighted over the boundary
    triangles of the tets ``T``; without tets, the direction from the bounding box's centre),
    zero elsewhere."""
    if T is None:
        d = X - 0.5 * (X.min(0) + X.max(0))
    else:
        from ..geometry.tetmesh import TetMesh

        F = TetMesh(X, np.asarray(T)).boundary_faces()
        a = np.cross(X[F[:, 1]] - X[F[:, 0]], X[F[:, 2]] - X[F[:, 0]])  # 2 x area, outward
        d = np.zeros_like(X)
        for j in range(3):
            np.add.at(d, F[:, j], a)
    out = np.zeros_like(X)
    length = np.linalg.norm(d[surface], axis=1, keepdims=True)
    out[surface] = d[surface] / np.maximum(length, 1e-300)
    return out


def _around(
    a: np.ndarray, b: np.ndarray, X: np.ndarray, tree: cKDTree, radius: float
) -> list[np.ndarray]:
    """Waypoints (not ``a`` or ``b``) that take a sphere of ``radius`` from ``a`` to ``b``
    around the points ``X`` instead of through them: none when the straight segment stays
    ``radius`` clear of every point; else ``a`` and ``b`` lifted onto the ball about the
    points' centre that clears them all, and the arc between, in steps of at most 30 degrees
    (a straight step between them then stays clear too)."""
    samples = a + np.linspace(0.0, 1.0, 33)[:, None] * (b - a)
    if tree.query(samples)[0].min() >= radius:
        return []
    c = 0.5 * (X.min(0) + X.max(0))
    R = (float(np.linalg.norm(X - c, axis=1).max()) + radius) / np.cos(np.radians(15.0))
    ua, ub = a - c, b - c
    ua /= max(np.linalg.norm(ua), 1e-300)
    ub /= max(np.linalg.norm(ub), 1e-300)
    mid = ua + ub
    if np.linalg.norm(mid) < 1e-6:  # opposite sides: over the top
        mid = np.array([0.0, 0.0, 1.0]) - ua[2] * ua
        if np.linalg.norm(mid) < 1e-6:
            mid = np.array([1.0, 0.0, 0.0])
    mid /= np.linalg.norm(mid)
    out = []
    for u0, u1 in ((ua, mid), (mid, ub)):
        angle = float(np.arccos(np.clip(u0 @ u1, -1.0, 1.0)))
        steps = max(1, int(np.ceil(angle / np.radians(30.0))))
        for t in np.linspace(0.0, 1.0, steps + 1)[: -1 if u1 is mid else None]:
            u = (np.sin((1 - t) * angle) * u0 + np.sin(t * angle) * u1) / max(np.sin(angle), 1e-12)
            if angle < 1e-9:
                u = u0
            out.append(c + R * u / np.linalg.norm(u))
    return out


def _time_keys(
    keys: np.ndarray, holds: np.ndarray, speed: float, F: int, dt: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Key frames and values for :func:`_smooth_keys` from key positions (K, 3) and the rest
    time at each (s). With ``speed`` (m/s) > 0 each segment takes the frames in which its
    smoothstep, whose peak is 1.5x its mean speed, stays within ``speed``, a rest adds a
    repeated key; the keys beyond frame ``F`` are dropped but the first (the path heads for
    it). Else the keys (rests ignored) land on random frames, as the random keys do."""
    if speed <= 0:
        frames = np.sort(rng.choice(np.arange(1, F + 1), size=min(len(keys) - 1, F), replace=False))
        return np.concatenate([[0], frames]), keys[: len(frames) + 1]
    frames, values = [0], [keys[0]]
    for k in range(1, len(keys)):
        if frames[-1] >= F:
            break
        dist = float(np.linalg.norm(keys[k] - keys[k - 1]))
        frames.append(frames[-1] + max(1, int(np.ceil(1.5 * dist / (speed * dt)))))
        values.append(keys[k])
        if holds[k] > 0 and frames[-1] < F:
            frames.append(frames[-1] + max(1, int(round(holds[k] / dt))))
            values.append(keys[k])
    return np.array(frames), np.array(values)


def _load_force_source(source: str) -> tuple[np.ndarray, np.ndarray]:
    if not source:
        raise NeuralRomError(
            "replay_forces needs 'source': a bake with recorded forces (.nrbake) or an .npz with X and forces."
        )
    path = Path(source)
    if not path.exists():
        raise NeuralRomError(f"Force recording {path} does not exist; bake or record it first.")
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as d:
            if "X" not in d or "forces" not in d:
                raise NeuralRomError(f"{path} needs arrays 'X' (k, 3) and 'forces' (frames, k, 3).")
            X, F = np.asarray(d["X"], float), np.asarray(d["forces"], float)
    else:
        from ..data.cache import BakeCache

        cache = BakeCache.open(path)
        X, F = np.asarray(cache.X, float), np.asarray(cache.channel("forces"), float)
    if F.ndim != 3 or F.shape[1:] != X.shape or X.ndim != 2 or X.shape[1] != 3:
        raise NeuralRomError(
            f"Force recording {path}: forces {F.shape} do not match vertices {X.shape}."
        )
    return X, F
