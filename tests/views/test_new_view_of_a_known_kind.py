"""A new view of a known input kind is one module and one registry line: the throw-away view of
half_token_norm.py, registered here, is listed in the window, written by ``vitviz export --views`` (on the streamed
route), made from a streamed pass equal to the stored map, and given a row of ``vitviz evaluate --views`` whose
deletion and insertion AUCs are those of its map perturbed pixel by pixel here, with nothing else written for it.
(``vitviz stats`` takes no views: it measures the attention itself, distance, entropy and high-norm tokens.)"""

import csv

import numpy as np
import pytest
import torch
from half_token_norm import VIEW
from PIL import Image

from vitviz import views
from vitviz.batch.manifest import read_manifest
from vitviz.cli import main
from vitviz.document.streamed import stream_images
from vitviz.pipeline import Pipeline
from vitviz.views.options import ViewOptions


@pytest.fixture
def half_norm():
    views.register(VIEW)  # the one registry line
    yield VIEW
    views.unregister(VIEW.key)


def _photo(seed=0, size=(40, 48)):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (*size, 3), dtype=np.uint8))


def _expected(result, layer):
    """Half the L2 norm of each patch token after ``layer``, from the stored tokens (independent of the view)."""
    tok = result.tokens[layer + 1, result.num_prefix_tokens:].float()
    return (torch.linalg.vector_norm(tok, dim=-1) / 2).reshape(result.grid).numpy()


def test_its_streamed_map_equals_the_stored_map_at_every_layer(half_norm, tiny_model):
    pipe = Pipeline(tiny_model)
    photos = [_photo(0), _photo(1)]
    layers = range(-1, len(tiny_model.blocks))
    wanted = [(half_norm, ViewOptions(view=half_norm.key, layer=layer)) for layer in layers]
    streamed = stream_images(pipe, photos, demands=lambda shape: wanted)
    for photo, si in zip(photos, streamed):
        stored = pipe.run(photo)
        for _, o in wanted:
            ref = _expected(stored, o.layer)
            np.testing.assert_allclose(half_norm.compute(stored, o), ref, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(si.map(half_norm, o), half_norm.compute(stored, o), rtol=1e-5, atol=1e-6)
    assert streamed[0].result.tokens.device.type == "meta"  # made from the stream, not a stored stack


def test_vitviz_export_writes_it_on_the_streamed_route(half_norm, tiny_model, tiny_model_file, tmp_path, capsys):
    folder = tmp_path / "images"
    folder.mkdir()
    _photo(3, (32, 32)).save(folder / "a.png")
    out = tmp_path / "out"
    status = main(["export", "--model", str(tiny_model_file), str(folder), "--out", str(out), "--views",
                   half_norm.key, "--layers", "1", "--format", "npy", "--precision", "fp32"])
    err = capsys.readouterr().err
    assert status == 0, err
    assert "streamed passes" in err, err
    (rec,) = read_manifest(out / "manifest.jsonl")
    (entry,) = rec["maps"]
    assert entry["view"] == half_norm.key and "unavailable" not in entry
    written = np.load(out / entry["npy"])
    stored = Pipeline(tiny_model).run(Image.open(folder / "a.png").convert("RGB"))
    np.testing.assert_allclose(written, _expected(stored, 1), rtol=1e-5, atol=1e-6)


def test_the_window_lists_it(half_norm, qtbot, tiny_model, tmp_path, monkeypatch):
    from PySide6.QtCore import QSettings

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))
    make_app()
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), model=tiny_model)
    qtbot.addWidget(w)
    assert half_norm.key in w.controls.view_buttons and half_norm.key in w.acts.views
    assert w.acts.views[half_norm.key].text() == half_norm.title
    w.close()


def _brute_force_auc(model, x, saliency, target, mode, steps):
    """The AUC of a deletion or insertion curve with the mean baseline (zeros in the normalised input space), every
    perturbed image built by a loop over the patches and run alone (the formulas of vitviz.evaluate.perturbation)."""
    _, H, W = x.shape
    p = 8
    gh, gw = H // p, W // p
    P = gh * gw
    sal = np.asarray(saliency, np.float64).reshape(-1)
    order = sorted(range(P), key=lambda i: (-sal[i], i))
    fractions, scores = [], []
    for k in range(steps + 1):
        n = int(np.floor(k * P / steps + 0.5))
        img = x.clone()
        for i in range(P):
            if (i not in order[:n]) if mode == "insertion" else (i in order[:n]):
                r, c = divmod(i, gw)
                img[:, r * p:(r + 1) * p, c * p:(c + 1) * p] = 0.0
        with torch.inference_mode():
            scores.append(float(model(img[None]).float().softmax(-1)[0, target]))
        fractions.append(n / P)
    return sum((fractions[k + 1] - fractions[k]) * (scores[k] + scores[k + 1]) / 2 for k in range(steps))


def test_vitviz_evaluate_gives_it_a_row_of_its_maps_curves(half_norm, tiny_model, tiny_model_file, tmp_path, capsys):
    photo = tmp_path / "a.png"
    _photo(4, (32, 32)).save(photo)
    table = tmp_path / "faithfulness.csv"
    status = main(["evaluate", str(tiny_model_file), str(photo), "--views", half_norm.key, "--steps", "4",
                   "--seeds", "1", "--precision", "fp32", "--csv", str(table)])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert f"  {half_norm.key}  " in out  # the printed table's row
    (row,) = [r for r in csv.DictReader(table.read_text().splitlines()) if r["view"] == half_norm.key]
    pil = Image.open(photo).convert("RGB")
    stored = Pipeline(tiny_model).run(pil)
    sal = _expected(stored, ViewOptions().layer)  # the map at the default options, from the stored tokens
    x, _ = tiny_model.spec.preprocess.apply(pil)
    target = int(stored.target)
    assert int(row["target"]) == target
    for mode in ("deletion", "insertion"):
        ref = _brute_force_auc(tiny_model, x, sal, target, mode, 4)
        assert float(row[f"{mode}_auc"]) == pytest.approx(ref, abs=2e-6), mode
