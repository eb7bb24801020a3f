"""Ground truth for the localisation metrics, read from the formats the benchmarks ship. numpy, PIL; h5py for
``gtsegs_ijcv.mat``. No torch.

* :class:`MaskFolder`: masks named like the images (the same path below the folder, any image format): a greyscale
  or binary mask (0 = background, other values = object); a palette PNG (PASCAL VOC: the palette index is the class,
  0 background, ``ignore_value=255`` for the border); an RGB PNG (ImageNet-S: class = R + 256 G, 1000 = ignored,
  0 = other);
* :class:`SegmentationMat`: Chefer et al.'s ImageNet-segmentation file ``gtsegs_ijcv.mat`` (MATLAB v7.3, i.e. HDF5:
  ``/value/img`` and ``/value/gt`` hold object references to the images and masks), its images named
  ``gtsegs_ijcv.mat/0001`` (1-based, zero-padded);
* :class:`BoxFolder` (PASCAL VOC XML, one file named like each image) and :class:`CocoBoxes` (one COCO JSON): the
  union of the boxes as the object, for the pointing games;
* :class:`PointLabels`: OpenImagesV7 point labels (``oidv7-*-point-labels.csv``: ``ImageId, LabelName, X, Y`` in
  [0, 1] and ``EstimatedYesNo``) with the class descriptions (``LabelName, DisplayName``): per image and label, the
  positive and negative points (LeGrad's p-mIoU, a text prompt per label).

Each reader gives a :class:`GroundTruth` at the image's own pixel size; a mask whose size does not match its image is
a ValueError naming the mask file.
"""

from __future__ import annotations

import csv
import json
import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np
from PIL import Image

from vitviz.evaluate.protocol import IGNORE

MASK_SUFFIXES = (".png", ".bmp", ".tif", ".tiff", ".gif", ".jpg", ".jpeg", ".webp", ".pgm", ".ppm")
IMAGENET_S_IGNORE = 1000
MAT_ENTRY = re.compile(r"(?P<file>.+\.mat)[/\\](?P<index>\d+)$", re.IGNORECASE)


@dataclass(eq=False)
class GroundTruth:
    """One image's ground truth at its own pixel size.

    Attributes:
        source: where it was read (the mask file, ``file.mat/0001``, the XML ...), for messages.
        classes: int64 ``[H, W]``: 0 background, :data:`~vitviz.evaluate.protocol.IGNORE` ignored, other
            values a class (1 for a binary mask or a box); None for points alone.
        points: ``[(y, x, positive)]`` in image pixels (OpenImages), or None.
        label: the class in words (a point label's display name), or None.
    """

    source: str
    classes: np.ndarray | None = None
    points: list[tuple[float, float, bool]] | None = None
    label: str | None = None

    def object_mask(self, size: tuple[int, int], target: int | None = None) -> np.ndarray:
        """``[H, W]``: 1 object (every class, or only ``target``'s pixels), 0 background, IGNORE; all IGNORE when
        there is no mask (points alone)."""
        if self.classes is None:
            return np.full(size, IGNORE, np.int64)
        c = self.classes
        obj = (c > 0) if target is None else (c == target)
        out = obj.astype(np.int64)
        out[c == IGNORE] = IGNORE
        return out

    def main_class(self) -> int | None:
        """The class covering most pixels (``--target gt``), or None when the mask holds no class."""
        if self.classes is None:
            return None
        vals, counts = np.unique(self.classes[self.classes > 0], return_counts=True)
        return int(vals[np.argmax(counts)]) if vals.size else None


def decode_mask(img: Image.Image, ignore_value: int | None = None) -> np.ndarray:
    """A mask image as int64 classes: palette -> the index; RGB(A) -> ImageNet-S's ``R + 256 G`` (1000 ignored);
    greyscale or binary -> the value; ``ignore_value`` -> IGNORE."""
    if img.mode == "P":
        c = np.asarray(img, dtype=np.int64)
    elif img.mode in ("RGB", "RGBA"):
        a = np.asarray(img.convert("RGB"), dtype=np.int64)
        c = a[..., 0] + 256 * a[..., 1]
        c[c == IMAGENET_S_IGNORE] = IGNORE
    elif img.mode in ("1", "L", "I", "I;16", "I;16B", "I;16L", "F"):
        c = np.asarray(img.convert("I") if img.mode != "F" else img, dtype=np.int64)
    else:
        c = np.asarray(img.convert("L"), dtype=np.int64)
    if ignore_value is not None:
        c = np.where(c == ignore_value, IGNORE, c)
    return c


def check_size(source: str | os.PathLike, shape: tuple[int, int], image_size: tuple[int, int]) -> None:
    """The one line for a mask whose size is not its image's: ``MASK: the mask is WxH pixels but its image WxH``."""
    if tuple(shape) != tuple(image_size):
        raise ValueError(f"{source}: the mask is {shape[1]}x{shape[0]} pixels but its image "
                         f"{image_size[1]}x{image_size[0]}")


class MaskFolder:
    """Masks named like the images: ``FOLDER/REL.<any image suffix>`` for an image whose path below its input folder
    is ``REL`` (without suffix; :class:`vitviz.batch.inputs.InputImage`'s ``rel``), else ``FOLDER/STEM.*``."""

    def __init__(self, folder: str | os.PathLike, ignore_value: int | None = None) -> None:
        self.folder = Path(folder)
        self.ignore_value = ignore_value

    def find(self, rel: str) -> Path | None:
        for name in dict.fromkeys((rel, PurePosixPath(rel).name)):
            for suffix in MASK_SUFFIXES:
                for s in (suffix, suffix.upper()):
                    p = self.folder / f"{name}{s}"
                    if p.is_file():
                        return p
        return None

    def read(self, rel: str, image_size: tuple[int, int]) -> GroundTruth:
        p = self.find(rel)
        if p is None:
            raise ValueError(f"{self.folder}: no mask named {rel}.png (or another image suffix) for this image")
        return read_mask_file(p, image_size, self.ignore_value)


def mask_beside(image: str | os.PathLike) -> Path | None:
    """The mask named like ``image`` with ``_mask`` in the same folder (``cat.jpg`` -> ``cat_mask.png``, any image
    suffix), or None."""
    p = Path(image)
    for suffix in MASK_SUFFIXES:
        for s in (suffix, suffix.upper()):
            q = p.with_name(f"{p.stem}_mask{s}")
            if q.is_file():
                return q
    return None


def read_mask_file(path: str | os.PathLike, image_size: tuple[int, int], ignore_value: int | None = None
                   ) -> GroundTruth:
    """One mask file (:func:`decode_mask`), checked against the image's ``(height, width)``."""
    p = Path(path)
    try:
        with Image.open(p) as img:
            img.load()
            classes = decode_mask(img, ignore_value)
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: cannot read the mask ({e})") from None
    check_size(p, classes.shape, image_size)
    return GroundTruth(str(p), classes)


class SegmentationMat:
    """``gtsegs_ijcv.mat`` (Guillaumin et al.'s ImageNet segmentations as Chefer et al. ship them): ``/value/img``
    and ``/value/gt`` are ``[N, 1]`` object references; an image is ``[3, W, H]`` (MATLAB's column order), a mask
    ``[W, H]`` (possibly behind a second reference, as in Chefer's loader: ``f[f[gt[i, 0]][0, 0]]``)."""

    def __init__(self, path: str | os.PathLike) -> None:
        try:
            import h5py
        except ImportError:
            raise ValueError(f"{path}: reading a MATLAB v7.3 file needs h5py (pip install 'vitviz[localisation]')"
                             ) from None
        self.path = Path(path)
        try:
            self._file = h5py.File(self.path, "r")
            self._img, self._gt = self._file["value/img"], self._file["value/gt"]
        except (OSError, KeyError) as e:
            raise ValueError(f"{self.path}: not an ImageNet-segmentation file with /value/img and /value/gt "
                             f"({e})") from None
        self._ref = h5py.Reference
        if self._img.shape[0] * self._img.shape[-1] != self._gt.shape[0] * self._gt.shape[-1]:
            raise ValueError(f"{self.path}: {self._img.size} images but {self._gt.size} masks")

    def __len__(self) -> int:
        return int(self._img.size)

    def names(self) -> list[str]:
        """``file.mat/0001`` ... (1-based, zero-padded to at least 4 digits)."""
        width = max(4, len(str(len(self))))
        return [f"{self.path}/{i:0{width}d}" for i in range(1, len(self) + 1)]

    def _deref(self, refs, index: int) -> np.ndarray:
        if not 1 <= index <= len(self):
            raise ValueError(f"{self.path}/{index}: the file holds images 1 to {len(self)}")
        obj = self._file[refs[()].reshape(-1)[index - 1]]
        while obj.dtype == object or obj.dtype.kind == "O":
            obj = self._file[obj[()].reshape(-1)[0]]
        return np.asarray(obj[()])

    def image(self, index: int) -> np.ndarray:
        """uint8 ``[H, W, 3]``."""
        return np.ascontiguousarray(self._deref(self._img, index).transpose(2, 1, 0)).astype(np.uint8)

    def ground_truth(self, index: int) -> GroundTruth:
        classes = (self._deref(self._gt, index).transpose(1, 0) > 0).astype(np.int64)
        return GroundTruth(f"{self.path}/{index}", classes)


def split_mat_entry(name: str) -> tuple[str, int] | None:
    """``("gtsegs_ijcv.mat", 7)`` for ``gtsegs_ijcv.mat/0007``, else None."""
    m = MAT_ENTRY.match(str(name))
    return (m["file"], int(m["index"])) if m else None


def _boxes_mask(boxes: Sequence[tuple[float, float, float, float]], image_size: tuple[int, int]) -> np.ndarray:
    """1 inside any box ``(x0, y0, x1, y1)`` (pixel edges, x1 and y1 exclusive), 0 elsewhere."""
    h, w = image_size
    out = np.zeros((h, w), np.int64)
    for x0, y0, x1, y1 in boxes:
        r0, r1 = max(0, int(round(y0))), min(h, int(round(y1)))
        c0, c1 = max(0, int(round(x0))), min(w, int(round(x1)))
        out[r0:r1, c0:c1] = 1
    return out


class BoxFolder:
    """PASCAL VOC annotations: ``FOLDER/REL.xml`` (or ``FOLDER/STEM.xml``) per image; every ``object/bndbox``
    (``xmin ymin xmax ymax``, 1-based inclusive pixels) is object."""

    def __init__(self, folder: str | os.PathLike) -> None:
        self.folder = Path(folder)

    def read(self, rel: str, image_size: tuple[int, int]) -> GroundTruth:
        p = next((q for q in (self.folder / f"{rel}.xml", self.folder / f"{PurePosixPath(rel).name}.xml")
                  if q.is_file()), None)
        if p is None:
            raise ValueError(f"{self.folder}: no annotation named {rel}.xml for this image")
        try:
            root = ET.parse(p).getroot()
            boxes = []
            for b in root.iter("bndbox"):
                x0, y0, x1, y1 = (float(b.findtext(k)) for k in ("xmin", "ymin", "xmax", "ymax"))
                boxes.append((x0 - 1, y0 - 1, x1, y1))
            size = root.find("size")
            w, h = (int(size.findtext("width")), int(size.findtext("height"))) if size is not None else (None, None)
        except (ET.ParseError, TypeError, ValueError) as e:
            raise ValueError(f"{p}: not a PASCAL VOC annotation ({e})") from None
        if w is not None and (h, w) != tuple(image_size) and (h, w) != (0, 0):
            check_size(p, (h, w), image_size)
        return GroundTruth(str(p), _boxes_mask(boxes, image_size))


class CocoBoxes:
    """One COCO JSON (``images``: ``id, file_name, width, height``; ``annotations``: ``image_id, bbox = [x, y, w,
    h]``): an image is found by its file name; the union of its boxes is the object."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            d = json.loads(self.path.read_text(encoding="utf-8"))
            self._images = {PurePosixPath(im["file_name"]).name: im for im in d["images"]}
            self._boxes: dict[int, list] = {}
            for a in d["annotations"]:
                self._boxes.setdefault(a["image_id"], []).append([float(v) for v in a["bbox"]])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{self.path}: not a COCO annotation file ({type(e).__name__}: {e})") from None

    def read(self, name: str, image_size: tuple[int, int]) -> GroundTruth:
        im = self._images.get(PurePosixPath(str(name).replace("\\", "/")).name)
        if im is None:
            raise ValueError(f"{self.path}: no image named {Path(name).name} in the annotations")
        if "height" in im and "width" in im:
            check_size(f"{self.path} ({im['file_name']})", (int(im["height"]), int(im["width"])), image_size)
        boxes = [(x, y, x + w, y + h) for x, y, w, h in self._boxes.get(im["id"], [])]
        return GroundTruth(f"{self.path} ({im['file_name']})", _boxes_mask(boxes, image_size))


class PointLabels:
    """OpenImagesV7 point labels: per image (by its stem, the ``ImageId``) and label, the points ``X, Y`` (fractions
    of the width and height) answered ``yes`` (positive) or ``no`` (negative); ``unsure`` points are dropped. The
    class descriptions give each label its words (the text prompt)."""

    def __init__(self, points: str | os.PathLike, descriptions: str | os.PathLike | None = None) -> None:
        self.path = Path(points)
        names: dict[str, str] = {}
        if descriptions is not None:
            for row in _csv_rows(descriptions, ("LabelName", "DisplayName")):
                names[row["LabelName"]] = row["DisplayName"]
        self.by_image: dict[str, dict[str, list[tuple[float, float, bool]]]] = {}
        for row in _csv_rows(self.path, ("ImageId", "LabelName", "X", "Y", "EstimatedYesNo")):
            answer = row["EstimatedYesNo"].strip().lower()
            if answer not in ("yes", "no"):
                continue
            try:
                x, y = float(row["X"]), float(row["Y"])
            except ValueError:
                raise ValueError(f"{self.path}: X {row['X']!r}, Y {row['Y']!r} are not numbers") from None
            self.by_image.setdefault(row["ImageId"], {}).setdefault(row["LabelName"], []).append(
                (y, x, answer == "yes"))
        self.names = names

    def labels(self) -> list[str]:
        """Every label's words, sorted (the prompts)."""
        return sorted({self.names.get(k, k) for d in self.by_image.values() for k in d})

    def read(self, name: str, image_size: tuple[int, int]) -> list[GroundTruth]:
        """One :class:`GroundTruth` per label of the image (points in pixels), in label order."""
        h, w = image_size
        stem = PurePosixPath(str(name).replace("\\", "/")).stem
        out = []
        for label, pts in sorted(self.by_image.get(stem, {}).items()):
            out.append(GroundTruth(f"{self.path} ({stem}, {label})", None,
                                   [(y * h, x * w, pos) for y, x, pos in pts], self.names.get(label, label)))
        return out


def _csv_rows(path: str | os.PathLike, needed: Sequence[str]) -> list[dict[str, str]]:
    p = Path(path)
    try:
        with open(p, newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            missing = [k for k in needed if k not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(f"{p}: no column {', '.join(missing)} (has {', '.join(reader.fieldnames or [])})")
            return list(reader)
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from None


class GroundTruthSource:
    """Where ``vitviz evaluate --masks`` reads each image's ground truth: one of the readers above, chosen by what
    ``masks`` is (a ``.csv``: OpenImages point labels with ``classes``; a ``.json``: COCO boxes; a folder: masks
    named like the images, or VOC XML when it holds ``.xml`` files and no mask of that name), and/or the
    ``gtsegs_ijcv.mat`` files given as images (:func:`mat_inputs`)."""

    def __init__(self, masks: str | os.PathLike | None = None, *, classes: str | os.PathLike | None = None,
                 ignore_value: int | None = None) -> None:
        self.masks = None if masks is None else Path(masks)
        self.kind = "none"
        self.reader: MaskFolder | BoxFolder | CocoBoxes | PointLabels | None = None
        self._mats: dict[str, SegmentationMat] = {}
        self._boxes: BoxFolder | None = None
        m = self.masks
        if m is None:
            return
        if m.is_dir():
            self.kind, self.reader = "masks", MaskFolder(m, ignore_value)
            self._boxes = BoxFolder(m)
        elif not m.is_file():
            raise ValueError(f"--masks {m}: no such file or folder")
        elif m.suffix.lower() == ".csv":
            self.kind, self.reader = "points", PointLabels(m, classes)
        elif m.suffix.lower() == ".json":
            self.kind, self.reader = "boxes", CocoBoxes(m)
        else:
            raise ValueError(f"--masks {m}: give a folder of masks (or of VOC .xml files), a COCO .json or an "
                             "OpenImages point-label .csv")

    def mat(self, path: str) -> SegmentationMat:
        if path not in self._mats:
            self._mats[path] = SegmentationMat(path)
        return self._mats[path]

    def read(self, name: str, rel: str, image_size: tuple[int, int]) -> list[GroundTruth]:
        """The ground truths of one image (one per point label for OpenImages, else one): ValueError naming the
        file when it is missing, unreadable or of another size."""
        entry = split_mat_entry(name)
        if entry is not None:
            gt = self.mat(entry[0]).ground_truth(entry[1])
            check_size(gt.source, gt.classes.shape, image_size)
            return [gt]
        if self.reader is None:
            raise ValueError(f"{name}: no ground truth for this image (give --masks)")
        if isinstance(self.reader, PointLabels):
            found = self.reader.read(name, image_size)
            if not found:
                raise ValueError(f"{self.masks}: no point labels for image {PurePosixPath(rel).name}")
            return found
        if isinstance(self.reader, CocoBoxes):
            return [self.reader.read(name, image_size)]
        if self.reader.find(rel) is None and self._boxes is not None and any(
                (self.masks / f"{n}.xml").is_file() for n in (rel, PurePosixPath(rel).name)):
            return [self._boxes.read(rel, image_size)]
        return [self.reader.read(rel, image_size)]

    def load_image(self, name: str) -> np.ndarray | None:
        """The pixels of a ``file.mat/0001`` image (uint8 ``[H, W, 3]``), or None for an ordinary file."""
        entry = split_mat_entry(name)
        return None if entry is None else self.mat(entry[0]).image(entry[1])


def mat_inputs(items: Sequence[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """Split the IMAGES arguments: ``(name, rel)`` for every image of each ``gtsegs_ijcv.mat`` (all of them) or
    ``gtsegs_ijcv.mat/0007`` entry (that one), ``rel = "gtsegs_ijcv/0007"``; and the other items, as given."""
    out: list[tuple[str, str]] = []
    rest: list[str] = []
    for item in items:
        entry = split_mat_entry(item)
        if entry is not None and Path(entry[0]).is_file():
            mat = SegmentationMat(entry[0])
            names = mat.names()
            if not 1 <= entry[1] <= len(names):
                raise ValueError(f"{item}: the file holds images 1 to {len(names)}")
            out.append((names[entry[1] - 1], f"{Path(entry[0]).stem}/{names[entry[1] - 1].rsplit('/', 1)[1]}"))
        elif item.lower().endswith(".mat") and Path(item).is_file():
            out += [(n, f"{Path(item).stem}/{n.rsplit('/', 1)[1]}") for n in SegmentationMat(item).names()]
        else:
            rest.append(item)
    return out, rest
