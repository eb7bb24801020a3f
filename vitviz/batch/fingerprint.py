"""What identifies a model's maps by content, not by where it was loaded from: a SHA-256 of its weights (every
tensor of its state dict: name, dtype, shape and bytes) and of its spec (preprocessing, labels, name, architecture:
all that shapes a map or a figure, the file's path left out). A checkpoint replaced at the same path gets another
hash; the same weights moved elsewhere keep theirs. Computed once per run (about 1 GB/s on a CPU core)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import torch


def spec_dict(spec: Any) -> dict[str, Any]:
    """The spec as plain data, without the path it was loaded from."""
    if hasattr(spec, "to_dict"):
        d = spec.to_dict()
    elif dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        d = dataclasses.asdict(spec)
    else:
        d = {"spec": type(spec).__qualname__}
    d = dict(d)
    d.pop("source_path", None)
    return d


def model_sha256(model: torch.nn.Module) -> str:
    """The hex SHA-256 of ``model``'s spec (:func:`spec_dict`) and state dict (see the module's docstring)."""
    h = hashlib.sha256()
    # objects that are not plain data (a preprocessing callable ...) count by their type only: a repr with an
    # address would differ on every run
    h.update(json.dumps(spec_dict(getattr(model, "spec", None)), sort_keys=True,
                        default=lambda o: type(o).__qualname__).encode())
    for name, t in model.state_dict().items():
        if not isinstance(t, torch.Tensor):
            h.update(f"{name}:{type(t).__qualname__}\n".encode())
            continue
        t = t.detach()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}\n".encode())
        if t.layout != torch.strided or t.is_quantized:
            t = t.dequantize() if t.is_quantized else t.to_dense()
        flat = t.cpu().contiguous().reshape(-1)
        if flat.numel():
            h.update(memoryview(flat.view(torch.uint8).numpy()))
    return h.hexdigest()
