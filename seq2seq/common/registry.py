"""Name -> class registries, and the specs that name a registered component with its settings.

Score functions, attention structures, alignment features and loss terms are registered by name
with a class decorator. Each may declare its own settings as a frozen dataclass `Settings`
(defaults included, checks in `__post_init__`); a config names the component and any settings
that differ from the defaults in one string, a *spec*:

    model.score = "cosine(sharpness=5)"
    model.attention = "local_p(window=8)"
    model.features = "coverage(fertility=true)+prev_attention(filters=8)"   # a list: "+"
    train.loss_terms = "fertility(weight=0.1)"

`Registry.spec(text)` parses one spec into a `Spec` (the name and a typed `Settings` instance);
`Registry.specs(text)` a "+"-separated list ("" is none). Values are read as the type of their
field (int, float, bool as true/false, str); an unknown name, an unknown setting or a value of
the wrong type fails with one line naming the valid choices.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
S = TypeVar("S")


@dataclasses.dataclass(frozen=True)
class NoSettings:
  """The settings of a component that has none."""


@dataclasses.dataclass(frozen=True)
class Spec:
  """A registered component and its settings; `str(spec)` is the canonical spec, which names
  only the settings that differ from their defaults (so equal specs print alike)."""

  name: str
  settings: Any = NoSettings()

  def __str__(self) -> str:
    changed = [
      f"{f.name}={_show(getattr(self.settings, f.name))}"
      for f in dataclasses.fields(self.settings)
      if getattr(self.settings, f.name) != f.default
    ]
    return f"{self.name}({', '.join(changed)})" if changed else self.name


def typed_section(cls: type[S], given: dict[str, Any], section: str, **derived: Any) -> S:
  """`cls` (a dataclass of one config section's fields) from the section's values `given`, with
  the `derived` fields that do not come from it; ValueError naming any unknown or missing field."""
  fields = {f.name for f in dataclasses.fields(cls)} - set(derived)
  if unknown := sorted(set(given) - fields):
    raise ValueError(f"unknown {section} setting(s) {', '.join(unknown)}")
  if missing := sorted(fields - set(given)):
    raise ValueError(f"{section} settings missing: {', '.join(missing)}")
  return cls(**given, **derived)


def _show(value: Any) -> str:
  return str(value).lower() if isinstance(value, bool) else str(value)


_SPEC = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\((.*)\))?\s*$", re.DOTALL)


def split_top_level(text: str, sep: str) -> list[str]:
  """`text` split at the `sep` characters outside parentheses."""
  parts, depth, start = [], 0, 0
  for i, char in enumerate(text):
    depth += {"(": 1, ")": -1}.get(char, 0)
    if char == sep and depth == 0:
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return parts


def _convert(value: str, kind: Any, where: str) -> Any:
  text = value.strip().strip("'\"")
  try:
    if kind is bool:
      if text.lower() not in ("true", "false", "1", "0"):
        raise ValueError
      return text.lower() in ("true", "1")
    return kind(text)
  except ValueError:
    raise ValueError(f"{where} must be {kind.__name__}, got {value.strip()!r}") from None


def parse_settings(settings_cls: type[S], text: str, field: str) -> S:
  """The `settings_cls` instance that the spec `text` ("name" or "name(k=v, ...)") gives, each
  value read as its field's type; ValueError naming `field` for an unknown setting or value."""
  match = _SPEC.match(text)
  if match is None:
    raise ValueError(f"{field}={text!r} is not a spec: use NAME or NAME(key=value, ...)")
  name, body = match.group(1), match.group(2)
  fields = {f.name: f for f in dataclasses.fields(settings_cls)}
  hints = typing.get_type_hints(settings_cls)
  values = {}
  for item in split_top_level(body or "", ","):
    if not item.strip():
      continue
    key, eq, value = item.partition("=")
    key = key.strip()
    if not eq or key not in fields:
      valid = ", ".join(fields) or "none"
      raise ValueError(f"{field}: {name} has no setting {key!r}; valid: {valid}")
    values[key] = _convert(value, hints[key], f"{field}: {name}({key}=...)")
  try:
    return settings_cls(**values)
  except ValueError as e:
    raise ValueError(f"{field}={text!r}: {e}") from None


def optional_settings(
  settings_cls: type[S], name: str, text: Any, field: str, usage: str
) -> S | None:
  """The `settings_cls` of a field that is off ("") or one spec "NAME(k=v, ...)" (`usage`,
  shown when the name is wrong, says what it takes); settings given as they are pass through."""
  if text is None or isinstance(text, settings_cls):
    return text
  if not str(text).strip():
    return None
  if str(text).strip().split("(", 1)[0].strip() != name:
    raise ValueError(f"{field}={text!r}: use {usage}")
  return parse_settings(settings_cls, str(text), field)


class Registry(Generic[T]):  # noqa: UP046 (Python 3.11: no type parameter syntax)
  """Classes registered under names; `kind` names them in errors ("unknown KIND 'x'; valid: ...")
  and `field` is the config field whose specs name them (e.g. "model.attention").

  `sort`: `names()` sorted, else in registration order.
  """

  def __init__(self, kind: str, *, field: str = "", sort: bool = False):
    self.kind, self.field, self.sort = kind, field or kind, sort
    self._classes: dict[str, type[T]] = {}
    self._aliases: dict[str, str] = {}

  def alias(self, name: str, canonical: str) -> None:
    """`name` reads as the registered `canonical` (a paper's own name for it, e.g. Luong's
    "concat" for the additive score); specs print the canonical name."""
    if name in self._classes or name in self._aliases or canonical not in self._classes:
      raise ValueError(f"{self.kind} alias {name!r} -> {canonical!r}: taken, or not registered")
    self._aliases[name] = canonical

  def register(self, name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator adding a class under `name` (also set as its `name` attribute)."""

    def add(cls: type[T]) -> type[T]:
      if name in self._classes:
        raise ValueError(f"{self.kind} {name!r} is registered twice")
      if not dataclasses.is_dataclass(getattr(cls, "Settings", NoSettings)):
        raise TypeError(f"{cls.__name__}.Settings must be a dataclass")
      self._classes[name] = cls
      cls.name = name
      return cls

    return add

  def aliases(self) -> dict[str, str]:
    """{alias: the registered name it reads as}."""
    return dict(self._aliases)

  def names(self) -> list[str]:
    return sorted(self._classes) if self.sort else list(self._classes)

  def get(self, name: str) -> type[T]:
    name = self._aliases.get(name, name)
    if name not in self._classes:
      raise ValueError(
        f"unknown {self.kind} {name!r} ({self.field}); valid: {', '.join(self.names())}"
      )
    return self._classes[name]

  def spec(self, text: str | Spec) -> Spec:
    """The component and typed settings that `text` ("name" or "name(k=v, ...)") names."""
    if isinstance(text, Spec):
      return text
    match = _SPEC.match(str(text))
    if match is None:
      raise ValueError(f"{self.field}={text!r} is not a spec: use NAME or NAME(key=value, ...)")
    name = self._aliases.get(match.group(1), match.group(1))
    settings_cls = getattr(self.get(name), "Settings", NoSettings)
    return Spec(name, parse_settings(settings_cls, str(text), self.field))

  def specs(self, text: str) -> tuple[Spec, ...]:
    """The specs of a "+"-separated list ("" or "none": no component)."""
    if text.strip().lower() in ("", "none"):
      return ()
    found = tuple(self.spec(part) for part in split_top_level(text, "+"))
    names = [s.name for s in found]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
      raise ValueError(f"{self.field}={text!r} names {self.kind} {twice[0]!r} twice")
    return found

  def settings_help(self) -> str:
    """Every registered name with its settings and defaults, one per line (for docs and errors)."""
    lines = []
    for name in self.names():
      settings = getattr(self._classes[name], "Settings", NoSettings)
      args = ", ".join(f"{f.name}={_show(f.default)}" for f in dataclasses.fields(settings))
      lines.append(f"{name}({args})" if args else name)
    lines += [f"{alias} (another name for {name})" for alias, name in self._aliases.items()]
    return "\n".join(lines)
