"""Swept contact of a Subspace Neural Physics model: the contact features of the volume a
collider swept over a frame against the rest shape (:func:`contact_features`,
:func:`batch_contact_features`, :func:`swept_push_out`), and the render-time push-out of
vertices from colliders (:func:`push_out`)."""

from __future__ import annotations

import functools
import math

import numpy as np

from ...physics.colliders import Collider

#: Contact features of one collider (a model trained with ``contact_features``): of the rest
#: shape's vertices inside the volume the collider swept over the frame, the mean push-out
#: vector over all vertices (m, 3), the deepest penetration (m) and the fraction inside.
CONTACT_FEATURES = 5
#: Positions of a collider over a frame (from its last transform to this one, linearly) at
#: which :func:`swept_push_out` takes its penetration: a sphere of radius r moving d per frame
#: is missed by at most ``r - sqrt(r^2 - (d / 6)^2)`` between samples.
SWEEP_SAMPLES = 4


def swept_push_out(
    X: np.ndarray, before: np.ndarray, after: np.ndarray, kind: str, size: np.ndarray
) -> np.ndarray:
    """(n, 3) push-out of points ``X`` (n, 3) out of the volume a collider swept over a frame:
    at :data:`SWEEP_SAMPLES` transforms linearly from ``before`` to ``after`` (4, 4), per
    point the deepest penetration's depth times the collider's outward normal there (the
    first sample on a tie); zero outside. All in one frame (the object's reference frame:
    ``X`` its rest shape). The signed distances are :meth:`core.colliders.Collider.
    signed_distance`'s, vectorized over the samples (a Collider per sample cost ~100 us a
    frame).

    Parameters
    ----------
    X : (n, 3) m; before, after : (4, 4) the collider's transforms; kind : its kind
    size : (2,) its radius and half length, m
    """
    out = np.zeros_like(X)
    if kind == "plane":
        idx = None
    else:  # only the points within reach of the sweep's middle (most frames: none)
        t0, t1 = before[:3, 3], after[:3, 3]
        # a blend's column norms are at most the larger end's (the norm is convex)
        sc = np.maximum(
            np.sqrt(_dot3(before[:3, :3].T, before[:3, :3].T)),
            np.sqrt(_dot3(after[:3, :3].T, after[:3, :3].T)),
        )
        reach = float(size[0]) * sc.max() + float(size[1]) * sc[2] * (kind == "capsule")
        reach += 0.5 * math.dist(t0, t1)
        d = X - 0.5 * (t0 + t1)
        idx = np.flatnonzero(_dot3(d, d) < reach * reach)
        if not len(idx):
            return out
    Y = X if idx is None else X[idx]
    s = _SWEEP[:, None, None]
    M = (1.0 - s) * before[:3] + s * after[:3]  # (K, 3, 4)
    A, t = M[:, :, :3], M[:, :, 3]
    scales = np.sqrt(_dot3(A.swapaxes(1, 2), A.swapaxes(1, 2)))  # (K, 3) column norms
    R = A / np.maximum(scales, 1e-300)[:, None, :]
    d = Y[None] - t[:, None]  # (K, m, 3)
    if kind == "plane":
        depth = -_dot3(d, R[:, None, :, 2])
    else:
        if kind == "capsule":
            h = float(size[1]) * scales[:, 2, None]
            d = d - np.clip(_dot3(d, R[:, None, :, 2]), -h, h)[..., None] * R[:, None, :, 2]
        dist = np.sqrt(_dot3(d, d))
        depth = (float(size[0]) * scales.max(axis=1))[:, None] - dist
    best = np.argmax(depth, axis=0)
    cols = np.arange(len(Y))
    deepest = depth[best, cols]
    inside = np.flatnonzero(deepest > 0.0)
    if not len(inside):
        return out
    k = best[inside]
    if kind == "plane":
        N = R[k, :, 2]
    else:
        v = d[k, inside]
        r = dist[k, inside]
        N = v / np.maximum(r, 1e-300)[:, None]
        centre = r <= 1e-12  # at the centre any direction is a valid push-out direction
        N[centre] = R[k[centre], :, 0]
    out[inside if idx is None else idx[inside]] = deepest[inside, None] * N
    return out


#: Where between a collider's last and current transform :func:`swept_push_out` samples it.
_SWEEP = np.linspace(0.0, 1.0, SWEEP_SAMPLES)


def contact_features(
    X: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    kinds: list[str],
    sizes: np.ndarray,
    bound: tuple | None = None,
) -> np.ndarray:
    """(c * 5,) contact features (:data:`CONTACT_FEATURES`) of c colliders moving from
    transforms ``before`` to ``after`` (c, 4, 4), in the reference frame, against the rest
    shape ``X`` (n, 3) (:func:`swept_push_out`): per collider the mean push-out vector over
    the vertices, the deepest penetration and the fraction of vertices inside. Zero for a
    collider that swept past the rest shape.

    Why: the colliders' transforms at the end of a frame (the paper's external state) say
    nothing of where a collider came from or how deep it sits in the object. How deep and
    from where the collider passed through the rest shape is the contact, in numbers that do
    not depend on where on the object it happened: on the block of tests/test_snp.py,
    pressed by a sphere, held-out 0.51x the initial model with them, 0.91x without
    (training/snp.py's docstring).

    A sphere that keeps its rotation and scale over the frame sweeps a capsule: its features
    are the capsule's, exactly (:func:`_sphere_sweeps`); the other colliders are sampled
    (:func:`swept_push_out`).

    ``bound``: ``(centre (3,), radius)`` of a ball holding ``X``, optionally with X's bounding
    box ``(lo, hi)`` (the runtime's, computed once):
    a collider whose sweep stays outside it is skipped with a few scalar operations (most
    frames; the same features: it would push nothing out)."""
    out = np.zeros((len(kinds), CONTACT_FEATURES))
    for i, kind in enumerate(kinds):
        r, h = float(sizes[i][0]), float(sizes[i][1])
        f = contact_one(X, before[i].tolist(), after[i].tolist(), kind, r, h, bound)
        if f is not None:
            out[i] = f
    return out.reshape(-1)


def contact_one(X, bl: list, al: list, kind: str, r: float, h: float, bound) -> list | None:
    """The contact features (5 floats) of one collider sweeping from ``bl`` to ``al`` (its
    transforms as nested lists, 4 x 4), or None for zeros: :func:`contact_features`' body,
    which the runtime's step of one instance calls directly (its colliders' transforms read
    once as Python floats: the ball test, the translation test and a translating sphere's
    sweep take scalars, not array calls). A plane is sampled whatever the bound."""
    if kind == "plane":
        return _swept_one(X, np.array(bl), np.array(al), kind, (r, h))
    if bound is not None and _misses(bound, bl, al, r, h):
        return None
    if kind == "sphere" and _translates(bl, al):
        box = bound[2] if bound is not None and len(bound) > 2 else None
        return _sphere_sweep_one(X, bl, al, r, box)
    return _swept_one(X, np.array(bl), np.array(al), kind, (r, h))


def _swept_one(X, before: np.ndarray, after: np.ndarray, kind: str, size) -> list | None:
    """The sampled sweep's features (5 floats, :func:`swept_push_out`), or None for zeros."""
    P = swept_push_out(X, before, after, kind, size)
    depth = np.sqrt(_dot3(P, P))
    if not depth.any():
        return None
    return [*P.mean(axis=0), depth.max(), np.count_nonzero(depth) / len(X)]


def _sweep_misses(bound: tuple, before: np.ndarray, after: np.ndarray, size) -> bool:
    """:func:`_misses` of (4, 4) transforms and a size (2,)."""
    return _misses(bound, before.tolist(), after.tolist(), float(size[0]), float(size[1]))


def _misses(bound: tuple, bl: list, al: list, r: float, h: float) -> bool:
    """Whether a sphere or capsule (radius ``r``, half length ``h``) moving from ``bl`` to
    ``al`` (4 x 4 nested lists) stays outside the ball ``bound`` (centre, radius): the distance
    from the ball's centre to the segment its centre moves along, against the radii and a
    capsule's half length times the larger axis scale (at most sqrt(3) times the largest
    matrix entry), in Python floats."""
    (cx, cy, cz), rb = bound[0], bound[1]
    ax, ay, az = bl[0][3], bl[1][3], bl[2][3]
    ux, uy, uz = al[0][3] - ax, al[1][3] - ay, al[2][3] - az
    wx, wy, wz = cx - ax, cy - ay, cz - az
    uu = ux * ux + uy * uy + uz * uz
    s = 0.0 if uu <= 0.0 else min(max((wx * ux + wy * uy + wz * uz) / uu, 0.0), 1.0)
    dx, dy, dz = wx - s * ux, wy - s * uy, wz - s * uz
    big = max(
        abs(bl[0][0]), abs(bl[0][1]), abs(bl[0][2]),
        abs(bl[1][0]), abs(bl[1][1]), abs(bl[1][2]),
        abs(bl[2][0]), abs(bl[2][1]), abs(bl[2][2]),
        abs(al[0][0]), abs(al[0][1]), abs(al[0][2]),
        abs(al[1][0]), abs(al[1][1]), abs(al[1][2]),
        abs(al[2][0]), abs(al[2][1]), abs(al[2][2]),
    )  # fmt: skip
    reach = (r + h) * (_SQRT3 * big) + rb
    return dx * dx + dy * dy + dz * dz > reach * reach


_SQRT3 = math.sqrt(3.0)


def batch_contact_features(
    X: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    kinds: list[str],
    sizes: np.ndarray,
    bound: tuple | None = None,
) -> np.ndarray:
    """(B, c * 5) :func:`contact_features` of B instances at once: ``before``, ``after``
    (B, c, 4, 4) the colliders' transforms in each instance's reference frame, ``sizes``
    (B, c, 2). What the runtime's step runs (:meth:`SNPSimulation.batch_features`); equal to
    :func:`contact_features` of each instance bit for bit (tests/test_snp.py).

    Vectorized over instances and colliders of a kind: the sweeps that reach the ball
    ``bound`` (:func:`_sweep_misses`, on arrays), then the (sweep, vertex) pairs within reach
    of the sweep's middle (as :func:`swept_push_out`), then the :data:`SWEEP_SAMPLES` signed
    distances of every pair in one pass. The arithmetic is elementwise per pair (the dot
    products written out, no reduction over the batch), so an instance's features do not
    depend on the batch it is in; the per-sweep sums are :func:`numpy.bincount`'s, in vertex
    order as :func:`contact_features`' mean."""
    B, c = before.shape[:2]
    if B == 1:  # one instance: the per-collider loop, the same bits in fewer array calls
        return contact_features(X, before[0], after[0], kinds, sizes[0], bound)[None]
    groups = _kind_groups(tuple(kinds))
    if len(groups) == 1:  # one kind (the common case): every slot at once
        f = _swept_features(
            X,
            before.reshape(-1, 4, 4),
            after.reshape(-1, 4, 4),
            kinds[0],
            sizes.reshape(-1, 2),
            bound,
        )
        return f.reshape(B, -1)
    out = np.zeros((B, c, CONTACT_FEATURES))
    for kind, slots in groups:
        f = _swept_features(
            X,
            before[:, slots].reshape(-1, 4, 4),
            after[:, slots].reshape(-1, 4, 4),
            kind,
            sizes[:, slots].reshape(-1, 2),
            bound,
        )
        out[:, slots] = f.reshape(B, len(slots), CONTACT_FEATURES)
    return out.reshape(B, -1)


@functools.lru_cache(maxsize=64)
def _kind_groups(kinds: tuple) -> tuple:
    """``((kind, slots), ...)``: the collider slots of each kind, in sorted kind order."""
    return tuple((k, [i for i, x in enumerate(kinds) if x == k]) for k in sorted(set(kinds)))


def _dot3(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dot products over the last axis (3), written out: the same sum in the same order
    whatever the shape (a reduction's order may depend on it)."""
    out = a[..., 0] * b[..., 0]
    out += a[..., 1] * b[..., 1]
    out += a[..., 2] * b[..., 2]
    return out


def _swept_features(X, before, after, kind, size, bound) -> np.ndarray:
    """(S, 5) contact features of S sweeps of one kind (:func:`batch_contact_features`)."""
    S, n = len(before), len(X)
    out = np.zeros((S, CONTACT_FEATURES))
    if kind == "plane":
        act = np.arange(S)
    else:
        if bound is None:
            act = np.arange(S)
        elif S <= _SCALAR_SWEEPS:  # a few: in Python floats
            act = [j for j in range(S) if not _sweep_misses(bound, before[j], after[j], size[j])]
        else:  # _sweep_misses on arrays (the same arithmetic)
            centre, rb = bound[0], bound[1]
            t0 = before[:, :3, 3]
            u = after[:, :3, 3] - t0
            w = centre - t0
            uu = _dot3(u, u)
            s = np.clip(_dot3(w, u) / np.where(uu > 0.0, uu, 1.0), 0.0, 1.0)
            s[uu <= 0.0] = 0.0
            dd = w - s[:, None] * u
            scale = _SQRT3 * np.maximum(
                np.abs(before[:, :3, :3]).max(axis=(1, 2)),
                np.abs(after[:, :3, :3]).max(axis=(1, 2)),
            )
            reach = (size[:, 0] + size[:, 1]) * scale + rb
            act = np.flatnonzero(_dot3(dd, dd) <= reach * reach)
        if not len(act):
            return out
        if len(act) < S:
            before, after, size = before[act], after[act], size[act]
    if kind == "sphere":
        rigid = np.all(before[:, :3, :3] == after[:, :3, :3], axis=(1, 2))
        if rigid.any():
            rows = np.asarray(act)[rigid]
            box = bound[2] if bound is not None and len(bound) > 2 else None
            out[rows] = _sphere_sweeps(X, before[rigid], after[rigid], size[rigid, 0], box)
            if rigid.all():
                return out
            general = ~rigid
            act, before, after, size = (
                np.asarray(act)[general],
                before[general],
                after[general],
                size[general],
            )
    if kind == "plane" or len(act) * n <= _ALL_PAIRS:  # every vertex of every sweep
        loc, vert = _all_pairs(len(act), n)
    else:
        t0, t1 = before[:, :3, 3], after[:, :3, 3]
        # a blend's column norms are at most the larger end's (the norm is convex)
        sc = np.sqrt(np.maximum(_colsq(before[:, :3, :3]), _colsq(after[:, :3, :3])))
        reach = size[:, 0] * sc.max(axis=1)
        if kind == "capsule":
            reach += size[:, 1] * sc[:, 2]
        step = t1 - t0
        reach += 0.5 * np.sqrt(_dot3(step, step))
        # |x - mid|^2 < reach^2 by one product (a filter, so its round-off only needs a
        # margin: a vertex it lets through that is out of reach is not pushed out)
        mid = 0.5 * (t0 + t1)
        xx, mm = _dot3(X, X), _dot3(mid, mid)
        d2 = (xx - 2.0 * (mid @ X.T)) + mm[:, None]  # (S', n)
        loc, vert = np.nonzero(d2 < (reach * reach + 1e-9 * mm)[:, None] + 1e-9 * xx)
        if not len(loc):
            return out
    s = _SWEEP[None, :, None, None]
    M = (1.0 - s) * before[:, None, :3] + s * after[:, None, :3]  # (S', K, 3, 4)
    A = M[..., :3]
    scales = np.sqrt(_colsq(A))  # (S', K, 3) column norms
    axis = A[..., 2] / np.maximum(scales[..., 2], 1e-300)[..., None]  # (S', K, 3)
    d = X[vert][:, None] - np.ascontiguousarray(M[..., 3])[loc]  # (P, K, 3)
    if kind == "plane":
        depth = -_dot3(d, axis[loc])
    else:
        if kind == "capsule":
            h = size[loc, 1, None] * scales[loc, :, 2]
            d = d - np.clip(_dot3(d, axis[loc]), -h, h)[..., None] * axis[loc]
        dist = np.sqrt(_dot3(d, d))
        depth = (size[:, 0, None] * scales.max(axis=2))[loc] - dist
    best = np.argmax(depth, axis=1)  # the first sample on a tie
    deepest = depth[:, 0].copy()  # depth[best], exactly (a max over few columns, as columns)
    for j in range(1, depth.shape[1]):
        np.maximum(deepest, depth[:, j], out=deepest)
    inside = np.flatnonzero(deepest > 0.0)
    if not len(inside):
        return out
    k, sw = best[inside], loc[inside]
    if kind == "plane":
        N = axis[sw, k]
    else:
        r = dist[inside, k]
        N = d[inside, k] / np.maximum(r, 1e-300)[:, None]
        centre = r <= 1e-12  # at the centre any direction is a valid push-out direction
        if centre.any():
            N[centre] = (
                A[sw[centre], k[centre], :, 0]
                / np.maximum(scales[sw[centre], k[centre], 0], 1e-300)[:, None]
            )
    push = deepest[inside, None] * N
    norm = np.sqrt(_dot3(push, push))
    # per sweep (sw ascends): the sums in vertex order, as contact_features' mean
    first = np.flatnonzero(sw[1:] != sw[:-1]) + 1
    first = np.concatenate((_ZERO, first)) if len(first) else _ZERO
    rows = np.asarray(act)[sw[first]]
    f = out[rows]
    # one bincount for the three components (reduceat's sums are pairwise, not in order)
    sums = np.bincount((3 * sw[:, None] + _XYZ).reshape(-1), push.reshape(-1), 3 * len(before))
    f[:, :3] = sums.reshape(-1, 3)[sw[first]] / n
    f[:, 3] = np.maximum.reduceat(norm, first)
    f[:, 4] = np.bincount(sw, norm != 0.0, len(before))[sw[first]] / n
    f[f[:, 3] == 0.0] = 0.0  # contact_features: zero unless some push is nonzero
    out[rows] = f
    return out


def _translates(bl: list, al: list) -> bool:
    """Whether a collider kept its rotation and scale over the frame (it only moved): its
    transforms as nested lists, compared as floats."""
    return bl[0][:3] == al[0][:3] and bl[1][:3] == al[1][:3] and bl[2][:3] == al[2][:3]


def _sphere_sweeps(
    X: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    radius: np.ndarray,
    box: tuple | None = None,
) -> np.ndarray:
    """(S, 5) contact features (:func:`contact_features`) of S spheres that only translate
    over the frame, from ``before`` to ``after`` (S, 4, 4) (the same rotation and scale),
    ``radius`` (S,) before scaling: the swept volume is exactly a capsule, so a vertex's
    penetration is the radius less its distance to the segment the centre moved along (no
    sampling), pushed out along that distance's direction (at the segment itself, the
    sphere's first axis). The fast path of spheres, the usual collider: about a third of the
    array calls of :func:`swept_push_out`'s sampled sweep. Elementwise per (sweep, vertex) pair,
    the sums in vertex order (:func:`numpy.bincount`), so a sweep's features do not depend on
    the other sweeps: one sweep broadcasts over the vertices, several gather their pairs,
    with the same bits. ``box``: ``(lo, hi)`` a box holding X (the runtime's ``bound``): the
    sweeps whose capsule's box misses it are zeros without any per-vertex work (most frames of
    a collider near the object, not on it)."""
    S, n = len(before), len(X)
    out = np.zeros((S, CONTACT_FEATURES))
    A = before[:, :3, :3]
    if S == 1:  # every vertex by coordinate, the sweep in floats: faster than gathering pairs
        # whatever the size (at 288 / 1,024 / 5,000 vertices 32 / 38 / 105 us against 101 /
        # 106 / 260 us), the same bits
        f = _sphere_sweep_one(X, before[0].tolist(), after[0].tolist(), float(radius[0]), box)
        if f is not None:
            out[0] = f
        return out
    r = radius * np.sqrt(_colsq(A).max(axis=1))  # (S,) the scaled radius
    t0 = before[:, :3, 3]
    if box is not None:  # _sphere_sweep_one's test of the capsule's box, on arrays
        t1, rr = after[:, :3, 3], r[:, None]
        near = np.all(np.minimum(t0, t1) - rr <= box[1], axis=1)
        near &= np.all(np.maximum(t0, t1) + rr >= box[0], axis=1)
        if not near.all():  # the rest: a sweep's features do not depend on the others'
            near = np.flatnonzero(near)
            if len(near):
                out[near] = _sphere_sweeps(X, before[near], after[near], radius[near])
            return out
    u = after[:, :3, 3] - t0  # (S, 3) the centre's move
    uu = _dot3(u, u)
    uu = np.where(uu > 0.0, uu, 1.0)  # a sphere that did not move: u = 0, s = 0
    if S * n <= _ALL_PAIRS:
        loc, vert = _all_pairs(S, n)
    else:  # the pairs within reach of the segment's middle (a filter; see _swept_features)
        mid = t0 + 0.5 * u
        reach = r + 0.5 * np.sqrt(_dot3(u, u))
        xx, mm = _dot3(X, X), _dot3(mid, mid)
        d2 = (xx - 2.0 * (mid @ X.T)) + mm[:, None]  # (S, n)
        loc, vert = np.nonzero(d2 < (reach * reach + 1e-9 * mm)[:, None] + 1e-9 * xx)
        if not len(loc):
            return out
    w = X[vert] - t0[loc]
    ul = u[loc]
    s = _dot3(w, ul) / uu[loc]
    np.minimum(np.maximum(s, 0.0, out=s), 1.0, out=s)
    d = w - s[:, None] * ul
    r2 = r[loc] * r[loc]
    cand = np.flatnonzero(_dot3(d, d) < r2)
    if not len(cand):
        return out
    sw = loc[cand]
    d = d[cand]
    dist = np.sqrt(_dot3(d, d))
    depth = r[sw] - dist
    inside = depth > 0.0  # sqrt's rounding can leave a vertex on the surface
    if not inside.all():
        d, dist, depth, sw = d[inside], dist[inside], depth[inside], sw[inside]
        if not len(depth):
            return out
    N = d / np.maximum(dist, 1e-300)[:, None]
    centre = dist <= 1e-12  # on the segment any direction is a valid push-out direction
    if centre.any():
        axis = A[:, :, 0] / np.sqrt(_colsq(A)[:, :1])
        N[centre] = axis[sw[centre]]
    push = depth[:, None] * N
    first = np.flatnonzero(sw[1:] != sw[:-1]) + 1
    first = np.concatenate((_ZERO, first)) if len(first) else _ZERO
    rows = sw[first]
    sums = np.bincount((3 * sw[:, None] + _XYZ).reshape(-1), push.reshape(-1), 3 * S)
    out[rows, :3] = sums.reshape(-1, 3)[rows] / n
    out[rows, 3] = np.maximum.reduceat(depth, first)
    out[rows, 4] = np.bincount(sw, minlength=S)[rows] / n
    return out


def _sphere_sweep_one(X: np.ndarray, bl: list, al: list, radius: float, box=None) -> list | None:
    """:func:`_sphere_sweeps` of one sphere, from ``bl`` to ``al`` (its transforms as nested
    lists, 4 x 4), against every vertex: the features (5 floats), or None for zeros. The
    sweep in Python floats, the vertices by broadcasting, in the same operations and order as
    the gathered pairs of :func:`_sphere_sweeps` (Python floats are IEEE doubles), so the
    same bits. ``box``: ``(lo, hi)`` the bounding box of X: a sweep whose capsule's box misses
    it returns None at once (frames near the object but not on it)."""
    (a00, a01, a02, b0), (a10, a11, a12, b1), (a20, a21, a22, b2) = bl[:3]
    c0, c1, c2 = (
        a00 * a00 + a10 * a10 + a20 * a20,
        a01 * a01 + a11 * a11 + a21 * a21,
        a02 * a02 + a12 * a12 + a22 * a22,
    )
    r0 = radius * math.sqrt(max(c0, c1, c2))
    e0, e1, e2 = al[0][3], al[1][3], al[2][3]
    if box is not None:
        (l0, l1, l2), (h0, h1, h2) = box
        if (
            min(b0, e0) - r0 > h0
            or max(b0, e0) + r0 < l0
            or min(b1, e1) - r0 > h1
            or max(b1, e1) + r0 < l1
            or min(b2, e2) - r0 > h2
            or max(b2, e2) + r0 < l2
        ):
            return None
    u0, u1, u2 = e0 - b0, e1 - b1, e2 - b2
    uu = u0 * u0 + u1 * u1 + u2 * u2
    uu = uu if uu > 0.0 else 1.0  # a sphere that did not move: u = 0, s = 0
    # by coordinate (n,): an (n, 3) array less a (3,) row runs a 3-long loop n times, 2-3x
    # slower at these sizes; the same operations on each element
    d0 = X[:, 0] - b0
    d1 = X[:, 1] - b1
    d2 = X[:, 2] - b2
    s = d0 * u0
    s += d1 * u1
    s += d2 * u2
    s /= uu
    np.minimum(np.maximum(s, 0.0, out=s), 1.0, out=s)
    d0 -= s * u0
    d1 -= s * u1
    d2 -= s * u2
    dd = d0 * d0
    dd += d1 * d1
    dd += d2 * d2
    cand = (dd < r0 * r0).nonzero()[0]
    if not len(cand):
        return None
    d = np.empty((len(cand), 3))
    d[:, 0], d[:, 1], d[:, 2] = d0[cand], d1[cand], d2[cand]
    dist = np.sqrt(dd[cand])  # _dot3 of d, elementwise: the same bits
    depth = r0 - dist
    if not depth.min() > 0.0:  # sqrt's rounding can leave a vertex on the surface
        inside = depth > 0.0
        d, dist, depth = d[inside], dist[inside], depth[inside]
        if not len(depth):
            return None
    N = d / np.maximum(dist, 1e-300)[:, None]
    if dist.min() <= 1e-12:  # on the segment any direction is a valid push-out direction
        N[dist <= 1e-12] = np.array((a00, a10, a20)) / math.sqrt(c0)
    push = depth[:, None] * N
    n = len(X)
    # an axis-0 sum adds the rows in order, as _sphere_sweeps' bincount
    return [*(push.sum(axis=0) / n).tolist(), float(depth.max()), len(depth) / n]


_XYZ = np.arange(3)
#: Up to this many (sweep, vertex) pairs :func:`_swept_features` takes them all: the filter of
#: the vertices within reach (a dozen array calls) costs more than it saves (the same features:
#: a vertex out of reach is not inside).
_ALL_PAIRS = 1024


@functools.lru_cache(maxsize=16)
def _all_pairs(S: int, n: int) -> tuple:
    """(sweep, vertex) index pairs of every vertex of S sweeps, sweep-major."""
    loc, vert = np.repeat(np.arange(S), n), np.tile(np.arange(n), S)
    loc.flags.writeable = vert.flags.writeable = False
    return loc, vert


_ZERO = np.zeros(1, dtype=np.int64)


def _colsq(A: np.ndarray) -> np.ndarray:
    """Squared column norms (..., 3) of matrices A (..., 3, 3), summed in row order."""
    out = A[..., 0, :] * A[..., 0, :]
    out += A[..., 1, :] * A[..., 1, :]
    out += A[..., 2, :] * A[..., 2, :]
    return out


#: Up to this many sweeps :func:`_swept_features` tests each against the rest shape's ball in
#: Python floats (about 1 us a sweep, against ~20 us for the array version's calls).
_SCALAR_SWEEPS = 8


def push_out(x: np.ndarray, colliders: list[Collider], margin: float = 0.0) -> np.ndarray:
    """Render-time push-out (Holden 2019, sec. 6.4): every vertex closer than ``margin`` to
    a collider's surface (inside it: negative distance) moves along the collider's
    distance gradient to ``margin`` outside. The network's state is not changed: only what
    is shown. Returns ``x`` itself when no vertex is inside, else a moved copy.

    Parameters
    ----------
    x : (n, 3) world positions, m; colliders : this frame's colliders; margin : m
    """
    out = x
    for c in colliders:
        if c.kind == "plane":
            idx = np.arange(len(out))
        else:  # only the vertices within reach of the centre: one distance per vertex
            if _clear_of(out, c, margin):
                continue
            A, t = c.transform[:3, :3], c.transform[:3, 3]
            d = out - np.repeat(t[None], len(out), axis=0)  # out - t, its bits, at half its cost
            scales = np.sqrt(np.einsum("ij,ij->j", A, A))
            reach = c.radius * scales.max() + c.half_length * scales[2] + margin
            idx = np.flatnonzero(np.einsum("ij,ij->i", d, d) < reach * reach)
            if not len(idx):
                continue
        phi, n = c.signed_distance(out[idx])
        inside = phi < margin
        if inside.any():
            if out is x:
                out = x.copy()
            out[idx[inside]] += (margin - phi[inside])[:, None] * n[inside]
    return out


def _clear_of(x: np.ndarray, c: Collider, margin: float) -> bool:
    """Whether every point of ``x`` (k, 3) is farther than ``margin`` from the surface of
    sphere or capsule ``c``, by a margin that round-off cannot cross: then :func:`push_out`
    moves none of them and skips their signed distances, and its result keeps its bits (the
    walking cape's 600 vertices, 160 of them within reach of the torso's centre and none
    inside it: 54 -> 14 us a frame, one core, loaded machine). First from the capsule's
    axis as a line, which no point is farther from than from the segment (110 of the cape's
    119 frames end there), then, when a point is near the line, from the segment.
    The collider's axis and sizes are read as Python floats: only this test uses them."""
    (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2) = c.transform[:3].tolist()
    sx = math.sqrt(a0 * a0 + b0 * b0 + c0 * c0)
    sy = math.sqrt(a1 * a1 + b1 * b1 + c1 * c1)
    sz = math.sqrt(a2 * a2 + b2 * b2 + c2 * c2)
    near = c.radius * max(sx, sy, sz) + margin  # from the segment
    if not near > 0.0 or not sz > 0.0:
        return False
    bound = near * (1.0 + _CLEAR_SLACK) + _CLEAR_SLACK
    u0, u1, u2 = a2 / sz, b2 / sz, c2 / sz
    if c.kind != "capsule":  # a sphere: from its centre, the whole test
        e = np.subtract(x, (t0, t1, t2))
        return bool(np.einsum("ij,ij->i", e, e).min() > bound * bound)
    # from the axis line: x - t's parts along two unit vectors across the axis (Duff et al.
    # 2017's orthonormal basis, on Python floats), each one matrix-vector product and a
    # scalar: no (k, 3) broadcasts (the cape's frame 14 -> 9 us; the slack covers the
    # basis' round-off)
    sign = math.copysign(1.0, u2)
    a = -1.0 / (sign + u2)
    b = u0 * u1 * a
    v0, v1, v2 = 1.0 + sign * u0 * u0 * a, sign * b, -sign * u0
    w0, w1, w2 = b, sign + u1 * u1 * a, -u1
    v = np.array(((v0, v1, v2), (w0, w1, w2)))
    e = x @ v[0]
    e -= t0 * v0 + t1 * v1 + t2 * v2
    f = x @ v[1]
    f -= t0 * w0 + t1 * w1 + t2 * w2
    e *= e
    f *= f
    e += f
    if e.min() > bound * bound:
        return True
    d = np.subtract(x, (t0, t1, t2))
    h = c.half_length * sz
    axis = np.array((u0, u1, u2))
    s = d @ axis
    np.minimum(np.maximum(s, -h, out=s), h, out=s)  # np.clip, at a third of its cost
    e = d - s[:, None] * axis
    return bool(np.einsum("ij,ij->i", e, e).min() > bound * bound)


#: Relative (and absolute, m) slack of :func:`_clear_of`: far above the round-off of either
#: distance (1e-15 of it), far below anything a push-out could move.
_CLEAR_SLACK = 1e-9
