"""vitviz.batch: many images headless. No Qt.

:mod:`~vitviz.batch.inputs` (which images, shards, a loader thread), ``vitviz export`` (:mod:`~vitviz.batch.export`
with :mod:`~vitviz.batch.export_options`, :mod:`~vitviz.batch.export_plan`, :mod:`~vitviz.batch.export_maps`,
:mod:`~vitviz.batch.export_files`, :mod:`~vitviz.batch.manifest`), ``vitviz
stats`` (:mod:`~vitviz.batch.stats`, :mod:`~vitviz.batch.stats_files`, :mod:`~vitviz.batch.stats_plot`) and how a
failed image is reported (:mod:`~vitviz.batch.failures`). The names below are imported on first use.
"""

from __future__ import annotations

from vitviz._util.lazy import lazy_names

_NAMES = {
    "InputImage": "inputs", "expand_inputs": "inputs", "stream_batches": "inputs", "take_shard": "inputs",
    "ExportOptions": "export_options", "Exporter": "export", "ExportSummary": "export", "export_images": "export",
    "read_manifest": "manifest", "DatasetStats": "stats", "compute_stats": "stats", "read_stats_csv": "stats_files",
    "write_outputs": "stats_files", "stats_figure": "stats_plot",
}
__all__ = sorted(_NAMES)

__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
