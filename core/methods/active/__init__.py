"""Active faces (Srinivasan et al. 2021): a learned actuation driven by sliders or markers.

The model (trained by :mod:`training.active`) is a decoder ``a = pi_theta(z)`` from a latent
code ``z`` (a few numbers) to per-element shape-targeting actions (eq. 4, 9), and the flesh it
actuates: the quasistatic equilibrium ``chi(a)`` (eq. 5) with the skull fixed and the jaw's
nodes where the jaw's transform puts them (:mod:`core.quasistatic`).

Each frame (:class:`ActiveFace.step`):

* **sliders**: ``z`` is the slider values (one per latent coordinate);
* **markers**: ``z`` minimizes ``sum_k w_k ||p_k(chi(pi(z))) - m_k||^2 + rho ||z - z_prev||^2``
  (eq. 17 with a small pull ``rho`` to the previous frame's code, which keeps an under-marked
  face from drifting). We solve it by **Levenberg-Marquardt** on the reduced problem: the
  Jacobian ``dp/dz = -P U (U^T H U)^-1 U^T (d2E/dx da) (da/dz)`` comes from the implicit
  function theorem (eq. 10-11) at the current equilibrium, so each iteration is one reduced
  solve and one small dense system. By default a frame first tries the joint iteration on
  the code and the equilibrium (:meth:`ActiveFace.fit_markers_sqp`: one element pass per
  iteration instead of a converged reduced solve per trial), LM when it does not converge. On the bench head (8.3K tets, 30 markers) LM reaches in
  3 iterations (0.26 s) a cost that the paper's Adam (lr 0.1) needs 144 iterations (7.2 s)
  to come within 5% of (``bench/active.py``);
* the **jaw** is ``reference_frame``, its 4x4 transform relative to rest (identity: closed);
* **colliders** press the embedded skin (penalty, :mod:`core.quasistatic`); the reduced
  subspace (expressions) cannot dent a cheek, so a reduced frame that touches a collider is
  finished by the full solve (``contact="full"``).

The **skin shown** (the ``skin`` setting): by default the keys' blend ``L [z, angle, 1]``
(:attr:`ActiveModel.blend`, linear in the code and the jaw's hinge angle, so any blend of the
training keys is reproduced as a PCA of them reproduces it) plus the physics' change from
contact, ``P (chi_c - chi_0)``: the equilibrium with the colliders touching minus the one
without, two full solves on the frames where the blend touches a collider and none on the
others. A marker frame is then a linear least squares in the code and the angle (Gauss-Newton
with the head's motion), the contact's rates joining it in contact
(:meth:`ActiveFace.contact_skin_rates`). ``skin="physics"`` shows the flesh's equilibrium
every frame, with the detail layer; what follows is its runtime.

Two solves: the **full** quasistatic solve (Newton on every free node: the reference and
for final bakes; the paper's runtime) and the **reduced** one, ``x = X + G u_jaw + U q``:
``G`` the linear-elastic lift of the jaw's displacement into the flesh (``-K_ff^-1 K_fc`` at
rest), ``U`` a POD basis of the training equilibria and their latent tangents ``dx/dz`` with
that lift removed; Newton in ``q`` on the exact energy of every element (the elements' kernel
is a few milliseconds; the solve is ``r x r``). ``solve = "reduced"`` by default.

Every frame reports the equilibrium residual (largest free-node force over ``mu h^2``;
``StepReport.force_residual``): at most the solve tolerance for the full solve; for the
reduced one, the reduced residual (``U^T g``) is at the tolerance and the full one is what
the subspace leaves.
"""

from ...registry import Method
from .fits import blend_samples, fit_blend, fit_cubature, fit_detail, jaw_lift
from .markers import head_matrix, head_unmoved, levenberg_marquardt
from .model import ActiveModel
from .runtime import ActiveFace, play
from .schema import NAME, load, model_from_file, save
from .settings import SETTINGS

METHOD = Method(
    name=NAME,
    label="Active face (Srinivasan 2021)",
    description="A face whose muscles are learned per-element actuations fit to sculpted "
    "shape keys through a differentiable quasistatic simulation; driven by latent sliders or "
    "by markers (Levenberg-Marquardt), with the jaw and colliders as inputs.",
    settings=SETTINGS,
    load=load,
    trainer="training.active:train",
    needs_torch=True,
    inputs=frozenset({"sliders", "markers", "colliders", "reference_frame"}),
    trains_on=frozenset({"face"}),
    order=60,
)

__all__ = [
    "METHOD",
    "NAME",
    "SETTINGS",
    "ActiveFace",
    "ActiveModel",
    "blend_samples",
    "fit_blend",
    "fit_cubature",
    "fit_detail",
    "head_matrix",
    "head_unmoved",
    "jaw_lift",
    "levenberg_marquardt",
    "load",
    "model_from_file",
    "play",
    "save",
]
