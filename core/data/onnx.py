"""Trained models as ONNX graphs, for game engines and Houdini (export only).

A model plays inside the extension with numpy alone (:mod:`core.nnet`). Studios that ship a
cape or a prop in Unreal (NNE), Unity (Sentis / Inference Engine) or Houdini (ML Deform SOP)
run networks through ONNX, so :func:`export_onnx` writes the part of a model that is a fixed
array program (a network step, a decoder, a basis) as an ONNX graph. What a method exports
is its record's ``onnx`` function (:class:`core.registry.Method`): it reads the model file's
own arrays and description and adds nodes to an :class:`OnnxGraph`; nothing here branches on
a method's name.

The graph
---------
* Opset :data:`OPSET` (15) and IR version :data:`IR_VERSION` (8): Unity Sentis imports opsets 7
  to 15 (its manual; later versions more), Unreal's NNE and Houdini run ONNX Runtime, which
  reads every opset up to its release's, and opset 15 with IR 8 is what ONNX Runtime 1.10
  (2021) and later read. Only elementwise operators, MatMul, Gather, Concat, Reshape and
  ReduceSum are used, each in Sentis's table of supported operators.
* float32 by default (the engines' type; ``precision="float64"`` keeps the numpy runtime's
  type, for checking). Every input has a leading batch axis ``B`` (instances at once).
* Each input and output carries a doc string (what, shape, units) and the file's metadata
  (``metadata_props``) the method's description: the names of the external features, the
  frame convention, the source model's method and mesh hash.

The ``onnx`` package is imported only here and only when exporting; the extension never
needs it to play a model, and a Python without it gets a message saying what to install.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import NeuralRomError, WriteError
from ..reduced.nnet import MLP

__all__ = ["OPSET", "IR_VERSION", "OnnxGraph", "export_onnx", "require_onnx"]

#: ONNX operator set of the exported graphs (see the module docstring).
OPSET = 15
#: ONNX IR version of the files (what ONNX Runtime 1.10+ reads).
IR_VERSION = 8
PRECISIONS = ("float32", "float64")

_ACTIVATION_OPS = {
    "relu": "Relu",
    "elu": "Elu",  # alpha = 1, as torch.nn.ELU() and core.nnet
    "tanh": "Tanh",
    "sin": "Sin",
    "softplus": "Softplus",
}


def require_onnx():
    """The ``onnx`` module, or NeuralRomError saying how to get it."""
    try:
        import onnx
    except ImportError:
        raise NeuralRomError(
            "Exporting to ONNX needs the 'onnx' package in the Python that runs the export "
            "(pip install onnx; the extension itself never needs it): run the export from the "
            "development environment (.venv/bin/python), or install onnx into the Python set "
            "in Preferences."
        ) from None
    return onnx


class OnnxGraph:
    """A graph being built: named inputs, constants, nodes and outputs, in one precision.

    Parameters
    ----------
    precision : "float32" or "float64", the type of every float input, constant and output
    """

    def __init__(self, precision: str = "float32") -> None:
        if precision not in PRECISIONS:
            raise NeuralRomError(f"Precision {precision!r} is not one of {', '.join(PRECISIONS)}.")
        self.onnx = require_onnx()
        self.dtype = np.dtype(precision)
        self.inputs: list = []
        self.outputs: list = []
        self.nodes: list = []
        self.initializers: list = []
        self.metadata: dict[str, str] = {}
        self.description: dict[str, list[dict]] = {"inputs": [], "outputs": []}
        self._names: set[str] = set()

    def _fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self._names:
            name, i = f"{base}_{i}", i + 1
        self._names.add(name)
        return name

    def _value_info(self, name: str, shape: Sequence, doc: str):
        h = self.onnx.helper
        elem = self.onnx.helper.np_dtype_to_tensor_dtype(self.dtype)
        info = h.make_tensor_value_info(name, elem, list(shape))
        info.doc_string = doc
        return info

    def input(self, name: str, shape: Sequence, doc: str) -> str:
        """A graph input; ``shape`` entries are ints or axis names ("B")."""
        self._names.add(name)
        self.inputs.append(self._value_info(name, shape, doc))
        self.description["inputs"].append({"name": name, "shape": list(shape), "doc": doc})
        return name

    def output(self, value: str, name: str, shape: Sequence, doc: str) -> None:
        """Expose ``value`` as the output ``name``."""
        self._names.add(name)
        self.nodes.append(self.onnx.helper.make_node("Identity", [value], [name]))
        self.outputs.append(self._value_info(name, shape, doc))
        self.description["outputs"].append({"name": name, "shape": list(shape), "doc": doc})

    def const(self, array: Any, name: str = "c", *, integer: bool = False) -> str:
        """A constant: float arrays in the graph's precision, ``integer`` ones as int64."""
        a = np.asarray(array, dtype=np.int64 if integer else self.dtype)
        name = self._fresh(name)
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(a), name))
        return name

    def node(self, op: str, *inputs: str, name: str | None = None, **attrs) -> str:
        """One node with one output; returns the output's name."""
        out = self._fresh(name or op.lower())
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), [out], **attrs))
        return out

    def mlp(self, x: str, net: MLP, prefix: str = "net") -> str:
        """``net`` applied to the rows of ``x`` (B, in): MatMul + Add (+ activation) per layer,
        the weights transposed once so rows multiply as ``x W^T``."""
        h = x
        for i, (W, b, act) in enumerate(zip(net.W, net.b, net.activations, strict=True)):
            h = self.node("MatMul", h, self.const(W.T, f"{prefix}.W{i}T"))
            h = self.node("Add", h, self.const(b, f"{prefix}.b{i}"))
            if act != "identity":
                h = self.activation(act, h)
        return h

    def activation(self, act: str, x: str) -> str:
        """``act`` of ``x``: its ONNX operator; in float64, where ONNX Runtime has no Elu or
        Softplus kernel, the same functions from elementary operators (as core.nnet
        evaluates them)."""
        if self.dtype == np.float64 and act in ("elu", "softplus"):
            pos = self.node("Relu", x)
            if act == "elu":  # max(z, 0) + (e^min(z, 0) - 1)
                neg = self.node("Min", x, self.const(0.0, "zero"))
                tail = self.node("Sub", self.node("Exp", neg), self.const(1.0, "one"))
            else:  # max(z, 0) + log(1 + e^-|z|)
                e = self.node("Exp", self.node("Neg", self.node("Abs", x)))
                tail = self.node("Log", self.node("Add", e, self.const(1.0, "one")))
            return self.node("Add", pos, tail)
        return self.node(_ACTIVATION_OPS[act], x)

    def affine_positions(self, q: str, X: np.ndarray, U: np.ndarray, name: str, doc: str) -> None:
        """The output ``name`` (B, n, 3) = ``X + U q`` for coordinates ``q`` (B, k): one MatMul
        by ``U^T`` (k, 3n) and the rest shape added."""
        n = len(X)
        flat = self.node("MatMul", q, self.const(np.asarray(U).T, "U_T"))
        flat = self.node("Add", flat, self.const(np.asarray(X).reshape(-1), "X_flat"))
        shaped = self.node("Reshape", flat, self.const([-1, n, 3], "shape_n3", integer=True))
        self.output(shaped, name, ["B", n, 3], doc)

    def to_model(self, doc: str):
        """The ModelProto, checked with ``onnx.checker``."""
        onnx, h = self.onnx, self.onnx.helper
        graph = h.make_graph(
            self.nodes, "neural_rom", self.inputs, self.outputs, initializer=self.initializers
        )
        graph.doc_string = doc
        model = h.make_model(
            graph,
            opset_imports=[h.make_opsetid("", OPSET)],
            producer_name="neural_rom",
            doc_string=doc,
        )
        model.ir_version = IR_VERSION
        h.set_model_props(model, self.metadata)
        onnx.checker.check_model(model, full_check=True)
        return model


def export_onnx(
    model_path: str | os.PathLike,
    out: str | os.PathLike,
    *,
    precision: str = "float32",
    expect_mesh_hash: str | None = None,
) -> dict:
    """Write the ONNX graph of the model file ``model_path`` to ``out`` (atomically).

    Returns
    -------
    dict : ``{"path", "method", "opset", "precision", "inputs", "outputs", "metadata"}``,
        inputs and outputs as ``{"name", "shape", "doc"}``; what the CLI prints.

    Raises
    ------
    NeuralRomError : the method has no ONNX graph (naming the ones that do), onnx is missing,
        or the model file is stale, foreign or corrupt (CacheError).
    """
    from .. import registry
    from .modelfile import load_model

    model = load_model(model_path, expect_mesh_hash=expect_mesh_hash)
    record = registry.get(model.method)
    build = record.onnx_function()
    if build is None:
        able = [m.label for m in registry.methods() if m.onnx is not None]
        raise NeuralRomError(
            f"The {record.label} model has no network step or decoder to export to ONNX "
            f"(its runtime is not a fixed array program); methods that export: {', '.join(able)}."
        )
    g = OnnxGraph(precision)
    doc = build(model, g)
    g.metadata.update(
        {
            "neural_rom.method": model.method,
            "neural_rom.mesh_hash": str(model.mesh_hash),
            "neural_rom.source": Path(model_path).name,
            "neural_rom.precision": precision,
        }
    )
    proto = g.to_model(doc)
    out = Path(out)
    tmp = out.with_name(out.name + ".part")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(proto.SerializeToString())
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise WriteError(f"Cannot write {out}: {e.strerror or e}; choose a writable path.") from e
    return {
        "path": str(out),
        "method": model.method,
        "opset": OPSET,
        "precision": precision,
        **g.description,
        "metadata": {k: _maybe_json(v) for k, v in g.metadata.items()},
    }


def _maybe_json(v: str):
    try:
        return json.loads(v)
    except (TypeError, ValueError):
        return v
