"""Server-side registry of callables that jobs may target, filled by client code at import."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings


@dataclass(frozen=True)
class RegisteredCallable:
    name: str
    func: Callable[..., Any]
    # The callable records the dedup key itself, inside its own transaction.
    records_own_key: bool = False


@dataclass
class Registry:
    callables: dict[str, RegisteredCallable] = field(default_factory=dict)

    def register(self, entry: RegisteredCallable) -> None:
        existing = self.callables.get(entry.name)
        if existing is not None and existing.func is not entry.func:
            raise ValueError(f"callable name {entry.name!r} is registered twice")
        self.callables[entry.name] = entry

    def get(self, name: str) -> RegisteredCallable | None:
        return self.callables.get(name)


registry = Registry()


def register_callable(
    name: str, *, records_own_key: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make ``func`` available as a job target under ``name`` (never a user-supplied path)."""

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        registry.register(RegisteredCallable(name, func, records_own_key))
        return func

    return decorate


def load_client_modules() -> None:
    """Import the modules that declare targets and schedules (setting SCHEDULER_CLIENT_MODULES)."""
    for module in getattr(settings, "SCHEDULER_CLIENT_MODULES", []):
        importlib.import_module(module)
