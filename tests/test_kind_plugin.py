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
