"""What the host gathers for a frame, as arrays: a :class:`Track` of consecutive frames (the
object's world matrix, which carries its pins, the colliders' kind, size and transform per
frame; sliders, markers and a driving reference frame where they are gathered), and a
:class:`FrameReader` for the one frame the viewport shows; both give a frame's
:class:`.protocol.FrameInputs`, to the bit alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from ..data.files import write_npz
from ..errors import CacheError, NeuralRomError
from ..physics.colliders import KINDS, Collider
from .protocol import FrameInputs, Markers
from .render import to_world


@dataclass
class Track:
    """The inputs of consecutive frames, as the host gathered them.

    Frame ``k`` of the track is scene frame ``frame0 + k``; frame 0 is the rest state.

    Attributes
    ----------
    frame0 : int
        The scene frame of track frame 0.
    object_matrix : (F, 4, 4) float array
        The simulated object's ``matrix_world``; its pinned nodes follow it.
    collider_kind : (F, C) str array
        ``"plane"``, ``"sphere"`` or ``"capsule"``, per frame and collider.
    collider_radius, collider_half_length : (F, C) float arrays, metres.
    collider_friction : (C,) float array.
    collider_transform : (F, C, 4, 4) float array, rigid world matrices.
    sliders : (F, r) float array or None.
    reference_frame : (F, 4, 4) float array or None.
    marker_vertices : (p,) int array or None; with ``marker_positions`` (F, p, 3) float
        array (world metres) and ``marker_weights`` (p,) float array.
    """

    frame0: int
    object_matrix: np.ndarray
    collider_kind: np.ndarray
    collider_radius: np.ndarray
    collider_half_length: np.ndarray
    collider_friction: np.ndarray
    collider_transform: np.ndarray
    sliders: np.ndarray | None = None
    reference_frame: np.ndarray | None = None
    marker_vertices: np.ndarray | None = None
    marker_positions: np.ndarray | None = None
    marker_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.frame0 = int(self.frame0)
        self.object_matrix = np.asarray(self.object_matrix, dtype=np.float64).reshape(-1, 4, 4)
        n = len(self.object_matrix)
        self.collider_kind = np.asarray(self.collider_kind, dtype=str).reshape(n, -1)
        c = self.collider_kind.shape[1]
        self.collider_radius = np.asarray(self.collider_radius, dtype=np.float64).reshape(n, c)
        self.collider_half_length = np.asarray(self.collider_half_length, np.float64).reshape(n, c)
        self.collider_friction = np.asarray(self.collider_friction, dtype=np.float64).reshape(c)
        self.collider_transform = np.asarray(self.collider_transform, np.float64).reshape(
            n, c, 4, 4
        )
        for name in ("sliders", "reference_frame", "marker_positions"):  # per frame
            a = getattr(self, name)
            if a is not None and len(a) != n:
                raise NeuralRomError(
                    f"the job's {name} has {len(a)} frames but its matrices {n}: gather "
                    "every input over the same frames"
                )

    def __len__(self) -> int:
        return len(self.object_matrix)

    def colliders(self, k: int) -> list:
        """The :class:`.colliders.Collider` list of track frame ``k``."""
        return [
            Collider(
                kind=str(self.collider_kind[k, j]),
                radius=float(self.collider_radius[k, j]),
                half_length=float(self.collider_half_length[k, j]),
                transform=self.collider_transform[k, j],
                friction=float(self.collider_friction[j]),
            )
            for j in range(self.collider_kind.shape[1])
        ]

    def inputs(
        self, k: int, *, pins_local: np.ndarray | None = None, ground_z: float | None = None
    ):
        """The :class:`.protocol.FrameInputs` of track frame ``k``.

        Parameters
        ----------
        pins_local : (p, 3) float array or None
            The pinned nodes in the object's local space: their targets are these carried
            by the object's matrix.
        ground_z : float or None
            World height (m) of the ground plane the model was trained with; used when
            the frame has no collider of its own.
        """
        M = self.object_matrix[k]
        pins = None if pins_local is None else to_world(pins_local, M)
        cols = self.colliders(k)
        if not cols and ground_z is not None:
            cols = [ground_plane(ground_z)]
        markers = None
        if self.marker_vertices is not None:
            markers = Markers(self.marker_vertices, self.marker_positions[k], self.marker_weights)
        return FrameInputs(
            colliders=cols,
            pin_targets=pins,
            sliders=None if self.sliders is None else self.sliders[k],
            markers=markers,
            reference_frame=None if self.reference_frame is None else self.reference_frame[k],
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None:
                out[f.name] = np.asarray(value)
        return out

    @classmethod
    def from_arrays(cls, arrays) -> Track:
        known = {f.name for f in fields(cls)}
        values = {k: arrays[k] for k in arrays if k in known}
        values["frame0"] = int(values["frame0"])
        return cls(**values)


class FrameReader:
    """The inputs of the frame being shown, from the host's world matrices read once: what
    :meth:`Track.inputs` of a one-frame track gives, to the last bit (a test checks it), at
    a fraction of its cost, for the viewport's frame handler (the walking cape's frame: a
    one-frame track with its colliders cost 64 us of a 0.34 ms frame).

    The colliders' sizes and places are :func:`.colliders.box_colliders`' arithmetic, on
    Python floats where it is elementwise (numpy's calls on arrays this small cost about a
    microsecond each) and with numpy's own product where BLAS rounds (a collider's centre
    through its matrix).

    Parameters
    ----------
    kinds : the shape each collider is taken as ("plane", "sphere", "capsule")
    names : what to call the colliders in an error (default "1", "2", ...)
    plane_radius : the radius a plane is given (None: 0, as :func:`.colliders.box_colliders`)
    reference_frame : the frame's reference frame is the object's matrix, rigid
        (:func:`.clothbake.rigid`; a cloth's owner), else none
    """

    def __init__(
        self,
        kinds: list[str],
        names: list[str] | None = None,
        *,
        plane_radius: float | None = None,
        reference_frame: bool = False,
    ) -> None:
        self.kinds = [str(k) for k in kinds]
        for kind in self.kinds:
            if kind not in KINDS:
                raise NeuralRomError(
                    f"Unknown collider shape {kind!r}; use plane, sphere or capsule."
                )
        self.names = [str(j + 1) for j in range(len(self.kinds))] if names is None else names
        self.plane_radius = 0.0 if plane_radius is None else float(plane_radius)
        self.reference_frame = bool(reference_frame)
        self._no_friction = [0.0] * len(self.kinds)

    def inputs(
        self,
        mats: np.ndarray,
        boxes: list,
        friction=None,
        *,
        pins_local: np.ndarray | None = None,
        ground_z: float | None = None,
    ):
        """The :class:`.protocol.FrameInputs` of one frame.

        Parameters
        ----------
        mats : (1 + colliders, 4, 4) world matrices, the object's first
        boxes : per collider its box's ``(half extents (3,), centre (3,))``, local, unscaled
        friction : (colliders,) friction coefficients (default 0)
        pins_local, ground_z : as :meth:`Track.inputs` takes them
        """
        mats = np.asarray(mats, dtype=np.float64)
        rows = mats.tolist()
        friction = self._no_friction if friction is None else friction
        cols = []
        for j, kind in enumerate(self.kinds):
            (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2), _ = rows[1 + j]
            # split_scale: the columns' lengths, summed row by row as numpy's reduce does
            sx = math.sqrt(a0 * a0 + b0 * b0 + c0 * c0)
            sy = math.sqrt(a1 * a1 + b1 * b1 + c1 * c1)
            sz = math.sqrt(a2 * a2 + b2 * b2 + c2 * c2)
            dx, dy, dz = max(sx, 1e-12), max(sy, 1e-12), max(sz, 1e-12)
            hx, hy, hz = (float(v) for v in boxes[j][0])
            hx, hy, hz = hx * sx, hy * sy, hz * sz
            half_length = 0.0
            if kind == "sphere":
                radius = max(hx, hy, hz)
            elif kind == "capsule":
                radius = max(hx, hy)
                half_length = max(hz - radius, 0.0)
            else:
                radius = self.plane_radius
            if kind != "plane" and not radius > 0:
                raise NeuralRomError(
                    f"Collider '{self.names[j]}' has zero size; scale it up or use a larger "
                    "empty display size."
                )
            # a centred box (a primitive's) at a place off the axes' planes: the centre's
            # product is zeros and the place its translation, whatever the zeros' signs
            # (4 of the reader's 10 us); else numpy's product below, for its bits
            centred = not any(boxes[j][1]) and t0 != 0.0 and t1 != 0.0 and t2 != 0.0
            T = np.array(
                [
                    [a0 / dx, a1 / dy, a2 / dz, t0],
                    [b0 / dx, b1 / dy, b2 / dz, t1],
                    [c0 / dx, c1 / dy, c2 / dz, t2],
                    [0.0, 0.0, 0.0, 1.0],
                ]
            )
            if not centred:
                # the centre through the matrix: box_colliders' product, its operands' layout
                A = mats[None, 1 + j, :3, :3]
                centre = np.asarray(boxes[j][1], dtype=np.float64).reshape(1, 3)
                T[:3, 3] = (centre @ A.transpose(0, 2, 1))[0, 0] + mats[1 + j, :3, 3]
            cols.append(Collider(kind, radius, half_length, T, float(friction[j])))
        if not cols and ground_z is not None:
            cols = [ground_plane(ground_z)]
        M = mats[0]
        reference = None
        if self.reference_frame:  # clothbake.rigid: the axis scales divided out
            (a0, a1, a2, t0), (b0, b1, b2, t1), (c0, c1, c2, t2), bottom = rows[0]
            dx = max(math.sqrt(a0 * a0 + b0 * b0 + c0 * c0), 1e-12)
            dy = max(math.sqrt(a1 * a1 + b1 * b1 + c1 * c1), 1e-12)
            dz = max(math.sqrt(a2 * a2 + b2 * b2 + c2 * c2), 1e-12)
            reference = np.array(
                [
                    [a0 / dx, a1 / dy, a2 / dz, t0],
                    [b0 / dx, b1 / dy, b2 / dz, t1],
                    [c0 / dx, c1 / dy, c2 / dz, t2],
                    bottom,
                ]
            )
        return FrameInputs(
            colliders=cols,
            pin_targets=None if pins_local is None else to_world(pins_local, M),
            reference_frame=reference,
        )


def write_track(path: str | Path, track: Track) -> Path:
    """Write a track (atomically) for a worker to read."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_npz(path, track.to_arrays())
    return path


def read_track(path: str | Path) -> Track:
    """Read a track written by :func:`write_track`.

    Raises
    ------
    CacheError
        The file is missing or not a track.
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            return Track.from_arrays({k: z[k] for k in z.files})
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CacheError(
            f"The job's inputs {path} cannot be read ({e}); run Bake Simulation again."
        ) from e


def ground_plane(z: float):
    """A ground plane collider at world height ``z`` (m), solid below."""
    M = np.eye(4)
    M[2, 3] = z
    return Collider("plane", transform=M)
