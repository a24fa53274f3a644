"""Fit of an active face (Srinivasan et al. 2021, sec. 5) to sculpted shape keys.

Stages (each checkpointed; a cancelled run resumes from the last one):

1. **Approximate target actions** (sec. 5.1): each training key's skin pulls the passive
   flesh (zero actions: ARAP) through zero-rest-length springs, with the skull fixed and the
   jaw at the key's angle; the symmetric polar factor of each element's ``F`` is its target
   (:func:`core.quasistatic.polar_actions`).
2. **Warm start** (sec. 5.1): the decoder ``pi_theta`` (latent -> 6 m actions) and one
   code per key fitted to those targets. We replace the paper's beta-VAE encoder by an
   auto-decoder (the codes are free parameters, initialized by the PCA of the targets): the
   runtime never encodes a surface (markers are fitted by eq. 17), so an encoder would be
   thrown away. Regularized by ``beta ||z||^2``; a linear decoder is fitted to the PCA codes
   by least squares (the optimum Adam's epochs approach). The decoder is **linear** by default
   (``decoder="mlp"``: the paper's MLP): on the small demo head (24 training keys, 6 held
   out, latent 8) the MLP fits the training keys closer (0.062 mm after 4 end-to-end epochs
   vs 0.070 after 8) but generalizes worse: held out, code refitted, warm start 0.0986 vs
   0.0908 mm, end to end 0.0996 vs 0.0897 (surface PCA-8 0.0992); the jaw-open keys 0.0992
   vs 0.0893 (PCA-8 0.0966). With exact physics (the true muscle actions restricted to the
   8-dim PCA of the true activations) the same held-out keys come to 0.044 mm: what is left
   is the decoder's generalization from 24 keys, not the latent size or the solve.
   ``jaw_input`` adds the jaw angle to the decoder's input (the jaw is always the solve's
   boundary): linear, training 0.065 vs 0.070 mm, held out 0.0923 vs 0.0897: it fits closer
   and generalizes no better (with the MLP: held out 0.1056 vs 0.0986 at the warm start),
   so it is off by default.
3. **End to end** (sec. 5.2, eq. 14-16): the skin error of the quasistatic equilibria
   ``sum_i ||P chi(pi(z_i)) - t_i||^2`` minimized over the decoder and the codes with Adam,
   gradients by the adjoint with the exact Hessian (:meth:`QuasistaticSolver.adjoint`, eq.
   13); each key's equilibrium warm-starts its next solve. The paper's L2 regularization is
   weight decay on the decoder and ``beta ||z||^2`` on the codes.
4. **Reduced basis**: POD of the training equilibria and their code tangents ``dx/dz``, with
   the jaw's linear lift removed (:mod:`core.methods.active`).

The model file is torch-free (:func:`core.methods.active.save`).
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np
import torch

from ..core.data.files import ensure_writable_dir, write_npz
from ..core.errors import JobCancelled, NeuralRomError
from ..core.kinds.face.rig import FaceRig, ShapeKeys, check_shape_keys, load_face
from ..core.methods.active import (
    ActiveFace,
    ActiveModel,
    blend_samples,
    fit_blend,
    fit_cubature,
    fit_detail,
    jaw_lift,
    save,
)
from ..core.physics.fem import TetFEM
from ..core.physics.quasistatic import QuasistaticSolver, polar_actions
from .nets import build_mlp, to_numpy_mlp, torch_device, torch_threads
from .run import TrainingRun

#: Code regularization ``beta`` (per unit code, relative to the mean squared skin error in m^2).
BETA = 1e-8
#: Adam's learning rates of the end-to-end stage: decoder, codes.
E2E_LR = (3e-4, 3e-3)
#: Targeting-spring stiffness in units of ``mu h`` (stiff: the skin lands within 0.1 mm).
SPRING = 2000.0


def _open(face) -> tuple[FaceRig, ShapeKeys]:
    if isinstance(face, list | tuple) and len(face) == 1:
        face = face[0]  # the worker's list of inputs
    if isinstance(face, str | Path):
        path = Path(face)
        if path.suffix != ".npz" or not path.is_file():
            raise NeuralRomError(
                f"The active-face method fits a face file (skin, skull, jaw and shape keys, "
                f"written by core.face.save_face or the Face set-up), not {path.name}: export "
                "the face first and train on that file."
            )
        rig, keys = load_face(path)
    elif isinstance(face, tuple) and len(face) == 2 and isinstance(face[0], FaceRig):
        rig, keys = face
    else:
        raise NeuralRomError(
            "The active-face method fits one face file (or a rig and its "
            "shape keys); export the face first."
        )
    if keys is None or len(keys) == 0:
        raise NeuralRomError("The face has no shape keys to fit: add sculpted shape keys.")
    check_shape_keys(rig, keys)
    if (~keys.held_out).sum() < 2:
        raise NeuralRomError("Fitting needs at least 2 shape keys that are not held out.")
    return rig, keys


def target_actions(rig: FaceRig, targets: np.ndarray, jaw: np.ndarray, tol: float = 1e-7):
    """Sec. 5.1: approximate actions (K, m, 6) and the pulled flesh (K, n, 3) of skin targets
    (K, s, 3) with jaw angles (K,)."""
    fem = rig.fem()
    qs = QuasistaticSolver(fem, rig.constrained, surface=rig.skin_matrix())
    k = SPRING * qs.force_scale / qs.length_scale
    zero = np.zeros((len(rig.T), 6))
    A, Xs = [], []
    for t, j in zip(targets, jaw, strict=True):
        eq = qs.solve(zero, rig.boundary(j), springs=(t, k), tol=tol)
        F = eq.x[rig.T].transpose(0, 2, 1) @ fem.B
        A.append(polar_actions(F))
        Xs.append(eq.x)
    return np.array(A), np.array(Xs)


def skin_error(rig: FaceRig, x: np.ndarray, t: np.ndarray) -> float:
    """Mean skin vertex distance (m) between node positions ``x`` and skin targets ``t``."""
    return skin_error_of(rig.skin.apply(x), t)


def skin_error_of(skin: np.ndarray, t: np.ndarray) -> float:
    """Mean vertex distance (m) between a skin (s, 3) and skin targets ``t``."""
    return float(np.linalg.norm(skin - t, axis=-1).mean())


class _Checkpoint:
    def __init__(self, directory, rig, keys, settings):
        key = hashlib.sha256(
            json.dumps(
                {
                    "X": hashlib.sha256(rig.X.tobytes()).hexdigest(),
                    "keys": hashlib.sha256(
                        np.ascontiguousarray(keys.positions).tobytes()
                    ).hexdigest(),
                    # more epochs continue a run, the skin's blend or detail layer is fitted
                    # after it: none is part of its identity
                    "settings": {
                        k: v for k, v in settings.items() if k not in ("epochs", "detail", "skin")
                    },
                },
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()[:16]
        self.dir = Path(directory) if directory else None
        self.key = key
        if self.dir:
            ensure_writable_dir(self.dir, "training checkpoints")

    def path(self, stage):
        return self.dir / f"active_{stage}_{self.key}.npz" if self.dir else None

    def load(self, stage):
        p = self.path(stage)
        if p is None or not p.exists():
            return None
        with np.load(p, allow_pickle=False) as d:
            return {k: d[k] for k in d.files}

    def save(self, stage, arrays):
        if self.dir:
            write_npz(self.path(stage), arrays)


def fit(run: TrainingRun) -> dict:
    """Fit an active face and write its model to ``run.out`` (what :func:`train` runs).

    ``run.data``: the path of a face file (:func:`core.face.save_face`: rig and shape keys),
    or ``(FaceRig, ShapeKeys)``.

    Returns
    -------
    dict: ``out``, the errors (``train_error_m`` end to end, ``warm_error_m`` of the warm
    start alone), timings (``seconds_per_epoch``), ``epochs_done``, ``resumed``; and the
    objects ``model`` (ActiveModel), ``warm_decoder`` (MLP) and ``warm_codes`` (N, d).
    """
    say, emit, cancel, s = run.say, run.emit, run.should_cancel, run.settings
    rig, keys = _open(run.data)
    if run.expect_mesh_hash and rig.mesh().hash() != run.expect_mesh_hash:
        raise NeuralRomError("The face file belongs to another tet mesh: re-export the face.")
    ensure_writable_dir(run.out.parent, "the model")
    dev = torch_device(run.device)
    run.device = str(dev)
    ck = _Checkpoint(run.checkpoint_dir, rig, keys, s)
    train_idx = np.flatnonzero(~keys.held_out)
    T_skin = keys.positions[train_idx]
    jaws = keys.jaw[train_idx]
    N = len(train_idx)
    m6 = 6 * len(rig.T)
    d = s["latent_dim"]
    rng = np.random.default_rng(s["seed"])
    torch.manual_seed(s["seed"])
    resumed = []
    t_start = time.perf_counter()

    # 1. approximate target actions
    st = ck.load("targets")
    if st is None:
        say(0.0, f"approximate target actions of {N} shapes (sec. 5.1)")
        A, Xs = target_actions(rig, T_skin, jaws)
        ck.save("targets", {"A": A, "X": Xs})
    else:
        A, Xs = st["A"], st["X"]
        resumed.append("targets")
    if cancel():
        raise JobCancelled("Training cancelled after the target actions (checkpointed).")

    # 2. warm start: auto-decoder on the target actions
    top = float(np.abs(jaws).max())
    jaw_scale = 1.0 / top if s["jaw_input"] and top > 0 else 0.0
    nj = 1 if jaw_scale else 0
    jf = torch.tensor(jaw_scale * jaws[:, None], dtype=torch.float64, device=dev)[:, :nj]
    hidden = s["hidden"] if s["decoder"] == "mlp" else []
    net = build_mlp([d + nj, *hidden, m6], "elu").to(dev, torch.float64)
    Af = torch.tensor(A.reshape(N, -1), dtype=torch.float64, device=dev)
    st = ck.load("warm")
    if st is None:
        mean = A.reshape(N, -1).mean(0)
        C = A.reshape(N, -1) - mean
        if nj:  # the codes start as PCA coordinates of what the jaw angle does not explain
            g = jf.cpu().numpy() - jf.cpu().numpy().mean(0)
            C = C - g @ np.linalg.lstsq(g, C, rcond=None)[0]
        u, sv, _ = np.linalg.svd(C, full_matrices=False)
        z0 = np.zeros((N, d))
        r = min(d, N)
        z0[:, :r] = u[:, :r] * np.sqrt(N)  # unit-variance PCA coordinates
        z0 += 1e-3 * rng.normal(size=z0.shape)
        codes = torch.tensor(z0, dtype=torch.float64, device=dev, requires_grad=True)
        with torch.no_grad():
            net[-1].bias.copy_(torch.tensor(mean, dtype=torch.float64))
        if not hidden:  # linear: the decoder given the codes by least squares, which is the
            # warm start's optimum (the truncated SVD; Adam's 400 epochs came to it in 2 minutes
            # on own head B)
            say(0.1, "warm start: the linear decoder by least squares")
            Y = np.column_stack([z0, jf.cpu().numpy(), np.ones(N)])
            sol = np.linalg.lstsq(Y, A.reshape(N, -1), rcond=None)[0]
            with torch.no_grad():
                net[-1].weight.copy_(torch.tensor(sol[:-1].T, dtype=torch.float64))
                net[-1].bias.copy_(torch.tensor(sol[-1], dtype=torch.float64))
        opt = torch.optim.Adam(
            [{"params": net.parameters(), "lr": 1e-2}, {"params": [codes], "lr": 1e-2}]
        )
        with torch_threads(dev, 2):
            for ep in range(s["warm_epochs"] if hidden else 0):
                opt.zero_grad()
                loss = ((net(torch.cat([codes, jf], 1)) - Af) ** 2).mean() + 1e-6 * (
                    codes**2
                ).mean()
                loss.backward()
                opt.step()
                if ep % 50 == 0:
                    say(
                        0.1 + 0.1 * ep / max(s["warm_epochs"], 1),
                        f"warm start epoch {ep}: action error {loss.item() ** 0.5:.3g}",
                    )
                    if cancel():
                        raise JobCancelled("Training cancelled during the warm start.")
        ck.save("warm", {**_net_arrays(net), "codes": codes.detach().cpu().numpy()})
    else:
        _set_net(net, st)
        codes = torch.tensor(st["codes"], dtype=torch.float64, device=dev, requires_grad=True)
        resumed.append("warm")
    warm_dec = to_numpy_mlp(net, "elu")
    warm_codes = codes.detach().cpu().numpy().copy()

    # 3. end to end through the quasistatic solve (adjoint, exact Hessian)
    fem = TetFEM(rig.X, rig.T, rig.material)
    qs = QuasistaticSolver(fem, rig.constrained, surface=rig.skin_matrix())
    bnd = [rig.boundary(j) for j in jaws]
    x_cache = np.array(Xs)
    start_epoch = 0
    st = ck.load("e2e")
    if st is not None:
        _set_net(net, st)
        codes = torch.tensor(st["codes"], dtype=torch.float64, device=dev, requires_grad=True)
        x_cache = st["x"]
        start_epoch = int(st["epoch"])
        warm_err = float(st["warm_err"])
        resumed.append(f"e2e@{start_epoch}")
    opt = torch.optim.Adam(
        [
            {"params": net.parameters(), "lr": E2E_LR[0], "weight_decay": 0.0},
            {"params": [codes], "lr": E2E_LR[1]},
        ]
    )
    if st is not None:
        _set_adam(opt, st)
    history = []
    if st is None:
        warm_err = None
    batch = min(8, N)
    t_epochs = []
    with torch_threads(dev, 2):
        for ep in range(start_epoch, s["epochs"] + 1):
            t0 = time.perf_counter()
            order = np.random.default_rng([s["seed"], ep]).permutation(N)  # same on resume
            errs = np.zeros(N)
            for b0 in range(0, N, batch):
                idx = order[b0 : b0 + batch]
                opt.zero_grad()
                a = net(torch.cat([codes[idx], jf[idx]], 1))
                grads = np.zeros((len(idx), m6))
                for k, i in enumerate(idx):
                    ai = a[k].detach().cpu().numpy().reshape(-1, 6)
                    eq = qs.solve(ai, bnd[i], x0=x_cache[i], tol=1e-6, max_iters=30)
                    x_cache[i] = eq.x
                    diff = rig.skin.apply(eq.x) - T_skin[i]
                    errs[i] = np.linalg.norm(diff, axis=1).mean()
                    dLdx = qs.surface.T @ diff * (2.0 / diff.shape[0])  # mean squared error
                    grads[k] = qs.adjoint(eq.x, dLdx, lu=qs.last_lu).ravel()
                if ep == s["epochs"]:
                    continue  # the last pass only measures
                (a * torch.tensor(grads, device=dev)).sum().backward()
                with torch.no_grad():
                    codes.grad[idx] += 2 * BETA * codes[idx]
                opt.step()
            mean_err = float(errs.mean())
            if warm_err is None and ep == 0 and start_epoch == 0:
                warm_err = mean_err
            history.append(mean_err)
            if ep < s["epochs"]:
                t_epochs.append(time.perf_counter() - t0)
            emit({"epoch": ep, "skin_error_m": mean_err})
            say(
                0.2 + 0.7 * ep / max(s["epochs"], 1),
                f"end-to-end epoch {ep}: mean skin error {mean_err * 1000:.3g} mm",
            )
            if ep < s["epochs"]:
                ck.save(
                    "e2e",
                    {
                        **_net_arrays(net),
                        **_adam_arrays(opt),
                        "x": x_cache,
                        "codes": codes.detach().cpu().numpy(),
                        "epoch": np.array(ep + 1),
                        "warm_err": np.array(warm_err),
                    },
                )
            if cancel() and ep < s["epochs"]:
                raise JobCancelled(f"Training cancelled after epoch {ep} (checkpointed).")

    # 4. reduced basis from the equilibria and their code tangents
    dec = to_numpy_mlp(net, "elu")
    z_all = codes.detach().cpu().numpy()
    say(0.92, "reduced basis")
    lift = jaw_lift(TetFEM(rig.X, rig.T, rig.material), rig.constrained, rig.jaw_nodes)
    model = ActiveModel(
        X=rig.X,
        T=rig.T,
        material=rig.material,
        fixed=rig.fixed,
        jaw_nodes=rig.jaw_nodes,
        jaw_pivot=rig.jaw_pivot,
        jaw_axis=rig.jaw_axis,
        skin=rig.skin,
        decoder=dec,
        codes=z_all,
        lift=lift,
        U=np.zeros((len(qs.free), 1)),
        jaw_scale=jaw_scale,
    )
    if s["skin"] == "blend":  # the keys and the rest face at their codes, least squares
        say(0.91, "the skin's blend of the keys")
        z_rest = ActiveFace(model, solve="full").fit_latent(
            rig.skin_V, jaw=0.0, z0=np.zeros(d), pull=1e-9, iters=12
        )[0]
        model.blend = fit_blend(model, z_all, jaws, T_skin, rig.skin_V, z_rest)
        # each key's recorded code refitted through the blend from its trained one (the least
        # squares leaves a key 0.002 mm mean, 0.23 mm max, from the blend at its trained code
        # on own head B; every key lies in the blend's span): Pose from Key shows the key
        fitter = ActiveFace(model, solve="full")
        model.codes = np.array(
            [
                fitter.fit_latent(t, jaw=a, z0=z, pull=1e-12, iters=12)[0]
                for z, t, a in zip(z_all, T_skin, jaws, strict=True)
            ]
        )
    elif s["detail"]:  # on the training keys and blends of pairs of them (the keys weigh 2/3)
        say(0.91, "skin detail layer")
        bz, ba, bx, bt = blend_samples(
            model, z_all, jaws, x_cache, T_skin, rig.skin_V, 2 * N, s["seed"]
        )
        model.detail = fit_detail(
            model,
            np.vstack([z_all, bz]),
            np.append(jaws, ba),
            np.concatenate([x_cache, bx]),
            np.concatenate([T_skin, bt]),
            weights=np.append(np.full(N, 4.0), np.ones(2 * N)),
        )
    model.U = reduced_basis(model, z_all, jaws, x_cache, s["basis"])
    say(0.96, "cubature")
    model.cub_elements, model.cub_weights, cub_err = fit_cubature(
        model, z_all, x_cache, jaws=jaws, seed=s["seed"]
    )
    held = held_out_errors(model, rig, keys, say)
    # the skin shown at each training key's recorded code (the blend, or the equilibria with
    # the detail layer), what Pose from Key shows; train_error_m is the flesh's equilibria
    skin_err = float(
        np.mean(
            [
                skin_error_of(model.skin_of(x, z, a), t)
                for z, x, a, t in zip(model.codes, x_cache, jaws, T_skin, strict=True)
            ]
        )
    )
    meta = {
        "settings": dict(s),
        **held,
        "skin_train_error_m": skin_err,
        "train_error_m": history[-1] if history else None,
        "warm_error_m": warm_err,
        "n_train": int(N),
        "n_held_out": int(keys.held_out.sum()),
        "cubature_elements": int(len(model.cub_elements)),
        "cubature_error": cub_err,
    }
    path = save(run.out, model, meta)
    say(1.0, f"done: mean training skin error {history[-1] * 1000:.3g} mm")
    return {
        "out": str(path),
        "train_error_m": history[-1],
        "warm_error_m": warm_err,
        "history_m": history,
        "key_errors_m": errs.tolist(),
        "skin_train_error_m": skin_err,
        "seconds_per_epoch": float(np.mean(t_epochs)) if t_epochs else 0.0,
        "seconds": time.perf_counter() - t_start,
        "epochs_done": len(t_epochs) + start_epoch,
        "resumed": resumed,
        "warm_decoder": warm_dec,
        "warm_codes": warm_codes,
        "model": model,
        "k": int(model.U.shape[1]),
        "dofs": int(d),
        "cubature_elements": len(model.cub_elements),
        "cubature_error": cub_err,
        **held,
    }


def held_out_errors(model: ActiveModel, rig: FaceRig, keys: ShapeKeys, say) -> dict:
    """The fit judged on the keys it never saw: each held-out key's latent code refitted to
    its whole skin (eq. 17, the full solve, as Fit Sliders to Key does), beside surface PCA
    of the training keys with as many dimensions (the key's orthogonal projection).

    Returns ``max_error_val_m`` (the largest skin vertex error over the held-out keys, what
    the panel shows as the validation error), ``held_out_mean_error_m`` (mean over their skin
    vertices) and ``held_out_pca_mean_error_m``; empty when no key is held out.
    """
    held = np.flatnonzero(keys.held_out)
    if not len(held):
        return {}
    say(0.98, f"held-out keys: refitting the code of {len(held)}")
    full = ActiveFace(model, solve="full")
    # a blend of keys is a linear least squares: a pull that weighs as little as float noise
    # (1e-9 m^2 per unit code, the physical fit's, left 3e-5 mm on own heads where PCA is
    # exact: 3e-7 with this one)
    pull = 1e-12 if model.blends else 1e-9
    D = (keys.positions[~keys.held_out] - rig.skin_V).reshape(int((~keys.held_out).sum()), -1)
    basis = np.linalg.svd(D, full_matrices=False)[2][: model.latent_dim]
    worst, means, pca = 0.0, [], []
    for j in held:
        t = keys.positions[j]
        jaw = model.jaw_matrix(keys.jaw[j])
        z, x, _, _ = full.fit_latent(t, jaw=jaw, z0=np.zeros(model.latent_dim), pull=pull)
        d = np.linalg.norm(model.skin_of(x, z, jaw) - t, axis=-1)
        worst, means = max(worst, float(d.max())), [*means, float(d.mean())]
        r = (t - rig.skin_V).reshape(-1)
        pca.append(float(np.linalg.norm((r - basis.T @ (basis @ r)).reshape(-1, 3), axis=1).mean()))
    return {
        "max_error_val_m": worst,
        "held_out_mean_error_m": float(np.mean(means)),
        "held_out_pca_mean_error_m": float(np.mean(pca)),
    }


def train(run: TrainingRun) -> dict:
    """The registry's trainer entry point: :func:`fit`, its JSON-able results."""
    res = fit(run)
    record = {k: v for k, v in res.items() if k not in ("model", "warm_decoder", "warm_codes")}
    # the common keys of a trainer's result (training.run), which the add-on records
    return {**record, "model": res["out"], "train_seconds": res["seconds"]}


def reduced_basis(model: ActiveModel, codes, jaws, xs, size: int) -> np.ndarray:
    """POD (orthonormal, (3 f, r)) of the training equilibria and their code tangents with
    the jaw's lift removed."""
    face = ActiveFace(model, solve="full")
    free = face.free
    snaps = []
    for z, j, x in zip(codes, jaws, xs, strict=True):
        eq = face.solve_full(z, j, x0=x)
        ujaw = (model.boundary(j)[face.jaw_rows] - model.X[model.jaw_nodes]).ravel()
        u = (eq.x - model.X).ravel()[free] - model.lift @ ujaw
        snaps.append(u)
        J = face.full_jacobian(eq.x, z, jaw=j).reshape(-1, len(z))[free]
        snaps.extend((J * 0.3).T)  # tangents at a third of a code's spread
    S = np.array(snaps).T
    Uu, sv, _ = np.linalg.svd(S, full_matrices=False)
    r = int(min(size, np.sum(sv > 1e-10 * sv[0])))
    return Uu[:, :r]


def _adam_arrays(opt) -> dict:
    out = {}
    for i, st in opt.state_dict()["state"].items():
        for name, v in st.items():
            out[f"adam{i}_{name}"] = torch.as_tensor(v).detach().cpu().numpy()
    return out


def _set_adam(opt, arrays) -> None:
    sd = opt.state_dict()
    state = {}
    for key, v in arrays.items():
        if key.startswith("adam"):
            i, name = key[4:].split("_", 1)
            state.setdefault(int(i), {})[name] = torch.tensor(v)
    sd["state"] = state
    opt.load_state_dict(sd)


def _net_arrays(net) -> dict:
    return {f"p{i}": p.detach().cpu().numpy() for i, p in enumerate(net.parameters())}


def _set_net(net, arrays) -> None:
    with torch.no_grad():
        for i, p in enumerate(net.parameters()):
            p.copy_(torch.tensor(arrays[f"p{i}"], dtype=p.dtype))
