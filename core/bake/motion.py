"""Training motion drawn from the user's own animation (no bpy, no torch).

A bake teaches a model only the motions it shows. A cloth on a character is driven by the
character's walk, turn and stop, not by random keys; so a bake can draw each variant's
motion from the user's animation of the thing the cloth hangs from (its *owner*, an object
or an armature bone), sampled per frame as world transforms by Blender
(:mod:`addon.clothbake`), and perturbed here with a seed, so that every variant is a motion
of the same character that no other variant contains (whole variants can be held out).

Conventions: a *track* is an ``(F, 4, 4)`` array of rigid world transforms, one per frame
(scale divided out, :func:`core.clothbake.rigid`), of the owner's frame; the world's up is
``+Z`` (Blender's). Times are in frames of the track.

The perturbation (:func:`perturb`) rebuilds the motion from the source's *body-frame
increments* ``B_t = M(s_{t-1})^-1 M(s_t)`` at a warped source time ``s_t``: composed back,
``M'_t = Y_t M'_{t-1} B'_t`` reproduces the source exactly when nothing is perturbed
(``M'_t = M'_0 M(s_0)^-1 M(s_t)``), and each perturbation is a change to one factor:

* **time warp, speed changes**: ``s_t = s_{t-1} + v_t`` with ``v_t`` the variant's speed
  (a factor in :attr:`Perturbation.speed`) times a smooth random wobble; past the end of the
  source it plays on looped (a walk cycle keeps walking: the loop continues from the last
  frame's pose);
* **stops and starts**: ``v_t`` ramps to zero for a stretch and back up (the character
  stands, then walks on); every variant starts from rest (``v`` ramps up over
  :attr:`Perturbation.ramp` frames: Blender's cloth starts at rest) and from the source's
  first pose, where the user put the owner;
* **reversed stretches** (FEM bakes: :attr:`Perturbation.reverse`): ``v_t`` turns smoothly
  through zero to backwards for a stretch and back (the swing turns back early);
* **amplitude scales**: ``B'_t`` is ``B_t`` with its translation scaled by one factor and
  its rotation angle by another (a longer stride, a stronger sway);
* **turns**: ``Y_t`` turns the previous pose about the world up axis through its own
  position by a smooth random yaw rate, so the character walks on in the new heading.

:func:`motion_distance` measures how far two tracks are apart as the cloth feels them
(body-frame velocities, invariant to where and which way the whole track goes, minimised
over time shifts): what a test asserts to say a held-out variant is not a training one.
This module is meant for FEM bakes too (a soft body carried by a character): a bake samples
its owner, perturbs, and keys the result.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from ..errors import NeuralRomError

__all__ = [
    "MotionError",
    "Perturbation",
    "body_velocities",
    "describe_draws",
    "draw_pins",
    "motion_distance",
    "name_salt",
    "perturb",
    "plot_variants",
    "sample",
]

_UP = np.array([0.0, 0.0, 1.0])


class MotionError(NeuralRomError):
    """A track cannot be used as a source of training motion."""


@dataclass(frozen=True)
class Perturbation:
    """The ranges a variant's perturbation is drawn from (uniformly, seeded).

    Attributes
    ----------
    speed : (lo, hi) factor on the source's playback speed (a time warp of the whole motion)
    wobble : relative amplitude of the smooth speed changes along a variant (0: constant)
    stop : probability that a variant stops for a stretch and starts again
    stop_frames : (lo, hi) frames a stop lasts (ramps included)
    ramp : frames over which a variant starts from rest (and a stop slows and speeds up)
    stride : (lo, hi) factor on the translation of every frame's body-frame increment
    sway : (lo, hi) factor on the rotation angle of every frame's body-frame increment
    reverse : probability that a variant plays a stretch of the source backwards (a swing
        that turns back early; 0 for a walk, which does not walk backwards)
    reverse_frames : (lo, hi) frames a reversed stretch lasts (ramps included)
    turn : the largest extra heading turn rate, rad per second (a smooth random yaw rate
        within +-turn, with a random sign)
    """

    speed: tuple = (0.6, 1.5)
    wobble: float = 0.25
    stop: float = 0.5
    stop_frames: tuple = (20, 50)
    reverse: float = 0.0
    reverse_frames: tuple = (12, 30)
    ramp: int = 8
    stride: tuple = (0.7, 1.3)
    sway: tuple = (0.6, 1.4)
    turn: float = 0.8

    def to_dict(self) -> dict:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def _check_track(M: np.ndarray, name: str) -> np.ndarray:
    M = np.asarray(M, dtype=np.float64)
    if M.ndim != 3 or M.shape[1:] != (4, 4) or len(M) < 2:
        raise MotionError(f"{name} must be (F, 4, 4) world transforms with F >= 2, got {M.shape}.")
    if not np.all(np.isfinite(M)):
        raise MotionError(f"{name} has non-finite transforms: check the owner's animation.")
    return M


def sample(track: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``(len(s), 4, 4)``: the track at fractional frames ``s`` (>= 0): translations linearly,
    rotations along the shortest arc between the two frames around; past the last frame the
    track plays on looped, each loop carried by the whole track's motion
    ``M(L) M(0)^-1`` (continuous in pose: a walk cycle walks on)."""
    M = _check_track(track, "the track")
    s = np.asarray(s, dtype=np.float64)
    if np.any(s < 0):
        raise MotionError("sample: times must be >= 0")
    L = len(M) - 1
    k = np.floor(s / L).astype(int)
    r = s - k * L
    i = np.minimum(np.floor(r).astype(int), L - 1)
    w = r - i
    a, b = M[i], M[i + 1]
    rel = Rotation.from_matrix(np.einsum("fji,fjk->fik", a[:, :3, :3], b[:, :3, :3]))
    out = np.zeros((len(s), 4, 4))
    out[:, 3, 3] = 1.0
    out[:, :3, :3] = a[:, :3, :3] @ Rotation.from_rotvec(rel.as_rotvec() * w[:, None]).as_matrix()
    out[:, :3, 3] = (1 - w)[:, None] * a[:, :3, 3] + w[:, None] * b[:, :3, 3]
    if np.any(k > 0):
        D = M[L] @ np.linalg.inv(M[0])
        for n in np.unique(k[k > 0]):
            out[k == n] = np.linalg.matrix_power(D, int(n)) @ out[k == n]
    return out


def _smooth_noise(rng: np.random.Generator, n: int, period: float) -> np.ndarray:
    """(n,) a smooth random signal in about [-1, 1]: a cubic interpolation of uniform knots
    ``period`` frames apart."""
    knots = max(2, int(np.ceil(n / max(period, 1.0))) + 2)
    v = rng.uniform(-1.0, 1.0, knots)
    x = np.arange(n) / max(period, 1.0)
    i = np.minimum(np.floor(x).astype(int), knots - 2)
    t = x - i
    h = t * t * (3 - 2 * t)  # smoothstep: zero slope at the knots
    return (1 - h) * v[i] + h * v[i + 1]


def _ramp(t: np.ndarray, width: float) -> np.ndarray:
    u = np.clip(t / max(width, 1e-9), 0.0, 1.0)
    return u * u * (3 - 2 * u)


def perturb(
    track: np.ndarray,
    frames: int,
    rng: np.random.Generator,
    dt: float,
    settings: Perturbation | None = None,
) -> tuple[np.ndarray, dict]:
    """One variant of the source ``track`` (module docstring).

    Parameters
    ----------
    track : (F, 4, 4) rigid world transforms of the owner, one per frame of its animation
    frames : the variant's frames after the first (the result has ``frames + 1``)
    rng : the variant's generator (seeded by the caller: seed and variant)
    dt : seconds per frame (the turn rate is per second)
    settings : the ranges (:class:`Perturbation`); default ranges when None

    Returns
    -------
    (frames + 1, 4, 4) rigid world transforms, the first the source's first; and the draws
    (JSON-able: speed, stride, sway, turn rate, the stop's frames or None, the source time
    reached) for the bake's metadata.
    """
    p = settings or Perturbation()
    M = _check_track(track, "the owner's animation")
    T = int(frames) + 1
    t = np.arange(T, dtype=np.float64)
    speed = float(rng.uniform(*p.speed))
    v = speed * (1.0 + p.wobble * _smooth_noise(rng, T, 30.0))
    v *= _ramp(t, p.ramp)  # start from rest
    stop = None
    if rng.uniform() < p.stop and T > 2 * p.ramp + p.stop_frames[0]:
        length = int(rng.integers(p.stop_frames[0], p.stop_frames[1] + 1))
        length = min(length, T - 2 * p.ramp - 1)
        a = int(rng.integers(p.ramp, T - length))
        b = a + length
        v *= np.maximum(_ramp(a + p.ramp - t, p.ramp), _ramp(t - (b - p.ramp), p.ramp))
        stop = [a, b]
    v = np.maximum(v, 0.0)
    v[0] = 0.0
    reverse = None
    # (no draw at all when reverse is 0: the cloth bake's variants stay what they were)
    if p.reverse > 0 and rng.uniform() < p.reverse and T > 2 * p.ramp + p.reverse_frames[0]:
        length = int(rng.integers(p.reverse_frames[0], p.reverse_frames[1] + 1))
        length = min(length, T - 2 * p.ramp - 1)
        a = int(rng.integers(p.ramp, T - length))
        b = a + length
        # the speed turns smoothly through zero to backwards and back: w from 1 to -1 to 1
        w = 1.0 - 2.0 * np.minimum(_ramp(t - a, p.ramp), _ramp(b - t, p.ramp))
        v = v * w
        reverse = [a, b]
    s = np.maximum(np.cumsum(v), 0.0)  # never before the source's first frame
    stride = float(rng.uniform(*p.stride))
    sway = float(rng.uniform(*p.sway))
    yaw_rate = p.turn * dt * _smooth_noise(rng, T, 60.0) * np.sign(rng.uniform(-1, 1))
    yaw_rate *= np.abs(v) / max(speed, 1e-9)  # a standing character does not turn on its own
    S = sample(M, s)
    B = np.linalg.inv(S[:-1]) @ S[1:]  # body-frame increments
    rot = Rotation.from_matrix(B[:, :3, :3]).as_rotvec() * sway
    B[:, :3, :3] = Rotation.from_rotvec(rot).as_matrix()
    B[:, :3, 3] *= stride
    out = np.empty((T, 4, 4))
    out[0] = M[0]
    for f in range(1, T):
        prev = out[f - 1]
        Y = np.eye(4)
        Y[:3, :3] = Rotation.from_rotvec(_UP * yaw_rate[f]).as_matrix()
        Y[:3, 3] = prev[:3, 3] - Y[:3, :3] @ prev[:3, 3]  # about the up axis through it
        out[f] = Y @ prev @ B[f - 1]
    draws = {
        "speed": speed,
        "stride": stride,
        "sway": sway,
        "turn_rate_max": float(np.abs(yaw_rate).max() / dt),
        "stop": stop,
        "reverse": reverse,
        "source_frames": float(s[-1]),
    }
    return out, draws


def body_velocities(track: np.ndarray, dt: float, length: float) -> np.ndarray:
    """(F - 1, 6): each frame's body-frame linear velocity (m/s) and angular velocity times
    ``length`` (m/s): the motion as a body carried by the track feels it, whatever the
    track's place and heading in the world."""
    M = _check_track(track, "the track")
    B = np.linalg.inv(M[:-1]) @ M[1:]
    w = Rotation.from_matrix(B[:, :3, :3]).as_rotvec()
    return np.concatenate([B[:, :3, 3], w * float(length)], axis=1) / float(dt)


def motion_distance(
    a: np.ndarray, b: np.ndarray, dt: float, length: float, max_shift: int | None = None
) -> float:
    """How unlike track ``a`` track ``b`` is: the RMS difference of their
    :func:`body_velocities` over the frames they share, relative to ``a``'s RMS, minimised
    over time shifts of ``b`` by up to ``max_shift`` frames (default: a quarter of the
    shorter track). 0: ``b`` contains ``a``'s motion (shifted); 1: as far as standing still.
    """
    va = body_velocities(a, dt, length)
    vb = body_velocities(b, dt, length)
    n = min(len(va), len(vb))
    shift = n // 4 if max_shift is None else int(max_shift)
    scale = float(np.sqrt(np.mean(np.sum(va[:n] ** 2, axis=1)))) or 1.0
    best = np.inf
    for k in range(-shift, shift + 1):
        x = va[max(0, -k) : n - max(0, k)]
        y = vb[max(0, k) : n - max(0, -k)]
        m = min(len(x), len(y))
        if m < max(2, n // 2):
            continue
        d = float(np.sqrt(np.mean(np.sum((x[:m] - y[:m]) ** 2, axis=1))))
        best = min(best, d)
    return best / scale


def name_salt(name: str) -> int:
    """A stable 32-bit number from an object's ``name`` (the first bytes of its SHA-256, the
    same on every machine and Python, unlike ``hash``): mixed into the seed of the variants
    drawn for that object (:func:`draw_pins`), so two objects baked with the same seed draw
    different perturbations while one object and one seed draw the same bits."""
    import hashlib

    return int.from_bytes(hashlib.sha256(str(name).encode("utf-8")).digest()[:4], "little")


def draw_pins(
    motion: dict, frames: int, dt: float, seed: int, variant: int
) -> tuple[np.ndarray, dict]:
    """Variant ``variant``'s pin targets drawn from the user's animation (FEM bakes).

    The pins ride on the source's rigid frame: each variant takes source ``variant`` modulo
    the number of sources (so that every motion in the file is baked), perturbs it with
    :func:`perturb` seeded by ``(seed, variant)`` and the object's name (``salt``), and
    moves the pins by the perturbed track's motion relative to its first pose,
    ``M'_t M'_0^-1``: frame 0 is where the pins rest whichever frame of the source the
    variant starts from.

    Parameters
    ----------
    motion : ``{"sources": [{"name", "frames": [a, b], "track": (F, 4, 4)}], "pins": (p, 3)
        world rest positions of the pins (m), "perturbation": Perturbation fields, "salt":
        the object's :func:`name_salt`, mixed into the seed (absent in specs made before it:
        those draw by seed and variant alone, as they were baked)}``
    frames : the bake's frames after the first; dt : seconds per frame
    seed : the bake's seed (not the variant's); variant : the variant index

    Returns
    -------
    (frames + 1, p, 3) pin targets (m) and the variant's record (JSON-able): the source's
    name and frames, the draws of :func:`perturb` and the drawn ``track`` (frames + 1, 4, 4).
    """
    sources = motion.get("sources") or []
    if not sources:
        raise MotionError("the motion has no source animation to draw from.")
    src = sources[int(variant) % len(sources)]
    settings = Perturbation(
        **{
            k: tuple(v) if isinstance(v, list) else v
            for k, v in (motion.get("perturbation") or {}).items()
        }
    )
    key = [int(seed), int(variant), 1]
    if motion.get("salt") is not None:
        key.append(int(motion["salt"]))
    rng = np.random.default_rng(key)
    track, draws = perturb(np.asarray(src["track"], dtype=np.float64), frames, rng, dt, settings)
    rel = track @ np.linalg.inv(track[0])  # (T, 4, 4): the motion since the first frame
    pins = np.asarray(motion["pins"], dtype=np.float64).reshape(-1, 3)
    targets = pins @ np.transpose(rel[:, :3, :3], (0, 2, 1)) + rel[:, None, :3, 3]
    record = {
        "source": str(src["name"]),
        "source_frames": [int(v) for v in src["frames"]],
        "among": [str(s["name"]) for s in sources],
        **draws,
        "track": track.tolist(),
    }
    return targets, record


def describe_draws(record: dict) -> str:
    """One line saying what a variant's drawn motion is (the panel's and the log's text)."""
    stop = record.get("stop")
    parts = [
        f"{record.get('source', '?')} at {record['speed']:.2f}x speed",
        f"stride {record['stride']:.2f}x",
        f"sway {record['sway']:.2f}x",
        f"turning up to {record['turn_rate_max']:.2f} rad/s",
        f"a stop at frames {stop[0]}-{stop[1]}" if stop else "no stop",
    ]
    if record.get("reverse"):
        a, b = record["reverse"]
        parts.append(f"backwards at frames {a}-{b}")
    return ", ".join(parts)


#: :func:`plot_variants`' colours (RGB 0-1): the turn, the travel, the zero line, the paper.
PLOT_TURN, PLOT_TRAVEL = (0.16, 0.42, 0.85), (0.93, 0.45, 0.1)
PLOT_AXIS, PLOT_PAPER = (0.55, 0.55, 0.55), (0.13, 0.13, 0.13)


def variant_curves(track: np.ndarray, axis: np.ndarray, direction: np.ndarray) -> np.ndarray:
    """(2, F): a drawn track's turn (degrees, its rotation since the first frame about
    ``axis``) and travel (metres, its move since the first frame along ``direction``)."""
    M = _check_track(track, "the track")
    rel = np.linalg.inv(M[0])[None] @ M
    rot = Rotation.from_matrix(rel[:, :3, :3]).as_rotvec()
    return np.stack([np.degrees(rot @ axis), (M[:, :3, 3] - M[0, :3, 3]) @ direction])


def plot_variants(tracks: list[np.ndarray], width: int = 240, row: int = 40) -> np.ndarray:
    """A small picture of the variants' drawn motions, one row per variant (top first): its
    turn (blue, degrees about the axis the variants turn about most) and travel (orange,
    metres along the direction they move most) over its frames, each scaled to the largest
    of all variants and drawn about a grey zero line, so the rows compare: a stop is a flat
    stretch, a stretch played backwards a curve that turns back, a faster variant one that
    swings more often.

    Parameters
    ----------
    tracks : (F_i, 4, 4) rigid world transforms, one per variant (:func:`draw_pins`' record)
    width, row : pixels of the picture's width and of each row's height

    Returns
    -------
    (row * len(tracks), width, 3) float array, RGB in [0, 1], the first row at the top.
    """
    tracks = [_check_track(t, "a variant's track") for t in tracks]
    if not tracks:
        raise MotionError("plot_variants: no variant to plot.")
    rot = np.concatenate(
        [
            Rotation.from_matrix((np.linalg.inv(t[0])[None] @ t)[:, :3, :3]).as_rotvec()
            for t in tracks
        ]
    )
    move = np.concatenate([t[:, :3, 3] - t[0, :3, 3] for t in tracks])
    axis = _principal(rot)
    direction = _principal(move)
    curves = [variant_curves(t, axis, direction) for t in tracks]
    scale = [max(float(np.abs(c[k]).max()) for c in curves) or 1.0 for k in (0, 1)]
    img = np.empty((row * len(tracks), width, 3))
    img[:] = PLOT_PAPER
    frames = max(len(t) for t in tracks)
    for i, c in enumerate(curves):
        top, mid, half = i * row, i * row + row // 2, 0.42 * row
        img[mid, :] = PLOT_AXIS
        img[top, :] = PLOT_AXIS  # the rows' border
        x = np.arange(c.shape[1]) * (width - 1) / max(frames - 1, 1)
        for k, colour in ((1, PLOT_TRAVEL), (0, PLOT_TURN)):
            _polyline(img, x, mid - half * c[k] / scale[k], colour)
    return img


def _principal(v: np.ndarray) -> np.ndarray:
    """The unit direction of ``v``'s rows' largest spread (x when they do not spread)."""
    if not np.any(np.abs(v) > 1e-12):
        return np.array([1.0, 0.0, 0.0])
    d = np.linalg.svd(v, full_matrices=False)[2][0]
    return d if d[np.argmax(np.abs(d))] > 0 else -d  # one sign on every machine


def _polyline(img: np.ndarray, x: np.ndarray, y: np.ndarray, colour) -> None:
    """Draw the line through the points ``(x, y)`` (pixels) into ``img`` (H, W, 3), two
    pixels wide, one sample per pixel of the longer side of each segment."""
    H, W = img.shape[:2]
    for (x0, y0), (x1, y1) in zip(zip(x[:-1], y[:-1]), zip(x[1:], y[1:])):
        n = int(max(abs(x1 - x0), abs(y1 - y0))) + 2
        t = np.linspace(0.0, 1.0, n)
        px = np.clip(np.rint(x0 + t * (x1 - x0)).astype(int), 0, W - 1)
        py = np.clip(np.rint(y0 + t * (y1 - y0)).astype(int), 0, H - 1)
        img[py, px] = colour
        img[np.minimum(py + 1, H - 1), px] = colour
