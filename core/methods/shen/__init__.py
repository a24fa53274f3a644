"""Nonlinear subspace dynamics with a high-order differentiable autoencoder: the runtime of
the ``shen`` method (Shen et al. 2021).

Positions are ``x = X + V c(r)`` with ``V`` (3n, k) the M-orthonormal PCA basis of the bakes
(zero on pinned DOFs), ``r = [p; z]`` the generalized coordinates (``n_p`` linear, ``n_z``
nonlinear; the paper's ``[p; q]``) and

.. math::  c(r) = E_p p + \\hat D(z), \\qquad E_p = [I_{n_p}; 0],

``\\hat D = F D``: the decoder MLP ``D`` (n_z -> k PCA coordinates) followed by the filter
``F = I - E_p E_p^T``, folded into its last layer (:func:`core.hocs.filtered_decoder`), so the
nonlinear part lives in the PCA modes ``n_p + 1 .. k`` and is M-orthogonal to the linear part
``U = V E_p`` (``U^T M V F = 0``: the paper's ``I - U U^T`` filter of sec. 3.5 for our mass
inner product, :class:`core.hocs.PcaFilter`). The encoder reads the filtered coordinates too.
With ``decoder_sees_p`` (the trainer's default) the decoder reads ``p`` too,
``c(r) = E_p p + \\hat D(p, z)`` (u = U p + D(p, z)): the shapes a large bend brings with it
(the shortening and the higher modes of a bar bent 90 degrees) follow ``p`` instead of
having to be told apart by a few latent coordinates. Everything below holds with ``z``
replaced by all of ``r`` in the decoder's terms (``J~ = [E_p | 0] + J^``, ``Delta r`` in
``H^[., .]`` and ``S^``, ``g^T H^`` on the whole ``n x n`` block; the code's ``r[d0:]``,
``d0 = 0`` instead of ``n_p``), and the closest shape fits ``p`` and ``z`` together.
Measured on the swung arm (``tests/test_shen_accuracy.py``, 3 + 1 DOFs, whole bakes held
out): closest shapes 11.5 mm against PCA-4's 28.0 (``D(z)``: 22.3 mm), replay 176.9 against
451.0 mm (``D(z)``: 297); the whip of ``bench/shen.py`` (3 + 2, 3,000 epochs) 2.1 / 42.2 mm
against PCA-5's 12.4 / 473.3 (``D(z)``: 5.2 / 291). The fictitious force then hardly
matters: whip 42.2 mm with it, 41.4 without; swung arm 3 + 1 under 0.1 mm apart (with
``D(z)`` it was what made the whip beat PCA in motion). The swung arm at 3 + 2
(``bench/shen.py``, 3,000 epochs): closest shapes 6.1 mm against PCA-5's 18.1 (0.34x;
Fulton at 5 DOFs: 7.7); the eq. (10) replay was 267.3 mm against PCA-5's 215.4, from one
held-out bake (the other 136.2) with 4 Newton stalls taken by the variational fallback.
Why (measured on that bake, frame by frame against the variational step on the same
manifold): the decoder's Jacobian in ``z`` is small (singular values 0.02 and 0.017 against
1 for ``p``), so ``z`` moves 0.2-0.7 in one step of the large swing while the shape hardly
moves, and eq. (10)'s inertia ``J~ a + H^[Delta r, Delta r]``, an expansion of
``c(r) - c_n - h c'_n`` truncated after second order, is poor over such a step: Newton then
crawls along a valley of ``|phi|^2`` (Armijo steps of 1/256 to 1/32 of the Newton step for
40 iterations, ``|phi|^2`` 2.0e-3 to 1.9e-3) toward a root that is there (the variational
minimizer has ``|phi|`` 4e-5). Neither the merit nor the damping is the fault: Newton on
eq. (10) from the variational minimizer (its root) replays worse, 331 mm, and after the
fallbacks ``z`` drifts out of the training range (to -24, -34), while two eq. (10) steps of
``h / 2`` (``substeps`` 2 everywhere: 78.0 mm, no stall) follow the variational step's
motion. So a stalled step is halved first (``split_stalls``, the default where the decoder
reads ``p``; once, kept when both halves converge without a fallback): that bake 27.8 mm,
no fallback, 2 halved steps, 6.2 Newton iterations a step; the replay over both held-out
bakes 136.2 mm, 0.63x PCA-5's. The stall is found late (about 40 crawling iterations); calling
three line-search steps under 1/16 (or 1/64, 1/256) of Newton's a stall cut that bake's
iterations to 5.1 a step but the halves then crawled too: 2 fallbacks (25.4 mm), not taken.
A crawl is also where the step's root depends on rounding: given its 30 iterations, Newton
at the whip's release (frame 10 of ``bench/shen.py``'s held-out bake) either stalled (then
halved: 42.1 mm) or converged in its 29th iteration on a root 15 mm away with ``z`` farther
out (-1.05, 1.17 against -0.20, 0.43), after which ``z`` stayed there and the replay went
to 280 mm, whichever the last bits decided: cubature weights x (1 - 1e-9), or two BLAS
threads, took the far root (42 / 42 / 280 mm at x 1, 1 + 1e-9, 1 - 1e-9; 221-302 mm with
two threads). So where a step may still be halved, Newton gets ``_CRAWL_ITERS`` (12)
iterations, not ``max_newton_iters``: a step that needs more (quadratic convergence takes
3-7 here) is halved, whatever root the crawl would have reached. The whip then replays
42.1 mm at every perturbation tried (x 1 +- 1e-12 ... 1e-6, one or two threads; the same for
limits of 6-20 iterations), the swung arm at 3 + 2 its stalling bake 25.4 mm with 0 um
between the perturbed replays (27.4-28.3 mm, 0.5 mm apart, before), and both take fewer
Newton iterations a step (whip 3.51 -> 3.38, swung arm 4.82 -> 4.04: the crawl is cut
short). Left: poor models still meet steps whose outcome rounding decides. Of 19 small
whips (120 tets, 300 epochs, seeds 0-7 and 1-5, one or two BLAS threads) the replays under
x (1 +- 1e-9) spread more than 1 mm for 6 before (16-1,130 mm) and for 3 now (62-706 mm),
all three models that replay 140-700 mm off a 300 mm swing (``z`` leaves its training
range); one of them was 0.013 mm before (a step that converged in 8 iterations at x 1 and
crawled at x (1 - 1e-9)). ``tests/test_shen_whip.py`` replays one that was 15.9 mm.
With ``D(z)`` the stalls are minima of ``|phi|^2`` that are
not roots (below) and halving leads ``z`` astray (the convergence test's random decoder), so
there the fallback stays the step (``D(z)`` at 3 + 2:
220 mm, PCA-5 215). Cost (``--speed``, 21,504 tets, 10 + 5):
4.78 ms per step against 4.44 for ``D(z)`` (183x / 197x full space's 874 ms, one run on the
shared machine), decoder work 228 against 197 us per Newton iteration (0.73 ms per step).
The tables below are ``D(z)``'s.
In the basis coordinates the mass matrix is ``M~ = V^T M V`` (the identity for our basis)
and every force is reduced by ``V^T``; cubature, contact and Rayleigh damping are the other
subspace runtimes' (:mod:`.common`) on ``V``.

The time step (Shen 2021 eq. 10-12, re-derived in :mod:`core.hocs`)
--------------------------------------------------------------------
Implicit Euler on Lagrange's equations in ``r``, with the fictitious force of the curved
subspace, is ``phi(r) = 0`` with

.. math::

    \\phi(r) = \\tilde J^T g, \\qquad g = \\tilde M (\\tilde J a + \\hat H[\\Delta z, \\Delta z])
        + h^2 (f_{int}(c) + f_c(c) + \\tilde D (c - c_n)/h - f),

``a = r - r_n - h r'_n``, ``Delta z = z - z_n``, ``J~ = dc/dr = [E_p | J^]`` (k, n_p + n_z),
``f_int = V^T df/du`` by cubature, ``f_c`` the collider penalty, ``D~ = alpha M~ + beta K~(c_n)``
Rayleigh damping frozen over the step, ``f = V^T (f_ext + M g)`` (pokes and gravity). Its
exact Jacobian (checked against finite differences of ``phi`` in ``tests/test_shen.py``) is

.. math::

    \\frac{\\partial\\phi}{\\partial r} = \\tilde J^T (\\tilde M + h^2 K) \\tilde J
        + \\tilde J^T \\tilde M [0 \\mid \\hat H[\\cdot, v] + \\hat S[\\cdot, \\Delta z, \\Delta z]]
        + \\operatorname{diag}(0, g^T \\hat H), \\qquad v = a_z + 2 \\Delta z,

``K = df_int/dc + df_c/dc + D~/h`` (exact element Hessians, not PSD-projected). The decoder's
``J^``, ``H^[dz, dz]``, ``H^[., v]``, ``S^[., dz, dz]`` come from one multidual pass and
``g^T H^`` from one reverse pass (:func:`core.hocs.jet`), exact to rounding. Without the
fictitious force (``fictitious=False``, the comparison the issue asks for; Fulton 2019's
equations) the ``H^[dz, dz]`` term goes and ``v = a_z``, no ``S``.

Newton. The matrix is not symmetric and ``phi`` is not the gradient of an energy, so the step
solves it by LU and judges a step by the merit ``m = |phi|^2 / 2``, whose slope along the
exact Newton direction is ``-|phi|^2`` (Armijo on ``m``, halving). When that line search
fails or the LU is singular, a Levenberg-Marquardt step on ``m``
(``(A^T A + lam diag(A^T A)) d = -A^T phi``, ``lam`` raised until ``m`` falls) is taken, which
always descends. Newton has stalled when it needs three of those in a row (or runs out of
iterations): ``m`` has a minimum there that is not a root (the decoder's tangent space nearly
singular, or no root near), and the step falls back to :meth:`_variational_step`, the
position-based implicit Euler potential on the same manifold, which has a minimizer
(``fallbacks`` counts these steps). Measured on the stalls of a whip model trained with
the paper's pose weighting (2 fallbacks in 73 held-out frames): ``|phi|`` falls linearly to
a plateau (1.4e-1 ... 3.5e-3, 3.44e-3, 3.41e-3, 3.41e-3; and 1.5e-2 ... 6.0e-3) and stays:
a minimum of the merit that is not a root, where no line search or damping helps, so the
fallback is the right step there (with ``D(p, z)`` a stall is first halved, see above).
Models trained without the weighting and with the linear
warm-up (``training/shen.py``) took no fallback on the held-out replays of either scene. ``third=False`` drops ``S`` from the matrix (an inexact
Newton: linear instead of quadratic convergence; the tests measure both). Warm start:
``r_n + h r'_n``. The step stops when the displacement of the Newton step on the cubature
sub-mesh is below ``newton_tol`` times the bounding-box diagonal, as the linear runtime's.
The full Newton step's system is evaluated with its matrix, which the next iteration needs
when the step is taken (nearly always): one decoder pass per iteration.

Measured (``bench/shen.py``, one core of a shared 2-core machine, whole bakes held out)
--------------------------------------------------------------------------------------
Whip (960 tets, tip pulled hard for 8 frames and released, up to 530 mm), 3 + 2 DOFs:

=================================  =========  ==========  =======  =====
model                              replay mm  closest mm  ms/step  iters
=================================  =========  ==========  =======  =====
Shen                                   441.7         8.5    18.5   3.36
Shen without the fictitious force      547.0         8.5    16.7   3.52
same manifold, variational step        564.2         8.5    21.6   3.35
PCA, 5 modes                           473.3        12.4     7.8   3.71
Fulton, latent 5 on 30 PCA modes       469.7         4.5    15.6  11.9
=================================  =========  ==========  =======  =====

So on the whip the fictitious force is what makes the nonlinear subspace beat PCA in motion
(0.93x PCA's replay error with it, 1.16x without), and Shen's closest shapes are 0.69x PCA's.
On a smaller whip (120 tets) the variational step was the better one (163 against 340 mm on
one held-out bake): neither discretization wins everywhere, so both stay. On the heavily
damped swung arm (``tests/test_shen_accuracy.py``, 3 + 1 DOFs) the replay is 0.66x PCA's
(1.47x that without the fictitious force), the closest shapes 0.80x; at 3 + 2 Shen is level
with PCA-5 (220 / 18.0 mm against 215 / 18.0). These are trained without the paper's pose
weighting and with 100 epochs of linear warm-up (``training/shen.py``; whip 3 + 2 at 1,000
epochs: 6.4 / 400 mm, with the weighting 8.3 / 663). The whip table above was measured with
the weighting. Step
time on the 21,504-tet bar at 10 + 5 DOFs: 14.3 ms against 1,324 ms for full space (93x;
random weights of the trained sizes, ``--speed``; 166x in a run where other jobs slowed full
space more), 3.2 Newton iterations per step; the decoder work of one iteration (jet with S,
then ``g^T H``) takes 205-223 us at best, 0.7 ms per step (in-step means under the shared
machine's load: 1.5-5.7 ms).

In contact. A step where the collider penalty acts (at the start or at the warm start) takes
:meth:`_variational_step` instead (``contact_variational``, the default): Newton on ``phi``
with the ``|phi|^2`` merit squares the stiff penalty and cycles between contact sets (on the
demo's dropped ball, ``scripts/demo.py``: 1,609 system evaluations in 30 steps, 10 iterations
a step, 45 at most, 2 fallbacks, replay 104 mm on the tet nodes), while the potential of the
variational step has a minimizer and Armijo on it copes with the penalty as the linear
runtime's does (5.2 iterations a step, 11 at most, no fallback, replay 22 mm against the
linear model's 31 mm at the same 7 DOFs). Its Newton matrix is the exact Hessian where that
is positive definite, else the Gauss-Newton one with PSD-projected element Hessians (a ridge
on the exact one took 8.3 iterations a step, 26 at most, on the ball). Steps without contact
(the whip, the swung arm) are Shen's eq. (10) as above.

Cubature. The default target is 0.01, not the linear method's 0.05: the curved subspace's
replays were far more sensitive to the cubature's force error. Measured on held-out bakes of
animated pinned bodies built with Blender primitives (CLI, defaults otherwise): a keyed
cylinder bar, 3 + 3 DOFs, 67.6 mm at 0.05 (40 elements), 6.2 mm at 0.01 (66), 1.8 mm with
every element (closest shapes 0.43 mm; the linear model at its default 6 DOFs 16.3 mm, at
0.01 9.9 mm); a cone tentacle, 2 + 2, 5.3 mm (20 elements), 4.5 mm (36), 4.4 mm with every
element (the linear model at 4 DOFs: 9.4 mm, at 0.01 15.3 mm).

Energy. ``phi`` has several roots where the decoder curves, and Newton (or its crawl) may end
on a far one: on the random decoders of ``tests/test_shen.py`` a converged root raised the
energy of undamped free vibration from 0.24 to 1.23 J in one step and to 2.64 J in four
(AMD EPYC, numpy 1.26; on numpy 2.4 the energy rose 26x and Newton then took 11.4
iterations a step instead of 2.3, the "3x the iterations on numpy 2" of issue 27). Which
root a step meets depends on the last bits: traced on this machine, the first difference
between numpy 1.26 and 2.4 is the reduced force ``U_elem^T g_e`` (a transposed
matrix-vector product), whose OpenBLAS kernel sums in another order in the OpenBLAS each
wheel bundles (0.3.23 and 0.3.31; ``sin``, the decoder's jets and the element terms agree
to the bit), as OpenBLAS picks other kernels on other CPUs. Implicit Euler dissipates, so a root is accepted
only if the step's energy ``E = |qdot|^2_{M~} / 2 + V(c) + C(c) - f.c`` (``f`` the step's
constant forces: pokes, gravity, the pins' frame) does not rise beyond rounding (1e-12 of
its terms); a root that gains is treated as a stall (halved where the decoder reads ``p``,
else the variational step). The variational step starts from ``r_n`` where the warm start's
potential is higher, so its minimizer's potential is at most the step's start energy, and
where its end still gains (a curved or non-convex potential allows it) the velocity is
scaled down to the start's energy (``energy_clamps``; ``energy_rejections`` counts the
rejected roots). Measured on the random decoders: one rejected root, then 200 undamped
steps each losing energy (largest change -2.4e-4 of the start), 2.2-2.3 Newton iterations
a step on numpy 1 and 2 alike; on tiny trained models with omega 4
(``tests/test_shen_energy.py``, 3 seeds x 1 or 2 threads, weights as trained and x
(1 + 1e-9)): 3-13 rejected roots and 0-4 scaled velocities in 126 steps, no rise beyond
1e-13 of the start, where without the guard the energy grew 1e7-1e29-fold.

Animated pins. The pins' moving frame (:mod:`core.frame`) changes a step only through its
inertial target ``q~`` (for ``c_n + h qdot_n``), the mass damping's target ``q_d`` (for
``c_n``), gravity and the colliders taken into the frame: the first two are constant over
the step, so they enter eq. (10) and the variational step as the constant force
``M~ (q~ - c_n - h qdot_n) / h^2 + alpha M~ (q_d - c_n) / h`` (exact for the flat part; on
the curved part it is the frame's force on the same inertia). With a linear decoder this is
the linear runtime's frame to 8e-10 m (``tests/test_shen.py``). A halved step turns the
frame halfway for its first half. But eq. (10)'s inertia is a second-order expansion about
``r_n`` with ``r``'s own velocity, and the frame's target ``q~`` is the exact one of the
flat coordinates, so on the curved part the two disagree by the frame's motion over the
step; the variational step's inertia ``|c(r) - q~|^2_{M~}`` takes the frame exactly. So
where the frame moves the variational step is taken (``frame_variational``, the default).
Measured on held-out bakes of animated pinned bodies built with Blender primitives (defaults,
the CLI): a cone tentacle (873 tets, 2 + 2 DOFs) 5.3 mm with it against 41.8 mm with eq. (10)
(4 rejected roots, 2 fallbacks; 262 mm with neither the guard nor it); a keyed cylinder bar
(3 + 3) 67.6 against 188.7 mm; the test's small swung bar (3 + 2, three trainings) 299 /
54 / 362 mm against 302 / 70 / 348. Colliders, pokes, gravity and damping are as in the
other subspace runtimes.
"""

from ...reduced.model import SUBSPACE_INPUTS
from ...registry import Method
from . import hocs
from .runtime import ShenSimulation
from .schema import NAME, load, onnx_graph, save
from .settings import SETTINGS

METHOD = Method(
    name=NAME,
    label="High-order Autoencoder (Shen 2021)",
    description="PCA modes plus a deep sin autoencoder in their complement; the true "
    "equations of motion on that curved subspace (fictitious forces included), Newton with "
    "exact third derivatives. Trains with PyTorch.",
    settings=SETTINGS,
    load=load,
    trainer="training.shen:train",
    needs_torch=True,
    inputs=SUBSPACE_INPUTS,
    onnx=onnx_graph,
    order=15,
    setup_cost=3.5,  # measured 3.2-4.6x linear on a board and a tail (Compare Methods)
)

__all__ = [
    "METHOD",
    "NAME",
    "SETTINGS",
    "ShenSimulation",
    "hocs",
    "load",
    "onnx_graph",
    "save",
]
