"""A data kind is its own files plus one registry record: a toy kind registered from this file
only (touching no file of the package) is listed with the built-in kinds, is training data a
method can declare (``trains_on``), and its data job runs in the real worker process, which
imports this file from the job's ``kind_origin`` (as a toy method's ``method_origin``:
tests/test_method_plugin.py).

The toy, "wave": its data job writes the bar's nodes swinging up and down over a few frames.
"""

from __future__ import annotations

import pytest
from neural_rom.core import registry
from neural_rom.core.errors import NeuralRomError
from neural_rom.core.registry import DataKind, Method

NAME = "wave"


def toy_kind() -> DataKind:
    return DataKind(
        NAME,
        "Wave (test)",
        "a bar swinging up and down (a test's toy data kind)",
        data_job="wave_bake",
        handler=run_wave_bake,
        order=900,
    )


def run_wave_bake(spec: dict) -> dict:
    """The toy's data job, as the worker runs it: ``handler(spec) -> dict``."""
    return {"frames": int(spec["frames"]), "kind": NAME}


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
    with pytest.raises(NeuralRomError, match=r"trains on a bar swinging .*not on full-space"):
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
