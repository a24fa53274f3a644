"""Full-space backward Euler: our integrator against pbatoolkit on the same problem.

Problem: a 1 m x 0.25 m x 0.25 m bar of linear tets (:func:`common.bar_for_tets`), clamped at
``x = 0``, falling under gravity from rest; stable Neo-Hookean, Y = 1 MPa, nu = 0.45,
rho = 1000 kg/m^3, lumped mass, h = 1/24 s, no damping.

* ``ours``: :class:`neural_rom.core.physics.sim.Simulation` as shipped (its Newton loop,
  per-element analytic PSD projection, fixed-pattern assembly,
  :class:`neural_rom.core.physics.linsolve.SPDSolver`).
* ``pbat``: pbatoolkit 0.0.11's C++ FEM (``pbat.fem.hyper_elastic_potential``: energy,
  gradient, element Hessians with per-element eigenvalue projection (12 x 12
  ``SelfAdjointEigenSolver``, ``HyperElasticSpdCorrection.Projection``) and CSR assembly, all
  in one call) inside a copy of *our* Newton loop: same start ``x~ = x_n + h v_n``, same
  Dirichlet treatment, same stopping rule, same Armijo line search, and the *same* linear
  solver. So the per-iteration "derivatives" column compares the FEM implementations, the
  "solve" column should match, and both runs should land on the same positions (checked).

pbatoolkit's stable Neo-Hookean is ``mu/2 (I_C - 3) + l/2 (J - 1 - mu/l)^2`` with ``l`` its
second Lamé argument; ours is the same energy with ``l = lambda + mu`` (Smith et al. 2019), so
pbatoolkit gets ``lambdag = lambda + mu``. Gradients and energy differences then agree to
pbatoolkit's ~2e-6 quadrature-weight rounding (its energy carries an extra constant
``mu^2 / (2 l)`` per unit volume, which changes nothing in the minimization).

Each (size, side) runs in a fresh process pinned to one core (pbatoolkit's TBB pool follows
the affinity mask), so the ratio is single thread against single thread. Peak memory is the
growth of the peak resident set (``VmHWM``, C++ allocations included) over the steps.

Usage::

    python bench/fullspace.py [--sizes 5k,20k,80k] [--steps N] [--solver auto|amg|superlu] [--json F]

The default, ``auto``, is what core/linsolve.py ships: AMG-preconditioned CG (pyamg) above
6000 rows, SuperLU below (see bench/README.md for why); ``--solver superlu`` measures the
direct solver alone (several minutes at 80K tets).
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

YOUNG, POISSON, DENSITY = 1.0e6, 0.45, 1000.0
DT = 1.0 / 24.0
GRAVITY = np.array([0.0, 0.0, -9.81])
NEWTON_TOL = 1e-6  # x bounding-box diagonal, as SimSettings.newton_tol
MAX_NEWTON = 30


def _best(fn, repeats: int = 3) -> float:
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ------------------------------------------------------------------------------- ours
def run_ours(n_tets: int, steps: int, solver: str) -> dict:
    from neural_rom.core.physics import fem
    from neural_rom.core.physics.sim import SimSettings, Simulation

    X, T = common.bar_for_tets(n_tets)
    pins = common.pinned_end(X)
    mat = fem.Material(YOUNG, POISSON, DENSITY)
    settings = SimSettings(
        dt=DT,
        gravity=tuple(GRAVITY),
        newton_tol=NEWTON_TOL,
        max_newton_iters=MAX_NEWTON,
        linear_solver=solver,
    )
    t0 = time.perf_counter()
    sim = Simulation(X, T, mat, settings, pinned=pins)
    sim.fem.assembler  # noqa: B018  (built lazily: count it as setup)
    setup = time.perf_counter() - t0
    base = common.rss_mib()
    reset = common.reset_peak_rss()  # False: the kernel kept its old mark; no number
    rows = []
    for _ in range(steps):
        rep = sim.step()
        rows.append(
            {
                "wall": rep.wall_time,
                "iters": rep.newton_iters,
                "derivatives": rep.timings.get("derivatives", 0.0),
                "solve": rep.timings.get("solve", 0.0),
                "line_search": rep.timings.get("line_search", 0.0),
                "converged": bool(rep.converged),
                "retries": rep.retries,
            }
        )
    peak = common.peak_rss_mib() - base if reset else float("nan")
    x = sim.x
    F = sim.fem
    He = F.element_hessians(x, project=True)
    kernels = {
        "energy": _best(lambda: F.energy(x)),
        "energy_gradient": _best(lambda: F.energy_gradient(x)),
        "hessian_noproj": _best(lambda: F.element_hessians(x, project=False)),
        "hessian_proj": _best(lambda: F.element_hessians(x, project=True)),
        "assembly": _best(lambda: F.assembler.assemble(He)),
        "all": _best(lambda: F.energy_gradient_hessian(x, project=True)),
    }
    return _result("ours", X, T, x, setup, rows, peak, kernels, sim.solver)


# ------------------------------------------------------------------------------- pbat
class PbatProblem:
    """pbatoolkit's FEM for the same bar, with our lumped mass and Dirichlet handling."""

    def __init__(self, X: np.ndarray, T: np.ndarray) -> None:
        import pbatoolkit

        pbat = pbatoolkit.pbat
        self.pbat = pbat
        self.el = pbat.fem.Element.Tetrahedron
        self.n = X.shape[0]
        V = np.asfortranarray(X.T)
        self.E = np.asfortranarray(T.T.astype(np.int64))
        wg = pbat.fem.mesh_quadrature_weights(self.E, V, self.el, order=1, quadrature_order=1)
        self.eg = np.ravel(pbat.fem.mesh_quadrature_elements(self.E, wg))
        self.wg = np.ravel(wg)
        self.GN = pbat.fem.shape_function_gradients(
            self.E, V, element=self.el, dims=3, order=1, quadrature_order=1
        )
        mu, lam = pbatoolkit.pypbat.fem.lame_coefficients(YOUNG, POISSON)
        self.mug = np.full(self.wg.size, mu)
        self.lambdag = np.full(self.wg.size, lam + mu)  # see the module docstring
        self.mass = pbat.fem.lumped_mass_matrix(
            self.E, V, rho=DENSITY, dims=1, element=self.el, order=1
        )
        self.flags = pbat.fem.ElementElasticityComputationFlags
        self.spd = pbat.fem.HyperElasticSpdCorrection

    def call(self, x: np.ndarray, flags: int, spd=None):
        return self.pbat.fem.hyper_elastic_potential(
            self.E,
            self.n,
            eg=self.eg,
            wg=self.wg,
            GNeg=self.GN,
            mug=self.mug,
            lambdag=self.lambdag,
            x=np.ravel(x),
            energy=self.pbat.fem.HyperElasticEnergy.StableNeoHookean,
            flags=flags,
            spd_correction=self.spd.Projection if spd is None else spd,
            element=self.el,
            order=1,
            dims=3,
        )

    def energy(self, x):
        return self.call(x, self.flags.Potential)[0]

    def energy_gradient_hessian(self, x):
        f = self.flags
        return self.call(x, f.Potential | f.Gradient | f.Hessian)


class _Pattern:
    """Positions, in a fixed CSR pattern, of the diagonal and of the Dirichlet rows/columns."""

    def __init__(self, A, fixed_dofs: np.ndarray) -> None:
        A.sort_indices()
        self.indptr, self.indices = A.indptr.copy(), A.indices.copy()
        rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
        fixed = np.zeros(A.shape[0], dtype=bool)
        fixed[fixed_dofs] = True
        self.diag = np.flatnonzero(rows == A.indices)
        if self.diag.size != A.shape[0]:
            raise RuntimeError("pbatoolkit's Hessian lacks diagonal entries")
        self.clear = fixed[rows] | fixed[A.indices]
        self.fixed_diag = np.flatnonzero(self.clear & (rows == A.indices))

    def matches(self, A) -> bool:
        return np.array_equal(A.indptr, self.indptr) and np.array_equal(A.indices, self.indices)


def _solver(X: np.ndarray, name: str, fixed_dofs: np.ndarray):
    """The linear solver both sides use: core/linsolve.py's, configured as the integrator does."""
    from neural_rom.core.physics.linsolve import SPDSolver

    solver = SPDSolver(X, name)
    if solver.B is not None:
        solver.B[fixed_dofs] = 0.0
    return solver


def run_pbat(n_tets: int, steps: int, solver: str) -> dict:
    X, T = common.bar_for_tets(n_tets)
    pins = common.pinned_end(X)
    linear = _solver(X, solver, (3 * pins[:, None] + np.arange(3)).ravel())
    t0 = time.perf_counter()
    P = PbatProblem(X, T)
    setup = time.perf_counter() - t0
    free = np.ones(X.shape[0], dtype=bool)
    free[pins] = False
    free_dofs = np.repeat(free, 3)
    fixed_dofs = np.flatnonzero(~free_dofs)
    m3 = np.repeat(P.mass, 3)
    f_ext = (P.mass[:, None] * GRAVITY[None, :]).ravel()
    L = float(np.linalg.norm(X.max(0) - X.min(0)))
    tol = NEWTON_TOL * L
    h = DT
    x_n, v_n = X.copy(), np.zeros_like(X)
    pattern = None
    base = common.rss_mib()
    reset = common.reset_peak_rss()  # False: the kernel kept its old mark; no number
    rows = []
    for _ in range(steps):
        w0 = time.perf_counter()
        tm = {"derivatives": 0.0, "solve": 0.0, "line_search": 0.0}
        x_tilde = (x_n + h * v_n).ravel()
        x = x_tilde.copy().reshape(-1, 3)
        x[pins] = X[pins]
        x = x.ravel()

        iters, converged = 0, False
        for _ in range(MAX_NEWTON):
            t0 = time.perf_counter()
            U, gU, A = P.energy_gradient_hessian(x)
            dx = x - x_tilde
            e = 0.5 / h**2 * dx @ (m3 * dx) + U - f_ext @ x
            g = m3 * dx / h**2 + gU - f_ext
            if pattern is None or not pattern.matches(A):
                pattern = _Pattern(A, fixed_dofs)
            A.data[pattern.diag] += m3 / h**2
            tm["derivatives"] += time.perf_counter() - t0
            g[~free_dofs] = 0.0
            t0 = time.perf_counter()
            A.data[pattern.clear] = 0.0
            A.data[pattern.fixed_diag] = 1.0
            p = -linear.solve(A, g)
            tm["solve"] += time.perf_counter() - t0
            iters += 1
            step = float(np.max(np.abs(p)))
            if step <= tol:
                x = x + p
                converged = True
                break
            t0 = time.perf_counter()
            slope = g @ p
            alpha, accepted = 1.0, False
            for _ in range(40):
                xt = x + alpha * p
                dxt = xt - x_tilde
                et = 0.5 / h**2 * dxt @ (m3 * dxt) + P.energy(xt) - f_ext @ xt
                if np.isfinite(et) and et <= e + 1e-4 * alpha * slope:
                    accepted = True
                    break
                alpha *= 0.5
            tm["line_search"] += time.perf_counter() - t0
            if not accepted:
                converged = abs(slope) / max(abs(e), 1e-300) < 1e-12
                break
            x = xt
            if alpha * step <= tol:
                converged = True
                break
        x = x.reshape(-1, 3)
        v_n, x_n = (x - x_n) / h, x
        rows.append(
            {
                "wall": time.perf_counter() - w0,
                "iters": iters,
                **tm,
                "converged": converged,
                "retries": 0,
            }
        )
    peak = common.peak_rss_mib() - base if reset else float("nan")
    f = P.flags
    x = x_n.ravel()
    kernels = {
        "energy": _best(lambda: P.call(x, f.Potential)),
        "energy_gradient": _best(lambda: P.call(x, f.Potential | f.Gradient)),
        "hessian_noproj": _best(lambda: P.call(x, f.Hessian, P.spd.NoCorrection)),
        "hessian_proj": _best(lambda: P.call(x, f.Hessian)),
        "all": _best(lambda: P.call(x, f.Potential | f.Gradient | f.Hessian)),
    }
    return _result("pbat", X, T, x_n, setup, rows, peak, kernels, linear)


def _result(side, X, T, x, setup, rows, peak, kernels, solve) -> dict:
    tip = X[:, 0] >= X[:, 0].max() - 1e-9
    vol = np.linalg.det(X[T[:, 1:]] - X[T[:, :1]]) / 6.0
    w = np.bincount(T.ravel(), weights=np.repeat(vol / 4.0, 4), minlength=len(X))  # lumped mass
    st = solve.stats
    amg = {}
    if st["cg_iterations"]:
        amg = {"cg_iters": st["cg_iterations"] / max(st["solves"], 1), "fallbacks": st["fallbacks"]}
    return {
        "amg": amg,
        "side": side,
        "tets": int(T.shape[0]),
        "vertices": int(X.shape[0]),
        "setup": setup,
        "steps": rows,
        "peak_extra_mib": peak,
        "peak_total_mib": common.peak_rss_mib(),
        "tip": (x[tip].mean(0) - X[tip].mean(0)).tolist(),
        "com": ((w[:, None] * (x - X)).sum(0) / w.sum()).tolist(),
        "kernels": kernels,
    }


def check_same_physics(n_tets: int = 750) -> float:
    """Relative difference of our and pbatoolkit's energy and gradient at a random pose."""
    from neural_rom.core.physics import fem

    X, T = common.bar_for_tets(n_tets)
    rng = np.random.default_rng(0)
    x = X + 0.02 * rng.standard_normal(X.shape)
    F = fem.TetFEM(X, T, fem.Material(YOUNG, POISSON, DENSITY))
    P = PbatProblem(X, T)
    f = P.flags
    U, g, _ = P.call(x, f.Potential | f.Gradient)
    U -= P.energy(X)  # pbatoolkit's energy is ours + mu^2 / (2 (lambda + mu)) per unit volume
    e_ours, g_ours = F.energy_gradient(x)
    return max(
        abs(U - e_ours) / abs(e_ours), np.linalg.norm(g - g_ours.ravel()) / np.linalg.norm(g)
    )


# ------------------------------------------------------------------------------- driver
def worker(side: str, n_tets: int, steps: int, solver: str) -> None:
    common.pin_this_process()
    fn = run_ours if side == "ours" else run_pbat
    print(json.dumps(fn(n_tets, steps, solver)))


def _per_iter(r: dict, key: str) -> float:
    iters = sum(s["iters"] for s in r["steps"])
    return sum(s[key] for s in r["steps"]) / max(iters, 1)


def summarize(r: dict) -> dict:
    st = r["steps"]
    iters = sum(s["iters"] for s in st)
    wall = sum(s["wall"] for s in st)
    return {
        "step": wall / len(st),
        "iters": iters / len(st),
        "iter": wall / max(iters, 1),
        "deriv": _per_iter(r, "derivatives"),
        "solve": _per_iter(r, "solve"),
        "ls": _per_iter(r, "line_search"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="5k,20k,80k", help="tet counts, e.g. 5k,20k,80k")
    ap.add_argument("--steps", type=int, default=2, help="time steps per case (default 2)")
    ap.add_argument(
        "--solver",
        default=None,
        help="linear solver for both sides, a core/linsolve.py backend: 'auto' (what ships: "
        "AMG-CG above 6000 rows), 'amg' or 'superlu'",
    )
    ap.add_argument("--json", help="also write the raw results to this JSON file")
    ap.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        side, n, steps, solver = args.worker
        worker(side, int(n), int(steps), solver)
        return 0
    if args.solver is None:
        args.solver = "auto"
    if args.steps < 1:
        raise SystemExit("--steps must be at least 1.")
    t_start = time.perf_counter()
    print(
        f"Bar 4:1:1 clamped at x=0, gravity, stable Neo-Hookean Y={YOUNG:g} Pa nu={POISSON} "
        f"rho={DENSITY:g}, h=1/24 s, {args.steps} step(s) from rest, linear solver "
        f"{args.solver!r} on both sides; one core per run."
    )
    diff = check_same_physics()
    print(f"Same physics: ours vs pbatoolkit energy/gradient relative difference {diff:.1e}\n")
    results = []
    hdr = (
        f"{'tets':>7} {'side':<5}{'step s':>8}{'it/step':>8}{'iter s':>8}{'deriv/it':>9}"
        f"{'solve/it':>9}{'ls/it':>8}{'+MiB':>7}"
    )
    print(hdr)
    for n in common.parse_sizes(args.sizes):
        pair = {}
        for side in ("ours", "pbat"):
            r = common.run_case(__file__, [side, str(n), str(args.steps), args.solver])
            results.append(r)
            if "error" in r:
                print(f"{n:>7} {side:<5} FAILED: {r['error'][:300]}")
                continue
            pair[side] = r
            s = summarize(r)
            print(
                f"{r['tets']:>7} {side:<5}{s['step']:8.3f}{s['iters']:8.1f}{s['iter']:8.3f}"
                f"{s['deriv']:9.3f}{s['solve']:9.3f}{s['ls']:8.3f}{r['peak_extra_mib']:7.0f}"
                + (f"  {r['amg']['cg_iters']:.0f} CG it/solve" if r["amg"] else "")
                + (
                    f", {r['amg']['fallbacks']} direct fallbacks"
                    if r["amg"].get("fallbacks")
                    else ""
                )
                + ("" if all(st["converged"] for st in r["steps"]) else "  NOT CONVERGED"),
                flush=True,
            )
        if len(pair) == 2:
            a, b = summarize(pair["ours"]), summarize(pair["pbat"])
            ka, kb = pair["ours"]["kernels"], pair["pbat"]["kernels"]
            tip_a, tip_b = np.array(pair["ours"]["tip"]), np.array(pair["pbat"]["tip"])
            print(
                f"{'':>7} ours/pbat: step {a['step'] / b['step']:.2f}x, "
                f"Newton iteration {a['iter'] / b['iter']:.2f}x, "
                f"derivatives {a['deriv'] / b['deriv']:.2f}x, solve {a['solve'] / b['solve']:.2f}x, "
                f"line search {a['ls'] / max(b['ls'], 1e-12):.2f}x; "
                f"tip offset ours {tip_a[2] * 1e3:.2f} mm vs pbat {tip_b[2] * 1e3:.2f} mm"
            )
            print(
                f"{'':>7} FEM kernels at the final pose, ours | pbat ms: "
                f"E {ka['energy'] * 1e3:.1f} | {kb['energy'] * 1e3:.1f}, "
                f"E+g {ka['energy_gradient'] * 1e3:.1f} | {kb['energy_gradient'] * 1e3:.1f}, "
                f"H {ka['hessian_noproj'] * 1e3:.1f} | {kb['hessian_noproj'] * 1e3:.1f} (pbat incl. assembly), "
                f"H+proj {ka['hessian_proj'] * 1e3:.1f} | {kb['hessian_proj'] * 1e3:.1f}, "
                f"assembly {ka['assembly'] * 1e3:.1f} | -, "
                f"E+g+H+proj+asm {ka['all'] * 1e3:.1f} | {kb['all'] * 1e3:.1f} "
                f"({ka['all'] / kb['all']:.2f}x)"
            )
    print(f"\n(total {time.perf_counter() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
