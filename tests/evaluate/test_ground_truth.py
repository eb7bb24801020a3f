"""Ground-truth readers (vitviz.evaluate.ground_truth), each on a tiny fixture written in its own format: an HDF5
gtsegs_ijcv.mat built with h5py object references, ImageNet-S RGB and VOC palette PNGs, a greyscale mask folder,
OpenImagesV7 point labels, VOC XML and COCO JSON boxes; a mask of the wrong size is one line naming the file."""

from __future__ import annotations

import json

import numpy as np
import pytest
from ground_truth_builders import write_segmentation_mat
from PIL import Image

from vitviz.evaluate.ground_truth import (
    BoxFolder,
    CocoBoxes,
    MaskFolder,
    PointLabels,
    SegmentationMat,
    split_mat_entry,
)
from vitviz.evaluate.localisation import IGNORE


def test_segmentation_mat_images_masks_and_names(tmp_path):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (6, 9, 3), dtype=np.uint8), rng.integers(0, 255, (5, 4, 3), dtype=np.uint8)]
    masks = [(rng.random((6, 9)) > 0.5).astype(np.uint8), (rng.random((5, 4)) > 0.5).astype(np.uint8)]
    p = tmp_path / "gtsegs_ijcv.mat"
    write_segmentation_mat(p, images, masks)
    mat = SegmentationMat(p)
    assert len(mat) == 2 and mat.names() == [f"{p}/0001", f"{p}/0002"]
    for i in (1, 2):
        np.testing.assert_array_equal(mat.image(i), images[i - 1])
        np.testing.assert_array_equal(mat.ground_truth(i).classes, masks[i - 1])
    assert split_mat_entry(f"{p}/0002") == (str(p), 2) and split_mat_entry("a/b.png") is None
    with pytest.raises(ValueError, match="holds images 1 to 2"):
        mat.image(3)
    (tmp_path / "bad.mat").write_bytes(b"MATLAB 5.0 MAT-file, not HDF5")
    with pytest.raises(ValueError, match="bad.mat: not an ImageNet-segmentation file"):
        SegmentationMat(tmp_path / "bad.mat")


def test_imagenet_s_rgb_mask_class_is_r_plus_256_g_and_1000_is_ignored(tmp_path):
    classes = np.array([[0, 5, 300], [1000, 919, 5]])
    rgb = np.stack([classes % 256, classes // 256, np.zeros_like(classes)], -1).astype(np.uint8)
    (tmp_path / "masks" / "sub").mkdir(parents=True)
    Image.fromarray(rgb).save(tmp_path / "masks" / "sub" / "a.png")
    gt = MaskFolder(tmp_path / "masks").read("sub/a", (2, 3))
    np.testing.assert_array_equal(gt.classes, [[0, 5, 300], [IGNORE, 919, 5]])
    assert gt.main_class() == 5
    np.testing.assert_array_equal(gt.object_mask((2, 3), 5), [[0, 1, 0], [IGNORE, 0, 1]])
    np.testing.assert_array_equal(gt.object_mask((2, 3)), [[0, 1, 1], [IGNORE, 1, 1]])


def test_voc_palette_mask_with_ignore_value(tmp_path):
    idx = np.array([[0, 15, 255], [15, 3, 0]], np.uint8)
    img = Image.fromarray(idx, mode="P")
    img.putpalette([v for i in range(256) for v in (i, 0, 255 - i)])
    img.save(tmp_path / "2007_000032.png")
    gt = MaskFolder(tmp_path, ignore_value=255).read("2007_000032", (2, 3))
    np.testing.assert_array_equal(gt.classes, [[0, 15, IGNORE], [15, 3, 0]])
    assert gt.main_class() == 15


def test_greyscale_mask_folder_any_format_and_a_wrong_size_is_one_line(tmp_path):
    m = np.zeros((4, 5), np.uint8)
    m[1:3, 2:4] = 255
    Image.fromarray(m).save(tmp_path / "cat.bmp")
    gt = MaskFolder(tmp_path).read("photos/cat", (4, 5))  # found by its stem when the path does not match
    np.testing.assert_array_equal(gt.object_mask((4, 5)), m > 0)
    with pytest.raises(ValueError) as e:
        MaskFolder(tmp_path).read("cat", (5, 5))
    assert str(e.value) == f"{tmp_path / 'cat.bmp'}: the mask is 5x4 pixels but its image 5x5"
    with pytest.raises(ValueError, match="no mask named dog.png"):
        MaskFolder(tmp_path).read("dog", (4, 5))


def test_openimages_point_labels(tmp_path):
    (tmp_path / "points.csv").write_text(
        "ImageId,Source,LabelName,X,Y,EstimatedYesNo\n"
        "img1,ih,/m/cat,0.25,0.5,yes\nimg1,ih,/m/cat,0.75,0.5,no\nimg1,ih,/m/cat,0.1,0.1,unsure\n"
        "img1,ih,/m/dog,0.5,0.5,yes\nimg2,ih,/m/dog,0.0,1.0,no\n")
    (tmp_path / "classes.csv").write_text("LabelName,DisplayName\n/m/cat,Cat\n/m/dog,Dog\n")
    pl = PointLabels(tmp_path / "points.csv", tmp_path / "classes.csv")
    assert pl.labels() == ["Cat", "Dog"]
    got = pl.read("folder/img1.jpg", (100, 200))
    assert [g.label for g in got] == ["Cat", "Dog"]
    assert got[0].points == [(50.0, 50.0, True), (50.0, 150.0, False)]
    assert got[0].classes is None and (got[0].object_mask((100, 200)) == IGNORE).all()
    assert pl.read("img3.jpg", (10, 10)) == []
    (tmp_path / "bad.csv").write_text("ImageId,X,Y\n")
    with pytest.raises(ValueError, match="bad.csv: no column LabelName, EstimatedYesNo"):
        PointLabels(tmp_path / "bad.csv")


def test_voc_xml_and_coco_json_boxes(tmp_path):
    (tmp_path / "a.xml").write_text(
        "<annotation><size><width>10</width><height>8</height><depth>3</depth></size>"
        "<object><name>dog</name><bndbox><xmin>2</xmin><ymin>3</ymin><xmax>4</xmax><ymax>5</ymax></bndbox></object>"
        "</annotation>")
    gt = BoxFolder(tmp_path).read("a", (8, 10))
    ref = np.zeros((8, 10), np.int64)
    ref[2:5, 1:4] = 1  # 1-based inclusive pixels 2..4 x 3..5
    np.testing.assert_array_equal(gt.classes, ref)
    with pytest.raises(ValueError, match="a.xml: the mask is 10x8 pixels but its image 10x9"):
        BoxFolder(tmp_path).read("a", (9, 10))
    coco = {"images": [{"id": 7, "file_name": "x/b.jpg", "width": 10, "height": 8}],
            "annotations": [{"image_id": 7, "bbox": [1, 2, 3, 4], "category_id": 1},
                            {"image_id": 7, "bbox": [8, 0, 2, 1], "category_id": 2}],
            "categories": [{"id": 1, "name": "a"}, {"id": 2, "name": "b"}]}
    (tmp_path / "coco.json").write_text(json.dumps(coco))
    gt = CocoBoxes(tmp_path / "coco.json").read("b.jpg", (8, 10))
    ref = np.zeros((8, 10), np.int64)
    ref[2:6, 1:4] = 1
    ref[0:1, 8:10] = 1
    np.testing.assert_array_equal(gt.classes, ref)
    with pytest.raises(ValueError, match="no image named c.jpg"):
        CocoBoxes(tmp_path / "coco.json").read("c.jpg", (8, 10))
