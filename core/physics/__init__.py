"""Full-space physics: FEM energies, time integration, colliders, linear solvers, the BLAS thread
cap, quasistatics, pokes."""
