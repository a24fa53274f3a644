"""The runtimes of the reduced-model methods, side by side: one package per method.

Each package holds its simulator (following :class:`core.engine.protocol.Simulator`), its
model-file writer ``save`` and loader ``load``, and ``METHOD``: its
:class:`core.registry.Method` record, which :mod:`core.registry` finds by listing this
package. What the subspace runtimes share is in :mod:`core.reduced`. Their trainers sit side
by side in :mod:`training` under the same names.
"""
