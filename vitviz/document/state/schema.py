"""The session file's vocabulary: its format name and version, its limits, the error it raises, and the data types
a session is read into (:class:`SessionState`, :class:`ImageRef`). No Qt, no torch."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vitviz.views.options import ViewOptions

if TYPE_CHECKING:  # pragma: no cover
    from vitviz.document.comparison import CompareSpec
    from vitviz.document.target_choice import TargetChoice
    from vitviz.model.preprocess import Preprocess

__all__ = ["FORMAT", "IMAGE_ENTRY_BYTES", "IN_MEMORY_MODEL", "MAX_BYTES", "MAX_CONTAINERS", "MAX_DEPTH",
           "MAX_FIGURE_BYTES", "MAX_IMAGES", "MAX_INDEX", "MAX_NUMBER_CHARS", "MAX_TEXT", "MAX_VALUES", "METADATA_KEY",
           "SUFFIX", "TARGET_VERSION", "VERSION", "ImageRef", "SessionState", "StateError", "size_text"]

FORMAT = "vitviz-session"
VERSION = 2
"""The newest session version this vitviz reads. A session whose target is a class (or the top class) is written as
version 1, which older vitviz read too; a similarity target or a function needs version 2 (its ``target`` is an
object)."""
TARGET_VERSION = 2  # the first version whose "target" may be an object
SUFFIX = ".vitviz.json"
METADATA_KEY = "vitviz.session"
"""The key of the state in an exported figure's metadata (PNG text chunk, SVG metadata, PDF document info)."""
MAX_IMAGES = 10_000
"""The most images a session holds (the writer refuses more, the reader too)."""
IMAGE_ENTRY_BYTES = 1024
"""What one image takes in a session file, on average at most: its path, its relative path and its SHA-256, indented
(a path of 100 characters takes about 250 bytes)."""
MAX_BYTES = MAX_IMAGES * IMAGE_ENTRY_BYTES + (64 << 10)
"""The largest session the writer writes and the reader reads (9.8 MiB: :data:`MAX_IMAGES` images of
:data:`IMAGE_ENTRY_BYTES`, and room for the rest), in a session file or in a figure's metadata. The writer checks
its output against it, so what vitviz writes it reads."""
MAX_CONTAINERS = MAX_IMAGES + 1000
"""The most JSON objects and lists a session holds (one object per image; the rest needs about 10): checked before
parsing, so a hostile file cannot make the parser build millions."""
MAX_VALUES = 4 * MAX_IMAGES + 10_000
"""The most JSON values (counted by their separating commas) a session holds (three per image)."""
MAX_NUMBER_CHARS = 40
"""The longest number a session holds (its characters); a longer one is refused before it is converted."""
MAX_FIGURE_BYTES = 1 << 30
"""The largest figure whose metadata is read (1 GiB)."""
MAX_TEXT = 4096  # characters of a path or name
MAX_DEPTH = 16  # JSON nesting (the schema needs 3)
MAX_INDEX = 1_000_000  # layers, patches, classes
IN_MEMORY_MODEL = "memory"  # the reference of a model handed to the window by a script (vitviz.show, tests)


def size_text(n: int) -> str:
    """``n`` bytes for messages: "9.8 MiB", "812 KiB", "120 bytes"."""
    if n >= 1 << 20:
        return f"{n / (1 << 20):.1f} MiB"
    if n >= 1 << 10:
        return f"{n / (1 << 10):.0f} KiB"
    return f"{n} bytes"


class StateError(ValueError):
    """A session file or figure cannot be used; the message names the file and every problem."""

    def __init__(self, source: str | os.PathLike | None, problem: str):
        self.source = None if source is None else str(source)
        self.problem = problem
        super().__init__(f"{self.source}: {problem}" if self.source else problem)


@dataclass(frozen=True)
class ImageRef:
    """One image of the session.

    Attributes:
        path: where it is (absolute when it is a file; a name such as ``"pasted image"`` when it is not).
        sha256: of the file's bytes when the state was made (None: unknown); a changed file is reported.
        relative: as written in the file, relative to that file's folder (a fallback for :func:`locate`).
    """

    path: str
    sha256: str | None = None
    relative: str | None = None


@dataclass(frozen=True)
class SessionState:
    """Everything that makes the window's picture (see the module docstring for the JSON form).

    Attributes:
        model: the model reference (``"demo"``, ``"file:PATH"``, ``"pretrained:NAME"``, ``"random:NAME"``;
            ``"memory"`` for a model handed over by a script, which cannot be reopened).
        images: the open images; ``images[current]`` is the one shown.
        current: index of the shown image.
        options: the view, display and analysis options.
        target: the class of the gradient views (None: the top class, no classifier, or a target of
            ``target_choice``).
        target_label: the target in words (the class's name, "similar to image x.png"), for messages.
        target_choice: a target that is not a class (similar to an image, a patch of one, a vector; a function of
            the output, saved by its name only), or None.
        target_relative: ``target_choice``'s file relative to the file's folder (a fallback for :func:`locate`).
        prompts: the text prompts the model classified into (a CLIP / SigLIP image tower made a zero-shot
            classifier; ``target`` then indexes them), or ``()``.
        model_name, device, precision: for messages (a session opens on the window's own device and precision).
        model_relative: the checkpoint relative to the file's folder (``file:`` models), a fallback for
            :func:`locate`.
        preprocess: how the model prepared its images (resize, crop, mean, std); a reopened model whose own
            preprocessing differs (a checkpoint that does not say, a default that changed) is given this one, so
            the maps are the same.
        heads_all_layers: the heads panel shows every layer x every head.
        compare: the comparison open in the Compare window, or None.
        written_by: the vitviz that wrote it.
        origin: the file it was read from (not written).
    """

    model: str
    images: tuple[ImageRef, ...]
    current: int
    options: ViewOptions
    target: int | None = None
    target_label: str = ""
    target_choice: TargetChoice | None = None
    target_relative: str | None = None
    prompts: tuple[str, ...] = ()
    model_name: str = ""
    device: str = "cpu"
    precision: str = "fp32"
    model_relative: str | None = None
    preprocess: Preprocess | None = None
    heads_all_layers: bool = False
    compare: CompareSpec | None = None
    written_by: str = ""
    origin: str = field(default="", compare=False)

    @property
    def image(self) -> ImageRef:
        """The shown image."""
        return self.images[self.current]

    @property
    def paths(self) -> list[str]:
        return [i.path for i in self.images]

