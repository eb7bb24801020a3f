"""``vitviz evaluate --masks`` end to end on a tiny random ViT: the CSV's localisation columns equal the library's
scores, --only localisation skips the curves, gtsegs_ijcv.mat as IMAGES, --target gt, one-line errors (a mask of
the wrong size names the mask file), and shards merged equal one run byte for byte."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
from ground_truth_builders import write_segmentation_mat
from PIL import Image

from vitviz.cli import main
from vitviz.evaluate import evaluate_views
from vitviz.evaluate.ground_truth import MaskFolder
from vitviz.evaluate.protocol import LOCALISATION_METRICS
from vitviz.pipeline import Pipeline


def _data(tmp_path, n=4, size=(40, 50)):
    """Images under pics/ and masks under masks/ (same relative paths, PNG masks for JPEG-free PNG images)."""
    rng = np.random.default_rng(0)
    for i in range(n):
        sub = "a" if i % 2 else "b"
        (tmp_path / "pics" / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / "masks" / sub).mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 255, size + (3,), dtype=np.uint8)).save(tmp_path / "pics" / sub / f"{i}.png")
        m = np.zeros(size, np.uint8)
        y, x = rng.integers(0, 20, 2)
        m[y:y + 18, x:x + 22] = 1 + i % 3  # the class value: 1, 2 or 3
        Image.fromarray(m).save(tmp_path / "masks" / sub / f"{i}.png")
    return tmp_path / "pics", tmp_path / "masks"


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_only_localisation_csv_equals_the_library_and_has_the_summary(tiny_model_file, tiny_model, tmp_path, capsys):
    pics, masks = _data(tmp_path)
    out = tmp_path / "loc.csv"
    argv = ["evaluate", str(tiny_model_file), str(pics), "--masks", str(masks), "--only", "localisation",
            "--views", "rollout,relevance,cls_last", "--csv", str(out), "--precision", "fp32"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "deletion AUC" not in text and "95% confidence interval" in text and "pointing_game" in text
    rows = _rows(out)
    assert list(rows[0]) == ["image", "target", "label", "view", *LOCALISATION_METRICS]
    per_image = [r for r in rows if r["image"] not in ("mean", "ci95")]
    assert len(per_image) == 4 * 3 and {r["view"] for r in rows if r["image"] == "ci95"} == {
        "rollout", "relevance", "cls_last"}
    # the library's scores for one image (the same maps: the window's, at the default options)
    pipe = Pipeline(tiny_model)
    src = str(pics / "a" / "1.png")
    gt = MaskFolder(masks).read("a/1", (40, 50))
    table = evaluate_views(pipe, src, ("rollout", "relevance", "cls_last"), ground_truth=gt, curves=False)
    for v in table.views:
        row = next(r for r in per_image if r["image"] == src and r["view"] == v.key)
        for m in LOCALISATION_METRICS:
            want = v.localisation_value(m)
            assert (row[m] == "") if math.isnan(want) else float(row[m]) == pytest.approx(want, abs=1e-6)
    assert all(r["p_miou"] == "" for r in per_image)  # masks: no point labels
    mean = next(r for r in rows if r["image"] == "mean" and r["view"] == "rollout")
    vals = [float(r["miou"]) for r in per_image if r["view"] == "rollout"]
    assert float(mean["miou"]) == pytest.approx(np.mean(vals), abs=1e-6)


def test_masks_beside_the_curves_and_target_gt(tiny_model_file, tmp_path, capsys):
    pics, masks = _data(tmp_path, n=2)
    out = tmp_path / "both.csv"
    assert main(["evaluate", str(tiny_model_file), str(pics), "--masks", str(masks), "--steps", "2", "--seeds", "1",
                 "--views", "relevance", "--target", "gt", "--csv", str(out)]) == 0
    text = capsys.readouterr().out
    assert "deletion AUC" in text and "localisation" in text
    rows = _rows(out)
    assert list(rows[0])[:5] == ["image", "target", "label", "view", "deletion_auc"]
    assert list(rows[0])[-6:] == list(LOCALISATION_METRICS)
    got = {r["image"]: r["target"] for r in rows if r["view"] == "relevance" and r["image"] not in ("mean", "ci95")}
    # the target is each mask's class value (image i: 1 + i % 3)
    assert got == {str(pics / "b" / "0.png"): "1", str(pics / "a" / "1.png"): "2"}


def test_segmentation_mat_as_images(tiny_model_file, tmp_path, capsys):
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 255, (36, 44, 3), dtype=np.uint8) for _ in range(3)]
    gts = []
    for _ in range(3):
        m = np.zeros((36, 44), np.uint8)
        m[5:25, 10:30] = 1
        gts.append(m)
    mat = tmp_path / "gtsegs_ijcv.mat"
    write_segmentation_mat(mat, images, gts)
    out = tmp_path / "seg.csv"
    assert main(["evaluate", str(tiny_model_file), str(mat), "--only", "localisation", "--views", "rollout",
                 "--csv", str(out)]) == 0
    capsys.readouterr()
    rows = [r for r in _rows(out) if r["image"] not in ("mean", "ci95")]
    assert [r["image"] for r in rows] == [f"{mat}/0001", f"{mat}/0002", f"{mat}/0003"]
    assert all(0 <= float(r["pixel_accuracy"]) <= 1 for r in rows)
    assert main(["evaluate", str(tiny_model_file), f"{mat}/2", "--only", "localisation", "--views", "rollout"]) == 0
    assert "gtsegs_ijcv.mat/0002" in capsys.readouterr().out


@pytest.mark.parametrize("extra, needle", [
    (["--only", "localisation"], "--only localisation: give the ground truth"),
    (["--ignore-value", "255"], "--ignore-value 255: give --masks too"),
    (["--masks", "{tmp}/nope"], "--masks {tmp}/nope: no such file or folder"),
    (["--masks", "{masks}", "--pointing-tolerance", "-1"], "--pointing-tolerance -1: must be 0 or more"),
    (["--target", "gt"], "--target gt: give the ground truth"),
])
def test_bad_flags_are_one_line(tiny_model_file, tmp_path, capsys, extra, needle):
    pics, masks = _data(tmp_path, n=1)
    extra = [e.format(tmp=tmp_path, masks=masks) for e in extra]
    assert main(["evaluate", str(tiny_model_file), str(pics), *extra]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert needle.format(tmp=tmp_path) in err, err


def test_a_mask_of_the_wrong_size_is_one_line_naming_it(tiny_model_file, tmp_path, capsys):
    pics, masks = _data(tmp_path, n=2)
    Image.fromarray(np.zeros((10, 10), np.uint8)).save(masks / "a" / "1.png")
    out = tmp_path / "x.csv"
    assert main(["evaluate", str(tiny_model_file), str(pics), "--masks", str(masks), "--only", "localisation",
                 "--views", "rollout", "--csv", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert any(f"{masks / 'a' / '1.png'}: the mask is 10x10 pixels but its image 50x40" in line for line in err)
    assert len([r for r in _rows(out) if r["image"] not in ("mean", "ci95")]) == 1  # the other image evaluated


@pytest.mark.parametrize("only", [None, "localisation"])
def test_shards_merged_equal_one_run(tiny_model_file, tmp_path, capsys, only):
    pics, masks = _data(tmp_path, n=5)
    base = ["evaluate", str(tiny_model_file), str(pics), "--masks", str(masks), "--views", "rollout,relevance",
            "--steps", "2", "--seeds", "2"] + (["--only", only] if only else [])
    one = tmp_path / "one" / "eval.csv"
    one.parent.mkdir()
    assert main(base + ["--csv", str(one)]) == 0
    sharded = tmp_path / "sharded"
    sharded.mkdir()
    for k in (1, 2):
        assert main(base + ["--csv", str(sharded / "eval.csv"), "--shard", f"{k}/2"]) == 0
    assert main(["merge", str(sharded)]) == 0
    capsys.readouterr()
    # the merge lists the images in the order of one run
    assert (sharded / "eval.csv").read_bytes() == one.read_bytes()


def test_localise_images_in_one_pass_equals_evaluate_views_per_image(tiny_model, tmp_path):
    from vitviz.evaluate.run import localise_images

    pics, masks = _data(tmp_path, n=3)
    paths = sorted(pics.rglob("*.png"))
    gts = [MaskFolder(masks).read(f"{p.parent.name}/{p.stem}", (40, 50)) for p in paths]
    pipe = Pipeline(tiny_model)
    views = ("rollout", "relevance", "legrad", "gradcam")
    for targets, classes in ((None, None), ([1, 2, 3], [g.main_class() for g in gts])):
        batch = localise_images(pipe, [str(p) for p in paths], views, gts, targets=targets, object_classes=classes)
        for k, (p, gt) in enumerate(zip(paths, gts)):
            one = evaluate_views(pipe, str(p), views, ground_truth=gt, curves=False,
                                 target=None if targets is None else targets[k],
                                 object_class=None if classes is None else classes[k])
            assert batch[k].target == one.target and batch[k].ground_truth == one.ground_truth == gt.source
            for a, b in zip(batch[k].views, one.views):
                np.testing.assert_allclose(a.saliency, b.saliency, rtol=1e-5, atol=1e-6)
                for m in LOCALISATION_METRICS:
                    x, y = a.localisation_value(m), b.localisation_value(m)
                    assert (math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, abs=1e-6), (p, a.key, m)


def test_openimages_point_labels_on_a_clip_model_one_table_per_label(tmp_path, capsys):
    """LeGrad's protocol: each point label's name is a prompt of the zero-shot model; p-mIoU at the label's points;
    the CSV's values equal the library's for that prompt."""
    pytest.importorskip("open_clip")
    import text_builders as tb

    from vitviz.evaluate.ground_truth import PointLabels
    from vitviz.pipeline import prompt_pipeline

    cfg = tb.open_clip_cfg(True)
    folder = tb.write_open_clip_folder(tmp_path / "oc", tb.open_clip_model(cfg), cfg)
    (tmp_path / "oi").mkdir()
    rng = np.random.default_rng(3)
    for name in ("img1", "img2"):
        Image.fromarray(rng.integers(0, 255, (48, 64, 3), dtype=np.uint8)).save(tmp_path / "oi" / f"{name}.png")
    points = tmp_path / "points.csv"
    points.write_text("ImageId,Source,LabelName,X,Y,EstimatedYesNo\n"
                      "img1,ih,/m/cat,0.3,0.4,yes\nimg1,ih,/m/cat,0.7,0.6,no\nimg1,ih,/m/cat,0.5,0.5,yes\n"
                      "img1,ih,/m/car,0.2,0.2,yes\nimg2,ih,/m/car,0.5,0.5,yes\nimg2,ih,/m/car,0.1,0.9,no\n")
    classes = tmp_path / "classes.csv"
    classes.write_text("LabelName,DisplayName\n/m/cat,Cat\n/m/car,Car\n")
    out = tmp_path / "p.csv"
    assert main(["evaluate", str(folder), str(tmp_path / "oi"), "--masks", str(points), "--classes", str(classes),
                 "--only", "localisation", "--views", "legrad", "--num-heads", "2", "--csv", str(out)]) == 0
    capsys.readouterr()
    rows = [r for r in _rows(out) if r["image"] not in ("mean", "ci95")]
    assert [(Path(r["image"]).name, r["label"], r["target"]) for r in rows] == [
        ("img1.png", "Car", "0"), ("img1.png", "Cat", "1"), ("img2.png", "Car", "0")]
    assert all(0 <= float(r["p_miou"]) <= 1 for r in rows)  # every label has a positive point: defined
    pp = prompt_pipeline(Pipeline.open(folder, num_heads=2), ["Car", "Cat"])
    labels = PointLabels(points, classes)
    for r in rows:
        gt = next(g for g in labels.read(r["image"], (48, 64)) if g.label == r["label"])
        table = evaluate_views(pp, r["image"], ["legrad"], target=int(r["target"]), ground_truth=gt, curves=False)
        want = table.views[0].localisation_value("p_miou")
        assert (r["p_miou"] == "") if math.isnan(want) else float(r["p_miou"]) == pytest.approx(want, abs=1e-6)
        assert r["miou"] == ""  # points only: no mask


def test_merge_refuses_shards_with_other_ground_truth_flags(tiny_model_file, tmp_path, capsys):
    pics, masks = _data(tmp_path, n=3)
    out = tmp_path / "sh"
    out.mkdir()
    for k, tol in ((1, "0"), (2, "15")):
        assert main(["evaluate", str(tiny_model_file), str(pics), "--masks", str(masks), "--only", "localisation",
                     "--views", "rollout", "--pointing-tolerance", tol, "--csv", str(out / "e.csv"),
                     "--shard", f"{k}/2"]) == 0
    capsys.readouterr()
    assert main(["merge", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--pointing-tolerance 0.0 in shard 1/2, 15.0 in shard 2/2" in err and len(err.strip().splitlines()) == 1
    assert not (out / "e.csv").exists()
