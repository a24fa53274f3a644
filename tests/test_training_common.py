"""training/run.py and training/nets.py: what every trainer shares."""

from __future__ import annotations

import pytest
import torch
from neural_rom.core.errors import NeuralRomError
from neural_rom.training.nets import load_torch_checkpoint, save_torch_checkpoint, torch_device


def test_the_training_device_is_chosen_or_refused_with_what_to_do():
    gpu = torch.cuda.is_available()
    assert torch_device("auto").type == ("cuda" if gpu else "cpu")
    assert torch_device(None) == torch_device("auto")
    assert torch_device("CPU") == torch.device("cpu")
    if gpu:
        assert torch_device("cuda:0") == torch.device("cuda:0")
    else:
        with pytest.raises(NeuralRomError, match="install a CUDA build of torch"):
            torch_device("cuda")
    with pytest.raises(NeuralRomError, match="use auto, cpu or cuda"):
        torch_device("tpu")


def test_torch_threads_are_set_on_the_cpu_and_restored():
    from neural_rom.training.nets import torch_threads

    before = torch.get_num_threads()
    with torch_threads("cpu", 1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError), torch_threads(torch.device("cpu"), 1):
        raise RuntimeError("a failing epoch")
    assert torch.get_num_threads() == before


class _NotWeights:
    """An arbitrary object: a checkpoint holding one must not be unpickled."""


def test_checkpoints_round_trip_and_never_unpickle_objects(tmp_path):
    f = tmp_path / "net.pt"
    assert load_torch_checkpoint(f, "cpu") is None
    assert load_torch_checkpoint(None, "cpu") is None
    w = torch.randn(3, 4, dtype=torch.float64)
    save_torch_checkpoint(f, {"w": w, "epoch": 7, "losses": [0.5, 0.25], "stopped": ""})
    st = load_torch_checkpoint(f, "cpu")
    assert torch.equal(st["w"], w) and st["epoch"] == 7 and st["losses"] == [0.5, 0.25]
    # overwriting goes through a temporary: no stray files beside the checkpoint
    save_torch_checkpoint(f, {"w": 2 * w})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["net.pt"]
    assert torch.equal(load_torch_checkpoint(f, "cpu")["w"], 2 * w)
    evil = tmp_path / "evil.pt"
    torch.save({"obj": _NotWeights()}, evil)
    with pytest.raises(Exception, match="[Ww]eights only|weights_only|Unsupported global"):
        load_torch_checkpoint(evil, "cpu")


def test_a_bake_made_again_under_its_name_never_resumes_an_old_checkpoint(tmp_path):
    """Checkpoints are keyed by each bake's id (new whenever a bake is written), not by its
    path: a bake made again under the same name (``bake --restart``) is another run's data.
    (The key fell back to the path: after a re-bake, Compare Methods' linear training took
    the old bakes' basis from its checkpoint, 8 modes where the new bakes give 6.)"""
    from neural_rom.core import bake
    from neural_rom.core.data.cache import BakeDataset
    from neural_rom.core.geometry import grid
    from neural_rom.core.geometry.tetmesh import TetMesh
    from neural_rom.core.physics import fem
    from neural_rom.training.run import Checkpoints

    X, T = grid.grid_tetmesh((0.2, 0.2, 0.2), (1, 1, 1))
    spec = bake.BakeSpec(material=fem.Material.preset("rubber").to_dict(), frames=2, pinned=[0])
    path = tmp_path / "drop.nrbake"
    keys = []
    for _ in range(2):
        bake.bake(TetMesh(X, T), spec, path, overwrite=True)
        keys.append(Checkpoints.open(None, "linear", BakeDataset.open([path]), {}).key)
    assert keys[0] != keys[1]  # same path, same frames, same settings: another bake
    assert Checkpoints.open(None, "linear", BakeDataset.open([path]), {}).key == keys[1]
