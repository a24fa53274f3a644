"""Marker fitting of an active face: Levenberg-Marquardt, the head's rigid motion, and the
face runtime's inverse control (:class:`MarkerFit`, a base of :class:`.runtime.ActiveFace`)."""

from __future__ import annotations

import numpy as np
import scipy.linalg as sla
import scipy.sparse.linalg as spla


def levenberg_marquardt(
    residual_jacobian,
    z0,
    *,
    iters: int = 6,
    damping: float = 1e-3,
    tol: float = 1e-10,
    rtol: float = 1e-3,
    J0=None,
):
    """Minimize ``||r(z)||^2`` from ``z0``; ``residual_jacobian(z) -> (r, jacobian)`` with
    ``jacobian()`` computing ``J`` (only called at accepted points).

    Returns ``(z, cost, iterations, J)``. The damping adapts (x0.3 on success, x10 on
    failure); a step is kept only when it lowers the cost; it stops when a step lowers the
    cost by less than ``rtol`` of it (a frame warm-started from the previous one stops after
    one or two) or the gradient is below ``tol``.

    With ``J0`` (a Jacobian from a nearby point, e.g. the previous frame's) no exact Jacobian
    is computed while the steps succeed: ``J`` is corrected by Broyden's rank-one secant
    update after every trial; the first rejected step computes the exact one and goes on
    with it (the cost is always the true one, so the result is never worse than the start).
    """
    z = np.asarray(z0, float).copy()
    r, jac = residual_jacobian(z)
    exact = J0 is None
    J = jac() if exact else np.array(J0, float)
    cost = float(r @ r)
    lam = damping
    it = 0
    while it < iters:
        it += 1
        A = J.T @ J
        g = J.T @ r
        if np.abs(g).max() <= tol * max(cost, 1e-300) ** 0.5:
            break
        for _ in range(8):
            step = -sla.solve(
                A + lam * (np.diag(np.diag(A)) + 1e-12 * np.trace(A) * np.eye(len(z))),
                g,
                assume_a="pos",
            )
            r2, jac2 = residual_jacobian(z + step)
            c2 = float(r2 @ r2)
            if not exact:  # the secant condition J step = r2 - r, whatever the outcome
                J = J + np.outer(r2 - r - J @ step, step) / (step @ step)
            if c2 < cost:
                small = cost - c2 < rtol * cost
                z, r, cost, jac = z + step, r2, c2, jac2
                if exact:
                    J = jac()
                lam *= 0.3
                break
            if not exact:  # the secant model misled: the exact Jacobian at z, same damping
                J, exact = jac(), True
                A, g = J.T @ J, J.T @ r
                continue
            lam *= 10.0
        else:
            break
        if small:  # converged: the last step bought less than rtol of the cost
            break
    return z, cost, it, J


def _cross(y: np.ndarray) -> np.ndarray:
    """Cross-product matrices (..., 3, 3) of vectors (..., 3)."""
    K = np.zeros((*y.shape[:-1], 3, 3))
    K[..., 0, 1], K[..., 0, 2], K[..., 1, 2] = -y[..., 2], y[..., 1], -y[..., 0]
    K[..., 1, 0], K[..., 2, 0], K[..., 2, 1] = y[..., 2], -y[..., 1], y[..., 0]
    return K


def _rotation(w: np.ndarray) -> np.ndarray:
    """``exp([w]x)`` (3, 3) of a rotation vector ``w`` (rad)."""
    a = float(np.linalg.norm(w))
    K = _cross(np.asarray(w, float))
    if a < 1e-12:
        return np.eye(3) + K
    return np.eye(3) + np.sin(a) / a * K + (1 - np.cos(a)) / a**2 * (K @ K)


def head_matrix(h) -> np.ndarray:
    """The head's rigid motion (4, 4) of its 6 parameters ``h``: a rotation vector (rad) and
    a translation (m); a point ``p`` of the face goes to ``R p + c``."""
    h = np.asarray(h, float)
    M = np.eye(4)
    M[:3, :3], M[:3, 3] = _rotation(h[:3]), h[3:]
    return M


def head_unmoved(h, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Points ``t`` (p, 3) taken back into the face's frame by the head's motion ``h`` (6,),
    ``R^T (t - c)``, and their rates ``d / dh`` (p, 3, 6): ``-R^T`` for the translation;
    ``R(-w) [y]x J_r(-w)`` for the rotation (``y = t - c``, ``J_r`` the right Jacobian of
    the rotation vector)."""
    h = np.asarray(h, float)
    w = h[:3]
    R = _rotation(w)
    y = np.asarray(t, float).reshape(-1, 3) - h[3:]
    out = y @ R  # R^T y per point
    a = float(np.linalg.norm(w))
    K = _cross(-w)
    if a < 1e-8:
        Jr = np.eye(3) - 0.5 * K
    else:
        Jr = np.eye(3) - (1 - np.cos(a)) / a**2 * K + (a - np.sin(a)) / a**3 * (K @ K)
    rates = np.zeros((len(y), 3, 6))
    rates[:, :, :3] = np.einsum("ij,pjk,kl->pil", R.T, _cross(y), Jr)
    rates[:, :, 3:] = -R.T
    return out, rates


class MarkerFit:
    """The inverse control of :class:`.runtime.ActiveFace` (its base): the Jacobians of the
    equilibrium and of the skin with respect to the code and the jaw, the blend's contact
    skin, and the marker fits (:meth:`fit_markers_sqp`, :meth:`fit_latent`)."""

    def reduced_jacobian(self, x, z, jaw=None):
        """``dq/dz`` (r, d) at the reduced equilibrium ``x`` for code ``z`` and jaw ``jaw``
        (transform, angle or None: closed; the decoder's jaw input)."""
        last = getattr(self, "_last", None)
        if last is not None and last[0] is x:
            Hr = last[1]
        else:
            Hr = self.reduced_terms(x, self.colliders, True)[2]
        M = self.sub.mixed_hessian(x)  # (3n, 6k)
        UtM = (M.T @ self.Ufull).T * np.repeat(self.w, 6)  # (r, 6k)
        d = len(np.asarray(z).reshape(-1))
        Jd = self.sub_decoder.jacobian(self.model.decoder_input(z, jaw))[:, :d]  # (6k, d)
        B = UtM @ Jd
        F = self._detail_force_rate(x, z, jaw, self.colliders)
        if F is not None:
            B = B + self.Ufull.T @ F
        return -sla.solve(Hr, B, assume_a="sym")

    def _detail_force_rate(self, x, z, jaw, colliders):
        """``d g / dz`` (3 n, d) through the detail layer in contact: the colliders press the
        skin shown, ``P x + D [z, angle, 1]``, so the code moves the skin they touch (None
        without colliders or a layer)."""
        m, qs = self.model, self.qs
        if not colliders or not m.detail.size:
            return None
        d = len(np.asarray(z).reshape(-1))
        p = m.skin.apply(x) + m.detail_offsets(z, jaw)
        Hp = qs.surface_terms(p, colliders, None, True)[2]
        o = np.einsum("sab,sbk->sak", Hp, m.detail[:, :d].reshape(len(p), 3, d))
        return qs.P3.T @ o.reshape(-1, d)

    def full_jacobian(self, x, z, colliders=None, jaw=None):
        """``dx/dz`` (n, 3, d) at the full equilibrium ``x`` for code ``z`` and jaw ``jaw``."""
        qs = self.qs
        qs.surface_offset = self.model.detail_offsets(z, jaw)
        lu = spla.splu(qs.hessian(x, colliders, None))
        M = self.fem.mixed_hessian(x)[qs.free]
        d = len(np.asarray(z).reshape(-1))
        Jd = self.model.decoder.jacobian(self.model.decoder_input(z, jaw))[:, :d]
        B = np.asarray(M @ Jd)
        F = self._detail_force_rate(x, z, jaw, colliders)
        if F is not None:
            B = B + F[qs.free]
        out = np.zeros((3 * len(x), Jd.shape[1]))
        out[qs.free] = -lu.solve(B)
        return out.reshape(len(x), 3, -1)

    # ------------------------------------------------------------------ blend of keys

    def touches(self, skin) -> bool:
        """Whether a skin vertex of ``skin`` (s, 3) lies inside a collider."""
        return any(float(c.signed_distance(skin)[0].min()) < 0.0 for c in self.colliders)

    def contact_skin(self, z, jaw):
        """The skin (s, 3) of a blend of keys (:attr:`ActiveModel.blend`) for code ``z`` and
        ``jaw`` with the colliders: ``L [z, angle, 1] + P (chi_c - chi_0)``, ``chi_0`` the
        full equilibrium without colliders and ``chi_c`` the one with them touching the skin
        shown (its offset ``L [z, angle, 1] - P chi_0``), each warm-started from the last
        contact frame's. Returns ``(skin, chi_0, chi_c (an Equilibrium), offset)``."""
        m, qs = self.model, self.qs
        lin = m.blend_skin(z, jaw)
        act, bnd = m.actions(z, jaw), m.boundary(jaw)
        qs.surface_offset = 0.0
        x0 = qs.solve(act, bnd, x0=self._x0, tol=self.tol).x
        offset = lin - m.skin.apply(x0)
        qs.surface_offset = offset
        xc0 = self._xc if self._xc is not None else x0
        eq = qs.solve(act, bnd, x0=xc0, colliders=self.colliders, tol=self.tol)
        self._x0, self._xc = x0, eq.x
        return lin + m.skin.apply(eq.x - x0), x0, eq, offset

    def contact_skin_rates(self, z, jaw, x0, xc, offset, with_angle: bool) -> np.ndarray:
        """``d skin / d (z[, angle])`` (3 s, d [+ 1]) of :meth:`contact_skin` at its
        equilibria ``x0`` (no colliders) and ``xc`` (the colliders touching with ``offset``):
        ``L_y + P (dchi_c - dchi_0)``, each equilibrium's rate by the implicit function
        theorem on the exact Hessian; ``chi_c``'s includes the offset's rate ``L_y - P
        dchi_0`` through the penalty's Hessian."""
        m, qs = self.model, self.qs
        k = len(z) + (1 if with_angle else 0)
        Ly = m.blend[:, :k]
        qs.surface_offset = 0.0
        d0 = self._equilibrium_rates(x0, z, jaw, with_angle, [], None)
        do = Ly - qs.P3 @ d0
        qs.surface_offset = offset
        dc = self._equilibrium_rates(xc, z, jaw, with_angle, self.colliders, do)
        return Ly + qs.P3 @ (dc - d0)

    def _equilibrium_rates(self, x, z, jaw, with_angle, colliders, offset_rate) -> np.ndarray:
        """``dx / d (z[, angle])`` (3 n, d [+ 1]) at the full equilibrium ``x`` of code ``z``
        and ``jaw`` (the jaw's nodes turn with the angle; ``offset_rate`` (3 s, k): the rate
        of the skin offset the colliders touch)."""
        m, qs, fem = self.model, self.qs, self.fem
        d = len(z)
        fem.set_actions(m.actions(z, jaw))
        H = fem.hessian(x, project=False)
        Hx = qs.extra_terms(x, colliders, None, True)[2]
        H = (H if Hx is None else H + Hx).tocsr()
        Jd = m.decoder.jacobian(m.decoder_input(z, jaw))
        M = fem.mixed_hessian(x)
        F = np.asarray(M @ Jd[:, :d])
        out = np.zeros((x.size, d + (1 if with_angle else 0)))
        if with_angle:
            b = np.zeros_like(x)
            b[m.constrained] = m.boundary_rate(m.jaw_angle(jaw))
            out[:, d] = b.ravel()
            Fa = H @ b.ravel()
            if m.jaw_scale:
                Fa = Fa + M @ (Jd[:, d] * m.jaw_scale)
            F = np.column_stack([F, Fa])
        if offset_rate is not None and colliders:
            p = m.skin.apply(x) + qs.surface_offset
            Hp = qs.surface_terms(p, colliders, None, True)[2]
            o = np.einsum("sab,sbk->sak", Hp, offset_rate.reshape(len(p), 3, -1))
            F = F + qs.P3.T @ o.reshape(-1, F.shape[1])
        free = qs.free
        out[free] = -spla.splu(H[free][:, free].tocsc()).solve(F[free])
        return out

    def _fit_blend(self, targets, vertices, weights, jaw, z0, pull, iters, rtol, theta0, head0):
        """:meth:`fit_latent` for a blend of keys: the skin ``L [z, angle, 1]`` is linear in
        the code and the angle (a linear least squares; the head's motion, when solved, by
        Gauss-Newton); where it touches a collider the contact's change and its rates
        (:meth:`contact_skin_rates`) join it. Leaves the fitted skin in ``_skin`` and the
        contact's equilibrium (or None) in ``_fit_eq``."""
        m = self.model
        rows = None
        if vertices is not None:
            rows = (3 * np.asarray(vertices)[:, None] + np.arange(3)).ravel()
        t = np.asarray(targets, float).reshape(-1, 3)
        w = np.ones(len(t)) if weights is None else np.asarray(weights, float)
        sw = np.repeat(np.sqrt(w), 3)
        d = len(z0)
        solve_jaw, solve_head = theta0 is not None, head0 is not None
        v0 = np.append(z0, float(theta0)) if solve_jaw else np.asarray(z0, float)
        nv = len(v0)
        if solve_head:
            v0 = np.append(v0, np.asarray(head0, float))
        sr = np.sqrt(pull)
        state = {}

        def rj(v):
            z = v[:d]
            jv = m.jaw_matrix(float(v[d])) if solve_jaw else jaw
            skin = m.blend_skin(z, jv)
            touch = bool(self.colliders) and self.touches(skin)
            eq = None
            if touch:
                skin, x0, eq, offset = self.contact_skin(z, jv)
            p = skin.reshape(-1) if rows is None else skin.reshape(-1)[rows]
            tv, t_rate = head_unmoved(v[nv:], t) if solve_head else (t, None)
            r = np.concatenate([sw * (p - tv.reshape(-1)), sr * (v - v0)])
            state.update(v=v.copy(), skin=skin, eq=eq)

            def jacobian():
                if touch:
                    Jp = self.contact_skin_rates(z, jv, x0, eq.x, offset, solve_jaw)
                    Jp = Jp if rows is None else Jp[rows]
                else:
                    Jp = m.blend[:, :nv] if rows is None else m.blend[rows, :nv]
                if solve_head:
                    Jp = np.column_stack([Jp, -t_rate.reshape(-1, 6)])
                return np.vstack([sw[:, None] * Jp, sr * np.eye(len(v))])

            return r, jacobian

        v, cost, it, _ = levenberg_marquardt(rj, v0, iters=iters, damping=1e-9, rtol=rtol)
        if not np.array_equal(state["v"], v):  # the last trial was a rejected step
            rj(v)
        z = v[:d]
        self.fitted_head = v[nv:].copy() if solve_head else None
        if solve_jaw:
            self.fitted_theta = float(v[d])
        self._skin, self._fit_eq = state["skin"], state["eq"]
        x = self.x if state["eq"] is None else state["eq"].x
        return z, x, cost, it

    # ------------------------------------------------------------------ inverse control

    def _base(self, jaw):
        """Node positions (n, 3) of the zero reduced coordinate with the jaw at ``jaw``: the
        constrained nodes on their boundary, the free ones lifted by ``G``."""
        m = self.model
        bnd = m.boundary(jaw)
        ujaw = (bnd[self.jaw_rows] - m.X[m.jaw_nodes]).ravel()
        base = m.X.copy()
        base.ravel()[self.free] += m.lift @ ujaw
        base[m.constrained] = bnd
        return base

    def _base_rate(self, theta: float) -> np.ndarray:
        """``d base / d theta`` (n, 3) of the jaw opened ``theta`` rad (:meth:`_base`)."""
        m = self.model
        rate = m.boundary_rate(theta)
        out = np.zeros_like(m.X)
        out.ravel()[self.free] = m.lift @ rate[self.jaw_rows].ravel()
        out[m.constrained] = rate
        return out

    def _jaw_force_rate(self, x, z, theta: float, dx: np.ndarray, gr: np.ndarray, eps=1e-6):
        """``d gr / d theta`` (r,) at fixed reduced coordinates: the reduced force's change
        when the jaw turns (its nodes and the lift move by ``dx`` per radian; a decoder that
        takes the jaw changes the actions too), by a forward difference of one gradient pass
        (``eps`` rad: the force is smooth, the difference agrees with a central one to
        1e-7 relative on the small head)."""
        m = self.model
        if m.jaw_scale:
            self.sub.set_actions(
                self.sub_decoder.forward(m.decoder_input(z, theta + eps)).reshape(-1, 6)
            )
        g2 = self.reduced_terms(x + eps * dx, self.colliders, False)[1]
        if m.jaw_scale:
            self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, theta)).reshape(-1, 6))
        return (g2 - gr) / eps

    def fit_markers_sqp(
        self, targets, vertices, weights=None, jaw=None, iters: int = 8, theta=None, head=None
    ):
        """Eq. (17) on the reduced problem by Newton / Gauss-Newton iterations on the code and
        the equilibrium together (SQP): each iteration is one pass over the cubature elements
        (reduced gradient and Hessian) and two small solves, where a Levenberg-Marquardt
        iteration needs a converged reduced solve (two or three passes, and line-search
        energies) per trial. The linearized equilibrium ``Hr dq + Br dz = -gr`` gives
        ``dq = a + Jq dz``; ``dz`` minimizes the linearized marker cost plus
        ``rho ||z - z_prev||^2``. ``Br = U^T (d2E/dx da) (da/dz)`` (a mixed-Hessian pass) is
        computed at the frame's first iteration only (a chord method: the equilibrium is
        still solved by exact Newton, the code's step uses a slightly stale sensitivity). It
        stops at an equilibrium (reduced residual below ``tol``) whose last code step
        changed the linearized cost by less than ``marker_rtol`` of it. On the small head
        (linear decoder, 30 markers, 48 frames between held-out keys) 5.6 element passes a
        frame (4.4 with Hessians, 1.1 mixed) instead of Levenberg-Marquardt's 14.8 (9.7
        with Hessians, 4.1 line-search energies, 1.0 mixed): CPU time per frame 30.9 ->
        14.3 ms, skin error 0.1194 vs 0.1192 mm (``bench/active.py``).

        With ``theta`` (the previous frame's hinge angle, rad) the jaw's angle is an unknown
        too: ``x = base(theta) + U q``, the markers move with ``base`` directly
        (``S dbase/dtheta``) and through the equilibrium (``Hr dq = -Bt dtheta``, ``Bt`` the
        reduced force's rate, :meth:`_jaw_force_rate`, one gradient pass an iteration); the
        same pull ``rho`` holds it to the previous frame's angle. ``jaw`` is then ignored.

        With ``head`` (the previous frame's head motion, 6 parameters of :func:`head_matrix`)
        the head's rigid motion is an unknown too: the markers are taken back into the face's
        frame by it (:func:`head_unmoved`, its rates a column each), held to the previous
        frame's by ``rho``; the fitted motion is left in ``fitted_head``.

        Returns ``(z, x, q, cost, iterations, reduced residual, converged, theta)``
        (``theta`` None without); not converged (a far jump, an indefinite reduced Hessian):
        the caller falls back to :meth:`fit_latent`.
        """
        m = self.model
        v = np.asarray(vertices)
        w = np.ones(len(v)) if weights is None else np.asarray(weights, float)
        sw = np.repeat(np.sqrt(w), 3)
        t_in = np.asarray(targets, float).reshape(-1, 3)
        t = t_in.reshape(-1)
        solve_head = head is not None
        h_prev = np.asarray(head, float) if solve_head else np.zeros(6)
        h = h_prev.copy()
        Jm = sw[:, None] * self.SU[v].reshape(-1, self.SU.shape[2])  # (3p, r)
        S = m.skin.matrix[v]
        rows = (3 * v[:, None] + np.arange(3)).ravel()
        Dm = sw[:, None] * m.detail_rates(rows)  # the detail layer's marker rates (3p, d + 1)
        Dfull = m.detail[rows] if m.detail.size else None
        z_prev = self.z.copy()
        rho = self.marker_pull
        d = len(z_prev)
        solve_jaw = theta is not None
        th_prev = float(theta) if solve_jaw else 0.0
        th = th_prev
        if not solve_jaw:
            base = self._base(jaw)
        scale = self.qs.force_scale
        wrep = np.repeat(self.w, 6)
        z, q = z_prev.copy(), self.q.copy()
        small, res_prev = False, np.inf
        for it in range(iters + 1):
            if solve_jaw:
                jaw = m.jaw_matrix(th)
                base = self._base(jaw)
            self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, jaw)).reshape(-1, 6))
            if self.colliders:  # they touch the skin shown
                self.qs.surface_offset = m.detail_offsets(z, jaw)
            x = base + (self.Ufull @ q).reshape(-1, 3)
            _, gr, Hr = self.reduced_terms(x, self.colliders, True)
            res = float(np.abs(gr).max() / scale)
            if solve_head:
                t, t_rate = head_unmoved(h, t_in)
                t = t.ravel()
            rm = sw * ((S @ x).ravel() - t)
            if Dfull is not None:
                rm += sw * (Dfull @ m.detail_input(z, jaw))
            pull = float((z - z_prev) @ (z - z_prev)) + (th - th_prev) ** 2
            pull += float((h - h_prev) @ (h - h_prev))
            cost = float(rm @ rm) + rho * pull
            if not np.isfinite(res) or res > 1.0 or res > max(10.0 * res_prev, 0.1):
                break  # far from an equilibrium, or diverging: no step without a line search
                # (from an equilibrium, 1e-7, a step of the code or the jaw may leave 1e-3..3e-2)
            res_prev = res
            if (res < self.tol and small) or it == iters:
                break
            if it == 0:  # a chord method: the frame's first Br serves its later iterations
                Jd = self.sub_decoder.jacobian(m.decoder_input(z, jaw))[:, :d]
                Br = ((self.sub.mixed_hessian(x).T @ self.Ufull).T * wrep) @ Jd  # (r, d)
                F = self._detail_force_rate(x, z, jaw, self.colliders)
                if F is not None:  # the layer moves the skin the colliders press
                    Br = Br + self.Ufull.T @ F
            B, G0 = Br, None
            if solve_jaw:  # the jaw's column: its rate changes with the angle, so every time
                dx = self._base_rate(th)
                B = np.column_stack([Br, self._jaw_force_rate(x, z, th, dx, gr)])
                G0 = sw * (S @ dx).ravel()  # the markers ride on the lifted jaw directly
            try:
                cf = sla.cho_factor(Hr)
            except np.linalg.LinAlgError:
                break
            a = -sla.cho_solve(cf, gr)
            Jq = -sla.cho_solve(cf, B)
            c = rm + Jm @ a
            G = Jm @ Jq
            G[:, :d] += Dm[:, :d]
            if solve_jaw:
                G[:, -1] += G0 + Dm[:, d]
            off = np.append(z - z_prev, th - th_prev)[: G.shape[1]]
            if solve_head:  # the head moves the markers, not the flesh
                G = np.column_stack([G, -sw[:, None] * t_rate.reshape(-1, 6)])
                off = np.append(off, h - h_prev)
            k = G.shape[1]
            A = G.T @ G + rho * np.eye(k)
            dv = -sla.solve(A, G.T @ c + rho * off, assume_a="pos")
            pred = float(np.sum((c + G @ dv) ** 2)) + rho * float((off + dv) @ (off + dv))
            small = abs(float(c @ c) + rho * float(off @ off) - pred) < (
                self.marker_rtol * max(pred, 1e-300)
            )
            nq = Jq.shape[1]
            z, q = z + dv[:d], q + a + Jq @ dv[:nq]
            if solve_jaw:
                th = th + float(dv[d])
            if solve_head:
                h = h + dv[nq:]
        ok = res < self.tol and small
        self.fitted_head = h if solve_head else None
        return z, x, q, cost, it, res, ok, (th if solve_jaw else None)

    def fit_latent(
        self,
        targets,
        *,
        vertices=None,
        weights=None,
        jaw=None,
        mode=None,
        z0=None,
        pull=None,
        iters=None,
        theta0=None,
        head0=None,
    ):
        """Eq. (17): the code whose equilibrium's skin best matches ``targets``.

        Parameters
        ----------
        targets : (p, 3) positions of skin vertices ``vertices`` (all skin vertices when None)
        weights : (p,) marker weights
        mode : "reduced" or "full" (the runtime's solve by default)
        pull : ``rho``, the pull toward ``z0`` (m^2 per unit code)
        theta0 : the jaw's hinge angle (rad) to start from when the fit solves it too (the
            same pull holds it there, per radian); ``jaw`` is then ignored and the fitted
            angle is left in ``fitted_theta``
        head0 : the head's motion (6 parameters, :func:`head_matrix`) to start from when the
            fit solves it too (the targets are taken back into the face's frame by it; the
            same pull holds it there); the fitted motion is left in ``fitted_head``

        Returns ``(z, x, cost, iterations)``.
        """
        m = self.model
        if m.blends:
            z0 = self.z if z0 is None else np.asarray(z0, float)
            return self._fit_blend(
                targets,
                vertices,
                weights,
                jaw,
                z0,
                self.marker_pull if pull is None else pull,
                iters or self.marker_iters,
                self.marker_rtol if iters is None else 1e-6,
                theta0,
                head0,
            )
        mode = mode or self.mode
        S = m.skin.matrix
        rows = None
        if vertices is not None:
            S = S[np.asarray(vertices)]
            rows = (3 * np.asarray(vertices)[:, None] + np.arange(3)).ravel()
        Dm = m.detail_rates(rows)  # (3p, d + 1)
        Dfull = (m.detail if rows is None else m.detail[rows]) if m.detail.size else None
        w = np.ones(S.shape[0]) if weights is None else np.asarray(weights, float)
        sw = np.sqrt(w)[:, None]
        t = np.asarray(targets, float).reshape(-1, 3)
        z0 = self.z if z0 is None else np.asarray(z0, float)
        d = len(z0)
        solve_jaw = theta0 is not None
        v0 = np.append(z0, float(theta0)) if solve_jaw else z0
        solve_head = head0 is not None
        nv = len(v0)  # the code and the angle: what the flesh answers
        if solve_head:
            v0 = np.append(v0, np.asarray(head0, float))
        rho = self.marker_pull if pull is None else pull
        state = {"x": self.x, "q": self.q, "z": None}

        def rj(v):
            z = v[:d]
            jv = m.jaw_matrix(float(v[d])) if solve_jaw else jaw
            if mode == "full":
                x = self.solve_full(z, jv, x0=state["x"]).x
            else:
                x, q, _, res = self.solve_reduced(z, jv, q0=state["q"])
                state["q"], state["res"] = q, res
            state["x"], state["z"] = x, v.copy()
            p = S @ x
            if Dfull is not None:
                p = p + (Dfull @ m.detail_input(z, jv)).reshape(-1, 3)
            tv, t_rate = head_unmoved(v[nv:], t) if solve_head else (t, None)
            r = np.concatenate([(sw * (p - tv)).ravel(), np.sqrt(rho) * (v - v0)])

            def jacobian():  # only at accepted steps
                if mode == "full":
                    Jx = self.full_jacobian(x, z, self.colliders, jv)  # (n, 3, d)
                else:
                    Jx = (self.Ufull @ self.reduced_jacobian(x, z, jv)).reshape(len(x), 3, -1)
                if solve_jaw:
                    Jx = np.concatenate([Jx, self._jaw_jacobian(x, z, float(v[d]), mode)], 2)
                Jp = (S @ Jx.reshape(len(x), -1)).reshape(S.shape[0], 3, -1)
                Jp = Jp + Dm[:, : Jp.shape[2]].reshape(Jp.shape)
                if solve_head:
                    Jp = np.concatenate([Jp, -t_rate], 2)
                return np.concatenate(
                    [(sw[:, :, None] * Jp).reshape(-1, len(v)), np.sqrt(rho) * np.eye(len(v))]
                )

            return r, jacobian

        # marker frames reuse the previous frame's Jacobian (Broyden-updated) when the
        # markers are the same vertices with the same weights
        key = (
            mode,
            solve_jaw,
            solve_head,
            S.shape[0],
            hash(np.asarray(vertices).tobytes()) if vertices is not None else None,
            hash(w.tobytes()),
            rho,
        )
        J0 = None
        if (
            iters is None
            and self.marker_jacobian == "broyden"
            and self._marker_J is not None
            and self._marker_J[0] == key
        ):
            J0 = self._marker_J[1]
        v, cost, it, J = levenberg_marquardt(
            rj,
            v0,
            iters=iters or self.marker_iters,
            rtol=self.marker_rtol if iters is None else 1e-6,
            J0=J0,
        )
        self._marker_J = (key, J)
        z = v[:d]
        self.fitted_head = v[nv:].copy() if solve_head else None
        if solve_jaw:
            self.fitted_theta = float(v[d])
            jaw = m.jaw_matrix(self.fitted_theta)
        if not np.array_equal(state["z"], v):  # the last trial was a rejected step
            if mode == "full":
                state["x"] = self.solve_full(z, jaw, x0=state["x"]).x
            else:
                state["x"], state["q"], _, state["res"] = self.solve_reduced(z, jaw, q0=state["q"])
        if mode != "full":
            self.q = state["q"]
            self._fit_res = state["res"]
        return z, state["x"], cost, it

    def _jaw_jacobian(self, x, z, theta: float, mode: str) -> np.ndarray:
        """``dx/dtheta`` (n, 3, 1) at the equilibrium ``x`` of code ``z`` with the jaw open
        ``theta`` rad: the jaw's nodes turn, the free nodes answer (the reduced solve: the lift
        and ``U dq``, ``Hr dq = -d gr/d theta``; the full one: ``H dx_f = -d g_f/d theta``)."""
        m = self.model
        if mode == "full":
            qs, eps = self.qs, 1e-6
            dx = np.zeros_like(x)
            dx[m.constrained] = m.boundary_rate(theta)
            actions = m.actions(z, theta)
            g = qs.gradient(x, self.colliders).ravel()[qs.free]
            if m.jaw_scale:
                qs.fem.set_actions(m.actions(z, theta + eps))
            g2 = qs.gradient(x + eps * dx, self.colliders).ravel()[qs.free]
            qs.fem.set_actions(actions)
            lu = spla.splu(qs.hessian(x, self.colliders, None))
            dx.ravel()[qs.free] = -lu.solve((g2 - g) / eps)
            return dx[:, :, None]
        self.sub.set_actions(self.sub_decoder.forward(m.decoder_input(z, theta)).reshape(-1, 6))
        self.qs.surface_offset = m.detail_offsets(z, theta)
        _, gr, Hr = self.reduced_terms(x, self.colliders, True)
        dx = self._base_rate(theta)
        dq = -sla.solve(Hr, self._jaw_force_rate(x, z, theta, dx, gr), assume_a="sym")
        return (dx + (self.Ufull @ dq).reshape(-1, 3))[:, :, None]
