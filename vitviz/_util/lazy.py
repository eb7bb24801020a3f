"""Lazy package namespaces (PEP 562): public names imported from their submodule on first use, so that importing the
package (and listing views, building the window) does not import torch."""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_names(package: str, names: dict[str, str], namespace: dict[str, Any]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package`` whose public ``names`` map to submodules (relative names).

    A resolved name is stored in ``namespace`` (the package's globals), so it costs one lookup only.
    """

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(f"{package}.{names[name]}"), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names))

    return __getattr__, __dir__
