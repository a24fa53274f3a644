"""The farm job types (farm/): the OpenJD template validated by openjd-model and run whole by
``openjd run`` (every step a process calling our CLI through this Python, the PyPI bpy as
Blender, the bake in two shards), against a one-machine run of the Flamenco job type's
commands (compiled by Node as Flamenco compiles it, one shard, run here through the CLI):
the merged dataset, the model, the compare report and the simulated cache agree. A shard
whose worker died mid-bake, re-run alone, resumes its variant after its last committed
frame and ends on the same bits. The Flamenco job type's own
tests run in Node's test runner.

The asset is tiny (a 0.5 m ball at tet size 0.3, 2 variants of 4 frames, a 3-mode linear
model): the module took 77-115 s on 2 cores at load 13-22 (its fixture 65-80 s, the shard
re-runs 14 s), most of it the 7 processes of ``openjd run`` each importing bpy.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from .blender_fixtures import addon_module, fresh_file

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "farm" / "openjd" / "template.yaml"
FLAMENCO_TESTS = ROOT / "farm" / "flamenco" / "tests"
NODE = shutil.which("node")
OPENJD = shutil.which("openjd", path=str(Path(sys.executable).parent))

openjd_model = pytest.importorskip("openjd.model", reason="the farm tests need openjd-model")

# the small asset's job parameters, shared by both runs
VARIANTS, SEED, FRAMES = 2, 0, "1:6"
TRAIN = ["--k", "3", "--max-cubature", "20"]


def load_template() -> dict:
    import yaml

    return yaml.safe_load(TEMPLATE.read_text())


def make_asset(folder: Path) -> Path:
    """A ball an artist would make: an ico sphere, Deformable, random pokes, 4 frames."""
    bpy = fresh_file()
    package = addon_module()
    package.register()
    try:
        bpy.ops.mesh.primitive_ico_sphere_add(subdivisions=2, radius=0.5, location=(0, 0, 1))
        obj = bpy.context.object
        obj.name = "Ball"
        s = obj.neural_rom
        s.role, s.tet_size, s.frames, s.scenario = "DEFORMABLE", 0.3, 4, "random_pokes"
        bpy.context.scene.frame_end = 6
        folder.mkdir(parents=True)
        blend = folder / "shot.blend"
        bpy.ops.wm.save_as_mainfile(filepath=str(blend))
    finally:
        package.unregister()
    return blend


def flamenco_tasks(settings: dict) -> list[dict]:
    out = subprocess.run(
        [NODE, str(FLAMENCO_TESTS / "harness.js"), json.dumps(settings)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout)


def run_flamenco_tasks(tasks: list[dict]) -> None:
    """Each task's command as a worker runs it: ``{blender} {blenderArgs} <blend> --command
    neural_rom ARGS`` is, with the PyPI bpy, ``cli.main(ARGS + --file <blend>)`` (the tasks
    in the order compiled, which is an order their dependencies allow)."""
    from neural_rom.ui import cli

    done: set[str] = set()
    for task in tasks:
        assert set(task["dependencies"]) <= done, task["name"]
        (cmd,) = task["commands"]
        p = cmd["parameters"]
        assert cmd["name"] == "blender-render" and p["args"][:2] == ["--command", "neural_rom"]
        assert cli.main([*p["args"][2:], "--file", p["blendfile"]]) == 0, task["name"]
        done.add(task["name"])


def openjd_run(project: Path, *extra: str) -> subprocess.CompletedProcess:
    params = {
        "ProjectDir": str(project),
        "BlendFile": "shot.blend",
        "Object": "Ball",
        "Blender": sys.executable,
        "Variants": VARIANTS,
        "Shards": 2,
        "Seed": SEED,
        "TrainOptions": " ".join(TRAIN),
        "SimulateFrames": FRAMES,
    }
    argv = [OPENJD, "run", str(TEMPLATE), "--job-param", json.dumps(params), *extra]
    return subprocess.run(argv, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if NODE is None or OPENJD is None:
        pytest.skip("the farm runs need Node (the Flamenco job type) and openjd-cli")
    base = tmp_path_factory.mktemp("farm")
    one = make_asset(base / "one").parent
    farm = base / "openjd"
    shutil.copytree(one, farm)
    # one machine: the Flamenco job type's commands with one shard holding both variants
    tasks = flamenco_tasks(
        {
            "object": "Ball",
            "blendfile": str(one / "shot.blend"),
            "variants": VARIANTS,
            "variants_per_task": VARIANTS,
            "seed": SEED,
            "train_options": " ".join(TRAIN),
            "simulate_frames": FRAMES,
        }
    )
    package = addon_module()
    fresh_file()
    package.register()
    try:
        run_flamenco_tasks(tasks)
    finally:
        from neural_rom.addon import jobs

        for state in jobs.active_jobs():
            jobs._JOBS[state.id].job.wait(timeout=10)
        jobs._JOBS.clear()  # as the addon fixture does: later tests start with no jobs
        package.unregister()
    result = openjd_run(farm)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return {"one": one, "farm": farm, "tasks": tasks, "log": result.stdout}


def test_the_template_validates_and_its_graph_is_the_pipeline():
    from openjd.model import create_job, decode_job_template

    template = decode_job_template(template=load_template())
    steps = {s.name: s for s in template.steps}
    assert list(steps) == ["Tetrahedralize", "Bake", "Merge", "Train", "Compare", "Simulate"]
    deps = {n: [d.dependsOn for d in s.dependencies or []] for n, s in steps.items()}
    assert deps == {
        "Tetrahedralize": [],
        "Bake": ["Tetrahedralize"],
        "Merge": ["Bake"],
        "Train": ["Merge"],
        "Compare": ["Train"],
        "Simulate": ["Train"],
    }
    params = {"ProjectDir": "/proj", "Object": "Body", "Shards": "5"}
    job = create_job(job_template=template, job_parameter_values=_values(template, params))
    bake = next(s for s in job.steps if s.name == "Bake")
    from openjd.model import StepParameterSpaceIterator

    shards = [t["Shard"].value for t in StepParameterSpaceIterator(space=bake.parameterSpace)]
    assert shards == ["1", "2", "3", "4", "5"]
    # the paths a job attachment or a shared disk carries: one INOUT folder
    pdir = next(p for p in template.parameterDefinitions if p.name == "ProjectDir")
    assert (pdir.type.value, pdir.objectType.value, pdir.dataFlow.value) == (
        "PATH",
        "DIRECTORY",
        "INOUT",
    )
    # a GPU fleet for the torch methods: the requirement the template's comment shows
    gpu = load_template()
    gpu["steps"][3]["hostRequirements"] = {"amounts": [{"name": "amount.worker.gpu", "min": 1}]}
    assert decode_job_template(template=gpu).steps[3].hostRequirements.amounts[0].min == 1


def _values(template, given: dict):
    from openjd.model import preprocess_job_parameters

    return preprocess_job_parameters(
        job_template=template,
        job_parameter_values=given,
        job_template_dir=TEMPLATE.parent,
        current_working_dir=TEMPLATE.parent,
    )


def test_the_flamenco_job_type_passes_its_node_tests():
    if NODE is None:
        pytest.skip("Node is not installed: the Flamenco job type's tests run in Node")
    r = subprocess.run(
        [NODE, "--test", str(FLAMENCO_TESTS)], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and "# fail 0" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]


def test_the_openjd_job_gives_the_one_machine_dataset_model_report_and_cache(runs):
    from neural_rom.core.data.cache import BakeDataset
    from neural_rom.core.data.modelfile import load_model
    from neural_rom.core.data.pc2 import read_pc2

    one, farm = runs["one"], runs["farm"]
    assert "Running step 'Bake'" in runs["log"] and "Running step 'Simulate'" in runs["log"]
    cache = Path("neural_rom") / "Ball"
    a = BakeDataset.open(one / cache / "bakes")
    b = BakeDataset.open(farm / cache / "bakes")
    assert len(a.trajectories) == len(b.trajectories) == VARIANTS
    for ta, tb in zip(a.trajectories, b.trajectories):
        assert ta.path.name == tb.path.name and ta.status == tb.status == "complete"
        np.testing.assert_array_equal(ta.positions, tb.positions)  # seeded: the same bits

    ma = load_model(one / cache / "models" / "linear.nrmodel")
    mb = load_model(farm / cache / "models" / "linear.nrmodel")
    assert sorted(ma.arrays) == sorted(mb.arrays) and ma.mesh_hash == mb.mesh_hash
    for name in ma.arrays:
        np.testing.assert_allclose(ma.arrays[name], mb.arrays[name], rtol=1e-9, atol=1e-12)

    ra = json.loads((one / "neural_rom" / "Ball_compare.json").read_text())["bakes"]
    rb = json.loads((farm / "neural_rom" / "Ball_compare.json").read_text())["bakes"]
    assert [r["bake"] for r in ra] == [r["bake"] for r in rb] and ra
    for x, y in zip(ra, rb):
        for key, value in x.items():
            if key.endswith("_m") or key.endswith("_pct"):
                assert y[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    fa, start_a, _ = read_pc2(one / "neural_rom" / "Ball_reduced.pc2")
    fb, start_b, _ = read_pc2(farm / "neural_rom" / "Ball_reduced.pc2")
    assert fa.shape == fb.shape == (6, fa.shape[1], 3) and start_a == start_b == 1
    assert np.abs(fa[-1] - fa[0]).max() > 1e-3  # the pokes move it
    np.testing.assert_allclose(fb, fa, rtol=0, atol=1e-6)


def test_a_crashed_shard_rerun_alone_resumes_its_variant_after_its_last_committed_frame(runs):
    from neural_rom.core.data.cache import BakeCache

    bakes = runs["farm"] / "neural_rom" / "Ball" / "bakes"
    v0, v1 = sorted(bakes.glob("*.nrbake"))
    before = BakeCache.open(v1).positions.copy()
    stamp = (v0 / "commit.json").stat().st_mtime_ns
    # a worker killed after committing frame 1: the commit record names 2 frames (the
    # bytes past them stay, as a crash mid-frame leaves them; core/cache.py ignores them)
    commit = json.loads((v1 / "commit.json").read_text())
    (v1 / "commit.json").write_text(json.dumps({**commit, "frames": 2}))
    assert BakeCache.open(v1).n_frames == 2
    r = openjd_run(
        runs["farm"], "--step", "Bake", "--task-param", "Shard=2", "--no-run-dependencies"
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "shard 1/2" in r.stdout and f"{v1.name} resumed at frame 2" in r.stdout
    assert (v0 / "commit.json").stat().st_mtime_ns == stamp  # the other shard's variant
    np.testing.assert_array_equal(BakeCache.open(v1).positions, before)
    # the task run again finds its variant complete and keeps it
    r = openjd_run(
        runs["farm"], "--step", "Bake", "--task-param", "Shard=2", "--no-run-dependencies"
    )
    assert r.returncode == 0 and f"{v1.name} was complete and is kept" in r.stdout
