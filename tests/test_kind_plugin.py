"""A data kind is its own files plus one registry record: a toy kind registered from this file
only (touching no file of the package) is listed with the built-in kinds, is training data a
method can declare (``trains_on``), its data job runs in the real worker process, which
imports this file from the job's ``kind_origin`` (as a toy method's ``method_origin``:
tests/test_method_plugin.py), and the frame engine drives its simulator through its frame
adapter, with no call back into the host.

The toy, "wave": a row of nodes whose height follows a slider with a lag (each frame keeps
half of the height before it and adds the frame's slider), so only frames stepped in order
from rest show the right heights. Its data job plays the sliders it is given from rest and
writes the positions of every frame.

Its Blender half (:class:`neural_rom.addon.kinds.BlenderKind`, registered from here too):
an object with a "wave" custom property is a wave, its slider is its height (z location);
the record names the toy's frame part, its sidebar box and its command module (this file:
``wave-bake``), and the sidebar, the command line and Simulate take them from it.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from neural_rom.core import jobs, registry
from neural_rom.core.data.files import write_npz
from neural_rom.core.engine.engine import Engine
from neural_rom.core.engine.protocol import FrameInputs, SimulatorBase, StepReport
from neural_rom.core.errors import NeuralRomError
from neural_rom.core.registry import DataKind, Method

NAME = "wave"
X = np.stack([np.linspace(0.0, 1.0, 5), np.zeros(5), np.zeros(5)], axis=1)

# ------------------------------------------------------------------------------- the toy kind


class WaveSimulation(SimulatorBase):
    """The toy's simulator: height ``h`` of the row's far end, the near end held."""

    def __init__(self, X: np.ndarray):
        self.X = np.asarray(X, dtype=np.float64)
        self.reset()

    def rest_positions(self) -> np.ndarray:
        return self.X.copy()

    def positions(self) -> np.ndarray:
        return self.X + np.outer(self.X[:, 0], [0.0, 0.0, self.h])

    def reset(self) -> None:
        self.frame, self.h = 0, 0.0

    def step(self, inputs: FrameInputs | None = None) -> StepReport:
        self.frame += 1
        self.h = 0.5 * self.h + float(inputs.sliders[0])
        return StepReport(substeps=1)

    def get_state(self) -> dict:
        return {"frame": np.array(self.frame), "h": np.array(self.h)}

    def set_state(self, state: dict) -> None:
        self.frame, self.h = int(state["frame"]), float(state["h"])

    def closest_shape(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x, dtype=np.float64)


class WaveAdapter:
    """The toy's frame adapter: what the host reads of a frame is the slider's value; the
    render mesh is the nodes themselves, as the host writes them (float32)."""

    def inputs(self, now: float) -> FrameInputs:
        return FrameInputs(sliders=np.array([float(now)]))

    def render(self, P: np.ndarray, now: float) -> np.ndarray:
        return np.asarray(P, dtype=np.float32)


def run_wave_bake(spec: dict) -> dict:
    """The toy's data job, as the worker runs it (``handler(spec) -> dict``): the sliders
    ``spec["sliders"]`` (one a frame after the rest frame) played from rest, every frame's
    positions written to ``spec["out"]``."""
    sim = WaveSimulation(X)
    frames = [sim.positions()]
    for value in spec["sliders"]:
        sim.step(WaveAdapter().inputs(value))
        frames.append(sim.positions())
    write_npz(spec["out"], {"positions": np.stack(frames)})
    return {"path": spec["out"], "frames": len(frames), "kind": NAME}


def toy_kind() -> DataKind:
    return DataKind(
        NAME,
        "Wave (test)",
        "a row of nodes following a slider (a test's toy data kind)",
        data_job="wave_bake",
        handler=run_wave_bake,
        adapter=WaveAdapter,
        order=900,
    )


if not __package__:
    # Imported by path: a worker finding the kind from the job's ``kind_origin`` registers
    # it as a studio's plug-in file would.
    registry.register_kind(toy_kind())
else:
    from .blender_fixtures import registered
    from .test_addon_ui import draw_all, panels, texts


@pytest.fixture(scope="module", autouse=True)
def _registered():
    assert registry.register_kind(toy_kind()).origin == __file__
    yield
    registry.unregister_kind(NAME)


def test_the_builtin_kinds_are_records_and_bake_kinds_a_view_of_them():
    built = {k.name: k for k in registry.kinds() if not k.origin}
    assert list(built) == ["fem", "cloth", "face", "family"]
    assert built["family"].extends == "fem" and built["family"].stored == "fem"
    assert built["face"].stepping == "equilibrium" and built["fem"].stepping == "timeline"
    assert {k.data_job for k in built.values()} == {"bake", "cloth_bake", "face_setup", ""}
    for k in built.values():  # a data job's handler is the job table's (the worker runs it)
        if k.data_job:
            assert k.handler_function() is jobs.handler(k.data_job), k.name
    stored = {k: v.description for k, v in built.items() if not v.extends}
    assert {k: registry.BAKE_KINDS[k] for k in stored} == stored
    assert "family" not in registry.BAKE_KINDS  # .blend files and bakes never store it
    with pytest.raises(ValueError, match="unknown training data kind 'family'"):
        registry.methods_for("family")
    assert registry.get_kind("face").trained_by(registry.get("active"))
    assert not registry.get_kind("face").trained_by(registry.get("linear"))
    assert registry.get_kind("family").trained_by(registry.get("licrom"))


def test_a_toy_kind_is_training_data_a_method_can_declare():
    toy = registry.get_kind(NAME)
    assert toy.origin.endswith("test_kind_plugin.py")
    assert registry.kinds()[-1] is toy and registry.BAKE_KINDS[NAME] == toy.description
    assert registry.kind_job_fields(toy) == {"data_kind": NAME, "kind_origin": toy.origin}
    assert registry.kind_job_fields(registry.get_kind("fem")) == {"data_kind": "fem"}
    method = Method(
        name="wave_method",
        label="Wave Method (test)",
        description="trains on the toy kind",
        settings=(),
        load=lambda model, **_: None,
        trainer=lambda run: {},
        trains_on={NAME},
    )
    with pytest.raises(NeuralRomError, match=r"trains on a row of nodes .*not on full-space"):
        method.check_trains_on("fem")


def test_a_kind_record_refuses_what_it_cannot_be():
    with pytest.raises(ValueError, match="stepping 'sometimes' is not one of"):
        DataKind("clay", "Clay", "clay", stepping="sometimes")
    with pytest.raises(ValueError, match="a handler needs the data_job it runs"):
        DataKind("clay", "Clay", "clay", handler=run_wave_bake)
    with pytest.raises(ValueError, match="extends 'family', which is not a stored kind"):
        registry.register_kind(DataKind("clay", "Clay", "clay", extends="family"))
    with pytest.raises(NeuralRomError, match="Unknown data kind 'clay'; .* knows fem, cloth"):
        registry.get_kind("clay")
    with pytest.raises(NeuralRomError, match="The file that defines this data kind is gone"):
        registry.get_kind("clay", origin="/no/such/file.py")


def test_the_toy_kinds_data_job_runs_in_the_worker_and_the_engine_plays_it(tmp_path):
    """The worker finds the toy kind through the job's ``kind_origin`` and runs its data
    job; the engine, driven through the kind's adapter with the sliders read frame by frame
    (the frames it steps on the way read first), shows every frame of that job exactly,
    however the timeline is scrubbed, stepping each frame once."""
    toy = registry.get_kind(NAME)
    sliders = [0.1, 0.3, -0.2, 0.0, 0.5, 0.25, -0.1, 0.05]  # scene frames 2..9
    spec = {"kind": toy.data_job, **registry.kind_job_fields(toy)}
    spec.update(sliders=sliders, out=str(tmp_path / "wave.npz"))
    job = jobs.Job.start(spec, sys.executable, tmp_path / "logs")
    assert job.wait(timeout=60) == jobs.DONE, job.message
    assert job.result == {"path": spec["out"], "frames": 9, "kind": NAME}
    with np.load(spec["out"], allow_pickle=False) as z:
        baked = z["positions"]
    assert np.abs(baked[:, -1, 2]).max() > 0.1  # it moves

    def read(frame: int) -> float:  # what the host reads at a scene frame (1: rest)
        return sliders[frame - 2] if frame >= 2 else 0.0

    engine = Engine(WaveSimulation(X), toy.adapter_class()(), 1)
    needed = []
    for f in (6, 2, 9, 4, 1, 9):
        need = engine.frames_needed(f, read(f))
        needed.append((need.start, need.stop))
        shown = engine.frame(f, read(f), [read(g) for g in need])
        np.testing.assert_array_equal(shown, baked[f - 1].astype(np.float32))
    assert needed == [(2, 6), (2, 2), (7, 9), (4, 4), (1, 1), (9, 9)]
    assert len(engine.step_seconds) == 8
    # a frame read anew with another slider: simulated again from the frame before it
    other = engine.frame(5, 1.0)
    assert other[-1, 2] == np.float32(0.5 * baked[3, -1, 2] + 1.0)
    assert engine.frames_needed(9, read(9)) == range(6, 9)


# ------------------------------------------------------------------------ its Blender half


def draw_wave(layout, obj, context) -> None:
    """The toy's sidebar box (the record's ``panel``)."""
    layout.label(text=f"Wave of {len(obj.data.vertices)} nodes, height {obj.location.z:.2f}")


def add_parser(sub, common) -> None:
    """The toy's command (the record's ``cli``): ``wave-bake``."""
    cmd = sub.add_parser("wave-bake", parents=[common], help="bake the toy wave (a test's kind)")
    cmd.add_argument("--frames", type=int, default=8)
    cmd.add_argument("--out", required=True)


def run(args) -> int:
    """``wave-bake``: the object's heights at frames 2.. as the sliders of the toy's data
    job, run here."""
    import bpy

    obj = bpy.data.objects[args.objects[0]]
    scene = bpy.context.scene
    sliders = []
    for frame in range(scene.frame_start + 1, scene.frame_start + 1 + args.frames):
        scene.frame_set(frame)
        sliders.append(float(obj.matrix_world[2][3]))
    print(run_wave_bake({"sliders": sliders, "out": args.out}))
    return 0


def blender_kind():
    """The toy's Blender record, its frame part a :class:`neural_rom.addon.driver.FramePart`
    (the engine on the toy's simulator and adapter; the height read from the object's world
    matrix, now or at a frame sampled on the way; the nodes written as the mesh)."""
    from neural_rom.addon import driver
    from neural_rom.addon.io import mesh as bm
    from neural_rom.addon.kinds import BlenderKind

    class WavePart(driver.FramePart):
        name = NAME

        @staticmethod
        def claims(obj) -> bool:
            return obj.get(NAME) is not None

        def load(self, obj, scene) -> tuple:
            sim = WaveSimulation(X)
            return sim, None, None, Engine(sim, WaveAdapter(), int(scene.frame_start))

        def now(self, d, obj, scene, colliders, mats=None) -> float:
            m = bm.matrices([obj])[0] if mats is None else mats[0]
            return float(m[2, 3])

        def write(self, d, obj, P, matrix) -> None:
            bm.set_positions(obj.data, d.engine.adapter.render(P, None))

    return BlenderKind(NAME, WavePart.claims, WavePart, panel=f"{__name__}:draw_wave", cli=__name__)


SLIDERS = [0.1, 0.3, -0.2, 0.0, 0.5, 0.25, -0.1, 0.05]  # scene frames 2..9


@pytest.fixture(scope="module")
def blender():
    """The add-on registered, the toy's Blender record with it, a wave "Row" keyed at
    heights 0, SLIDERS over frames 1..9 and a plain mesh "Plain"."""
    from neural_rom.addon import kinds

    with registered() as ns:
        kinds.register(blender_kind())
        bpy = ns.bpy
        mesh = bpy.data.meshes.new("Row")
        mesh.from_pydata(X.tolist(), [(i, i + 1) for i in range(len(X) - 1)], [])
        obj = bpy.data.objects.new("Row", mesh)
        bpy.context.scene.collection.objects.link(obj)
        obj[NAME] = 1
        for frame, z in enumerate([0.0, *SLIDERS], start=1):
            obj.location.z = z
            obj.keyframe_insert("location", index=2, frame=frame)
        plain = bpy.data.objects.new("Plain", bpy.data.meshes.new("Plain"))
        bpy.context.scene.collection.objects.link(plain)
        bpy.context.scene.frame_set(1)
        try:
            yield ns
        finally:
            kinds.unregister(NAME)


def wave_frames() -> np.ndarray:
    """(10, 5, 3) the toy's frames 1..9 as its own data job plays SLIDERS (frame f: row f-1)."""
    sim, frames = WaveSimulation(X), [X.copy()]
    for value in SLIDERS:
        sim.step(WaveAdapter().inputs(value))
        frames.append(sim.positions())
    return np.stack(frames)


def test_the_toy_kinds_box_shows_in_the_sidebar_for_its_objects_only(blender):
    from neural_rom.addon import kinds

    bpy = blender.bpy
    row, plain = bpy.data.objects["Row"], bpy.data.objects["Plain"]
    for obj in (row, plain):
        obj.neural_rom.role = "DEFORMABLE"
    assert kinds.kind_of(row).name == NAME and kinds.kind_of(plain).name == "fem"
    assert row.neural_rom.training_data_kind() == NAME
    log = draw_all(bpy, row)
    assert "NEURAL_ROM_PT_kind" in panels(log)
    assert "Wave of 5 nodes, height 0.00" in texts(log)
    log = draw_all(bpy, plain)
    assert "NEURAL_ROM_PT_kind" not in panels(log) and "Wave of" not in texts(log)


def test_the_toy_kinds_command_is_in_the_help_and_runs(blender, tmp_path, capsys):
    from neural_rom.ui import cli

    assert cli.main(["--help"]) == 0
    assert "wave-bake" in capsys.readouterr().out
    out = tmp_path / "row.npz"
    assert cli.main(["wave-bake", "--object", "Row", "--out", str(out)]) == 0
    with np.load(out, allow_pickle=False) as z:
        np.testing.assert_allclose(z["positions"], wave_frames()[:9], atol=1e-6)


def test_simulate_drives_a_toy_kinds_object_through_its_part(blender):
    """Simulate picks the toy's frame part from its record; scrubbing the timeline shows,
    at each frame, the toy's data job's frame (the frames on the way stepped from the
    heights sampled there)."""
    from neural_rom.addon import driver, simulate
    from neural_rom.addon.io import mesh as bm

    bpy = blender.bpy
    scene, row = bpy.context.scene, bpy.data.objects["Row"]
    assert type(driver.part_of(row)).__name__ == "WavePart"
    assert type(driver.part_of(bpy.data.objects["Plain"])) is driver.FramePart
    scene.frame_set(1)
    simulate.start_simulation(row, scene)
    try:
        expected = wave_frames()
        for frame in (6, 2, 9, 4, 1, 9):
            scene.frame_set(frame)  # the one frame handler drives it
            np.testing.assert_allclose(bm.get_positions(row.data), expected[frame - 1], atol=1e-6)
        assert np.abs(expected[8, -1, 2]) > 0.1  # it moves
    finally:
        simulate.stop_simulation(row)
    np.testing.assert_array_equal(bm.get_positions(row.data), X)
