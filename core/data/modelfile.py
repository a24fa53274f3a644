"""Trained-model files: torch-free, pickle-free, one file per model.

Every reduced model (linear, autoencoder, Shen, LiCROM, ...) is exported by
``training/`` to this format and played back by ``core`` with numpy alone.

Format (schema 1)
-----------------
A model is one uncompressed ``.npz`` archive (``np.savez``), by convention named
``<name>.nrmodel``, holding

- the model's arrays, each a numeric or boolean ``.npy`` member (never an object array);
- ``__meta__``: a uint8 array holding UTF-8 JSON::

    {"format": "neural_rom.model", "schema": 1, "method": "linear" | "autoencoder" | ...,
     "mesh_hash": <core.files.mesh_hash of the tet mesh>, "created": <ISO 8601 UTC>,
     "tool_version": <extension version>,
     "metadata": {<caller JSON: material, dt, training settings, metrics, network
                   descriptions from MLP.to_arrays, ...>},
     "arrays": {<name>: {"shape": [...], "dtype": "<f8", "sha256": <hex of the C-order
                bytes>}, ...}}

The manifest lets :func:`load_model` prove that every array is the one that was written:
a truncated, bit-flipped or edited file fails with :class:`~.errors.CacheError` instead of
playing back garbage. Files are written to a hidden temp file in the same directory and
moved into place with ``os.replace`` (:func:`.files.write_npz`), so the path holds the old model or the new one,
never half of one.

Example
-------
>>> arrays, net_meta = decoder.to_arrays(prefix="decoder.")        # doctest: +SKIP
>>> save_model("cube.nrmodel", method="autoencoder", mesh_hash=mesh.hash(),
...            arrays={**arrays, "U": U}, metadata={"decoder": net_meta, "dt": 1/24})
>>> m = load_model("cube.nrmodel", expect_mesh_hash=mesh.hash())  # doctest: +SKIP
>>> decoder = MLP.from_arrays(m.arrays, m.metadata["decoder"])     # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import CacheError
from .files import json_default, tool_version, write_npz

__all__ = [
    "FORMAT",
    "MODEL_SCHEMA",
    "SUFFIX",
    "Model",
    "load_model",
    "read_metadata",
    "save_model",
]

MODEL_SCHEMA = 1
SUFFIX = ".nrmodel"
FORMAT = "neural_rom.model"
_META = "__meta__"
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_DTYPE_KINDS = "biufc"  # bool, int, uint, float, complex: what npy stores without pickle


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def _manifest_entry(a: np.ndarray) -> dict[str, Any]:
    return {"shape": list(a.shape), "dtype": a.dtype.str, "sha256": _sha256(a)}


@dataclass
class Model:
    """A loaded model file.

    Attributes
    ----------
    path : Path
        The file it was read from.
    method : str
        Which method made it: its registered name (``"linear"``, ``"autoencoder"``, ...).
    mesh_hash : str
        Hash of the tet mesh it was trained for (:func:`.files.mesh_hash`).
    schema : int
        Format version of the file.
    metadata : dict
        The caller's JSON metadata (material, dt, training settings, metrics, ...).
    arrays : dict of str to ndarray
        Every array of the file, loaded eagerly and verified against the manifest.
    created, tool_version : str
        When and by which extension version the file was written.
    """

    path: Path
    method: str
    mesh_hash: str
    schema: int
    metadata: dict[str, Any]
    arrays: dict[str, np.ndarray] = field(repr=False)
    created: str = ""
    tool_version: str = ""

    def __repr__(self) -> str:
        return (
            f"Model({self.method!r}, path={str(self.path)!r}, mesh_hash={self.mesh_hash[:12]}, "
            f"arrays={sorted(self.arrays)})"
        )


def save_model(
    path: str | os.PathLike,
    *,
    method: str,
    mesh_hash: str,
    arrays: Mapping[str, np.ndarray],
    metadata: Mapping[str, Any],
) -> Path:
    """Write a model file atomically.

    Parameters
    ----------
    path : path-like
        Destination. ``.nrmodel`` is appended when the name has no suffix. The
        directory must exist; an existing file is replaced (atomically).
    method : str
        The registered name of the method, e.g. ``"linear"``, ``"autoencoder"``, ``"shen"``, ``"licrom"``.
    mesh_hash : str
        :func:`.files.mesh_hash` (``TetMesh.hash()``) of the mesh the model belongs to.
    arrays : mapping of str to array
        Numeric or boolean arrays; names of letters, digits, ``_``, ``.`` and ``-``.
        Stored exactly (dtype, shape and bytes round-trip).
    metadata : mapping
        JSON-serializable (numpy scalars and arrays are converted): material, dt,
        training settings, metrics, network descriptions.

    Returns
    -------
    Path
        The path written.
    """
    path = Path(path)
    if not path.suffix:
        path = path.with_name(path.name + SUFFIX)
    if not isinstance(method, str) or not method:
        raise ValueError(f"save_model: method must be a non-empty string, got {method!r}")
    if not isinstance(mesh_hash, str) or not mesh_hash:
        raise ValueError(f"save_model: mesh_hash must be a non-empty string, got {mesh_hash!r}")
    if not isinstance(metadata, Mapping):
        raise TypeError(f"save_model: metadata must be a dict, got {type(metadata).__name__}")
    if not path.parent.is_dir():
        raise CacheError(
            f"cannot write model {path}: the folder {path.parent} does not exist; create it "
            "or pick another output path"
        )

    out: dict[str, np.ndarray] = {}
    for name, a in arrays.items():
        if not isinstance(name, str) or not _NAME_RE.match(name) or name == _META:
            raise ValueError(
                f"save_model: bad array name {name!r}: use letters, digits, '_', '.' and '-' "
                f"(not starting with '.' or '-', and not {_META!r})"
            )
        a = np.asarray(a)
        if a.dtype.kind not in _DTYPE_KINDS or a.dtype.fields is not None:
            raise ValueError(
                f"save_model: array {name!r} has dtype {a.dtype}; only numeric and boolean "
                "arrays can be stored (put text and settings in metadata)"
            )
        out[name] = a if a.flags.c_contiguous else a.copy(order="C")  # keeps 0-d arrays 0-d

    meta = {
        "format": FORMAT,
        "schema": MODEL_SCHEMA,
        "method": method,
        "mesh_hash": mesh_hash,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "tool_version": tool_version(),
        "metadata": dict(metadata),
        "arrays": {name: _manifest_entry(a) for name, a in out.items()},
    }
    try:
        meta_bytes = json.dumps(meta, indent=1, default=json_default).encode("utf-8")
    except (TypeError, ValueError) as e:
        raise ValueError(
            "save_model: metadata must be JSON-serializable (numbers, strings, lists, dicts, "
            f"numpy scalars/arrays): {e}"
        ) from e
    out[_META] = np.frombuffer(meta_bytes, dtype=np.uint8)

    write_npz(path, out, durable=True)
    return path


def _corrupt(path: Path, why: str) -> CacheError:
    return CacheError(f"model file {path} is corrupt ({why}); re-export the model or retrain it")


def load_model(
    path: str | os.PathLike,
    *,
    expect_mesh_hash: str | None = None,
    expect_method: str | None = None,
) -> Model:
    """Read and verify a model file written by :func:`save_model`.

    Parameters
    ----------
    path : path-like
        The ``.nrmodel`` file.
    expect_mesh_hash : str, optional
        Hash of the mesh the model will drive; a model trained for another mesh is refused.
    expect_method : str, optional
        Required model kind; a model of another kind is refused.

    Returns
    -------
    Model

    Raises
    ------
    CacheError
        The file is missing, truncated, corrupt, not a Neural ROM model, of another schema,
        for another mesh or of another method, or holds pickled (object) arrays. The
        message says which, and what to do.
    """
    path = Path(path)
    with _open(path, check_arrays=True) as npz:
        names = set(npz.files)
        meta = _read_meta(path, npz)
        manifest = meta["arrays"]
        names.discard(_META)
        if names != set(manifest):
            missing = sorted(set(manifest) - names)
            extra = sorted(names - set(manifest))
            raise _corrupt(path, f"arrays missing: {missing}, unexpected: {extra}")
        # the metadata checks come before the (costlier) array reads so that a foreign or
        # stale model is reported as such, not as whatever its arrays happen to look like
        if expect_mesh_hash is not None and meta["mesh_hash"] != expect_mesh_hash:
            raise CacheError(
                f"model {path.name} was trained for another mesh (hash {meta['mesh_hash'][:12]}, "
                f"this mesh is {expect_mesh_hash[:12]}); re-train for this mesh or pick the "
                "right object (re-tetrahedralizing changes the mesh)"
            )
        if expect_method is not None and meta["method"] != expect_method:
            raise CacheError(
                f"model {path.name} is a {meta['method']!r} model, not {expect_method!r}; pick "
                f"a {expect_method!r} model or switch the method to {meta['method']!r}"
            )
        arrays = {name: _read_array(path, npz, name, manifest[name]) for name in sorted(names)}
    return Model(
        path=path,
        method=meta["method"],
        mesh_hash=meta["mesh_hash"],
        schema=meta["schema"],
        metadata=meta["metadata"],
        arrays=arrays,
        created=str(meta.get("created", "")),
        tool_version=str(meta.get("tool_version", "")),
    )


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The caller metadata of a model file (training settings, metrics, the bakes it was
    trained on and the split, ...), checked as :func:`load_model` checks it, without
    reading the model's arrays.

    Raises
    ------
    CacheError
        As :func:`load_model`: missing, truncated, not a model, another schema.
    """
    path = Path(path)
    with _open(path, check_arrays=False) as npz:
        return _read_meta(path, npz)["metadata"]


def read_method(path: str | os.PathLike) -> str:
    """The method a model file names, checked as :func:`read_metadata` checks the file,
    without reading its arrays."""
    path = Path(path)
    with _open(path, check_arrays=False) as npz:
        return str(_read_meta(path, npz)["method"])


def _open(path: Path, *, check_arrays: bool):
    """The model archive opened without pickle, after the checks that need no arrays
    (and, with ``check_arrays``, the refusal of object arrays)."""
    if not path.exists():
        raise CacheError(
            f"no model file at {path}: train (or export) a model first, or check the path"
        )
    if not path.is_file():
        raise CacheError(f"{path} is not a file: pick the .nrmodel file of a trained model")
    if not zipfile.is_zipfile(path):
        raise CacheError(
            f"model file {path} is truncated or corrupt (not a readable archive), or not a "
            "Neural ROM model: re-export or retrain the model"
        )
    if check_arrays:
        _refuse_object_arrays(path)
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise CacheError(
            f"model file {path} is truncated or corrupt ({e}): re-export or retrain the model"
        ) from e
    if _META not in npz.files:
        npz.close()
        raise CacheError(
            f"{path} has no Neural ROM metadata: it is not a model file written by Neural "
            "ROM (or it is damaged); pick the right file, or re-export the model"
        )
    return npz


def _refuse_object_arrays(path: Path) -> None:
    """Read only the ``.npy`` headers and refuse pickled (object) arrays before anything else."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise CacheError(
            f"model file {path} is truncated or corrupt ({e}): re-export or retrain the model"
        ) from e
    with zf:
        for info in zf.infolist():
            name = info.filename.removesuffix(".npy")
            try:
                with zf.open(info) as f:
                    version = np.lib.format.read_magic(f)
                    # versions 2 and 3 share the header layout (3 only allows UTF-8 field names)
                    read = (
                        np.lib.format.read_array_header_1_0
                        if version == (1, 0)
                        else np.lib.format.read_array_header_2_0
                    )
                    _, _, dtype = read(f)
            except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
                raise _corrupt(path, f"array {name!r} is unreadable: {e}") from e
            if dtype.hasobject:
                raise CacheError(
                    f"model file {path} holds a pickled object array {name!r}; pickled data is "
                    "refused because loading it can run code. Only use model files exported by "
                    "Neural ROM"
                )


def _read_member(path: Path, npz, name: str) -> np.ndarray:
    try:
        return npz[name]
    except ValueError as e:
        if "allow_pickle" in str(e):
            raise CacheError(
                f"model file {path} holds a pickled object array {name!r}; pickled data is "
                "refused because it can run code. Only use model files exported by Neural ROM"
            ) from e
        raise _corrupt(path, f"array {name!r} is unreadable: {e}") from e
    except (OSError, EOFError, zipfile.BadZipFile, KeyError) as e:
        raise _corrupt(path, f"array {name!r} is unreadable: {e}") from e


def _read_meta(path: Path, npz) -> dict[str, Any]:
    raw = _read_member(path, npz, _META)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise _corrupt(path, "the metadata is not a byte array")
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _corrupt(path, f"the metadata is not valid JSON: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise CacheError(
            f"{path} is not a Neural ROM model file (format "
            f"{meta.get('format') if isinstance(meta, dict) else None!r}, expected {FORMAT!r}); "
            "pick the .nrmodel file of a trained model"
        )
    schema = meta.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise _corrupt(path, f"no integer schema version (got {schema!r})")
    if schema > MODEL_SCHEMA:
        raise CacheError(
            f"model {path.name} was made by a newer Neural ROM (schema {schema}); this version "
            f"reads {MODEL_SCHEMA}: update the extension"
        )
    if schema < MODEL_SCHEMA:
        raise CacheError(
            f"model {path.name} was made by an older Neural ROM (schema {schema}); this version "
            f"reads {MODEL_SCHEMA}: retrain the model (or re-export it) with this version"
        )
    for key in ("method", "mesh_hash"):
        if not isinstance(meta.get(key), str) or not meta[key]:
            raise _corrupt(path, f"no {key} in the metadata")
    if not isinstance(meta.get("metadata"), dict):
        raise _corrupt(path, "the caller metadata is not an object")
    manifest = meta.get("arrays")
    if not isinstance(manifest, dict) or not all(
        isinstance(v, dict) and {"shape", "dtype", "sha256"} <= set(v) for v in manifest.values()
    ):
        raise _corrupt(path, "no valid array manifest")
    return meta


def _read_array(path: Path, npz, name: str, entry: Mapping[str, Any]) -> np.ndarray:
    a = _read_member(path, npz, name)
    if a.dtype.kind not in _DTYPE_KINDS or a.dtype.fields is not None:
        raise CacheError(
            f"model file {path} holds array {name!r} of dtype {a.dtype}, which Neural ROM never "
            "writes; it is refused. Only use model files exported by Neural ROM"
        )
    if list(a.shape) != list(entry["shape"]):
        raise _corrupt(
            path, f"array {name!r} has shape {a.shape}, expected {tuple(entry['shape'])}"
        )
    if a.dtype.str != entry["dtype"]:
        raise _corrupt(path, f"array {name!r} has dtype {a.dtype.str}, expected {entry['dtype']}")
    if _sha256(a) != entry["sha256"]:
        raise _corrupt(path, f"array {name!r} does not match its checksum")
    return a
