"""Scrubbing a simulation along a timeline, like Blender's point cache, in memory.

:class:`Timeline` puts any :class:`~.simulator.Simulator` on a host's frame numbers. The
start frame is the rest state. Every simulated frame is kept in a :class:`FrameCache`
(simulator state, positions, and a digest of the inputs that produced it), so

* jumping back restores a kept frame without simulating;
* jumping forward simulates only from the newest kept frame before the target, with the
  inputs of each frame in between;
* a frame whose inputs changed since it was simulated (a collider moved, a poke started)
  is simulated again from the frame before it, and every later frame is forgotten.

A step's inputs are the frame's :class:`~.protocol.FrameInputs` and the running pokes
(:class:`~.poke.Poke`), whose forces follow the body: they are computed from the positions
the step starts from. The host (Blender's frame handler) gathers the inputs of a frame
once and writes the positions it gets back; nothing here knows about Blender. Going
forward over frames not kept, the host asks first which frames will be stepped
(:meth:`Timeline.missing`), samples their inputs, and hands them to
:meth:`Timeline.positions_at` (``earlier``): the timeline never calls back into the host.

A simulator that runs on other meshes (``swap_mesh``: LiCROM) can continue on an edited
mesh mid-run (:meth:`Timeline.swap_mesh`). Every kept frame records the mesh it was
simulated on (``mesh``, a counter). Its state is the latent (``q``, ``qdot``), which means
the same on every mesh of the object, so a frame of an earlier mesh is shown on the current
one (its positions recomputed from its state: the motion it had, on the shape there is
now); the frames after the swap are simulated on the new mesh, and a frame before it whose
inputs change is simulated again on the current mesh. The host's render mesh has only one
topology at a time, so the old mesh itself is not shown again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..physics.poke import Poke
from .protocol import FrameInputs


@dataclass
class CachedFrame:
    """One simulated frame: simulator state, (n, 3) positions (m, world), what drove it
    and the mesh its positions are of (a counter, :meth:`Timeline.swap_mesh`).

    ``drove`` is the digest of the inputs that produced the frame (:attr:`inputs`), or the
    inputs and pokes themselves, digested when the frame is first compared: a frame played
    forward is never compared until the timeline comes back to it, and the digest cost
    5.5 of the walking cape's 220 us a frame (the inputs are the host's, built anew each
    frame and not changed afterwards: :meth:`Timeline.positions_at`)."""

    state: dict
    positions: np.ndarray
    drove: str | tuple = ""
    mesh: int = 0

    @property
    def inputs(self) -> str:
        """The digest of the inputs that produced the frame (:func:`frame_digest`)."""
        if not isinstance(self.drove, str):
            self.drove = frame_digest(*self.drove)
        return self.drove


class FrameCache:
    """Simulated frames of one simulation, by frame number.

    Parameters
    ----------
    key : anything comparable
        What the cached frames depend on (model file, material, start frame, ...); a
        driver compares it with :meth:`matches` and invalidates on a change.
    max_frames : int
        Frames kept at most; the ones farthest from the newest write go first.
    """

    def __init__(self, key=None, max_frames: int = 10000):
        self.key = key
        self.max_frames = int(max_frames)
        self._frames: dict[int, CachedFrame] = {}
        # the newest kept frame (None: none): playing forward asks for the frame before the
        # next and forgets from a frame past the newest, which then cost O(1), not a scan of
        # every kept frame (one per frame played: 10,000 at most)
        self._newest: int | None = None

    def __len__(self) -> int:
        return len(self._frames)

    def __contains__(self, frame: int) -> bool:
        return int(frame) in self._frames

    @property
    def frames(self) -> list[int]:
        return sorted(self._frames)

    def matches(self, key) -> bool:
        return self.key == key

    def get(self, frame: int) -> CachedFrame | None:
        return self._frames.get(int(frame))

    def put(
        self,
        frame: int,
        state: dict,
        positions: np.ndarray,
        inputs: str | tuple = "",
        mesh: int = 0,
        *,
        own: bool = False,
    ) -> None:
        """Keep frame ``frame`` (copies of the state's arrays and of the positions);
        ``inputs``: the digest of what drove it, or ``(FrameInputs, pokes)`` to digest when
        it is first compared (:attr:`CachedFrame.inputs`). ``own``: the caller hands
        ``state`` over and keeps no reference to it or its arrays (a simulator's
        ``get_state()``, which returns fresh ones: :mod:`.simulator`), so it is kept as
        given, not copied."""
        frame = int(frame)
        if not own:
            state = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in state.items()}
        self._frames[frame] = CachedFrame(
            state, np.array(positions, dtype=np.float64), inputs, int(mesh)
        )
        if self._newest is None or frame > self._newest:
            self._newest = frame
        if len(self._frames) > self.max_frames:
            far = sorted(self._frames, key=lambda f: abs(f - frame), reverse=True)
            for f in far[: len(self._frames) - self.max_frames]:
                del self._frames[f]
            self._newest = max(self._frames)

    def latest_at_or_before(self, frame: int) -> int | None:
        """The newest cached frame ``<= frame`` (None when there is none)."""
        frame = int(frame)
        if frame in self._frames:
            return frame
        if self._newest is not None and frame > self._newest:
            return self._newest
        earlier = [f for f in self._frames if f <= frame]
        return max(earlier) if earlier else None

    def invalidate(self, from_frame: int | None = None, key=None) -> None:
        """Forget every frame (``from_frame`` None) or the frames ``>= from_frame``;
        with ``key``, the cache belongs to that key afterwards."""
        if from_frame is None:
            self._frames.clear()
            self._newest = None
        elif self._newest is not None and from_frame <= self._newest:
            for f in [f for f in self._frames if f >= from_frame]:
                del self._frames[f]
            self._newest = max(self._frames, default=None)
        if key is not None:
            self.key = key


def inputs_digest(*arrays) -> str:
    """A short digest of a frame's inputs (arrays; None and strings allowed)."""
    h = hashlib.sha1()
    for a in arrays:
        _digest_one(h, a)
    return h.hexdigest()[:16]


def _digest_one(h, a) -> None:
    if a is None:
        h.update(b"-")
    elif isinstance(a, str):
        h.update(b"s" + a.encode())
    else:
        a = np.ascontiguousarray(a, dtype=np.float64)
        h.update(str(a.shape).encode())
        h.update(a.tobytes())


def frame_digest(inputs: FrameInputs, pokes: Sequence[Poke] = ()) -> str:
    """Digest of everything that drives one frame: the colliders (kind, size, friction,
    transform), forces, pin targets, sliders, markers, reference frame and pokes. A
    collider's numbers go in as bytes (its sizes packed, its transform's own bytes): the
    frame handler digests every frame's inputs (9 -> 4 us for the cape's one collider)."""
    h = hashlib.sha1()
    cols = inputs.colliders
    if cols is None:
        h.update(b"-")
    else:
        h.update(("c" + ",".join(c.kind for c in cols) + ";").encode())
        for c in cols:
            h.update(_SIZES.pack(c.radius, c.half_length, c.friction))
            h.update(np.ascontiguousarray(c.transform, dtype=np.float64).tobytes())
    m = inputs.markers
    for a in (inputs.forces, inputs.pin_targets, inputs.sliders, inputs.reference_frame):
        _digest_one(h, a)
    for a in (None, None, None) if m is None else (m.vertices, m.positions, m.weights):
        _digest_one(h, a)
    for p in pokes:
        max_force = -1.0 if p.max_force is None else p.max_force
        for a in (p.idx, p.w, p.target, np.array([p.stiffness, max_force])):
            _digest_one(h, a)
    return h.hexdigest()[:16]


_SIZES = struct.Struct("<3d")


class Timeline:
    """A simulator on a host's frame numbers, scrubbable (see the module docstring).

    Parameters
    ----------
    sim : Simulator
        Any simulator of the protocol (:mod:`.simulator`); reset to rest here.
    frame_start : int
        The frame that shows the rest state.
    max_frames : int
        Frames kept in memory at most.

    Attributes
    ----------
    cache : FrameCache
    step_seconds : list of float
        Wall time of every step taken, seconds (what playback costs per frame).
    mesh : int
        How many times the simulator changed mesh (:meth:`swap_mesh`).

    The timeline owns its simulator's state: it remembers which kept frame the simulator
    holds (the one it just stepped or restored) and restores a kept frame only when the
    simulator holds another, so playing forward does not restore the frame it just
    stepped (a ``get_state``/``set_state`` round trip continues bit-identically, so this
    changes no result; for the 2,500-vertex cape of bench/cloth_blender.py it saved ~30 us a
    frame). Whoever sets :attr:`sim`'s state behind its back calls :meth:`forget_held` (a
    step behind its back moves the simulator's ``frame``, which the timeline notices).
    """

    def __init__(self, sim, frame_start: int, *, max_frames: int = 10000):
        self.sim = sim
        self.frame_start = int(frame_start)
        self.cache = FrameCache(max_frames=max_frames)
        self.step_seconds: list[float] = []
        self.mesh = 0
        self._held: CachedFrame | None = None  # the kept frame whose state sim has now
        self._asked: tuple | None = None  # (inputs, pokes, digest) of the last question
        self.reset()

    def forget_held(self) -> None:
        """The simulator's state is no longer a kept frame's (it was stepped or set outside
        the timeline): the next frame restores its start."""
        self._held = None

    def _hold(self, hit: CachedFrame) -> None:
        """Put the kept frame ``hit``'s state into the simulator, unless it has it (a
        simulator whose frame counter moved since was stepped outside: restored too)."""
        frame = hit.state.get("frame")
        if hit is not self._held or getattr(self.sim, "frame", frame) != frame:
            self._held = None  # a set_state that raises leaves the state unknown
            self.sim.set_state(hit.state)
            self._held = hit

    def reset(self) -> None:
        """Forget every simulated frame; the start frame is the rest state."""
        self._held = None
        self.sim.reset()
        self.cache.invalidate()
        self.cache.put(
            self.frame_start, self.sim.get_state(), self.sim.positions(), mesh=self.mesh, own=True
        )
        self._held = self.cache.get(self.frame_start)

    def swap_mesh(self, frame: int, X: np.ndarray, T: np.ndarray, pinned=None):
        """Continue on the mesh ``(X, T)`` (rest nodes (n, 3), tets (m, 4); ``pinned`` its
        pinned nodes, None: the simulator's choice) from the newest
        kept frame at or before ``frame``: its state goes through ``sim.swap_mesh`` (which
        keeps ``q`` and its velocity), the frames after it are forgotten, and the earlier
        ones are shown on the new mesh from now on (see the module docstring).

        Returns what ``sim.swap_mesh`` returns. Raises AttributeError for a simulator that
        runs only on its own mesh, and whatever ``sim.swap_mesh`` raises for a bad mesh (the
        timeline is then unchanged).
        """
        at = self.cache.latest_at_or_before(max(int(frame), self.frame_start))
        hit = self.cache.get(at)
        self._hold(hit)
        self._held = None  # swap_mesh changes the simulator (and may raise halfway)
        report = self.sim.swap_mesh(X, T, pinned)
        self.mesh += 1
        self.cache.invalidate(at + 1)
        self.cache.put(
            at, self.sim.get_state(), self.sim.positions(), hit.drove, self.mesh, own=True
        )
        self._held = self.cache.get(at)
        return report

    def _current(self, frame: int) -> CachedFrame:
        """Kept frame ``frame``, its positions recomputed on the current mesh when it was
        simulated on an earlier one (the latent state means the same on every mesh)."""
        hit = self.cache.get(frame)
        if hit.mesh != self.mesh:
            self._hold(hit)
            self.cache.put(frame, hit.state, self.sim.positions(), hit.drove, self.mesh, own=True)
            hit = self._held = self.cache.get(frame)
        return hit

    def missing(
        self, frame: int, inputs: FrameInputs | None = None, *, pokes: Sequence[Poke] = ()
    ) -> range:
        """The frames :meth:`positions_at` of the same arguments steps on the way to
        ``frame`` (after the newest kept frame before it, up to ``frame`` excluded), whose
        inputs the host gathers before that call (``earlier``); empty when ``frame`` is
        kept with these inputs, at or before the start frame, or next after a kept one.

        The host samples its scene at these frames, then calls :meth:`positions_at` once:
        the timeline never calls back into the host (Blender's ``scene.frame_set``)."""
        frame = int(frame)
        if frame <= self.frame_start or self._kept(frame, inputs, pokes):
            return range(frame, frame)
        return range(self.cache.latest_at_or_before(frame - 1) + 1, frame)

    def _kept(self, frame: int, inputs: FrameInputs | None, pokes: Sequence[Poke]) -> bool:
        """Whether frame ``frame`` is kept, driven by the same inputs and pokes."""
        hit = self.cache.get(frame)
        return hit is not None and hit.inputs == self._digest(inputs, pokes)

    def _digest(self, inputs: FrameInputs | None, pokes: Sequence[Poke]) -> str:
        """:func:`frame_digest`, remembered for the same objects' next question
        (:meth:`missing`, then :meth:`positions_at`: one digest a frame)."""
        inputs = FrameInputs() if inputs is None else inputs
        pokes = tuple(pokes)
        asked = self._asked
        if (
            asked is not None
            and asked[0] is inputs
            and len(asked[1]) == len(pokes)
            and all(a is b for a, b in zip(asked[1], pokes, strict=True))
        ):
            return asked[2]
        drove = frame_digest(inputs, pokes)
        self._asked = (inputs, pokes, drove)
        return drove

    def positions_at(
        self,
        frame: int,
        inputs: FrameInputs | None = None,
        *,
        pokes: Sequence[Poke] = (),
        earlier: Sequence[FrameInputs] | None = None,
    ) -> np.ndarray:
        """(n, 3) positions at ``frame``, simulating what is missing or stale.

        Parameters
        ----------
        frame : the frame to show; at or before the start frame it is the rest state.
        inputs : the inputs of ``frame`` (default: none).
        pokes : pokes running now; they act on every frame this call steps.
        earlier : the inputs of the frames :meth:`missing` names, in order, stepped on the
            way to ``frame``; None: they are ``inputs`` (a scene that does not move).

        The inputs and pokes are kept as given (not copied) until the timeline comes back to
        their frame and digests them (:attr:`CachedFrame.inputs`): the host builds each
        frame's anew and leaves them as they are (a simulator keeps a frame's colliders too).

        Raises ValueError, changing nothing, when ``earlier`` is not one input per frame
        :meth:`missing` names.
        """
        frame = int(frame)
        if frame <= self.frame_start:
            return self._current(self.frame_start).positions
        inputs = FrameInputs() if inputs is None else inputs
        pokes = tuple(pokes)
        drove = (inputs, pokes)  # digested only when compared: a frame played forward is not
        if frame in self.cache:
            drove = self._digest(inputs, pokes)
            if self.cache.get(frame).inputs == drove:
                self._asked = None
                hit = self._current(frame)
                self._hold(hit)
                return hit.positions
        self._asked = None
        first = self.cache.latest_at_or_before(frame - 1)
        if earlier is not None and len(earlier) != frame - 1 - first:
            raise ValueError(
                f"frame {frame}: {len(earlier)} earlier inputs for the {frame - 1 - first} "
                f"frames {first + 1}..{frame - 1} stepped on the way (Timeline.missing)"
            )
        self.cache.invalidate(frame)  # inputs changed there: this frame and later are stale
        self._hold(self.cache.get(first))
        for f in range(first + 1, frame):
            fin = inputs if earlier is None else earlier[f - first - 1]
            self._step(f, fin, pokes, (fin, pokes))
        self._step(frame, inputs, pokes, drove)
        return self.cache.get(frame).positions

    def _step(
        self, frame: int, inputs: FrameInputs, pokes: Sequence[Poke], drove: str | tuple
    ) -> None:
        if pokes:  # poke forces follow the body: from the positions this step starts at
            X = self.sim.positions()
            forces = sum(p.forces(X) for p in pokes)
            if inputs.forces is not None:
                forces = forces + inputs.forces
            inputs = dataclasses.replace(inputs, forces=forces)
        self._held = None  # a step that raises leaves the state unknown
        t0 = time.perf_counter()
        self.sim.step(inputs)
        self.step_seconds.append(time.perf_counter() - t0)
        self.cache.put(
            frame, self.sim.get_state(), self.sim.positions(), drove, self.mesh, own=True
        )
        self._held = self.cache.get(frame)
