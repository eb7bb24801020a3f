"""Start-up times of the ``vitviz`` command, each in a new process (cold-ish: the OS file cache stays warm).

Measured, median over ``--repeats`` runs, wall time from spawning the process:

* ``vitviz --version``                       target < 0.5 s
* ``vitviz models``                          target < 1.5 s
* the window visible after launch (``vitviz``)                           target < 1 s (issue 35)
* the first overlay for the bundled model (``vitviz --model DEMO SAMPLE``)  target < 2 s (issue 35)

The two GUI figures need the app's start-up log (:mod:`vitviz.gui.startup`): with ``VITVIZ_STARTUP_LOG=1`` it prints
``vitviz: window shown after X.XX s (heavy modules loaded: none)`` and ``vitviz: first overlay after X.XX s (...)`` on
stderr (X counted from ``import vitviz``; the table also shows that figure, and which heavy libraries, torch,
matplotlib, ..., were loaded when the window was shown: "none" is the design). When the line never comes the row says
"not instrumented" (or "timeout" / "exited" when the process stopped or hung). GUI runs use
``QT_QPA_PLATFORM=offscreen`` (unless a display is asked for with ``--display``) and a fresh ``VITVIZ_SETTINGS`` INI
file, and are killed once the line appears.

As an installed package would, vitviz's modules are byte-compiled first (``compileall``; ``PYTHONDONTWRITEBYTECODE``
is dropped for the runs): without ``.pyc`` files each start compiles ~200 modules again (about 0.25 s more). The
machine's load changes every figure: compare two trees interleaved, on the same load, and quote ``uptime``.

Usage:
    .venv/bin/python bench/startup.py [--repeats 5] [--gui-repeats 3] [--timeout 60]
                                      [--only version,models,window,overlay]
"""

from __future__ import annotations

import argparse
import compileall
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TARGETS = {"version": 0.5, "models": 1.5, "window": 1.0, "overlay": 2.0}
LABELS = {
    "version": "vitviz --version",
    "models": "vitviz models",
    "window": "window shown (vitviz)",
    "overlay": "first overlay (bundled model + sample)",
}
LOG_LINES = {"window": "window shown", "overlay": "first overlay"}


def vitviz_command() -> list[str]:
    """The installed console script next to this interpreter, else ``python -m vitviz``."""
    script = Path(sys.executable).with_name("vitviz")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "vitviz"]


def time_command(argv: list[str], env: dict[str, str], timeout: float) -> tuple[float | None, str]:
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, "timeout"
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        return None, f"exit {r.returncode}: {r.stderr.strip().splitlines()[-1:] or ''}"
    return wall, "ok"


def time_until_log_line(argv: list[str], what: str, env: dict[str, str],
                        timeout: float) -> tuple[float | None, float | None, str]:
    """Spawn ``argv``; return (wall seconds until the start-up log line ``what`` appeared on stderr, the seconds the
    line itself reports, status: "ok" or "ok; heavy: ..." naming what the line says was loaded). The process (group)
    is killed as soon as the line is seen."""
    pattern = re.compile(rf"vitviz: {re.escape(what)} after ([0-9.]+) s(?: \(heavy modules loaded: ([^)]*)\))?")
    found = threading.Event()
    result: dict[str, float] = {}
    tail: list[str] = []
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)

    def reader():
        assert proc.stderr is not None
        for line in proc.stderr:
            m = pattern.search(line)
            if m and not found.is_set():
                result["wall"] = time.perf_counter() - t0
                result["reported"] = float(m.group(1))
                result["heavy"] = m.group(2) or "?"
                found.set()
            tail.append(line.rstrip())
            del tail[:-5]

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    deadline = t0 + timeout
    while not found.is_set() and proc.poll() is None and time.perf_counter() < deadline:
        found.wait(0.05)
    exited = proc.poll()
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(10)
    th.join(2)
    if found.is_set():
        return result["wall"], result["reported"], f"ok; heavy: {result['heavy']}"
    if exited is not None:
        return None, None, "not instrumented" if exited == 0 else f"exited {exited}: {' | '.join(tail[-2:])}"
    return None, None, "not instrumented (timeout)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5, help="runs of each command-line case (default 5)")
    ap.add_argument("--gui-repeats", type=int, default=3, help="runs of each GUI case (default 3)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a run is given up (default 60)")
    ap.add_argument("--only", default="version,models,window,overlay", help="comma-separated cases")
    ap.add_argument("--display", action="store_true", help="use the real display instead of offscreen")
    args = ap.parse_args(argv)

    from vitviz.demo import default_model_path, sample_images

    compileall.compile_dir(str(REPO / "vitviz"), quiet=1)  # as an install does (see the docstring)
    cmd = vitviz_command()
    tmp = tempfile.TemporaryDirectory(prefix="vitviz-startup-")
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "PYTHONDONTWRITEBYTECODE")}
    base_env["TORCH_HOME"] = base_env.get("TORCH_HOME", os.path.join(tmp.name, "torch"))
    gui_env = dict(base_env, VITVIZ_STARTUP_LOG="1")
    if not args.display:
        gui_env["QT_QPA_PLATFORM"] = "offscreen"

    samples = sample_images()
    cases = {
        "version": cmd + ["--version"],
        "models": cmd + ["models"],
        "window": cmd,
        "overlay": cmd + ["--model", str(default_model_path())] + ([str(samples[0])] if samples else []),
    }
    wanted = [c.strip() for c in args.only.split(",") if c.strip()]
    rows = []
    for case in wanted:
        if case not in cases:
            ap.error(f"unknown case {case!r}; choose from {', '.join(cases)}")
        walls, reported, status = [], [], "ok"
        n = args.gui_repeats if case in LOG_LINES else args.repeats
        for i in range(n):
            if case in LOG_LINES:
                env = dict(gui_env, VITVIZ_SETTINGS=os.path.join(tmp.name, f"{case}-{i}.ini"))  # fresh settings
                wall, rep, status = time_until_log_line(cases[case], LOG_LINES[case], env, args.timeout)
                if rep is not None:
                    reported.append(rep)
            else:
                wall, status = time_command(cases[case], base_env, args.timeout)
            if wall is None:
                break
            walls.append(wall)
            print(f"  {case:<8s} run {i + 1}/{n}: {wall:.2f} s", file=sys.stderr, flush=True)
        rows.append((case, walls, reported, status))

    print(f"\nvitviz start-up ({' '.join(Path(c).name for c in cmd[:1])}, median of new processes, wall time "
          f"from spawn; python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
    print(f"{'case':<42s} {'median':>8s} {'min':>7s} {'max':>7s} {'in-app':>7s} {'target':>8s}  verdict")
    for case, walls, reported, status in rows:
        target = TARGETS[case]
        tgt = f"< {target:.1f} s" if target else "-"
        if not status.startswith("ok") or not walls:
            print(f"{LABELS[case]:<42s} {'':>8s} {'':>7s} {'':>7s} {'':>7s} {tgt:>8s}  {status}")
            continue
        med = statistics.median(walls)
        inapp = f"{statistics.median(reported):.2f}" if reported else ""
        verdict = "-" if target is None else ("ok" if med < target else "SLOW")
        loaded = f" ({status[4:]})" if status.startswith("ok; ") else ""
        print(f"{LABELS[case]:<42s} {med:7.2f}s {min(walls):6.2f}s {max(walls):6.2f}s {inapp:>7s} {tgt:>8s}  "
              f"{verdict}{loaded}")
    print("in-app: the seconds the app itself reports since `import vitviz` (VITVIZ_STARTUP_LOG); heavy: the heavy "
          "libraries loaded at that moment (the window is shown with none)")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
