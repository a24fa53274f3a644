"""core.modelfile: bit-exact round trips, atomic writes, and every way a model file can be wrong."""

import json
import os

import numpy as np
import pytest
from neural_rom.core.data import modelfile
from neural_rom.core.data.files import mesh_hash
from neural_rom.core.data.modelfile import MODEL_SCHEMA, SUFFIX, Model, load_model, save_model
from neural_rom.core.errors import CacheError
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.reduced.nnet import MLP

HASH = "ab" * 32
OTHER_HASH = "cd" * 32


def sample_arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "U": rng.normal(size=(30, 4)),
        "x_rest": rng.normal(size=30).astype(np.float32),
        "cubature.elements": rng.integers(0, 100, size=12),
        "cubature.weights": rng.random(12),
        "pinned": rng.random(10) > 0.5,
        "spectrum": rng.normal(size=3) + 1j * rng.normal(size=3),
        "big_endian": np.arange(5, dtype=">f8"),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 3)),
        "bytes-u8": np.arange(7, dtype=np.uint8),
    }


def save_sample(tmp_path, name="m.nrmodel", **kw):
    args = {
        "method": "pca",
        "mesh_hash": HASH,
        "arrays": sample_arrays(),
        "metadata": {"material": {"E": 1e5, "nu": 0.45, "density": 1000.0}, "dt": 1 / 24},
    }
    args.update(kw)
    return save_model(tmp_path / name, **args)


def rewrite(path, edit_meta=None, edit_arrays=None):
    """Re-save a model's members with edited metadata and/or arrays (manifest left as is)."""
    with np.load(path, allow_pickle=False) as z:
        members = {k: z[k] for k in z.files}
    meta = json.loads(members.pop("__meta__").tobytes())
    if edit_meta:
        edit_meta(meta)
    if edit_arrays:
        edit_arrays(members)
    members["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **members)


def test_round_trip_is_bit_exact_with_metadata(tmp_path):
    arrays = sample_arrays()
    meta = {
        "material": {"E": 1e5, "nu": 0.45, "density": 1000.0},
        "dt": 1 / 24,
        "training": {"epochs": np.int64(200), "lr": np.float32(1e-3), "seed": 0},
        "metrics": {"train_rmse": 1.25e-4, "energy": np.array([1.0, 0.5])},
        "note": "héllo",
    }
    p = save_model(
        tmp_path / "cube.nrmodel", method="pca", mesh_hash=HASH, arrays=arrays, metadata=meta
    )
    assert p == tmp_path / "cube.nrmodel"
    m = load_model(p, expect_mesh_hash=HASH, expect_method="pca")
    assert isinstance(m, Model)
    assert (m.path, m.method, m.mesh_hash, m.schema) == (p, "pca", HASH, MODEL_SCHEMA)
    assert m.created.endswith("+00:00") and m.tool_version
    assert sorted(m.arrays) == sorted(arrays)
    for k, a in arrays.items():
        b = m.arrays[k]
        assert b.dtype == a.dtype and b.shape == a.shape, k
        assert b.tobytes() == a.tobytes(), k
    assert m.metadata["dt"] == 1 / 24
    assert m.metadata["training"] == {"epochs": 200, "lr": pytest.approx(1e-3), "seed": 0}
    assert m.metadata["metrics"]["energy"] == [1.0, 0.5]
    assert m.metadata["note"] == "héllo"
    assert "pca" in repr(m) and HASH[:12] in repr(m)


def test_file_is_a_plain_uncompressed_npz_with_json_meta(tmp_path):
    import zipfile

    p = save_sample(tmp_path)
    with zipfile.ZipFile(p) as zf:
        assert all(i.compress_type == zipfile.ZIP_STORED for i in zf.infolist())
    with np.load(p, allow_pickle=False) as z:
        meta = json.loads(z["__meta__"].tobytes().decode())
    assert meta["format"] == "neural_rom.model" and meta["schema"] == 1 and meta["method"] == "pca"
    entry = meta["arrays"]["U"]
    assert entry["shape"] == [30, 4] and entry["dtype"] == "<f8" and len(entry["sha256"]) == 64


def test_suffix_is_added_only_when_the_name_has_none(tmp_path):
    assert save_sample(tmp_path, name="bare") == tmp_path / ("bare" + SUFFIX)
    assert save_sample(tmp_path, name="x.npz") == tmp_path / "x.npz"
    assert load_model(tmp_path / "bare.nrmodel").method == "pca"


def test_atomic_write_leaves_no_temp_files_and_keeps_the_old_model_on_failure(
    tmp_path, monkeypatch
):
    p = save_sample(tmp_path)
    save_sample(tmp_path, method="autoencoder")  # overwrite in place
    assert os.listdir(tmp_path) == ["m.nrmodel"]
    assert load_model(p).method == "autoencoder"

    real_savez = np.savez

    def crash(f, **arrays):  # writes half a file, then dies (disk full, Esc, power cut)
        real_savez(f, **{k: v for k, v in list(arrays.items())[:2]})
        raise OSError("No space left on device")

    monkeypatch.setattr(modelfile.np, "savez", crash)
    with pytest.raises(OSError, match="No space"):
        save_sample(tmp_path, method="licrom")
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["m.nrmodel"]
    assert load_model(p).method == "autoencoder"  # the previous model, intact

    with pytest.raises(ValueError, match="JSON-serializable"):
        save_sample(tmp_path, metadata={"f": object()})
    assert os.listdir(tmp_path) == ["m.nrmodel"]


def test_save_rejects_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="bad array name '__meta__'"):
        save_sample(tmp_path, arrays={"__meta__": np.zeros(2)})
    with pytest.raises(ValueError, match="bad array name 'a/b'"):
        save_sample(tmp_path, arrays={"a/b": np.zeros(2)})
    with pytest.raises(ValueError, match="only numeric and boolean.*metadata"):
        save_sample(tmp_path, arrays={"names": np.array(["a", "b"], dtype=object)})
    with pytest.raises(ValueError, match="only numeric and boolean"):
        save_sample(tmp_path, arrays={"s": np.array(["abc"])})
    with pytest.raises(ValueError, match="method must be a non-empty string"):
        save_sample(tmp_path, method="")
    with pytest.raises(ValueError, match="mesh_hash"):
        save_sample(tmp_path, mesh_hash=None)
    with pytest.raises(CacheError, match="does not exist; create it"):
        save_sample(tmp_path, name="no/such/dir/m.nrmodel")
    assert os.listdir(tmp_path) == []


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(CacheError, match="no model file at .*train .* a model first"):
        load_model(tmp_path / "nope.nrmodel")
    with pytest.raises(CacheError, match="is not a file"):
        load_model(tmp_path)


@pytest.mark.parametrize("cut", [1, 5, 22, 200, 5000])
def test_truncated_file_is_reported_as_truncated(tmp_path, cut):
    p = save_sample(tmp_path)
    data = p.read_bytes()
    p.write_bytes(data[:-cut])
    with pytest.raises(CacheError, match="truncated or corrupt.*re-export or retrain"):
        load_model(p)


def test_not_an_archive(tmp_path):
    p = tmp_path / "m.nrmodel"
    p.write_bytes(b"BLENDER-v402" + bytes(100))
    with pytest.raises(CacheError, match="truncated or corrupt.*not a Neural ROM model"):
        load_model(p)


# a small array (its zip CRC is checked while the headers are scanned) and a large one
@pytest.mark.parametrize("name", ["U", "basis"])
def test_flipped_byte_inside_an_array_is_corrupt(tmp_path, name):
    arrays = {**sample_arrays(), "basis": np.random.default_rng(1).normal(size=(3000, 4))}
    p = save_sample(tmp_path, arrays=arrays)
    a = arrays[name]
    data = bytearray(p.read_bytes())
    at = data.find(a.tobytes())
    assert at > 0
    data[at + a.nbytes // 2] ^= 0x01  # one bit of one float
    p.write_bytes(bytes(data))
    with pytest.raises(
        CacheError,
        match=rf"model file .* is corrupt \(array '{name}'.*re-export the model or retrain",
    ):
        load_model(p)


def test_manifest_detects_arrays_swapped_behind_the_zip_checksums(tmp_path):
    # a consistent zip whose arrays no longer match what was written: checksum, shape, dtype
    p = save_sample(tmp_path)

    def bump(m):
        m["U"] = m["U"].copy()
        m["U"][0, 0] += 1e-12

    rewrite(p, edit_arrays=bump)
    with pytest.raises(CacheError, match="array 'U' does not match its checksum"):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_arrays=lambda m: m.update(U=m["U"][:-1]))
    with pytest.raises(CacheError, match=r"array 'U' has shape \(29, 4\), expected \(30, 4\)"):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_arrays=lambda m: m.update(U=m["U"].astype(np.float32)))
    with pytest.raises(CacheError, match="array 'U' has dtype <f4, expected <f8"):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_arrays=lambda m: m.pop("pinned"))
    with pytest.raises(
        CacheError, match=r"corrupt \(arrays missing: \['pinned'\], unexpected: \[\]"
    ):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_arrays=lambda m: m.update(extra=np.zeros(2)))
    with pytest.raises(CacheError, match=r"unexpected: \['extra'\]"):
        load_model(p)


def test_newer_and_older_schema(tmp_path):
    p = save_sample(tmp_path)
    rewrite(p, edit_meta=lambda m: m.update(schema=MODEL_SCHEMA + 1))
    with pytest.raises(
        CacheError,
        match=rf"made by a newer Neural ROM \(schema {MODEL_SCHEMA + 1}\); this version reads "
        rf"{MODEL_SCHEMA}: update the extension",
    ):
        load_model(p)
    rewrite(p, edit_meta=lambda m: m.update(schema=MODEL_SCHEMA - 1))
    with pytest.raises(CacheError, match=r"older Neural ROM \(schema 0\).*retrain"):
        load_model(p)
    rewrite(p, edit_meta=lambda m: m.update(schema="1"))
    with pytest.raises(CacheError, match="corrupt .*no integer schema"):
        load_model(p)


def test_wrong_mesh_and_wrong_method(tmp_path):
    p = save_sample(tmp_path)
    with pytest.raises(
        CacheError,
        match=rf"trained for another mesh \(hash {HASH[:12]}, this mesh is {OTHER_HASH[:12]}\); "
        "re-train for this mesh or pick the right object",
    ):
        load_model(p, expect_mesh_hash=OTHER_HASH)
    with pytest.raises(CacheError, match="is a 'pca' model, not 'licrom'"):
        load_model(p, expect_method="licrom")
    assert load_model(p, expect_mesh_hash=HASH).mesh_hash == HASH


def test_foreign_npz_and_broken_metadata(tmp_path):
    p = tmp_path / "foreign.nrmodel"
    with open(p, "wb") as f:
        np.savez(f, U=np.eye(3))
    with pytest.raises(CacheError, match="no Neural ROM metadata: it is not a model file"):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_meta=lambda m: m.update(format="someone.else"))
    with pytest.raises(CacheError, match="not a Neural ROM model file \\(format 'someone.else'"):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_meta=lambda m: m.pop("mesh_hash"))
    with pytest.raises(CacheError, match="corrupt .*no mesh_hash"):
        load_model(p)

    p = save_sample(tmp_path)
    rewrite(p, edit_meta=lambda m: m.update(arrays=[]))
    with pytest.raises(CacheError, match="no valid array manifest"):
        load_model(p)

    with open(p, "wb") as f:
        np.savez(f, U=np.eye(3), __meta__=np.frombuffer(b"{not json", dtype=np.uint8))
    with pytest.raises(CacheError, match="metadata is not valid JSON"):
        load_model(p)


class _Boom:
    ran = False

    def __reduce__(self):  # what a malicious pickle would do on load
        return (_Boom._run, ())

    @staticmethod
    def _run():
        _Boom.ran = True


def test_pickled_object_arrays_are_refused_without_unpickling(tmp_path):
    p = save_sample(tmp_path)
    evil = np.empty(1, dtype=object)
    evil[0] = _Boom()

    def add_evil(m):
        m["evil"] = evil

    def add_to_manifest(meta):
        meta["arrays"]["evil"] = {"shape": [1], "dtype": "|O", "sha256": "0" * 64}

    rewrite(p, edit_meta=add_to_manifest, edit_arrays=add_evil)
    with pytest.raises(CacheError, match="pickled object array 'evil'; pickled data is refused"):
        load_model(p)
    # also when the object array is the metadata itself, or the file has no metadata at all
    with open(p, "wb") as f:
        np.savez(f, __meta__=evil)
    with pytest.raises(CacheError, match="pickled object array '__meta__'"):
        load_model(p)
    with open(p, "wb") as f:
        np.savez(f, evil=evil)
    with pytest.raises(CacheError, match="pickled object array 'evil'"):
        load_model(p)
    assert not _Boom.ran


def test_mlp_and_real_mesh_hash_through_a_model_file(tmp_path):
    X, T = grid_tetmesh((0.1, 0.1, 0.1), (2, 2, 2))
    h = mesh_hash(X, T)
    rng = np.random.default_rng(3)
    dec = MLP(
        [rng.normal(size=(16, 3)), rng.normal(size=(16, 16)), rng.normal(size=(3 * len(X), 16))],
        [rng.normal(size=16), rng.normal(size=16), rng.normal(size=3 * len(X))],
        ["elu", "elu", "identity"],
    )
    arrays, net_meta = dec.to_arrays(prefix="decoder.", dtype=np.float32)
    p = save_model(
        tmp_path / "cube",
        method="autoencoder",
        mesh_hash=h,
        arrays={**arrays, "X": X},
        metadata={"decoder": net_meta, "dt": 0.01, "metrics": {"val_rmse": 1e-3}},
    )
    m = load_model(p, expect_mesh_hash=h, expect_method="autoencoder")
    back = MLP.from_arrays(m.arrays, m.metadata["decoder"])
    z = rng.normal(size=3)
    np.testing.assert_array_equal(back.forward(z), MLP.from_arrays(arrays, net_meta).forward(z))
    # the same grid moved by a micrometre is another mesh
    with pytest.raises(CacheError, match="another mesh"):
        load_model(p, expect_mesh_hash=mesh_hash(X + 1e-6, T))
