"""The distance plot draws a data set's statistics (the attention_stats.csv of `vitviz stats`) beside this image's."""

import numpy as np
from gui_helpers import open_and_wait

from vitviz.batch.stats import STATS_COLUMNS, DatasetStats
from vitviz.batch.stats_files import csv_bytes, stats_rows


def _csv(path, L, H, seed=0, images=12):
    rng = np.random.default_rng(seed)
    mean = rng.uniform(5, 40, (L, H))
    stats = DatasetStats(model="tiny test ViT", images=images, distance_mean=mean, distance_sd=mean / 10,
                         entropy_mean=rng.uniform(0, 3, (L, H)), entropy_sd=np.full((L, H), 0.1))
    path.write_bytes(csv_bytes(STATS_COLUMNS, stats_rows(stats)))
    return np.round(mean, 4)


def test_dataset_curve_beside_this_image(qtbot, window, image_path, tmp_path):
    open_and_wait(qtbot, window, image_path)
    plots = window.plots
    r = window.session.result
    L, H = r.num_layers, r.num_heads
    assert plots.distance.dataset_curve() is None
    csv = tmp_path / "attention_stats.csv"
    mean = _csv(csv, L, H)
    mean[0, 0] = 500.0  # far above this image's distances: the y range must follow
    _csv_with(csv, mean)
    assert plots.distance.load_dataset(str(csv))
    x, y = plots.distance.dataset_curve()
    np.testing.assert_allclose(x, np.arange(L))
    np.testing.assert_allclose(y, mean.mean(axis=1), rtol=1e-5)
    points = plots.distance.dataset_points.getData()
    assert len(points[0]) == L * H
    np.testing.assert_allclose(sorted(points[1]), sorted(mean.ravel()), rtol=1e-5)
    labels = plots.distance.legend_labels()
    assert "data set: mean of heads" in labels and "data set: each head" in labels
    assert [f"h{h}" for h in range(H)] == plots.distance.legend_labels()[:H]
    title = plots.distance.title.text()
    assert "this image (filled)" in title and "data set of 12 images" in title
    assert "12 images of tiny test ViT" in plots.distance.title.toolTip()
    assert plots.distance.plot.getViewBox().viewRange()[1][1] >= 500.0
    # the next image keeps the data set's curve
    window.session.set_result(r)
    plots.refresh(window.session)
    assert plots.distance.dataset_curve() is not None
    # cleared: the image alone again, its own y range
    plots.distance.clear_dataset()
    assert plots.distance.dataset_curve() is None and "data set: mean of heads" not in plots.distance.legend_labels()
    assert plots.distance.title.text() == "Mean attention distance per layer and head · this image · computed in " \
        + r.precision
    assert plots.distance.plot.getViewBox().viewRange()[1][1] < 500.0


def _csv_with(path, mean):
    L, H = mean.shape
    stats = DatasetStats(model="tiny test ViT", images=12, distance_mean=mean, distance_sd=mean / 10,
                         entropy_mean=np.ones((L, H)), entropy_sd=np.zeros((L, H)))
    path.write_bytes(csv_bytes(STATS_COLUMNS, stats_rows(stats)))


def test_dataset_of_another_model_or_a_bad_file(qtbot, window, image_path, tmp_path):
    open_and_wait(qtbot, window, image_path)
    plots = window.plots
    r = window.session.result
    other = tmp_path / "other.csv"
    _csv(other, r.num_layers + 9, r.num_heads)
    assert plots.distance.load_dataset(str(other))
    assert plots.distance.dataset_curve() is None
    title = plots.distance.title.text()
    assert f"has {r.num_layers + 9} layers" in title and "not drawn" in title
    bad = tmp_path / "notes.csv"
    bad.write_text("a,b\n1,2\n")
    assert not plots.distance.load_dataset(str(bad))
    text = plots.distance.title.text()
    assert "Could not open the data set" in text and str(bad) in text and "missing columns" in text
    kept = plots.distance.dataset  # the one before is kept
    assert kept is not None and kept.num_layers == r.num_layers + 9
    binary = tmp_path / "x.csv"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    assert not plots.distance.load_dataset(str(binary))
