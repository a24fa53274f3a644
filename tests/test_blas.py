"""The BLAS thread count at run time (core/blas.py): set and put back, and the measured
choice of the faster count."""

import time

import numpy as np
from neural_rom.core.physics.blas import (
    blas_libraries,
    blas_threads,
    fastest_threads,
    get_blas_threads,
)


def test_threads_are_set_in_the_block_and_put_back():
    libs = blas_libraries()
    print(f"\nOpenBLAS found: {[p for p, _, _ in libs]}, threads {get_blas_threads()}")
    # numpy's and scipy's wheels on Linux, Windows and Intel macOS bundle OpenBLAS
    assert libs, "no OpenBLAS in numpy's or scipy's wheel: this platform needs another BLAS"
    before = get_blas_threads()
    with blas_threads(1):
        assert get_blas_threads() == [1] * len(libs)
        with blas_threads(2):
            assert get_blas_threads() == [2] * len(libs)
        assert get_blas_threads() == [1] * len(libs)
    assert get_blas_threads() == before
    with blas_threads(None):  # None: as they are
        assert get_blas_threads() == before
    A = np.random.default_rng(0).normal(size=(300, 300))
    with blas_threads(1):  # products still right on one thread
        np.testing.assert_allclose(A @ A.T, (A @ A.T).T, atol=1e-9)


def test_the_faster_count_is_chosen():
    for fast in (1, 2):

        def run(fast=fast):
            time.sleep(0.005 if get_blas_threads()[0] == fast else 0.05)

        got = fastest_threads(run, counts=(1, 2))
        assert got["threads"] == fast, got
        assert got["seconds"][fast] < got["seconds"][3 - fast]
    assert fastest_threads(lambda: None, counts=(1,))["threads"] is None  # nothing to choose
