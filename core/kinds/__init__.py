"""What each data kind brings to core: one module or package per kind, each with its
registry record ``KIND`` (:class:`core.registry.DataKind`), found by listing this package."""
