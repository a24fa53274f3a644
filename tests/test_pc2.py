import struct

import numpy as np
import pytest
from neural_rom.core.data.pc2 import HEADER_SIZE, PC2Writer, read_pc2, write_pc2
from neural_rom.core.errors import CacheError


def test_round_trip(tmp_path, rng):
    frames = rng.normal(size=(7, 11, 3))
    path = write_pc2(tmp_path / "a.pc2", frames, start_frame=5, sample_rate=0.5)
    got, start, rate = read_pc2(path)
    assert got.shape == (7, 11, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got, frames.astype(np.float32))
    assert (start, rate) == (5.0, 0.5)
    mm, _, _ = read_pc2(path, mmap=True)
    np.testing.assert_array_equal(mm, got)


def test_header_bytes_by_hand(tmp_path):
    frames = np.array([[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]] * 3)
    path = write_pc2(tmp_path / "h.pc2", frames, start_frame=10, sample_rate=1.0)
    raw = path.read_bytes()
    expected_header = (
        b"POINTCACHE2\x00"
        + (1).to_bytes(4, "little")  # version
        + (2).to_bytes(4, "little")  # points
        + struct.pack("<f", 10.0)  # start frame
        + struct.pack("<f", 1.0)  # sample rate
        + (3).to_bytes(4, "little")  # samples
    )
    assert HEADER_SIZE == 32
    assert raw[:32] == expected_header
    assert len(raw) == 32 + 3 * 2 * 3 * 4
    # first point of the first sample, float32 little endian
    assert raw[32:44] == struct.pack("<3f", 1.0, 2.0, 3.0)
    assert raw[-4:] == struct.pack("<f", 6.0)


def test_streaming_generator_holds_one_frame(tmp_path):
    seen = []

    def gen():
        for k in range(5):
            seen.append(k)
            yield np.full((4, 3), float(k))

    path = write_pc2(tmp_path / "g.pc2", gen())
    frames, start, _ = read_pc2(path)
    assert seen == [0, 1, 2, 3, 4] and start == 1.0
    np.testing.assert_array_equal(frames[:, 0, 0], np.arange(5))


def test_failed_write_leaves_previous_file(tmp_path):
    path = write_pc2(tmp_path / "k.pc2", np.zeros((2, 3, 3)))
    before = path.read_bytes()
    with pytest.raises(ValueError, match="expected \\(3, 3\\)"), PC2Writer(path, 3) as w:
        w.write(np.ones((3, 3)))
        w.write(np.ones((4, 3)))  # wrong point count
    assert path.read_bytes() == before
    assert not list(tmp_path.glob("*.partial"))


def test_empty_cache_needs_point_count(tmp_path):
    with pytest.raises(ValueError, match="n_points"):
        write_pc2(tmp_path / "e.pc2", [])
    path = write_pc2(tmp_path / "e.pc2", [], n_points=8)
    frames, _, _ = read_pc2(path)
    assert frames.shape == (0, 8, 3)


def test_bad_and_truncated_files(tmp_path):
    bad = tmp_path / "bad.pc2"
    bad.write_bytes(b"NOTACACHE" + bytes(40))
    with pytest.raises(CacheError, match="not a PC2"):
        read_pc2(bad)
    path = write_pc2(tmp_path / "t.pc2", np.zeros((4, 5, 3)))
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CacheError, match="truncated"):
        read_pc2(path)
