"""Bake caches: round trips, crash/cancel safety, damaged and foreign caches, shards."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from neural_rom.core.data import cache as cache_mod
from neural_rom.core.data.cache import (
    SCHEMA_VERSION,
    BakeCache,
    BakeDataset,
    BakeWriter,
    Channel,
    open_for_training,
)
from neural_rom.core.data.files import mesh_hash
from neural_rom.core.errors import CacheError, JobCancelled

N_VERTS = 7


def tet_mesh(shift: float = 0.0):
    X = np.array(
        [[0, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1]], float
    )
    X[:, 0] += shift
    T = np.array([[0, 1, 2, 3], [1, 4, 2, 3], [1, 5, 4, 3], [2, 4, 6, 3]], np.int64)
    return X, T


CHANNELS = {
    "positions": (N_VERTS, 3),
    "colliders": ((2, 4, 4), "<f4"),
    "newton_iters": ((), "<i4"),
    "dt": (),
}


def make_frame(rng, i):
    X, _ = tet_mesh()
    return {
        "positions": X + 0.01 * i + rng.standard_normal((N_VERTS, 3)) * 1e-3,
        "colliders": rng.standard_normal((2, 4, 4)).astype(np.float32),
        "newton_iters": np.int32(3 + i),
        "dt": 1.0 / 24.0,
    }


def write_bake(path, n, rng, *, shift=0.0, channels=CHANNELS, **kw):
    X, T = tet_mesh(shift)
    frames = []
    with BakeWriter(
        path,
        X=X,
        T=T,
        channels=channels,
        metadata={"dt": np.float64(1 / 24), "seed": np.int64(7), "material": {"E": 1e5}},
        extra_arrays={"pinned": np.array([0, 3])},
        **kw,
    ) as w:
        for i in range(n):
            f = make_frame(rng, i)
            assert w.append(**f) == i + 1
            frames.append(f)
    return frames


def file_sizes(path):
    return {p.name: p.stat().st_size for p in Path(path).iterdir()}


# ---------------------------------------------------------------------- round trip


def test_round_trip_bit_for_bit(tmp_path, rng):
    p = tmp_path / "a.nrbake"
    frames = write_bake(p, 6, rng)
    c = BakeCache.open(p)
    assert c.n_frames == len(c) == 6 and c.status == "complete"
    assert c.schema == SCHEMA_VERSION
    X, T = tet_mesh()
    assert np.array_equal(c.X, X) and c.X.dtype == np.float64
    assert np.array_equal(c.T, T) and c.T.dtype == np.int64
    assert c.mesh_hash == mesh_hash(X, T)
    assert np.array_equal(c.extra("pinned"), [0, 3])
    assert c.meta == {"dt": 1 / 24, "seed": 7, "material": {"E": 1e5}}
    assert c.metadata_full["channels"]["colliders"] == {"dtype": "<f4", "shape": [2, 4, 4]}
    pos = c.positions
    assert isinstance(pos, np.memmap) and pos.shape == (6, N_VERTS, 3)
    assert not pos.flags.writeable
    for name in CHANNELS:
        arr = c.channel(name)
        assert isinstance(arr, np.memmap)
        want = np.stack([np.asarray(f[name]) for f in frames]).astype(c.channels[name].dtype)
        assert arr.dtype == want.dtype
        assert arr.tobytes() == want.tobytes()  # bit for bit
    fr = c.frame(-1)
    assert fr["newton_iters"] == 8 and fr["dt"] == 1 / 24
    assert np.array_equal(fr["positions"], frames[-1]["positions"])
    with pytest.raises(IndexError, match="6 frames"):
        c.frame(6)
    # raw layout: frame i of positions at byte offset i * n * 3 * 8, little endian
    raw = np.fromfile(p / "positions.bin", dtype="<f8").reshape(6, N_VERTS, 3)
    assert np.array_equal(raw, pos)
    assert c.nbytes >= 6 * N_VERTS * 3 * 8
    with pytest.raises(CacheError, match="no channel 'velocities'"):
        c.channel("velocities")
    with pytest.raises(CacheError, match="no extra array 'embedding'"):
        c.extra("embedding")


def test_open_does_not_read_data_huge_sparse_file(tmp_path, rng):
    p = tmp_path / "big.nrbake"
    write_bake(p, 3, rng)
    huge = 1 << 36  # 64 GiB, sparse: no data blocks allocated
    with open(p / "positions.bin", "r+b") as f:
        f.truncate(huge)
    assert (p / "positions.bin").stat().st_size == huge
    c = BakeCache.open(p)  # judged by the commit count, not the file size
    assert c.n_frames == 3
    pos = c.channel("positions")
    assert isinstance(pos, np.memmap) and pos.shape == (3, N_VERTS, 3)
    # a resume cuts the file back to the committed frames
    w = BakeWriter.resume(p)
    assert (p / "positions.bin").stat().st_size == 3 * N_VERTS * 3 * 8
    w.close()


def test_empty_bake_and_extend(tmp_path, rng):
    p = tmp_path / "e.nrbake"
    X, T = tet_mesh()
    w = BakeWriter(p, X=X, T=T, channels=[Channel("positions", (N_VERTS, 3))], metadata={})
    c = BakeCache.open(p)
    assert c.n_frames == 0 and c.status == "in_progress"
    assert c.positions.shape == (0, N_VERTS, 3)
    block = rng.standard_normal((4, N_VERTS, 3))
    assert w.extend(positions=block) == 4
    assert c.refresh() == 4  # a reader follows a bake in progress
    assert np.array_equal(c.positions, block)
    w.close()
    assert BakeCache.open(p).status == "complete"
    with pytest.raises(CacheError, match="closed"):
        w.append(positions=block[0])


# ---------------------------------------------------------------------- crash / cancel


def test_crash_mid_frame_then_resume(tmp_path, rng):
    p = tmp_path / "crash.nrbake"
    X, T = tet_mesh()
    w = BakeWriter(p, X=X, T=T, channels=CHANNELS, metadata={"seed": 1})
    frames = [make_frame(rng, i) for i in range(6)]
    for f in frames[:5]:
        w.append(**f)
    # Simulate a crash: the process dies while writing frame 5, half its bytes on disk,
    # the commit never rewritten, the writer never closed.
    w._close_files()
    half = N_VERTS * 3 * 8 // 2
    with open(p / "positions.bin", "ab") as fh:
        fh.write(os.urandom(half))
    del w

    c = BakeCache.open(p)
    assert c.n_frames == 5 and c.status == "in_progress"
    assert np.array_equal(c.positions[4], frames[4]["positions"])

    w = BakeWriter.resume(p)
    assert w.frames == 5 and BakeCache.open(p).status == "in_progress"
    assert (p / "positions.bin").stat().st_size == 5 * N_VERTS * 3 * 8  # garbage cut away
    assert w.append(**frames[5]) == 6
    w.close()
    c = BakeCache.open(p)
    assert c.n_frames == 6 and c.status == "complete"
    want = np.stack([f["positions"] for f in frames])
    assert c.positions.tobytes() == want.tobytes()
    assert np.array_equal(c.channel("newton_iters"), np.arange(6) + 3)
    assert c.meta == {"seed": 1}


def test_cancel_in_context_manager(tmp_path, rng):
    p = tmp_path / "cancel.nrbake"
    X, T = tet_mesh()
    with (
        pytest.raises(JobCancelled),
        BakeWriter(p, X=X, T=T, channels=CHANNELS, metadata={}) as w,
    ):
        for i in range(10):
            if i == 3:
                raise JobCancelled("user pressed Esc")
            w.append(**make_frame(rng, i))
    c = BakeCache.open(p)
    assert c.status == "cancelled" and c.n_frames == 3
    assert w.closed


def test_failure_in_context_manager_records_message(tmp_path, rng):
    p = tmp_path / "fail.nrbake"
    X, T = tet_mesh()
    with (
        pytest.raises(RuntimeError),
        BakeWriter(p, X=X, T=T, channels=CHANNELS, metadata={}) as w,
    ):
        w.append(**make_frame(rng, 0))
        raise RuntimeError("Newton diverged")
    c = BakeCache.open(p)
    assert c.status == "failed: Newton diverged" and c.n_frames == 1


def test_stale_tmp_files_are_ignored(tmp_path, rng):
    p = tmp_path / "tmp.nrbake"
    frames = write_bake(p, 4, rng)
    # a crash between writing the temp file and os.replace leaves these behind
    (p / "commit.json.tmp").write_text('{"frames": 999, "bake_')
    (p / "meta.json.tmp").write_text("garbage")
    c = BakeCache.open(p)
    assert c.n_frames == 4 and c.status == "complete"
    w = BakeWriter.resume(p)
    assert not (p / "commit.json.tmp").exists() and not (p / "meta.json.tmp").exists()
    w.append(**make_frame(rng, 4))
    w.close()
    c = BakeCache.open(p)
    assert c.n_frames == 5
    assert np.array_equal(c.positions[:4], np.stack([f["positions"] for f in frames]))
    assert json.loads((p / "commit.json").read_text())["frames"] == 5


# ---------------------------------------------------------------------- damaged / foreign


def test_truncated_channel(tmp_path, rng):
    p = tmp_path / "trunc.nrbake"
    write_bake(p, 4, rng)
    with open(p / "colliders.bin", "r+b") as f:
        f.truncate(3 * 2 * 4 * 4 * 4 + 10)  # 3.3 frames of 4 committed
    with pytest.raises(CacheError, match=r"colliders\.bin.*truncated.*re-bake"):
        BakeCache.open(p)
    with pytest.raises(CacheError, match="truncated"):
        BakeWriter.resume(p)
    (p / "colliders.bin").unlink()
    with pytest.raises(CacheError, match=r"missing the channel file colliders\.bin"):
        BakeCache.open(p)


def test_foreign_mesh_and_schema(tmp_path, rng):
    p = tmp_path / "f.nrbake"
    write_bake(p, 2, rng)
    X, T = tet_mesh()
    assert BakeCache.open(p, expect_mesh_hash=mesh_hash(X, T)).n_frames == 2
    other = mesh_hash(*tet_mesh(shift=1e-9))
    assert other != mesh_hash(X, T)
    with pytest.raises(
        CacheError, match="belongs to another mesh.*bake it again for the current mesh"
    ):
        BakeCache.open(p, expect_mesh_hash=other)
    with pytest.raises(CacheError, match="another mesh"):
        BakeWriter.resume(p, expect_mesh_hash=other)

    meta = json.loads((p / "meta.json").read_text())
    for schema, hint in ((SCHEMA_VERSION + 1, "newer"), (SCHEMA_VERSION - 1, "older")):
        meta["schema"] = schema
        (p / "meta.json").write_text(json.dumps(meta))
        with pytest.raises(CacheError) as e:
            BakeCache.open(p)
        msg = str(e.value)
        assert f"schema version {schema}" in msg and hint in msg
        assert f"reads schema version {SCHEMA_VERSION}" in msg


def test_not_a_bake_and_corrupt_json(tmp_path, rng):
    with pytest.raises(CacheError, match="no bake at"):
        BakeCache.open(tmp_path / "nothing.nrbake")
    (tmp_path / "plain").mkdir()
    with pytest.raises(CacheError, match="not a Neural ROM bake"):
        BakeCache.open(tmp_path / "plain")
    p = tmp_path / "c.nrbake"
    write_bake(p, 2, rng)
    (p / "meta.json").unlink()
    with pytest.raises(CacheError, match="not a Neural ROM bake"):
        BakeCache.open(p)

    p = tmp_path / "d.nrbake"
    write_bake(p, 2, rng)
    meta = (p / "meta.json").read_text()
    (p / "meta.json").write_text(meta[: len(meta) // 2])
    with pytest.raises(CacheError, match=r"meta\.json.*corrupt"):
        BakeCache.open(p)
    (p / "meta.json").write_text(json.dumps({**json.loads(meta), "format": "other"}))
    with pytest.raises(CacheError, match="not a Neural ROM bake"):
        BakeCache.open(p)
    (p / "meta.json").write_text(meta)
    (p / "commit.json").write_text("{not json")
    with pytest.raises(CacheError, match=r"commit\.json.*corrupt"):
        BakeCache.open(p)

    # channel names from meta.json become file names: no path traversal
    bad = json.loads(meta)
    bad["channels"] = {"../../evil": {"dtype": "<f8", "shape": [3]}}
    (p / "meta.json").write_text(json.dumps(bad))
    with pytest.raises(CacheError, match="corrupt"):
        BakeCache.open(p)

    # a commit record copied from another bake is refused
    q = tmp_path / "q.nrbake"
    write_bake(q, 2, rng)
    (p / "meta.json").write_text(meta)
    (p / "commit.json").write_text((q / "commit.json").read_text())
    with pytest.raises(CacheError, match="another bake"):
        BakeCache.open(p)


def test_non_finite_frame_refused(tmp_path, rng):
    p = tmp_path / "nan.nrbake"
    X, T = tet_mesh()
    w = BakeWriter(p, X=X, T=T, channels=CHANNELS, metadata={})
    for i in range(3):
        w.append(**make_frame(rng, i))
    before = file_sizes(p)
    commit = (p / "commit.json").read_bytes()
    bad = make_frame(rng, 3)
    bad["colliders"][1, 2, 3] = np.inf  # positions were valid: still nothing written
    with pytest.raises(CacheError, match="frame 3 has non-finite values.*not written"):
        w.append(**bad)
    bad = make_frame(rng, 3)
    bad["dt"] = np.nan
    with pytest.raises(CacheError, match="frame 3 has non-finite"):
        w.append(**bad)
    # float64 values that overflow the float32 channel are non-finite once stored
    bad = make_frame(rng, 3)
    bad["colliders"] = bad["colliders"].astype(np.float64) * 1e300
    with pytest.raises(CacheError, match="non-finite"):
        w.append(**bad)
    block = np.stack([make_frame(rng, 3)["positions"]] * 3)
    block[2, 0, 0] = np.nan
    with pytest.raises(CacheError, match="frame 5 has non-finite"):
        w.extend(
            positions=block, colliders=np.zeros((3, 2, 4, 4)), newton_iters=[1, 2, 3], dt=[0.1] * 3
        )
    assert w.frames == 3 and file_sizes(p) == before
    assert (p / "commit.json").read_bytes() == commit
    assert w.append(**make_frame(rng, 3)) == 4
    w.close()
    assert BakeCache.open(p).n_frames == 4


def test_append_validation_messages(tmp_path, rng):
    p = tmp_path / "v.nrbake"
    X, T = tet_mesh()
    w = BakeWriter(p, X=X, T=T, channels=CHANNELS, metadata={})
    f = make_frame(rng, 0)
    with pytest.raises(ValueError, match=r"missing channels \['dt'\]"):
        w.append(**{k: v for k, v in f.items() if k != "dt"})
    with pytest.raises(ValueError, match=r"unknown channels \['velocity'\]"):
        w.append(**f, velocity=np.zeros(3))
    with pytest.raises(ValueError, match=r"'positions' expects per-frame shape \(7, 3\)"):
        w.append(**{**f, "positions": np.zeros((6, 3))})
    with pytest.raises(ValueError, match="'newton_iters' stores int32"):
        w.append(**{**f, "newton_iters": 2.5})
    assert w.frames == 0
    w.append(**{**f, "positions": np.zeros((N_VERTS, 3), np.float32)})  # safe upcast
    w.close()
    with pytest.raises(ValueError, match="not allowed"):
        Channel("bad name", (3,))
    with pytest.raises(ValueError, match="numeric"):
        Channel("obj", (3,), object)
    assert Channel("p", (3,), ">f4").dtype == "<f4"


def test_overwrite_and_refusals(tmp_path, rng):
    p = tmp_path / "o.nrbake"
    write_bake(p, 3, rng)
    with pytest.raises(CacheError, match="already exists.*overwrite=True"):
        write_bake(p, 1, rng)
    assert BakeCache.open(p).n_frames == 3  # untouched
    write_bake(p, 2, rng, shift=5.0, overwrite=True)
    c = BakeCache.open(p)
    assert c.n_frames == 2 and c.X[0, 0] == 5.0
    assert sorted(x.name for x in tmp_path.iterdir()) == ["o.nrbake"]  # no leftovers
    # a directory with user files is never deleted
    user = tmp_path / "user"
    user.mkdir()
    (user / "keep.txt").write_text("precious")
    with pytest.raises(CacheError, match="not a Neural ROM bake; refusing"):
        write_bake(user, 1, rng, overwrite=True)
    assert (user / "keep.txt").read_text() == "precious"
    # an existing empty directory is fine
    empty = tmp_path / "empty.nrbake"
    empty.mkdir()
    write_bake(empty, 1, rng)
    assert BakeCache.open(empty).n_frames == 1


@pytest.mark.skipif(cache_mod.fcntl is None, reason="the writer lock is POSIX flock")
def test_one_writer_at_a_time(tmp_path, rng, monkeypatch):
    """A second writer (resume or overwrite) waits for the first, then gives up without
    touching the bake; once the first closed (or its process died), it goes on."""
    monkeypatch.setattr(cache_mod, "WRITER_WAIT_S", 0.2)
    p = tmp_path / "w.nrbake"
    X, T = tet_mesh()
    first = BakeWriter(p, X=X, T=T, channels=CHANNELS, metadata={})
    first.append(**make_frame(rng, 0))
    with pytest.raises(CacheError, match="another process is writing the bake .*wait for it"):
        BakeWriter.resume(p)
    with pytest.raises(CacheError, match="another process is writing the bake"):
        write_bake(p, 1, rng, overwrite=True)
    assert first.append(**make_frame(rng, 1)) == 2  # the first writer was not disturbed
    first.close("cancelled")
    assert sorted(x.name for x in tmp_path.iterdir()) == ["w.nrbake"]  # no leftovers
    second = BakeWriter.resume(p)
    assert second.frames == 2 and second.append(**make_frame(rng, 2)) == 3
    second.close()
    assert BakeCache.open(p).n_frames == 3


def test_a_bake_in_a_folder_that_cannot_be_written_is_a_write_error(tmp_path, rng):
    from neural_rom.core.errors import WriteError

    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(WriteError, match="cannot write the bake b.nrbake to .*folder you can"):
        write_bake(tmp_path / "file" / "b.nrbake", 1, rng)


# ---------------------------------------------------------------------- mesh hash


def test_mesh_hash_definition():
    X, T = tet_mesh()
    import hashlib

    want = hashlib.sha256(X.astype("<f8").tobytes() + T.astype("<i8").tobytes()).hexdigest()
    assert mesh_hash(X, T) == want
    # dtype and memory layout of the inputs do not change the identity
    assert mesh_hash(np.asfortranarray(X), T.astype(np.int32)) == want
    assert mesh_hash(X, T[:, [1, 0, 2, 3]]) != want
    with pytest.raises(ValueError, match=r"\(n, 3\)"):
        mesh_hash(X[:, :2], T)


# ---------------------------------------------------------------------- datasets


def test_dataset_of_shards(tmp_path, rng):
    lens = [3, 5, 2]
    all_frames = []
    for k, n in enumerate(lens):
        all_frames.append(write_bake(tmp_path / f"shard{k:02d}.nrbake", n, rng))
    ds = BakeDataset.open(str(tmp_path / "shard*.nrbake"))
    assert len(ds) == 3 and ds.n_frames == 10
    assert [t.n_frames for t in ds] == lens
    cat = ds.concatenated("positions")
    assert cat.shape == (10, N_VERTS, 3) and not isinstance(cat, np.memmap)
    want = np.stack([f["positions"] for fr in all_frames for f in fr])
    assert np.array_equal(cat, want)
    assert np.array_equal(ds.concatenated("positions", [2]), want[8:])
    # a folder of bakes and an explicit list open the same dataset
    assert [t.path for t in BakeDataset.open(tmp_path)] == [t.path for t in ds]
    ds2 = BakeDataset.open([tmp_path / "shard02.nrbake", tmp_path / "shard00.nrbake"])
    assert ds2.n_frames == 5
    X, T = tet_mesh()
    assert BakeDataset.open(str(tmp_path / "*.nrbake"), expect_mesh_hash=mesh_hash(X, T))

    # a shard of another mesh is named
    write_bake(tmp_path / "shard03.nrbake", 2, rng, shift=2.0)
    with pytest.raises(CacheError, match=r"shard03\.nrbake belongs to another mesh"):
        BakeDataset.open(str(tmp_path / "shard*.nrbake"))
    with pytest.raises(CacheError, match=r"shard03\.nrbake belongs to another mesh"):
        BakeDataset.open(str(tmp_path / "shard*.nrbake"), expect_mesh_hash=mesh_hash(X, T))
    # same mesh, other channel table
    write_bake(tmp_path / "odd.nrbake", 1, rng, channels={**CHANNELS, "dt": ((), "<f4")})
    with pytest.raises(CacheError, match=r"odd\.nrbake has channels"):
        BakeDataset.open([tmp_path / "shard00.nrbake", tmp_path / "odd.nrbake"])
    with pytest.raises(CacheError, match="no bakes match"):
        BakeDataset.open(str(tmp_path / "nope*.nrbake"))


def test_split_whole_trajectories_seeded(tmp_path, rng):
    for k in range(10):
        write_bake(tmp_path / f"s{k}.nrbake", 1 + k % 3, rng, durable=False)
    ds = BakeDataset.open(str(tmp_path / "*.nrbake"))
    train, val = ds.split(0.2, seed=3)
    assert len(val) == 2 and len(train) == 8
    assert sorted(np.concatenate([train, val]).tolist()) == list(range(10))  # a partition
    t2, v2 = ds.split(0.2, seed=3)
    assert np.array_equal(train, t2) and np.array_equal(val, v2)
    splits = {tuple(ds.split(0.2, seed=s)[1]) for s in range(20)}
    assert len(splits) > 1  # the seed matters
    # frames of one trajectory never end up on both sides
    n_train = ds.concatenated("positions", train).shape[0]
    n_val = ds.concatenated("positions", val).shape[0]
    assert n_train + n_val == ds.n_frames
    assert ds.split(0.0)[1].size == 0
    assert ds.split(0.01)[1].size == 1  # at least one validation trajectory
    one = BakeDataset.open([tmp_path / "s0.nrbake"])
    tr, va = one.split(0.5)
    assert tr.tolist() == [0] and va.size == 0
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        ds.split(1.0)


def test_metadata_update_and_json(tmp_path, rng):
    p = tmp_path / "m.nrbake"
    X, T = tet_mesh()
    w = BakeWriter(
        p,
        X=X,
        T=T,
        channels={"positions": (N_VERTS, 3)},
        metadata={"scenario": {"gravity": np.array([0, 0, -9.81])}},
    )
    w.update_metadata(newton_tol=1e-6, status="baking frame 0")
    c = BakeCache.open(p)
    assert c.status == "baking frame 0"
    assert c.meta == {"scenario": {"gravity": [0, 0, -9.81]}, "newton_tol": 1e-6}
    with pytest.raises(ValueError, match="JSON"):
        w.update_metadata(bad=object())
    assert BakeCache.open(p).meta == c.meta  # a failed update leaves meta.json intact
    w.close("cancelled")
    assert BakeCache.open(p).status == "cancelled"
    assert cache_mod.FORMAT == json.loads((p / "meta.json").read_text())["format"]


def test_open_for_training_refuses_saying_how_to_make_the_bake_again(tmp_path):
    """What every recorded bake passes before use (FEM bakes and cloth bakes alike): an empty
    bake, one of another mesh and a missing one are refused, each saying how to make it
    again in the words of its kind."""
    X, T = tet_mesh()
    full, empty = tmp_path / "full.nrbake", tmp_path / "empty.nrbake"
    write_bake(full, 2, np.random.default_rng(0), mesh_hash="m")
    write_bake(empty, 0, np.random.default_rng(0), mesh_hash="m")
    assert open_for_training(full, "m", name="b").n_frames == 2
    cases = [
        (empty, "m", "has no frames"),
        (full, "other", r"cannot be used \(bake .* belongs to another mesh"),
        (tmp_path / "gone.nrbake", "m", r"cannot be used \(no bake at"),
    ]
    for where, expect, says in cases:
        with pytest.raises(CacheError, match=f"^Bake 'b' {says}.*; re-bake.$"):
            open_for_training(where, expect, name="b")
        with pytest.raises(CacheError, match=f"^Cloth bake 'b' {says}.*; cloth-bake again.$") as e:
            open_for_training(where, expect, name="b", noun="Cloth bake", redo="cloth-bake again")
        print(e.value)
