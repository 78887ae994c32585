"""A name -> class registry, filled by a class decorator (the score functions, the structures)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):  # noqa: UP046 (Python 3.11: no type parameter syntax)
  """Classes registered under names; `kind` names them in errors ("unknown KIND 'x'; valid: ...").

  `sort`: `names()` sorted, else in registration order.
  """

  def __init__(self, kind: str, *, sort: bool = False):
    self.kind, self.sort = kind, sort
    self._classes: dict[str, type[T]] = {}

  def register(self, name: str) -> Callable[[type[T]], type[T]]:
    """Class decorator adding a class under `name` (also set as its `name` attribute)."""

    def add(cls: type[T]) -> type[T]:
      if name in self._classes:
        raise ValueError(f"{self.kind} {name!r} is registered twice")
      self._classes[name] = cls
      cls.name = name
      return cls

    return add

  def names(self) -> list[str]:
    return sorted(self._classes) if self.sort else list(self._classes)

  def get(self, name: str) -> type[T]:
    if name not in self._classes:
      raise ValueError(f"unknown {self.kind} {name!r}; valid: {', '.join(self.names())}")
    return self._classes[name]
