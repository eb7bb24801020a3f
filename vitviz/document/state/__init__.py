"""Reproducible state: what the window shows, as a versioned JSON document (``.vitviz.json``) and as figure metadata.

No Qt. A :class:`SessionState` names everything that makes the picture: the model (its reference,
:mod:`vitviz.model.sources`), the open images and which one is shown, the gradient target, every view, display and
analysis option (:class:`~vitviz.views.options.ViewOptions`: every row of the option table), the heads panel's grid
toggle and, when a comparison is open, the comparison (:class:`~vitviz.document.comparison.CompareSpec`). The
window's File > Save session writes one with :func:`save_state`; every exported figure carries the same JSON under
the metadata key :data:`METADATA_KEY` (:func:`figure_metadata`), so
File > Open session reads either (:func:`read_state`) and restores the view that made it.

Reading is strict and bounded in time and memory: a file over :data:`MAX_BYTES`, more lists, objects or values than
a session holds, JSON that is not an object, nested too deeply, with duplicate keys, NaN or numbers of more than
:data:`MAX_NUMBER_CHARS` characters, unknown keys, values of the wrong type or out of range, an unknown view or
colormap, or a newer schema version gives a :class:`StateError` naming the file, the field and the problem, before
anything is changed; of a figure only its metadata is read (never its pixels), and a damaged or cut-short figure is
a :class:`StateError` too: it is the one error of reading. What vitviz writes it reads: the writer holds itself to
the same limits (:data:`MAX_IMAGES` images, :data:`MAX_BYTES`) and reads its output back before writing
(:func:`readable_json`). :func:`locate` then finds the files the state names (each at its saved absolute path, else
relative to the state file's folder, so a project folder can move) and raises one :class:`StateError` listing
everything missing (the first few missing images and how many more). :func:`reproduce` rebuilds the
:class:`~vitviz.document.session.Session` headlessly (the CLI, tests); the window does the same on its worker.

The parts: :mod:`~vitviz.document.state.schema` (the data types, limits and error),
:mod:`~vitviz.document.state.snapshot` (from the window), :mod:`~vitviz.document.state.writer` (writing),
:mod:`~vitviz.document.state.reader` (reading, with the value checks of :mod:`~vitviz.document.state.json_checks`),
:mod:`~vitviz.document.state.location` (finding the files), :mod:`~vitviz.document.state.reopen` (reopening).

Schema (``"version": 1``)::

    {"format": "vitviz-session", "version": 1 | 2, "written_by": "vitviz 0.1.0",
     "model": {"ref": "file:/abs/vit.safetensors", "relative": "vit.safetensors", "name": "ViT-Ti/16",
               "device": "cpu", "precision": "fp32"},
     "images": [{"path": "/abs/cat.png", "relative": "cat.png", "sha256": "..."}],
     "current": 0, "target": 281, "target_label": "tabby cat",
     "options": {"view": "relevance", "layer": 11, "head": "mean", "query": 0, ... every ViewOptions field},
     "window": {"heads_all_layers": false},
     "compare": null | {"layout": "views", "views": ["cls", "rollout"], "images": [0, 1], "layers": [],
                        "classes": [], "shared_scale": true}}

``relative`` entries are written relative to the folder of the file the state is written into (the session file or
the exported figure) and are only a fallback: the absolute path wins when it exists. ``target`` is the class whose
gradients the target-dependent views show (null: the top class, or the model has no classifier), or (version 2) an
object naming a target that is not a class (:mod:`vitviz.document.target_choice`)::

    "target": {"kind": "image", "path": "/abs/ref.png", "relative": "ref.png"}
    "target": {"kind": "patch", "path": "/abs/ref.png", "relative": "ref.png", "patch": [3, 4]}
    "target": {"kind": "vector", "path": "/abs/ref.npy", "relative": "ref.npy"}
    "target": {"kind": "callable", "name": "my_score"}      (a function: its name only; reopened as the top class)

A session with a class target is written as version 1 (older vitviz read it); one with such an object as version 2.
The reference files are found like the images (absolute path, else relative); a missing one is named.

A session whose model classified text prompts (CLIP / SigLIP) carries them (version 2); ``target`` indexes them and
reopening encodes them again with the model's text tower::

    "prompts": ["a cat", "a dog"], "target": 1, "target_label": "a dog"
"""

from vitviz._util.lazy import lazy_names

# imported on first use: the window starts without the readers (xml, email) and writers
_LAZY = {
    "SHOWN_PROBLEMS": "location", "changed_images": "location", "locate": "location",
    "from_dict": "reader", "parse_state": "reader", "read_state": "reader",
    "apply_state": "reopen", "reproduce": "reopen", "state_pipeline": "reopen", "state_target": "reopen",
    "with_preprocess": "reopen",
    "FORMAT": "schema", "IMAGE_ENTRY_BYTES": "schema", "IN_MEMORY_MODEL": "schema", "ImageRef": "schema",
    "MAX_BYTES": "schema", "MAX_FIGURE_BYTES": "schema", "MAX_IMAGES": "schema", "MAX_NUMBER_CHARS": "schema",
    "METADATA_KEY": "schema", "SUFFIX": "schema", "SessionState": "schema", "StateError": "schema",
    "TARGET_VERSION": "schema", "VERSION": "schema",
    "capture_state": "snapshot", "file_sha256": "snapshot",
    "figure_metadata": "writer", "readable_json": "writer", "save_state": "writer", "state_json": "writer",
    "to_dict": "writer",
}

__all__ = ["FORMAT", "IMAGE_ENTRY_BYTES", "IN_MEMORY_MODEL", "MAX_BYTES", "MAX_FIGURE_BYTES", "MAX_IMAGES",
           "MAX_NUMBER_CHARS", "METADATA_KEY", "SHOWN_PROBLEMS", "SUFFIX", "TARGET_VERSION", "VERSION", "ImageRef",
           "SessionState", "StateError", "apply_state", "capture_state", "changed_images", "figure_metadata",
           "file_sha256", "from_dict", "locate", "parse_state", "read_state", "readable_json", "reproduce",
           "save_state", "state_json", "state_pipeline", "state_target", "to_dict", "with_preprocess"]

__getattr__, __dir__ = lazy_names("vitviz.document.state", _LAZY, globals())
