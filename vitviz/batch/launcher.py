"""Which shard of a batch command this process is, from the launcher that started it. Standard library only.

``vitviz export``, ``vitviz stats`` and ``vitviz evaluate`` split their images into N shards (``--shard K/N``,
:func:`vitviz.batch.inputs.take_shard`); when ``--shard`` is not given, :func:`launch_from_env` reads it from the
environment of the launchers researchers use:

* **torchrun** (``torchrun --standalone --nproc-per-node=8 -m vitviz export ...``): ``RANK`` / ``WORLD_SIZE`` give
  shard ``RANK + 1`` of ``WORLD_SIZE``; a device ``cuda`` becomes ``cuda:LOCAL_RANK`` (one GPU per process).
* **SLURM job arrays** (``sbatch --array=0-7``): ``SLURM_ARRAY_TASK_ID`` / ``SLURM_ARRAY_TASK_COUNT``; the index is
  ``(ID - SLURM_ARRAY_TASK_MIN) / SLURM_ARRAY_TASK_STEP``, so an array ``--array=1-8`` is shards 1..8 too. A
  torchrun inside each array task splits that task's share further (N = tasks x processes).
* **SLURM tasks** (``srun --ntasks=8``): ``SLURM_PROCID`` / ``SLURM_NTASKS``.

Shards are independent (no process group, no NCCL): each writes its own part, and ``vitviz merge`` joins them.
A value that is not what the launcher sets (not an integer, a rank beyond the world size) is a :class:`LaunchError`
naming the variable; ``--shard K/N`` overrides the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

OVERRIDE = "give --shard K/N to choose the shard yourself"


class LaunchError(ValueError):
    """An environment variable of a launcher holds a value the launcher never sets (the message names it)."""


@dataclass(frozen=True)
class Launch:
    """Where a process's shard comes from.

    Attributes:
        shard: ``(K, N)``, ``1 <= K <= N``.
        device: the device to run on (``cuda:LOCAL_RANK`` for ``cuda`` under torchrun, else as asked).
        origin: the launcher and the variables read, e.g. ``torchrun (RANK=3, WORLD_SIZE=8)``.
    """

    shard: tuple[int, int]
    device: str
    origin: str

    def line(self) -> str:
        """The first line a command prints: ``shard 4/8 from torchrun (RANK=3, WORLD_SIZE=8), device cuda:3``."""
        k, n = self.shard
        return f"shard {k}/{n} from {self.origin}, device {self.device}"


def _value(env: Mapping[str, str], name: str) -> str | None:
    v = env.get(name)
    return None if v is None or not v.strip() else v.strip()


def _int(env: Mapping[str, str], name: str, who: str) -> int:
    text = _value(env, name)
    if text is None:
        raise LaunchError(f"{name} is not set, but the other variables of {who} are; {OVERRIDE}")
    try:
        return int(text)
    except ValueError:
        raise LaunchError(f"{name}={text!r}: not an integer ({who} sets a whole number; {OVERRIDE})") from None



def _checked_rank(rank: int, rank_name: str, size: int, size_name: str) -> tuple[int, int]:
    """``(rank, size)`` once ``size >= 1`` and ``0 <= rank < size``; else LaunchError naming the variable."""
    if size < 1:
        raise LaunchError(f"{size_name}={size}: must be at least 1 ({OVERRIDE})")
    if not 0 <= rank < size:
        raise LaunchError(f"{rank_name}={rank}: must be between 0 and {size_name} - 1 = {size - 1} ({OVERRIDE})")
    return rank, size

def _torchrun(env: Mapping[str, str]) -> tuple[int, int] | None:
    """``(rank, world size)`` (0-based rank) of torchrun, or None when neither variable is set."""
    if _value(env, "RANK") is None and _value(env, "WORLD_SIZE") is None:
        return None
    who = "torchrun"
    world = _int(env, "WORLD_SIZE", who)
    rank = _int(env, "RANK", who)
    return _checked_rank(rank, "RANK", world, "WORLD_SIZE")


def _slurm_array(env: Mapping[str, str]) -> tuple[int, int, str] | None:
    """``(index, count, detail)`` of a SLURM job array task (0-based index), or None outside an array."""
    if _value(env, "SLURM_ARRAY_TASK_ID") is None:
        return None
    who = "a SLURM job array"
    task = _int(env, "SLURM_ARRAY_TASK_ID", who)
    low = _int(env, "SLURM_ARRAY_TASK_MIN", who) if _value(env, "SLURM_ARRAY_TASK_MIN") is not None else 0
    step = _int(env, "SLURM_ARRAY_TASK_STEP", who) if _value(env, "SLURM_ARRAY_TASK_STEP") is not None else 1
    if step < 1:
        raise LaunchError(f"SLURM_ARRAY_TASK_STEP={step}: must be at least 1 ({OVERRIDE})")
    if _value(env, "SLURM_ARRAY_TASK_COUNT") is not None:
        count = _int(env, "SLURM_ARRAY_TASK_COUNT", who)
    elif _value(env, "SLURM_ARRAY_TASK_MAX") is not None:  # older SLURM: no COUNT
        count = (_int(env, "SLURM_ARRAY_TASK_MAX", who) - low) // step + 1
    else:
        raise LaunchError(f"SLURM_ARRAY_TASK_COUNT is not set, but SLURM_ARRAY_TASK_ID is; {OVERRIDE}")
    if count < 1:
        raise LaunchError(f"SLURM_ARRAY_TASK_COUNT={count}: must be at least 1 ({OVERRIDE})")
    offset = task - low
    if offset < 0 or offset % step or offset // step >= count:
        raise LaunchError(f"SLURM_ARRAY_TASK_ID={task}: not one of the {count} tasks of an array from "
                          f"SLURM_ARRAY_TASK_MIN={low} in steps of {step} (an array with gaps, such as --array=1,3,7, "
                          f"cannot be told apart from a missing task; {OVERRIDE})")
    detail = f"SLURM_ARRAY_TASK_ID={task}, SLURM_ARRAY_TASK_COUNT={count}"
    if low:
        detail += f", SLURM_ARRAY_TASK_MIN={low}"
    if step != 1:
        detail += f", SLURM_ARRAY_TASK_STEP={step}"
    return offset // step, count, detail


def _slurm_tasks(env: Mapping[str, str]) -> tuple[int, int] | None:
    """``(SLURM_PROCID, SLURM_NTASKS)`` of an ``srun`` task, or None when SLURM_PROCID is not set."""
    if _value(env, "SLURM_PROCID") is None:
        return None
    who = "srun"
    rank = _int(env, "SLURM_PROCID", who)
    if _value(env, "SLURM_NTASKS") is None and _value(env, "SLURM_NPROCS") is not None:
        ntasks = _int(env, "SLURM_NPROCS", who)
    else:
        ntasks = _int(env, "SLURM_NTASKS", who)
    return _checked_rank(rank, "SLURM_PROCID", ntasks, "SLURM_NTASKS")


def _torchrun_device(env: Mapping[str, str], device: str) -> str:
    """``cuda:LOCAL_RANK`` for the device ``cuda``; any other device as it is."""
    if device.strip().lower() != "cuda" or _value(env, "LOCAL_RANK") is None:
        return device
    local = _int(env, "LOCAL_RANK", "torchrun")
    if local < 0:
        raise LaunchError(f"LOCAL_RANK={local}: must be 0 or more ({OVERRIDE})")
    return f"cuda:{local}"


def launch_from_env(device: str = "cpu", env: Mapping[str, str] | None = None) -> Launch | None:
    """The shard (and device) a launcher gave this process (see the module's docstring), or None when no launcher
    variable is set.

    Raises:
        LaunchError: a variable holds a value its launcher never sets (not an integer, a rank beyond the size).
    """
    env = os.environ if env is None else env
    torch_run = _torchrun(env)
    array = _slurm_array(env)
    if torch_run is not None:
        rank, world = torch_run
        dev = _torchrun_device(env, device)
        origin = f"torchrun (RANK={rank}, WORLD_SIZE={world})"
        if array is None:
            return Launch((rank + 1, world), dev, origin)
        index, count, detail = array
        return Launch((index * world + rank + 1, count * world), dev, f"SLURM array task {index + 1} of {count} "
                                                                       f"({detail}) x {origin}")
    if array is not None:
        index, count, detail = array
        return Launch((index + 1, count), device, f"SLURM array ({detail})")
    tasks = _slurm_tasks(env)
    if tasks is not None:
        rank, ntasks = tasks
        return Launch((rank + 1, ntasks), device, f"SLURM tasks (SLURM_PROCID={rank}, SLURM_NTASKS={ntasks})")
    return None
