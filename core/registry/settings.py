"""A method's training settings: what the panel shows, the CLI parses and the trainer
receives (:class:`Setting`), checked by value here and only here."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import NeuralRomError

KINDS = ("int", "float", "bool", "enum", "int_list")


@dataclass(frozen=True)
class Setting:
    """One training setting of a method: what the panel shows, the CLI parses and the
    trainer receives.

    Attributes
    ----------
    name : identifier (a Python name; the CLI option is ``--name-with-dashes``)
    kind : "int", "float", "bool", "enum" or "int_list" (a list of ints, e.g. layer widths)
    default : the value when none is given; None only with ``auto``
    label : shown in the panel
    help : one sentence a user understands (the panel's tooltip and the CLI's help)
    unit : "" or an SI unit ("m", "s", "Pa", ...)
    minimum, maximum : inclusive bounds (None: unbounded); for int_list, of each entry
    soft_maximum : where the panel's slider ends (None: ``maximum``)
    items : the choices of an enum, as (identifier, label, help); an enum with items "on"
        and "off" (a tri-state that was a bool: "auto", "on", "off") also takes True / False
    auto : None is allowed and means "choose automatically"; the panel and the CLI write
        it as 0 (numbers) and say so in the help
    advanced : shown under the panel's Advanced fold (always on the CLI)
    """

    name: str
    kind: str
    default: Any
    label: str
    help: str
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    soft_maximum: float | None = None
    items: tuple = ()
    auto: bool = False
    advanced: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"setting {self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.kind == "enum" and not self.items:
            raise ValueError(f"setting {self.name}: an enum needs items")
        if self.default is None and not self.auto:
            raise ValueError(f"setting {self.name}: default None needs auto=True")
        if self.default is not None:
            self.check(self.default)

    @property
    def range_text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        if self.kind == "enum":
            return "one of " + ", ".join(i[0] for i in self.items)
        if self.kind == "bool":
            return "true or false"
        lo, hi = self.minimum, self.maximum
        each = "each " if self.kind == "int_list" else ""
        if lo is not None and hi is not None:
            text = f"{each}between {_num(lo)} and {_num(hi)}{unit}"
        elif lo is not None:
            text = f"{each}at least {_num(lo)}{unit}"
        elif hi is not None:
            text = f"{each}at most {_num(hi)}{unit}"
        else:
            text = f"any number{unit}"
        return text + (" (0 chooses it automatically)" if self.auto else "")

    def check(self, value: Any) -> Any:
        """``value`` converted to this setting's type; NeuralRomError naming the field and
        its range when it does not fit."""
        if value is None or (self.auto and self.kind in ("int", "float") and _is_zero(value)):
            if self.auto:
                return None
            raise NeuralRomError(f"Setting {self.name} needs a value ({self.range_text}).")
        bad = NeuralRomError(f"Setting {self.name} = {value!r} is not valid: {self.range_text}.")
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
                return value.lower() in ("true", "1", "yes")
            if isinstance(value, int | float) and value in (0, 1):
                return bool(value)
            raise bad
        if self.kind == "enum":
            names = [i[0] for i in self.items]
            if isinstance(value, bool) and {"on", "off"} <= set(names):
                return "on" if value else "off"  # a former bool setting's old values
            if value not in names:
                raise bad
            return str(value)
        if self.kind == "int_list":
            if isinstance(value, str):
                parts = [p for p in value.replace(",", " ").split() if p]
            elif isinstance(value, Iterable):
                parts = list(value)
            else:
                raise bad
            if not parts:
                raise bad
            return [self._number(p, int, bad) for p in parts]
        return self._number(value, int if self.kind == "int" else float, bad)

    def _number(self, value: Any, typ: type, bad: NeuralRomError):
        if isinstance(value, bool):
            raise bad
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise bad from None
        if not math.isfinite(v) or (typ is int and v != int(v)):
            raise bad
        if (self.minimum is not None and v < self.minimum) or (
            self.maximum is not None and v > self.maximum
        ):
            raise bad
        return int(v) if typ is int else v

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["items"] = [list(i) for i in self.items]
        return d


def _num(v: float) -> str:
    return f"{v:g}"


def _is_zero(value: Any) -> bool:
    try:
        return not isinstance(value, bool) and float(value) == 0.0
    except (TypeError, ValueError):
        return False
