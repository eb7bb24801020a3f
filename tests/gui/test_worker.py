"""The worker thread of the window (vitviz.gui.worker.TaskRunner) and the suite's check that none outlives a test."""

import threading

from gui_helpers import leftover_threads


def test_a_running_worker_is_found_and_a_shut_down_one_is_not(qtbot):
    from vitviz.gui.worker import TaskRunner

    before = set(threading.enumerate())
    runner = TaskRunner()
    assert [t.name for t in leftover_threads(before, wait_s=0.2)] == ["vitviz-worker"]
    assert runner.shutdown()
    assert leftover_threads(before, wait_s=5.0) == []
