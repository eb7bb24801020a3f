"""The memory this process can still take, and memory reserved by work in flight in other threads (images being
decoded at the same time each pass a check alone, not together). No torch, no Qt."""

from __future__ import annotations

import resource
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


def free_memory() -> int | None:
    """Bytes this process can still allocate: the smaller of the machine's ``MemAvailable`` and what the process's
    own limits leave (``RLIMIT_AS`` less its address space, ``RLIMIT_DATA`` less its data); None when unknown."""
    found: list[int] = []
    status: dict[str, int] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
        with open("/proc/self/status", encoding="ascii") as f:
            status = {k: int(v.split()[0]) * 1024 for k, v in (line.split(":", 1) for line in f)
                      if k in ("VmSize", "VmData")}
    except (OSError, ValueError):
        pass
    for limit, used in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY and used in status:
            found.append(max(0, soft - status[used]))
    return min(found) if found else None


class Reservations:
    """Bytes held by the work in flight (in every thread), so that pieces of work started at the same time do not each
    pass a memory check alone and together exceed the memory: a need is compared with the free memory less what is
    reserved. ``condition``: guards the count; notified at each release."""

    def __init__(self) -> None:
        self.condition = threading.Condition()
        self._reserved = 0

    @property
    def reserved(self) -> int:
        with self.condition:
            return self._reserved

    @contextmanager
    def hold(self, need: int, free_memory: Callable[[], int | None],
             refuse: Callable[[int], BaseException]) -> Iterator[None]:
        """Reserve ``need`` bytes for the block. A need that fits alone but not beside what is reserved waits until
        a reservation ends (that memory is then in use, or free again: ``free_memory()`` says which); one that would
        not fit even with every reservation back raises ``refuse(free)`` at once. Released however the block ends."""
        with self.condition:
            while True:
                free = free_memory()
                if free is None or need <= free - self._reserved:
                    break
                if self._reserved == 0 or need > free + self._reserved:  # would not fit with the others' back
                    raise refuse(free)
                self.condition.wait()  # fits alone, not beside the work in flight: until a piece of it ends
            self._reserved += need
        try:
            yield
        finally:
            with self.condition:
                self._reserved -= need
                self.condition.notify_all()
