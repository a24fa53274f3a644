"""training/shen/cubature.py: the paper's neural cubature (Shen et al. 2021, sec. 5), the
selection network ``S`` on the element graph trained with the weight network ``W``.

A small clamped bar (6 x 2 x 2 cells, 144 tets), its six lowest vibration modes as the basis
and 60 random poses of large amplitude in them (whole "trajectories" of 10 poses for the
validation split); everything seeded, torch on one thread.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
import torch
from neural_rom.core.geometry.grid import grid_tetmesh
from neural_rom.core.physics.fem import Material, TetFEM, mass_matrix
from neural_rom.core.reduced.cubature import Cubature, cubature_error
from neural_rom.core.reduced.subspace import modal_basis
from neural_rom.training.shen.cubature import (
    SelectionNet,
    _coords,
    _normalized,
    _top,
    element_features,
    element_graph,
    neural_cubature,
    relative_error,
    selection_loss,
)

COUNTS = (6, 12, 20)


@pytest.fixture(scope="module")
def bar():
    torch.set_num_threads(1)
    X, T = grid_tetmesh((0.4, 0.1, 0.1), (6, 2, 2))
    mat = Material(youngs_modulus=5e4, poisson_ratio=0.4, density=1000.0)
    fem = TetFEM(X, T, mat)
    mass = mass_matrix(X, T, mat.density)
    pins = np.flatnonzero(X[:, 0] < 1e-9)
    sub = modal_basis(fem, mass, pins, k=6)
    rng = np.random.default_rng(0)
    q = rng.normal(size=(60, 6)) * np.array([0.3, 0.3, 0.1, 0.1, 0.05, 0.05])
    poses = sub.decode(q)
    A, b, keep = _normalized(fem, sub.U, poses, None)
    c = _coords(fem, sub.U, mass, poses)[keep]
    groups = (np.arange(len(poses)) // 10)[keep]
    is_val = groups == 5
    adjacency = element_graph(T)
    feats = element_features(T, X, poses[keep])
    out = neural_cubature(
        A,
        b,
        c,
        feats,
        adjacency,
        X[T].mean(axis=1),
        is_val,
        COUNTS,
        add=4,
        epochs=10,
        s_lr=1e-2,
        seed=0,
    )
    return {
        "X": X,
        "T": T,
        "fem": fem,
        "U": sub.U,
        "poses": poses[keep],
        "A": A,
        "b": b,
        "c": c,
        "is_val": is_val,
        "adjacency": adjacency,
        "feats": feats,
        "out": out,
    }


def test_element_graph_is_the_normalized_face_adjacency(bar):
    """Tets sharing a face are neighbours (at most 4, interior tets of this grid have 4);
    ``A^ = D^-1/2 (A + I) D^-1/2`` is symmetric with ``A^ sqrt(d) = sqrt(d)`` (eq. 19's
    ``1 / sqrt(d_i d_j)``), so its largest eigenvalue is 1."""
    T = bar["T"]
    A = bar["adjacency"].to_dense().numpy()
    np.testing.assert_allclose(A, A.T, rtol=0, atol=0)
    nbrs = (A > 0).sum(1) - 1
    assert nbrs.max() == 4 and nbrs.min() >= 1
    # the neighbours share exactly three vertices
    i, j = np.nonzero(np.triu(A, 1))
    shared = [len(set(T[a]) & set(T[b])) for a, b in zip(i, j)]
    assert set(shared) == {3}
    # every pair of tets that shares three vertices is an edge
    V = sp.csr_matrix((np.ones(T.size), (np.repeat(np.arange(len(T)), 4), T.ravel())))
    pairs = np.argwhere(np.triu((V @ V.T).toarray() == 3, 1))
    assert len(pairs) == len(i)
    d = nbrs + 1.0
    np.testing.assert_allclose(A @ np.sqrt(d), np.sqrt(d), rtol=1e-13)
    print(
        f"{len(T)} tets, {len(i)} shared faces, largest eigenvalue {np.linalg.eigvalsh(A)[-1]:.15f}"
    )
    assert abs(np.linalg.eigvalsh(A)[-1] - 1.0) < 1e-12


def test_selection_scores_are_probabilities_over_the_candidates(bar):
    """S's output: non-negative, zero on the cubature elements, sums to one over the
    candidates, for every pose."""
    torch.manual_seed(0)
    S = SelectionNet(bar["adjacency"]).to(torch.float64)
    cand = torch.ones(len(bar["T"]), dtype=torch.bool)
    cand[:10] = False
    with torch.no_grad():
        s = S(torch.as_tensor(bar["feats"]), cand).numpy()
    assert np.all(s >= 0) and np.all(s[:, :10] == 0)
    np.testing.assert_allclose(s.sum(1), 1.0, rtol=1e-13)


def test_selection_picks_distinct_valid_elements_growing_to_each_count(bar):
    """The selected sets have exactly the asked sizes, distinct valid element indices, each
    set inside the next (elements are only added), NNLS weights >= 0."""
    m = len(bar["T"])
    prev: set[int] = set()
    for n, r in zip(COUNTS, bar["out"]):
        el = r["elements"]
        assert len(el) == n and len(np.unique(el)) == n
        assert el.min() >= 0 and el.max() < m and el.dtype.kind == "i"
        assert prev <= set(el.tolist())
        prev = set(el.tolist())
        assert np.all(r["w0"] >= 0) and r["w0"].shape == (n,)


def test_spread_keeps_the_picks_apart(bar):
    """``_top`` with ``spread`` s: no two picks within s face rings (while there is room)."""
    rng = np.random.default_rng(1)
    score = rng.normal(size=len(bar["T"]))
    A = (bar["adjacency"].to_dense().numpy() > 0).astype(float)
    for s in (1, 2):
        picks = _top(score, 4, bar["adjacency"], s)
        reach = np.linalg.matrix_power(A, s) > 0  # within s rings (self included)
        assert len(set(picks.tolist())) == 4
        assert not reach[np.ix_(picks, picks)][~np.eye(4, dtype=bool)].any()
    np.testing.assert_array_equal(_top(score, 4, bar["adjacency"], 0), np.argsort(-score)[:4])


def test_training_s_lowers_its_loss_and_w_does_not_do_worse_than_its_start(bar):
    """On the training poses: S trained on the residual of a cubature set explains more of it
    than untrained S (eq. 21); the trained S+W rule's error is at most that of its starting
    point (the NNLS weights of S's elements), and its weights are >= 0 for every pose, even
    far outside the training poses."""
    from neural_rom.training.shen.cubature import _nnls_weights, train_weight_net

    A, b, c = bar["A"], bar["b"], bar["c"]
    el = bar["out"][0]["elements"]
    w0 = _nnls_weights(A[:, :, el], b)
    residual = torch.as_tensor(b - A[:, :, el] @ w0)
    cand = torch.ones(A.shape[2], dtype=torch.bool)
    cand[torch.as_tensor(el)] = False
    torch.manual_seed(0)
    S = SelectionNet(bar["adjacency"]).to(torch.float64)
    tA, tf = torch.as_tensor(A), torch.as_tensor(bar["feats"])
    with torch.no_grad():
        before = float(selection_loss(S(tf, cand), tA, residual))
    opt = torch.optim.Adam(S.parameters(), lr=1e-2)
    for _ in range(60):
        loss = selection_loss(S(tf, cand), tA, residual)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        after = float(selection_loss(S(tf, cand), tA, residual))
    el = bar["out"][-1]["elements"]
    Ael, w0 = A[:, :, el], bar["out"][-1]["w0"]
    # the training poses as their own validation: the epoch kept is the best on them
    net, info = train_weight_net(Ael, b, c, Ael, b, c, w0, epochs=80, seed=0)
    with torch.no_grad():
        w = net(torch.as_tensor(c)).numpy()
        far = net(torch.as_tensor(50.0 * np.random.default_rng(2).normal(size=c.shape))).numpy()
    start, trained = relative_error(Ael, b, w0), relative_error(Ael, b, w)
    exact = cubature_error(bar["fem"], bar["U"], Cubature(el, w0), bar["poses"])
    print(
        f"S loss {before:.4f} -> {after:.4f}; {len(el)} elements on the training poses: "
        f"S+NNLS {start:.4f} (core.cubature: {exact:.4f}), S+W {trained:.4f} "
        f"(best epoch {info['best_epoch']})"
    )
    assert after < 0.95 * before
    assert abs(start - exact) < 1e-12
    assert trained <= start * (1 + 1e-9) and info["best_epoch"] > 0
    assert np.all(w >= 0) and np.all(far >= 0)


def test_more_selected_elements_never_fit_worse(bar):
    """The sets only grow, so their NNLS error on the training poses never grows with the
    count (the S+NNLS column of ``bench/shen.py --cubature`` can only fall down the table)."""
    errs = [relative_error(bar["A"][:, :, r["elements"]], bar["b"], r["w0"]) for r in bar["out"]]
    print("S + NNLS training error at", COUNTS, ":", [round(e, 4) for e in errs])
    assert all(a >= b - 1e-12 for a, b in zip(errs, errs[1:]))


def test_weight_net_starts_at_the_greedy_rule_and_fits_no_worse(bar):
    """The weight network's initial weights are the greedy NNLS weights for every pose
    (squared output, zero last layer), non-negative always; trained, its error on the poses
    it fits is no worse than the greedy rule's."""
    from neural_rom.core.reduced.cubature import optimized_cubature
    from neural_rom.training.shen.cubature import train_weight_net

    fem, U, poses = bar["fem"], bar["U"], bar["poses"]
    cub = optimized_cubature(fem, U, poses[:40], target=1e-9, max_elements=8)
    A, b, c = bar["A"][:, :, cub.elements], bar["b"], bar["c"]
    net, info = train_weight_net(
        A[:40], b[:40], c[:40], A[40:], b[40:], c[40:], cub.weights, epochs=0
    )
    with torch.no_grad():
        w = net(torch.as_tensor(c)).numpy()
    np.testing.assert_allclose(w, np.broadcast_to(cub.weights, w.shape), rtol=1e-12)
    net, info = train_weight_net(
        A[:40], b[:40], c[:40], A[40:], b[40:], c[40:], cub.weights, epochs=60
    )
    with torch.no_grad():
        w = net(torch.as_tensor(c)).numpy()
    g, n = relative_error(A[:40], b[:40], cub.weights), relative_error(A[:40], b[:40], w[:40])
    print(
        f"8 elements: greedy {g:.4f}, neural {n:.4f} on the fitted poses; held out "
        f"{relative_error(A[40:], b[40:], cub.weights):.4f} / "
        f"{relative_error(A[40:], b[40:], w[40:]):.4f}"
    )
    assert np.all(w >= 0) and n <= g * (1 + 1e-9)
