"""The registry: one record per reduced-model method and per data kind, and everything that
loops over them.

A method is three things (DESIGN.md, "Methods plug in through one registry"):

* its **runtime**, a module of :mod:`core.methods` (numpy + scipy) holding the simulator
  class, the model-file writer and a module-level ``METHOD``: a :class:`Method` record;
* its **trainer**, named in the record by module path (``"training.linear:train"``,
  relative to the package) and imported lazily in the worker, or given as a callable;
* the **record** itself: identifier, label, description, the settings description
  (:class:`Setting`: type, default, range, unit, help), the loader (model file ->
  simulator), whether training needs torch, and which frame inputs the method takes.

Model loading (:func:`load_simulator`), the worker's train job, comparison, the panel's
Train menu and settings, the CLI's ``train`` options and the model box all loop over
:func:`methods`; nothing else branches on a method's name.

Built-in records are found by listing :mod:`core.methods` (every module there with a
``METHOD``), so adding a method adds files and touches no list. A method defined outside the
package (a studio's own, or a test's) calls :func:`register`; the record remembers the file
that registered it (``origin``) so a worker process can import that file and find the same
record.

Settings are validated by value here and only here (:meth:`Method.validate`): the panel, the
CLI and the worker all call it, so a bad value is refused with the field's name and range
before any job starts. The same setting name means the same thing in every method (``k`` is
the size of a method's PCA/POD basis wherever it appears); :func:`register` refuses a record
that gives a shared name another type or unit.

Data kinds (fem, cloth, face, family) have records of their own beside the methods'
(:class:`DataKind`): the training data an object has, the job that makes it and how its
frames are driven.

The package holds one module per part: :mod:`.settings` (:class:`Setting`), :mod:`.methods`
(:class:`Method`, :func:`register`, :func:`get`, :func:`load_simulator`, ...),
:mod:`.kinds` (:class:`DataKind`, :func:`register_kind`, :func:`kinds`, :data:`BAKE_KINDS`),
:mod:`.inputs` (:data:`INPUTS`) and :mod:`.plugins` (what the records share: references
imported when needed, a record's origin file, change listeners); this module re-exports
their public names, the API plug-ins, the add-on and the README use.
"""

from __future__ import annotations

from .inputs import BAKE_INPUTS_NEEDED, INPUTS
from .kinds import (
    BAKE_KINDS,
    STEPPING,
    DataKind,
    data_job_handler,
    get_kind,
    kind_job_fields,
    kinds,
    register_kind,
    unregister_kind,
)
from .methods import (
    Method,
    Values,
    baseline,
    check_inputs,
    get,
    job_fields,
    job_fields_of,
    load_simulator,
    methods,
    methods_for,
    names,
    register,
    takes_run,
    unregister,
)
from .plugins import LISTENERS as _LISTENERS  # noqa: F401 (tests clear it)
from .plugins import on_change, remove_listener
from .settings import KINDS, Setting

__all__ = [
    "BAKE_INPUTS_NEEDED",
    "BAKE_KINDS",
    "INPUTS",
    "KINDS",
    "STEPPING",
    "DataKind",
    "Method",
    "Setting",
    "Values",
    "baseline",
    "check_inputs",
    "data_job_handler",
    "get",
    "get_kind",
    "job_fields",
    "job_fields_of",
    "kind_job_fields",
    "kinds",
    "load_simulator",
    "methods",
    "methods_for",
    "names",
    "on_change",
    "register",
    "register_kind",
    "remove_listener",
    "takes_run",
    "unregister",
    "unregister_kind",
]
