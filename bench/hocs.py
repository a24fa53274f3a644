"""Decoder derivatives for Shen et al. 2021 (core/hocs.py) against torch.func, on one core.

For sin decoders shaped like the paper's (6-10 hidden layers of 64-128, n_q latents in,
k PCA coordinates out) this times, per call:

* ``J``: the Jacobian (k, n_q). numpy: :meth:`core.nnet.MLP.jacobian` (batched JVPs) and the
  jet; torch: ``jacfwd``.
* ``H[d,d]``: the second directional derivative (k,). numpy: the multicomplex step, one
  bicomplex row (:func:`core.hocs.csfd_derivative`); torch: ``jvp`` of ``jvp``.
* ``a^T H``: the left contraction (n_q, n_q). numpy: the jet's forward pass (J) and
  :meth:`core.hocs.Jet.left_hessian`; torch: ``hessian`` of ``a . D``.
* ``S[.,d,d]``: the third-order contraction (k, n_q). numpy: :func:`core.hocs.jet` with
  ``d`` (which also returns J, J d, H[d,d] and H[.,d]); torch: ``jacfwd`` of ``jvp(jvp)``.
* ``newton``: everything one Newton iteration needs (D, J, H[d,d], H[.,d], H[.,v],
  S[.,d,d], then g^T H): one :func:`core.hocs.jet` pass plus ``left_hessian``, multidual
  and multicomplex; torch: the six torch.func calls above.

Before timing, each case checks that numpy (both methods) and torch give the same numbers
(largest relative difference printed as ``agree``). Times are the best of 5 repeats of
enough calls to fill ~0.1 s, in microseconds; ``x torch`` is torch's time over the numpy
multidual one. One process pinned to one core, one thread everywhere (OpenBLAS, torch).

Usage::

    python bench/hocs.py [--cases 8x128:8:60,...] [--repeat 5]

A case is ``LAYERSxWIDTH:NQ:K``.
"""

from __future__ import annotations

import os

if __name__ == "__main__":  # one core, one thread, before numpy loads OpenBLAS
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})

import argparse  # noqa: E402
import itertools  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

DEFAULT_CASES = "6x64:4:30,8x128:4:60,8x128:8:60,8x128:16:60,10x128:8:60,6x64:16:30"
OPS = ("J", "H[d,d]", "a^T H", "S[.,d,d]", "newton")


def make_decoder(layers: int, width: int, r: int, k: int, seed: int = 0):
    """A sin MLP r -> width^layers -> k, SIREN-like weights (pre-activations of order 1)."""
    from neural_rom.core.reduced.nnet import MLP

    rng = np.random.default_rng(seed)
    sizes = [r] + [width] * layers + [k]
    Ws = [rng.normal(size=(o, i)) / np.sqrt(i) for i, o in itertools.pairwise(sizes)]
    bs = [0.1 * rng.normal(size=o) for o in sizes[1:]]
    return MLP(Ws, bs, ["sin"] * layers + ["identity"])


def numpy_ops(net, q, d, v, a):
    from neural_rom.core.methods.shen import hocs

    def newton(method):
        def run():
            jt = hocs.jet(net, q, d, v, method=method)
            return jt, jt.left_hessian(a)

        return run

    return {
        "J": {
            "nnet": lambda: net.jacobian(q),
            "multidual": lambda: hocs.jet(net, q).J,
            "multicomplex": lambda: hocs.jet(net, q, method="multicomplex").J,
        },
        "H[d,d]": {"multicomplex": lambda: hocs.csfd_derivative(net, q, [d, d])[0]},
        "a^T H": {
            "multidual": lambda: hocs.jet(net, q).left_hessian(a),
            "multicomplex": lambda: hocs.jet(net, q, method="multicomplex").left_hessian(a),
        },
        "S[.,d,d]": {
            "multidual": lambda: hocs.jet(net, q, d).Sdd,
            "multicomplex": lambda: hocs.jet(net, q, d, method="multicomplex").Sdd,
        },
        "newton": {"multidual": newton("multidual"), "multicomplex": newton("multicomplex")},
    }


def torch_ops(net, q, d, v, a):
    import torch
    from torch.func import hessian, jacfwd, jvp

    Ws = [torch.from_numpy(W) for W in net.W]
    bs = [torch.from_numpy(b) for b in net.b]
    n = len(Ws)

    def f(x):
        for i, (W, b) in enumerate(zip(Ws, bs)):
            x = W @ x + b
            if i < n - 1:
                x = torch.sin(x)
        return x

    qt, dt, vt, at = (torch.from_numpy(x) for x in (q, d, v, a))

    def along(u):  # x -> J(x) u
        return lambda x: jvp(f, (x,), (u,))[1]

    def hdd(x):  # x -> H(x)[d, d]
        return jvp(along(dt), (x,), (dt,))[1]

    def newton():
        J = jacfwd(f)(qt)
        Hd = jacfwd(along(dt))(qt)
        Hv = jacfwd(along(vt))(qt)
        Hdd = hdd(qt)
        Sdd = jacfwd(hdd)(qt)
        aH = hessian(lambda x: at @ f(x))(qt)
        return J, Hd, Hv, Hdd, Sdd, aH

    return {
        "J": lambda: jacfwd(f)(qt),
        "H[d,d]": lambda: hdd(qt),
        "a^T H": lambda: hessian(lambda x: at @ f(x))(qt),
        "S[.,d,d]": lambda: jacfwd(hdd)(qt),
        "newton": newton,
    }


def agreement(net, q, d, v, a) -> float:
    """Largest relative difference between the numpy methods and torch on the Newton set."""
    from neural_rom.core.methods.shen import hocs

    tJ, tHd, tHv, tHdd, tSdd, taH = (t.numpy() for t in torch_ops(net, q, d, v, a)["newton"]())
    worst = 0.0
    for method in ("multidual", "multicomplex"):
        jt = hocs.jet(net, q, d, v, method=method)
        pairs = [(jt.J, tJ), (jt.Hd, tHd), (jt.Hv, tHv), (jt.Hdd, tHdd), (jt.Sdd, tSdd)]
        pairs.append((jt.left_hessian(a), taH))
        for x, y in pairs:
            worst = max(worst, float(np.abs(x - y).max() / np.abs(y).max()))
    return worst


def best_us(fn, repeat: int, fill: float = 0.1) -> float:
    """Best time of one call, microseconds, over ``repeat`` loops of about ``fill`` seconds."""
    fn()  # warm up (torch.func traces, numpy allocations)
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-6)
    n = max(1, int(fill / once))
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return 1e6 * best


def run_case(spec: str, repeat: int = 5, fill: float = 0.1) -> dict:
    """Check and time one case ``LAYERSxWIDTH:NQ:K``; times in microseconds."""
    shape, r, k = spec.split(":")
    layers, width = (int(s) for s in shape.split("x"))
    r, k = int(r), int(k)
    net = make_decoder(layers, width, r, k)
    rng = np.random.default_rng(1)
    q, d, v = rng.normal(size=(3, r))
    d *= 0.1  # a step's change of q
    a = rng.normal(size=k)
    res = {"case": spec, "agree": agreement(net, q, d, v, a), "ops": {}}
    nops, tops = numpy_ops(net, q, d, v, a), torch_ops(net, q, d, v, a)
    for op in OPS:
        row = {name: best_us(fn, repeat, fill) for name, fn in nops[op].items()}
        row["torch"] = best_us(tops[op], repeat, fill)
        res["ops"][op] = row
    return res


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", default=DEFAULT_CASES, help="LAYERSxWIDTH:NQ:K,...")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    widths = (8, 11, 11, 9)
    head = "".join(f"{n:>{w}}" for n, w in zip(("nnet", "multidual", "multicplx", "torch"), widths))
    print(f"{'case':<15}{'op':<10}{head}{'x torch':>9}   (microseconds per call)")
    for spec in args.cases.split(","):
        res = run_case(spec, args.repeat)
        for op, row in res["ops"].items():
            cells = [row.get(m) for m in ("nnet", "multidual", "multicomplex", "torch")]
            text = "".join(f"{c:>{w}.0f}" if c else f"{'-':>{w}}" for c, w in zip(cells, widths))
            fast = row.get("multidual") or row["multicomplex"]
            print(f"{spec:<15}{op:<10}{text}{row['torch'] / fast:>8.1f}x")
        print(f"{spec:<15}agree (max relative difference numpy vs torch): {res['agree']:.1e}")


if __name__ == "__main__":
    main()
