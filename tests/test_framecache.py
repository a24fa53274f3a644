"""core.framecache without Blender: scrubbing a reduced simulation along a timeline.

Every frame the Timeline shows must be the frame a straight run from rest computes with the
same per-frame inputs (jumping back restores, jumping forward steps the frames in between,
a changed input re-simulates from that frame), and no frame is stepped twice."""

import numpy as np
import pytest
from neural_rom.core.engine.protocol import FrameInputs
from neural_rom.core.engine.timeline import FrameCache, Timeline, frame_digest, inputs_digest
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.methods.linear import LinearSimulation
from neural_rom.core.physics.fem import Material, mass_matrix
from neural_rom.core.physics.poke import Poke, poke_weights
from neural_rom.core.physics.sim import SimSettings

START = 1


def make_sim():
    """A clamped bar whose subspace is its whole free space (exact, and fast at 60 DOFs)."""
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (4, 1, 1))
    mat = Material(youngs_modulus=5e4, poisson_ratio=0.4, density=1000.0)
    pinned = np.flatnonzero(X[:, 0] < 1e-9)
    m3 = np.repeat(mass_matrix(X, T, mat.density, lumped=True), 3)
    free = np.ones(3 * len(X), dtype=bool)
    free[(3 * pinned[:, None] + np.arange(3)).ravel()] = False
    cols = np.flatnonzero(free)
    U = np.zeros((3 * len(X), len(cols)))
    U[cols, np.arange(len(cols))] = 1.0 / np.sqrt(m3[cols])
    return LinearSimulation(X, T, mat, U, SimSettings(dt=1 / 24), pinned=pinned)


def inputs_of(sim, frame: int, lift: float = 0.0) -> FrameInputs:
    """Animated pins: the clamped end rises (and by ``lift`` more from frame 6 on)."""
    X = sim.rest_positions()[sim.pinned]
    dz = 0.01 * (frame - START) + (lift if frame >= 6 else 0.0)
    return FrameInputs(pin_targets=X + [0.0, 0.0, dz])


def straight(frames: int, lift: float = 0.0, poke: Poke | None = None) -> dict[int, np.ndarray]:
    """Positions of frames START..frames stepped once each from rest."""
    sim = make_sim()
    out = {START: sim.positions()}
    for f in range(START + 1, frames + 1):
        inputs = inputs_of(sim, f, lift)
        if poke is not None:
            inputs.forces = poke.forces(sim.positions())
        sim.step(inputs)
        out[f] = sim.positions()
    return out


def between_of(sim, lift: float = 0.0):
    return lambda first, last: [inputs_of(sim, f, lift) for f in range(first, last + 1)]


def play(tl: Timeline, frame: int, inputs: FrameInputs, between, pokes=()) -> np.ndarray:
    """The host's two calls: the frames the timeline will step on the way, sampled with
    ``between(first, last)``, then the frame."""
    need = tl.missing(frame, inputs, pokes=pokes)
    earlier = between(need.start, need.stop - 1) if len(need) else None
    return tl.positions_at(frame, inputs, pokes=pokes, earlier=earlier)


def test_a_frame_played_forward_is_digested_when_compared():
    """A frame played forward keeps its inputs, undigested, until the timeline comes back to
    it; its digest then is the inputs' (:func:`frame_digest`), and the same inputs show the
    kept frame, other inputs simulate it again."""
    sim = make_sim()
    tl = Timeline(sim, START)
    poke = Poke(np.array([0]), np.array([1.0]), np.zeros(3), 50.0)
    for f in range(START + 1, 6):
        tl.positions_at(f, inputs_of(sim, f), pokes=[poke])
    kept = tl.cache.get(4)
    assert not isinstance(kept.drove, str)  # not digested yet
    assert kept.inputs == frame_digest(inputs_of(sim, 4), [poke])
    assert kept.drove == kept.inputs  # digested once
    tl.positions_at(4, inputs_of(sim, 4), pokes=[poke])
    assert len(tl.step_seconds) == 4 and tl.cache.get(4) is kept
    tl.positions_at(4, inputs_of(sim, 5), pokes=[poke])  # the pins elsewhere
    assert len(tl.step_seconds) == 5 and 5 not in tl.cache


def test_scrubbing_shows_the_straight_run_and_steps_each_frame_once():
    ref = straight(10)
    sim = make_sim()
    tl = Timeline(sim, START)
    for f in (10, 4, 10, 7, 1, 0, 10):
        P = play(tl, f, inputs_of(sim, f), between_of(sim))
        np.testing.assert_allclose(P, ref[max(f, START)], atol=1e-12)
    assert tl.cache.frames == list(range(1, 11))
    assert len(tl.step_seconds) == 9  # jumping back restored; nothing stepped twice
    assert np.abs(ref[10] - ref[1]).max() > 1e-2  # it moved
    # a jump back leaves the simulator in that frame's state: stepping on continues it
    tl.positions_at(4, inputs_of(sim, 4))
    sim.step(inputs_of(sim, 5))
    np.testing.assert_allclose(sim.positions(), ref[5], atol=1e-12)


def test_playing_forward_restores_nothing_and_the_same_bits_come_out():
    """The timeline restores a kept frame only when its simulator holds another: playing
    forward frame by frame (Blender's playback) restores none, and shows the bits of a
    straight run; a jump back restores once; a step or a state set outside it is noticed
    (the frame counter) or told (forget_held)."""
    ref = straight(12)
    sim = make_sim()
    restores = []
    set_state = sim.set_state
    sim.set_state = lambda state: (restores.append(state["frame"]), set_state(state))[1]
    tl = Timeline(sim, START)
    for f in range(START + 1, 9):
        np.testing.assert_array_equal(tl.positions_at(f, inputs_of(sim, f)), ref[f])
    print(f"restores playing frames 2..8: {len(restores)}")
    assert restores == []
    tl.positions_at(4, inputs_of(sim, 4))  # back to kept frames: each restored, once
    tl.positions_at(4, inputs_of(sim, 4))
    tl.positions_at(5, inputs_of(sim, 5))
    assert restores == [3, 4]  # scene frame 4 is the simulator's 3 (frame 1 is its rest)
    restores.clear()
    sim.step(inputs_of(sim, 6))  # behind the timeline's back: noticed by the frame counter
    sim.step(inputs_of(sim, 7))
    np.testing.assert_array_equal(tl.positions_at(9, inputs_of(sim, 9)), ref[9])
    assert restores == [7]  # scene frame 8 (the simulator's 7), then stepped to 9
    set_state(tl.cache.get(3).state)  # another state, not stepped there: the timeline is told
    restores.clear()
    tl.forget_held()
    np.testing.assert_array_equal(tl.positions_at(10, inputs_of(sim, 10)), ref[10])
    assert restores == [8]


def test_the_host_samples_the_frames_on_the_way_first_and_is_never_called_back():
    """Two calls a frame (R9): ``missing`` names the frames the next ``positions_at`` steps
    before the one shown, whose inputs the host samples; none when the frame is kept with
    the same inputs, is the next after a kept one, or is at the start. Inputs that do not
    match those frames are refused, and nothing changes."""
    ref = straight(8)
    sim = make_sim()
    tl = Timeline(sim, START)
    assert tl.missing(START, inputs_of(sim, START)) == range(START, START)
    assert tl.missing(2, inputs_of(sim, 2)) == range(2, 2)
    assert tl.missing(5, inputs_of(sim, 5)) == range(2, 5)
    with pytest.raises(ValueError, match=r"2 earlier inputs for the 3 frames 2..4"):
        tl.positions_at(5, inputs_of(sim, 5), earlier=[inputs_of(sim, 2), inputs_of(sim, 3)])
    assert tl.cache.frames == [START] and tl.step_seconds == []
    np.testing.assert_array_equal(play(tl, 5, inputs_of(sim, 5), between_of(sim)), ref[5])
    assert tl.missing(5, inputs_of(sim, 5)) == range(5, 5)  # kept
    assert tl.missing(3, inputs_of(sim, 3, lift=1.0)) == range(3, 3)  # stale, 2 kept
    assert tl.missing(8, inputs_of(sim, 8)) == range(6, 8)
    np.testing.assert_array_equal(play(tl, 8, inputs_of(sim, 8), between_of(sim)), ref[8])
    assert len(tl.step_seconds) == 7


def test_a_changed_input_resimulates_from_that_frame_and_forgets_later_ones():
    sim = make_sim()
    tl = Timeline(sim, START)
    play(tl, 10, inputs_of(sim, 10), between_of(sim))
    # the pins are lifted from frame 6: showing frame 6 with its new input steps from 5
    P6 = tl.positions_at(6, inputs_of(sim, 6, lift=0.05))
    assert len(tl.step_seconds) == 10 and tl.cache.frames == list(range(1, 7))
    lifted = straight(10, lift=0.05)
    np.testing.assert_allclose(P6, lifted[6], atol=1e-12)
    P10 = play(tl, 10, inputs_of(sim, 10, 0.05), between_of(sim, 0.05))
    np.testing.assert_allclose(P10, lifted[10], atol=1e-12)
    assert len(tl.step_seconds) == 14
    # without ``between`` the frames on the way take the target frame's inputs
    tl.reset()
    assert tl.cache.frames == [START]
    still = tl.positions_at(3, inputs_of(sim, 3))
    ref = make_sim()
    for _ in range(2):
        ref.step(inputs_of(ref, 3))
    np.testing.assert_allclose(still, ref.positions(), atol=1e-12)


def test_a_poke_acts_from_the_state_each_step_starts_at():
    sim = make_sim()
    X = sim.rest_positions()
    idx, w = poke_weights(X, X[-1], 0.15)
    poke = Poke(idx, w, X[-1] + [0.0, 0.3, 0.0], stiffness=50.0)
    ref = straight(8, poke=poke)
    tl = Timeline(sim, START)
    P = play(tl, 8, inputs_of(sim, 8), between_of(sim), pokes=[poke])
    np.testing.assert_allclose(P, ref[8], atol=1e-12)
    assert np.abs(P - straight(8)[8])[:, 1].max() > 1e-3  # pulled along +y
    # letting go re-simulates the frame shown, from the kept frame before it
    n = len(tl.step_seconds)
    free = tl.positions_at(8, inputs_of(sim, 8))
    assert len(tl.step_seconds) == n + 1
    assert not np.allclose(free, P)
    np.testing.assert_allclose(tl.positions_at(8, inputs_of(sim, 8)), free)  # now cached
    assert len(tl.step_seconds) == n + 1


def test_frame_digest_sees_each_input():
    from neural_rom.core.engine.protocol import Markers
    from neural_rom.core.physics.colliders import Collider

    base = FrameInputs(colliders=[Collider("sphere", radius=0.2)])
    d = frame_digest(base)
    assert frame_digest(FrameInputs(colliders=[Collider("sphere", radius=0.2)])) == d
    variants = [
        FrameInputs(colliders=[Collider("capsule", radius=0.2)]),
        FrameInputs(colliders=[Collider("sphere", radius=0.21)]),
        FrameInputs(colliders=[]),
        FrameInputs(),
        FrameInputs(colliders=base.colliders, forces=np.zeros((2, 3))),
        FrameInputs(colliders=base.colliders, sliders=np.zeros(2)),
        FrameInputs(colliders=base.colliders, reference_frame=np.eye(4)),
        FrameInputs(colliders=base.colliders, markers=Markers([0], [[0.0, 0.0, 0.0]])),
    ]
    digests = {frame_digest(v) for v in variants}
    assert len(digests) == len(variants) and d not in digests
    poke = Poke(np.array([0]), np.ones(1), np.zeros(3), 10.0)
    assert frame_digest(base, [poke]) != d
    assert frame_digest(base, [poke._replace(max_force=5.0)]) != frame_digest(base, [poke])


def test_frame_cache_get_put_invalidate():
    c = FrameCache(key="a", max_frames=4)
    q = np.arange(3.0)
    c.put(1, {"q": q, "frame": 0}, np.zeros((2, 3)), "d1")
    q[:] = -1  # the cache keeps its own copy
    np.testing.assert_array_equal(c.get(1).state["q"], [0, 1, 2])
    for f in (2, 3, 4):
        c.put(f, {"q": np.full(3, f)}, np.full((2, 3), f), f"d{f}")
    assert c.frames == [1, 2, 3, 4] and 3 in c and 9 not in c and c.get(9) is None
    assert c.latest_at_or_before(10) == 4 and c.latest_at_or_before(2) == 2
    assert c.latest_at_or_before(0) is None
    c.invalidate(3)
    assert c.frames == [1, 2] and c.matches("a")
    assert c.latest_at_or_before(10) == 2  # the newest kept frame moved back
    c.invalidate(7)  # past the newest: nothing to forget
    assert c.frames == [1, 2]
    for f in (3, 4, 5):
        c.put(f, {}, np.zeros((2, 3)))
    assert c.frames == [2, 3, 4, 5]  # over max_frames: the farthest from the write goes
    assert c.latest_at_or_before(9) == 5 and c.latest_at_or_before(1) is None
    c.put(0, {}, np.zeros((2, 3)))  # a write at 0 evicts the newest (5), farthest from it
    assert c.frames == [0, 2, 3, 4] and c.latest_at_or_before(9) == 4
    c.invalidate(key="b")
    assert len(c) == 0 and not c.matches("a") and c.matches("b")


def test_inputs_digest_sees_every_change():
    a = np.eye(4)
    assert inputs_digest(a, None) == inputs_digest(a.copy(), None)
    b = a.copy()
    b[0, 3] = 1e-9
    assert inputs_digest(b, None) != inputs_digest(a, None)
    assert inputs_digest(a, np.zeros((2, 3))) != inputs_digest(a, None)
    assert inputs_digest(np.zeros((0, 19)), None) != inputs_digest(np.zeros((1, 19)), None)


@pytest.mark.parametrize("frames", [1, 2])
def test_the_start_frame_is_rest_whatever_the_inputs(frames):
    sim = make_sim()
    tl = Timeline(sim, START)
    tl.positions_at(START + frames, inputs_of(sim, START + frames))
    np.testing.assert_array_equal(tl.positions_at(START, inputs_of(sim, 9)), sim.rest_positions())


def _simulators():
    """One cheap simulator of the registered methods whose state is arrays of their own:
    the linear subspace, the autoencoder's latent one, Shen's (random decoders: the state's
    ownership does not care how they were trained; LiCROM's state is the linear one's,
    SNP's is checked in tests/test_snp.py)."""
    from neural_rom.core.methods.autoencoder import AutoencoderSimulation
    from neural_rom.core.methods.shen import ShenSimulation

    from .test_latent import MAT, beam, elu_decoder
    from .test_shen import sin_decoder

    X, T, pinned, sub = beam(div=(4, 1, 1), k=6)
    s = SimSettings(dt=1 / 24)
    return {
        "linear": make_sim(),
        "autoencoder": AutoencoderSimulation(
            X, T, MAT, sub.U, elu_decoder(3, sub.k), s, pinned=pinned
        ),
        "shen": ShenSimulation(X, T, MAT, sub.U, 2, sin_decoder(3, sub.k), s, pinned=pinned),
    }


def _plain(state: dict) -> dict:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in state.items()}


@pytest.mark.parametrize("kind", ["linear", "autoencoder", "shen"])
def test_a_kept_frame_keeps_its_state_when_the_simulator_changes(kind):
    """The timeline keeps what ``get_state`` returns without copying it (the protocol: fresh
    arrays, :mod:`core.simulator`): the steps after a kept frame, and the simulator's state
    arrays overwritten in place, change no kept state; and the kept frame restored
    continues as it did."""
    sim = _simulators()[kind]
    tl = Timeline(sim, START)
    X = sim.rest_positions()[sim.pinned]
    lift = [FrameInputs(pin_targets=X + [0.0, 0.0, 0.01 * f]) for f in range(8)]
    for f in range(START + 1, START + 5):
        tl.positions_at(f, lift[f - START])
    then = tl.positions_at(START + 5, lift[5]).copy()
    kept = {f: _plain(tl.cache.get(f).state) for f in tl.cache.frames}
    held = [getattr(sim, k, None) for k in tl.cache.get(START + 5).state]
    held = [v for v in held if isinstance(v, np.ndarray)]
    assert held  # the state's arrays, by their names on the simulator (q, qdot, z, r, ...)
    for v in held:
        v[...] = np.nan
    assert {f: _plain(tl.cache.get(f).state) for f in kept} == kept
    tl.cache.invalidate(START + 5)
    tl.forget_held()  # the simulator's state was set behind the timeline's back
    np.testing.assert_array_equal(tl.positions_at(START + 5, lift[5]), then)
