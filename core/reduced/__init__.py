"""What the reduced (subspace) methods share: subspaces, cubature, numpy networks, the floating
pose, the subspace model and backward Euler in a linear subspace (:mod:`.integrator`)."""
