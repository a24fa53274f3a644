"""Which sparse SPD solver for the Newton step? Measured on the matrix the integrator solves.

The matrix is ``M/h^2 + H`` of a 4:1:1 bar (lumped mass, stable Neo-Hookean Hessian with
per-element PSD projection, at a bent and twisted pose, ``h = 1/24`` s, Y = 1 MPa,
nu = 0.45, rho = 1000 kg/m^3), with the DOFs of the clamped ``x = 0`` end removed.
The Hessian is assembled with pbatoolkit so that this benchmark does not wait on our FEM;
the pattern and conditioning are the same as ours.

Usage::

    python bench/solvers.py [--sizes 5k,20k,80k] [--solvers cholespy,superlu_mmd,...]

Every (solver, size) pair runs in a fresh process pinned to one core. Printed per case:
analysis + numeric factorization time ("factor"), numeric refactorization with the
analysis reused ("refactor", only where the API allows it), one solve, relative residual,
and the peak resident memory the factorization added.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common

#: name -> (one-line description, wheels on Linux/macOS/Windows?)
SOLVERS = {
    "cholespy": ("cholespy 2.2 CholeskySolverD (CHOLMOD supernodal, CPU)", True),
    "sksparse_minimal": ("sksparse-minimal 0.3 SparseCholesky (a cholespy fork)", True),
    "superlu_colamd": ("scipy spsolve, SuperLU, COLAMD (the default)", True),
    "superlu_mmd": ("scipy splu, SuperLU, MMD_AT_PLUS_A, symmetric mode", True),
    "qdldl": ("qdldl 0.1.9 (simplicial LDL^T, AMD; has update())", True),
    "pbat_ldlt": ("pbatoolkit Eigen SimplicialLDLT, AMD (reference, not a candidate)", False),
    "cg_jacobi": ("scipy cg, Jacobi preconditioner, rtol 1e-6", True),
    "cg_amg": ("pyamg CG + smoothed aggregation AMG (rigid modes), rtol 1e-6", True),
}

Y, NU, RHO, H = 1.0e6, 0.45, 1000.0, 1.0 / 24.0


def newton_matrix(n_tets: int) -> tuple:
    """``(A, b, X_free)``: the Dirichlet-reduced Newton matrix at a deformed pose, its RHS."""
    import pbatoolkit
    import scipy.sparse as sp

    pbat = pbatoolkit.pbat
    X, T = common.bar_for_tets(n_tets)
    el = pbat.fem.Element.Tetrahedron
    V = np.asfortranarray(X.T)
    E = np.asfortranarray(T.T)
    wg = pbat.fem.mesh_quadrature_weights(E, V, el, order=1, quadrature_order=1)
    eg = pbat.fem.mesh_quadrature_elements(E, wg)
    GN = pbat.fem.shape_function_gradients(E, V, element=el, dims=3, order=1, quadrature_order=1)
    mu, lam = pbatoolkit.pypbat.fem.lame_coefficients(Y, NU)
    s = X[:, 0] / X[:, 0].max()
    th = 0.5 * s  # twist, rad
    x = X.copy()
    yc, zc = X[:, 1] - 0.125, X[:, 2] - 0.125
    x[:, 1] = 0.125 + np.cos(th) * yc - np.sin(th) * zc
    x[:, 2] = 0.125 + np.sin(th) * yc + np.cos(th) * zc - 0.2 * s**2
    flags = pbat.fem.ElementElasticityComputationFlags
    _, g, Hs = pbat.fem.hyper_elastic_potential(
        E,
        X.shape[0],
        eg=np.ravel(eg),
        wg=np.ravel(wg),
        GNeg=GN,
        mug=np.full(wg.size, mu),
        lambdag=np.full(wg.size, lam),
        x=x.ravel(),
        energy=pbat.fem.HyperElasticEnergy.StableNeoHookean,
        flags=flags.Gradient | flags.Hessian,
        spd_correction=pbat.fem.HyperElasticSpdCorrection.Projection,
        element=el,
        order=1,
        dims=3,
    )
    m = pbat.fem.lumped_mass_matrix(E, V, rho=RHO, dims=3, element=el, order=1)
    A = (Hs + sp.diags(m / H**2)).tocsr()
    free = common.free_dofs(X.shape[0], common.pinned_end(X))
    A = A[free][:, free].tocsc()
    A.sort_indices()
    b = -g[free] - m[free] * np.tile([0.0, 0.0, -9.81], X.shape[0])[free]
    return A, b, X


def rigid_modes(X: np.ndarray, free: np.ndarray) -> np.ndarray:
    """The 6 rigid body modes of the free DOFs (the near null space AMG wants), (N, 6)."""
    from neural_rom.core.physics.linsolve import rigid_modes as all_modes

    return all_modes(X)[free]


def amg_hierarchy(A, B):
    """The AMG hierarchy core/linsolve.py builds (3 x 3 blocks, rigid-mode near null space)."""
    import pyamg

    return pyamg.smoothed_aggregation_solver(
        A.tocsr().tobsr(blocksize=(3, 3)), B=B, max_coarse=300, coarse_solver="splu"
    )


def measure(name: str, A, b: np.ndarray, X: np.ndarray, repeats: int) -> dict:
    """Time one solver on ``A x = b``: best of ``repeats`` for each phase."""
    import scipy.sparse.linalg as spla

    out: dict = {}

    def best(key: str, t: float) -> None:
        out[key] = min(out.get(key, np.inf), t)

    x = f = None
    for _ in range(repeats):
        if name in ("cholespy", "sksparse_minimal"):
            t0 = time.perf_counter()
            if name == "cholespy":
                import cholespy

                f = cholespy.CholeskySolverD(
                    A.shape[0],
                    A.indptr.astype(np.int32),
                    A.indices.astype(np.int32),
                    A.data,
                    cholespy.MatrixType.CSC,
                )
            else:
                from sksparse_minimal import SparseCholesky

                f = SparseCholesky(A)
            best("factor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            if name == "cholespy":
                x = np.zeros_like(b)
                f.solve(b, x)
            else:
                x = f.solve_A(b)
            best("solve", time.perf_counter() - t0)
        elif name == "superlu_colamd":
            t0 = time.perf_counter()
            f = spla.splu(A)
            best("factor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            x = f.solve(b)
            best("solve", time.perf_counter() - t0)
        elif name == "superlu_mmd":
            t0 = time.perf_counter()
            f = spla.splu(
                A,
                permc_spec="MMD_AT_PLUS_A",
                diag_pivot_thresh=0.0,
                options={"SymmetricMode": True},
            )
            best("factor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            x = f.solve(b)
            best("solve", time.perf_counter() - t0)
        elif name == "qdldl":
            import qdldl

            t0 = time.perf_counter()
            f = qdldl.Solver(A)
            best("factor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            f.update(A)
            best("refactor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            x = f.solve(b)
            best("solve", time.perf_counter() - t0)
        elif name == "pbat_ldlt":
            import pbatoolkit

            t0 = time.perf_counter()
            f = pbatoolkit.pbat.math.linalg.SimplicialLdlt_Csc_AMD()
            f.analyze(A)
            f.factorize(A)
            best("factor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            f.factorize(A)
            best("refactor", time.perf_counter() - t0)
            t0 = time.perf_counter()
            x = f.solve(b)
            best("solve", time.perf_counter() - t0)
        elif name == "cg_jacobi":
            t0 = time.perf_counter()
            d_inv = 1.0 / A.diagonal()
            P = spla.LinearOperator(A.shape, matvec=d_inv.__mul__)
            best("factor", time.perf_counter() - t0)
            res: list = []
            t0 = time.perf_counter()
            x, info = spla.cg(A, b, rtol=1e-6, maxiter=20000, M=P, callback=res.append)
            best("solve", time.perf_counter() - t0)
            out["cg_iters"], out["cg_info"] = len(res), int(info)
        elif name == "cg_amg":
            free = common.free_dofs(X.shape[0], common.pinned_end(X))
            t0 = time.perf_counter()
            ml = amg_hierarchy(A, rigid_modes(X, free))
            best("factor", time.perf_counter() - t0)
            res = []
            t0 = time.perf_counter()
            x = ml.solve(b, tol=1e-6, maxiter=300, accel="cg", residuals=res)
            best("solve", time.perf_counter() - t0)
            out["cg_iters"], out["cg_info"] = len(res), int(len(res) >= 300)
            f = ml
        else:
            raise SystemExit(f"Unknown solver {name!r}; choose from {', '.join(SOLVERS)}.")
        f = None  # free the factor before the next repeat
    out["residual"] = float(np.linalg.norm(A @ x - b) / np.linalg.norm(b))
    return out


def worker(name: str, n_tets: int) -> None:
    common.pin_this_process()
    A, b, X = newton_matrix(n_tets)
    import scipy.sparse.linalg  # noqa: F401  (import cost out of the timings)

    if name == "cholespy":
        import cholespy  # noqa: F401
    base = common.rss_mib()
    reset = common.reset_peak_rss()  # False: the kernel kept its old mark; no number
    repeats = 3 if A.shape[0] < 60000 else 2
    res = measure(name, A, b, X, repeats)
    res.update(
        solver=name,
        tets=n_tets,
        dofs=A.shape[0],
        nnz=A.nnz,
        peak_extra_mib=common.peak_rss_mib() - base if reset else float("nan"),
    )
    print(json.dumps(res))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5k,20k,80k", help="tet counts, e.g. 5k,20k,80k")
    ap.add_argument("--solvers", default=",".join(SOLVERS), help="comma-separated subset")
    ap.add_argument("--worker", nargs=2, metavar=("SOLVER", "TETS"), help=argparse.SUPPRESS)
    ap.add_argument("--json", help="also write the results to this JSON file")
    args = ap.parse_args(argv)
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return 0
    names = [s.strip() for s in args.solvers.split(",") if s.strip()]
    rows = []
    hdr = f"{'solver':<17}{'tets':>7}{'dofs':>7}{'factor s':>10}{'refac s':>9}{'solve s':>9}"
    hdr += f"{'resid':>9}{'+MiB':>7}  notes"
    print(hdr)
    for n in common.parse_sizes(args.sizes):
        for name in names:
            r = common.run_case(__file__, [name, str(n)])
            r.setdefault("solver", name)
            r.setdefault("tets", n)
            rows.append(r)
            if "error" in r:
                print(f"{name:<17}{n:>7}  FAILED {r['error'][:200]}")
                continue
            note = "" if SOLVERS[name][1] else "not a candidate"
            if "cg_iters" in r:
                note = f"{r['cg_iters']} CG iters" + ("" if r["cg_info"] == 0 else " (no conv.)")
            ref = f"{r['refactor']:9.3f}" if "refactor" in r else f"{'-':>9}"
            print(
                f"{name:<17}{r['tets']:>7}{r['dofs']:>7}{r['factor']:10.3f}{ref}{r['solve']:9.4f}"
                f"{r['residual']:9.1e}{r['peak_extra_mib']:7.0f}  {note}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
