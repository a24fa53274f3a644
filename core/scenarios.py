"""Training scenarios: what happens to the object during a bake.

A scenario is a JSON-able dict ``{"kind": ..., <parameters>}``; :func:`default_scenario`
lists every parameter with its default. Scenarios are deterministic given the bake seed,
and compose: ``{"kind": "composite", "parts": [spec, spec, ...]}`` sums the forces and
merges the colliders and pin motions of its parts.

Kinds
-----
gravity_drop
    The object starts lifted by ``height`` (m), optionally randomly rotated and spinning,
    with an initial velocity, and falls onto a ground plane at its rest bottom (``ground``).
    With pins it sags instead.
random_pokes
    Scripted random forces on random surface regions (Shen et al. 2021, section 6.1): a
    random surface vertex, its neighbours within ``radius``, a random direction, a smooth
    force pulse of ``strength`` body weights (or ``force`` newtons) for ``duration`` s.
keyframed_colliders
    Colliders and pins keyframed to random positions at random times (Holden et al. 2019,
    section 4). Without scene colliders a sphere is made; with ``move_pins`` the pinned
    vertices follow random rigid translations. The collider state is recorded each frame.
replay_forces
    Recorded interaction forces replayed onto this (finer) mesh (Fulton et al. 2019,
    section 4.4): ``source`` is a bake with a ``forces`` channel, or an .npz with ``X``
    (k, 3) and ``forces`` (frames, k, 3). Each source vertex's force is spread over the
    target vertices nearest to it, in proportion to their mass, so the total force of each
    source vertex (and hence of the whole recording) is preserved.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree

from .colliders import Collider, colliders_from_dicts
from .errors import NeuralRomError
from .poke import poke_weights, share
from .sim import FrameInputs

SCENARIO_KINDS = ("gravity_drop", "random_pokes", "keyframed_colliders", "replay_forces")

_DEFAULTS: dict[str, dict] = {
    "gravity_drop": {
        "height": 0.0,  # m the object starts above its rest position
        "random_rotation": False,  # start in a random orientation
        "initial_velocity": [0.0, 0.0, 0.0],  # m/s
        "spin": 0.0,  # rad/s about a random axis
        "ground": True,  # a ground plane at the rest bottom of the object
    },
    "random_pokes": {
        "count": 4,  # pokes per bake, spread over the frames
        "radius": 0.15,  # region radius, fraction of the object's bounding-box diagonal
        "strength": 2.0,  # total poke force in body weights (m g); ignored when force > 0
        "force": 0.0,  # total poke force, newtons (0: use strength)
        "duration": 0.5,  # seconds each poke lasts (smooth sin^2 pulse)
        "ground": False,
    },
    "keyframed_colliders": {
        "keys": 4,  # random keyframes per bake
        "radius": 0.25,  # generated sphere radius, fraction of the bounding-box diagonal
        "reach": 0.6,  # how far keys wander, fraction of the diagonal, around the object
        "move_pins": False,  # pins follow random rigid translations too
        "pin_amplitude": 0.2,  # fraction of the diagonal
        "ground": False,
    },
    "replay_forces": {
        "source": "",  # path to a bake (.nrbake) with a forces channel, or an .npz
        "scale": 1.0,
        "ground": False,
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
        parts = self.spec["parts"] if self.spec["kind"] == "composite" else [self.spec]
        for part in parts:
            getattr(self, "_" + part["kind"])(part, rng)
            self._ground |= bool(part.get("ground", False))
        if self._ground:
            zmin = float(ctx.X[:, 2].min())
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
        X = self.ctx.X
        c = np.average(X, axis=0, weights=self.ctx.mass)
        R = _random_rotation(rng) if p["random_rotation"] else np.eye(3)
        lift = np.array([0.0, 0.0, float(p["height"])])
        free = np.ones(len(X), dtype=bool)
        free[self.ctx.pinned] = False
        x0 = (X - c) @ R.T + c + lift
        self.x0[free] = x0[free]
        v = np.broadcast_to(np.asarray(p["initial_velocity"], dtype=float), X.shape).copy()
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
        total_weight = float(ctx.mass.sum() * (np.linalg.norm(ctx.gravity) or 9.81))
        magnitude = float(p["force"]) if p["force"] > 0 else float(p["strength"]) * total_weight
        t = np.arange(F + 1) * dt
        window = (F * dt) / count
        for i in range(count):
            centre = ctx.surface[rng.integers(len(ctx.surface))]
            # the one poke model (core.poke): a region weighted by mass, a prescribed total
            # force (a sin^2 pulse along a random direction) spread by weight
            idx, w = poke_weights(
                ctx.X, ctx.X[centre], radius, candidates=ctx.surface, mass=ctx.mass
            )
            direction = rng.normal(size=3)
            direction /= np.linalg.norm(direction)
            start = (i + rng.uniform(0.0, 0.5)) * window
            duration = min(float(p["duration"]), max(window, dt))
            s = np.clip((t - start) / duration, 0.0, 1.0)
            envelope = np.sin(np.pi * s) ** 2
            self.forces[:, idx, :] += share(w, envelope[:, None] * magnitude * direction)

    def _keyframed_colliders(self, p: dict, rng: np.random.Generator) -> None:
        ctx = self.ctx
        F = ctx.frames
        diag = _diagonal(ctx.X)
        lo, hi = ctx.X.min(0), ctx.X.max(0)
        centre = 0.5 * (lo + hi)
        reach = float(p["reach"]) * diag
        n_keys = max(1, int(p["keys"]))
        if not ctx.colliders:
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
            path = _smooth_keys(key_frames, np.array(keys), F)
            mats = np.tile(np.eye(4), (F + 1, 1, 1))
            mats[:, :3, 3] = path
            self.collider_dicts.append(
                {
                    "kind": "sphere",
                    "radius": radius,
                    "half_length": 0.0,
                    "transforms": mats.tolist(),
                }
            )
        if p["move_pins"] and len(ctx.pinned):
            key_frames = np.concatenate(
                [[0], np.sort(rng.choice(np.arange(1, F + 1), size=min(n_keys, F), replace=False))]
            )
            amp = float(p["pin_amplitude"]) * diag
            offs = np.vstack([np.zeros(3), rng.uniform(-amp, amp, size=(len(key_frames) - 1, 3))])
            self.pin_targets += _smooth_keys(key_frames, offs, F)[:, None, :]

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
        from .cache import BakeCache

        cache = BakeCache.open(path)
        X, F = np.asarray(cache.X, float), np.asarray(cache.channel("forces"), float)
    if F.ndim != 3 or F.shape[1:] != X.shape or X.ndim != 2 or X.shape[1] != 3:
        raise NeuralRomError(
            f"Force recording {path}: forces {F.shape} do not match vertices {X.shape}."
        )
    return X, F
