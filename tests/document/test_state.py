"""Reproducible state (vitviz.document.state): session files and figure metadata round trips, every option saved, and
bad session files refused with messages naming the file and the problem."""

import json
import shutil
from dataclasses import fields, replace

import numpy as np
import pytest
from PIL import Image

from vitviz.document import panel
from vitviz.document import state as st
from vitviz.document.session import Session
from vitviz.imaging import load_image
from vitviz.render import figures
from vitviz.views.options import ViewOptions

VIEWS = ("cls", "query", "rollout", "grad_rollout", "relevance", "token_sim", "pos_sim", "token_norm")


def _photo(path, seed, h=70, w=110):
    rng = np.random.default_rng(seed)
    Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(path)
    return str(path)


@pytest.fixture
def setup(tmp_path, tiny_model):
    """A checkpoint file, two photos, and a session showing the first with non-default options and a target that
    is not the top class."""
    from vitviz.model import save_checkpoint
    from vitviz.pipeline import Pipeline

    folder = tmp_path / "project"
    folder.mkdir()
    ckpt = save_checkpoint(tiny_model, folder / "tiny.safetensors")
    a, b = _photo(folder / "a.png", 0), _photo(folder / "b.png", 1)
    pipe = Pipeline(tiny_model)
    top = pipe.run(load_image(a), source=a).target
    target = (top + 2) % 5
    s = Session()
    s.add_images([a, b])
    s.set_result(pipe.run(load_image(a), source=a, target=target))
    s.set_options(view="relevance", layer=2, head=1, query=5, start_layer=1, head_fusion="max", discard_ratio=0.3,
                  cmap="viridis", opacity=0.45, interpolation="bilinear", colorbar=False, caption=True,
                  ignore_artefacts=True, scale_excludes_artefacts=False, scale="per_map", percentile=98.0,
                  log_scale=False, mask_keep=0.6, mask_style="dim", mask_background=True,
                  legrad_start=0, legrad_pooling="model", gradcam_layer=1,
                  legrad_correction=False, pca_joint=True, pca_style="dinov3", pca_colours_only=True)
    return {"folder": folder, "ckpt": ckpt, "ref": f"file:{ckpt}", "images": (a, b), "session": s, "pipe": pipe,
            "target": target}


def _maps(session):
    """Every view's map at the session's options (each view with its own key)."""
    out = {}
    for key in VIEWS:
        o = replace(session.options, view=key)
        from vitviz import views

        out[key] = session.map_for(views.get(key), session.clamped(o))
    return out


def _assert_same(s1, s2):
    assert s2.options == s1.options
    assert s2.result.target == s1.result.target
    assert s2.images == s1.images
    assert s2.result.source == s1.result.source
    np.testing.assert_array_equal(s2.current_map(), s1.current_map())
    np.testing.assert_array_equal(s2.image_map(), s1.image_map())
    for key, (m1, m2) in zip(VIEWS, zip(_maps(s1).values(), _maps(s2).values())):
        if m1 is None:
            assert m2 is None, key
        else:
            np.testing.assert_array_equal(m2, m1, err_msg=key)


# ----------------------------------------------------------------------------------------------- round trips
def test_session_file_round_trip_restores_identical_maps(setup, tmp_path):
    s = setup["session"]
    state = st.capture_state(s, setup["ref"], model_name="tiny")
    path = st.save_state(state, setup["folder"] / "view.vitviz.json")
    text = path.read_text(encoding="utf-8")
    doc = json.loads(text)
    assert doc["format"] == "vitviz-session" and doc["version"] == 1  # a class target: what older vitviz read
    assert doc["target"] == setup["target"] and doc["current"] == 0
    assert doc["images"][0]["relative"] == "a.png" and len(doc["images"][0]["sha256"]) == 64
    back = st.read_state(path)
    assert back.options == s.options and back.target == setup["target"] and back.model == setup["ref"]
    s2, pipe2 = st.reproduce(back)  # a new model object, read from the checkpoint file
    assert pipe2.model is not setup["pipe"].model
    assert s2.result.target == setup["target"] != s2.result.top_k(1)[0][0]
    _assert_same(s, s2)


@pytest.mark.parametrize("fmt", [".png", ".svg", ".pdf"])
def test_exported_figure_carries_the_session_and_reopens_the_same_view(setup, fmt):
    s = setup["session"]
    spec = panel.view_figure(s)
    out = setup["folder"] / f"figure{fmt}"
    meta = st.figure_metadata(st.capture_state(s, setup["ref"]), out)
    figures.save(spec, out, scale="native", metadata=meta)
    assert st.METADATA_KEY in figures.read_metadata(out)
    back = st.read_state(out)
    assert back.origin == str(out)
    s2, _ = st.reproduce(back)
    _assert_same(s, s2)


def test_a_figure_exported_by_an_earlier_version_still_opens(setup):
    """Figures written before the code moved into packages carry their state under the PNG text key
    ``vitviz.session``: the key is part of the file format, not a module path, and such a figure reopens."""
    from PIL.PngImagePlugin import PngInfo

    s = setup["session"]
    info = PngInfo()
    info.add_text("vitviz.session", st.state_json(st.capture_state(s, setup["ref"]), setup["folder"]))
    out = setup["folder"] / "older.png"
    Image.new("RGB", (8, 8)).save(out, pnginfo=info)
    back = st.read_state(out)
    assert back.options == s.options and back.model == setup["ref"]


def test_every_view_option_is_saved_and_read_back(setup):
    names = {f.name for f in fields(ViewOptions)}
    s = setup["session"]
    doc = st.to_dict(st.capture_state(s, setup["ref"]))
    assert set(doc["options"]) == names
    defaults = ViewOptions()
    changed = {n for n in names if getattr(s.options, n) != getattr(defaults, n)}
    assert len(changed) >= len(names) - 3  # the fixture changes (nearly) every option, so a lost one shows
    back = st.parse_state(json.dumps(doc))
    assert back.options == s.options
    # a fixed range and a log scale too
    s.set_options(scale="fixed", fixed_range=(0.001, 0.5), log_scale=True)
    back = st.parse_state(st.state_json(st.capture_state(s, setup["ref"])))
    assert back.options.fixed_range == (0.001, 0.5) and back.options.log_scale and back.options.scale == "fixed"


def test_a_moved_project_folder_is_found_through_relative_paths(setup, tmp_path):
    s = setup["session"]
    st.save_state(st.capture_state(s, setup["ref"]), setup["folder"] / "view.vitviz.json")
    moved = tmp_path / "elsewhere"
    shutil.move(str(setup["folder"]), moved)
    state = st.read_state(moved / "view.vitviz.json")
    found = st.locate(state)
    assert found.image.path == str((moved / "a.png").resolve())
    assert found.model == f"file:{(moved / 'tiny.safetensors').resolve()}"
    s2, _ = st.reproduce(state)
    np.testing.assert_array_equal(s2.current_map(), s.current_map())


def test_a_model_prepared_differently_in_memory_reopens_with_that_preprocessing(setup, tiny_model):
    """A checkpoint that does not say how images were prepared (or a default that changed) must not change the
    maps: the session records the preprocessing and the reopened model uses it."""
    from vitviz.model.preprocess import Preprocess
    from vitviz.pipeline import Pipeline

    a = setup["images"][0]
    own = Preprocess(resize=40, crop=(32, 32), interpolation="bilinear", mean=(0.2, 0.3, 0.4), std=(0.5, 0.4, 0.3))
    assert tiny_model.spec.preprocess != own  # the checkpoint file keeps the one it was saved with
    tiny_model.spec = tiny_model.spec.replace(preprocess=own)
    pipe = Pipeline(tiny_model)
    s = Session()
    s.add_images([a])
    s.set_result(pipe.run(load_image(a), source=a))
    s.set_options(view="rollout")
    state = st.capture_state(s, setup["ref"], preprocess=pipe.spec.preprocess)
    path = st.save_state(state, setup["folder"] / "p.vitviz.json")
    assert json.loads(path.read_text())["model"]["preprocess"]["mean"] == [0.2, 0.3, 0.4]
    back = st.read_state(path)
    assert back.preprocess == own
    s2, pipe2 = st.reproduce(back)
    assert pipe2.spec.preprocess == own
    np.testing.assert_array_equal(s2.current_map(), s.current_map())
    # without it, the file's own preprocessing gives other maps: the check above can fail
    s3, _ = st.reproduce(replace(back, preprocess=None))
    assert not np.array_equal(s3.current_map(), s.current_map())


def test_a_changed_image_is_reported(setup):
    state = st.capture_state(setup["session"], setup["ref"])
    assert st.changed_images(state) == []
    a = setup["images"][0]
    arr = np.asarray(Image.open(a)).copy()
    arr[0, 0] ^= 255
    Image.fromarray(arr).save(a)
    assert st.changed_images(state) == [a]


def test_save_never_replaces_a_file_unless_asked(setup):
    target = setup["folder"] / "keep.vitviz.json"
    target.write_text("mine")
    state = st.capture_state(setup["session"], setup["ref"])
    with pytest.raises(FileExistsError):
        st.save_state(state, target)
    assert target.read_text() == "mine"
    st.save_state(state, target, overwrite=True)
    assert st.read_state(target).options == state.options


def test_nothing_to_save_without_a_result():
    with pytest.raises(st.StateError, match="no image has been analysed"):
        st.capture_state(Session(), "demo")


# ----------------------------------------------------------------------------------------------- bad files
def _good(setup) -> dict:
    return st.to_dict(st.capture_state(setup["session"], setup["ref"]), setup["folder"])


def _set(doc, path, value):
    d = doc
    for k in path[:-1]:
        d = d[k]
    if value is _DELETE:
        del d[path[-1]]
    else:
        d[path[-1]] = value
    return doc


_DELETE = object()

BAD_FIELDS = [
    (("options", "layer"), "3", "options.layer must be an integer, not a string"),
    (("options", "layer"), True, "options.layer must be an integer, not true/false"),
    (("options", "head"), 1.5, "options.head must be a head index or one of"),
    (("options", "head"), "median", "options.head is 'median'; valid: mean, max, min"),
    (("options", "opacity"), 2, "options.opacity is 2; it must lie in 0 .. 1"),
    (("options", "cmap"), "rainbow9", "options.cmap is 'rainbow9'; valid:"),
    (("options", "view"), "saliency", "unknown view 'saliency'"),
    (("options", "query"), -1, "options.query is -1"),
    (("options", "fixed_range"), [1, 0], "low must be below high"),
    (("options", "fixed_range"), [0, "1"], "options.fixed_range[1] must be a number"),
    (("options", "scale"), "fixed", "options.scale is 'fixed' but options.fixed_range is null"),
    (("options", "colour"), 1, "options has unknown key 'colour'"),
    (("options",), [], "options must be an object, not a list"),
    (("images",), "a.png", "images must be a list, not a string"),
    (("images",), [], "images is empty"),
    (("images", 0, "path"), 3, "images[0].path must be a string, not an integer"),
    (("images", 0, "sha256"), "xyz", "images[0].sha256 is not a SHA-256 digest"),
    (("current",), 5, "current is 5; it must lie in 0 .. 1"),
    (("target",), -2, "target is -2"),
    (("model", "ref"), "vit_b_16", "a model reference is demo or KIND:NAME"),
    (("model",), _DELETE, "the session lacks 'model'"),
    (("format",), "something-else", "'format' must be 'vitviz-session'"),
    (("version",), 3, "written by a newer vitviz (session version 3"),
    (("version",), "1", "version must be an integer"),
    (("surprise",), 1, "unknown key 'surprise'"),
    (("compare",), {"layout": "diagonal"}, "compare.layout is 'diagonal'"),
    (("compare",), {"layout": "views", "images": [7]}, "compare.images[0] is 7"),
    (("window", "heads_all_layers"), "yes", "window.heads_all_layers must be true or false"),
    (("model", "preprocess"), {"resize": 0, "crop": [2, 2], "mean": [0.5], "std": [0.5]},
     "model.preprocess.resize is 0"),
    (("model", "preprocess"), {"resize": 8, "crop": [2, 2], "mean": [0.5, 0.5], "std": [0.5]},
     "mean and std must have the same number of channels"),
    (("model", "preprocess"), {"resize": 8, "crop": [2, 2], "mean": [0.5], "std": [0]},
     "model.preprocess.std[0] is 0"),
]


@pytest.mark.parametrize("where,value,message", BAD_FIELDS, ids=[m[:40] for _, _, m in BAD_FIELDS])
def test_wrong_fields_are_refused_naming_the_file_and_the_field(setup, where, value, message):
    doc = _set(_good(setup), where, value)
    path = setup["folder"] / "bad.vitviz.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(st.StateError) as e:
        st.read_state(path)
    assert str(e.value).startswith(f"{path}: ")
    assert message in str(e.value)


BAD_TEXTS = [
    (b"", "not valid JSON"),
    (b"\xff\xfe\x00garbage", "not UTF-8 text"),
    (b"[1, 2, 3]", "must hold a JSON object, not a list"),
    (b"{\"format\": \"vitviz-session\", \"format\": \"x\"}", "the key 'format' appears twice"),
    (b"{\"format\": \"vitviz-session\", \"version\": NaN}", "NaN is not a number a session can hold"),
    (b"{\"a\": " + b"9" * 5000 + b"}", "a: number too long (5,000 characters"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b"{\"a\":" * 40 + b"1" + b"}" * 40, "nested too deeply"),
]


@pytest.mark.parametrize("data,message", BAD_TEXTS, ids=[m for _, m in BAD_TEXTS])
def test_malformed_files_are_refused(tmp_path, data, message):
    path = tmp_path / "bad.vitviz.json"
    path.write_bytes(data)
    with pytest.raises(st.StateError) as e:
        st.read_state(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_huge_files_are_not_read(tmp_path):
    path = tmp_path / "huge.vitviz.json"
    with open(path, "wb") as fh:
        fh.truncate(st.MAX_BYTES + 1)
    with pytest.raises(st.StateError, match=r"a session file is at most 9\.8 MiB"):
        st.read_state(path)


def _many(folder, n, name_length=0):
    return tuple(st.ImageRef(path=str(folder / f"{'n' * name_length}img_{i:05d}.png"), sha256="ef" * 32)
                 for i in range(n))


def test_what_vitviz_writes_it_reads_ten_thousand_images(setup, tmp_path):
    """The largest session vitviz writes (MAX_IMAGES images, each with its digest: over the old 1 MB limit) reads
    back whole; the writer and the reader share one limit."""
    state = replace(st.capture_state(setup["session"], setup["ref"]), images=_many(tmp_path / "photos", 10_000))
    path = st.save_state(state, tmp_path / "many.vitviz.json")
    assert path.stat().st_size > 1 << 20
    back = st.read_state(path)
    assert [(i.path, i.sha256) for i in back.images] == [(i.path, i.sha256) for i in state.images]
    assert back.images[9999].relative == "photos/img_09999.png"
    assert back.options == state.options and back.current == 0
    figure_entry = st.figure_metadata(state, tmp_path / "fig.png")[st.METADATA_KEY]  # a figure carries it too
    assert st.parse_state(figure_entry, tmp_path / "fig.png").paths == state.paths
    assert st.MAX_BYTES == st.MAX_IMAGES * st.IMAGE_ENTRY_BYTES + (64 << 10)


def test_the_writer_refuses_what_the_reader_would_refuse_and_writes_nothing(setup, tmp_path):
    base = st.capture_state(setup["session"], setup["ref"])
    too_many = replace(base, images=_many(tmp_path, st.MAX_IMAGES + 1))
    with pytest.raises(st.StateError) as e:
        st.save_state(too_many, tmp_path / "a.vitviz.json")
    assert str(e.value) == (f"{tmp_path / 'a.vitviz.json'}: cannot be saved: the session holds 10,001 images; a "
                            f"session holds at most 10,000 (close some images first)")
    too_long = replace(base, images=_many(tmp_path / ("d" * 200) / ("e" * 200), st.MAX_IMAGES, name_length=240))
    with pytest.raises(st.StateError, match=r"cannot be saved: the session would take 1\d\.\d MiB; a session is at "
                                            r"most 9\.8 MiB"):
        st.save_state(too_long, tmp_path / "b.vitviz.json")
    with pytest.raises(st.StateError, match="cannot be saved"):
        st.figure_metadata(too_many, tmp_path / "c.png")
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob(".*"))  # nothing, not even a temporary


@pytest.mark.parametrize("field,token,message", [
    ("layer", "7" * 5000, "options.layer: number too long (5,000 characters; a session's numbers have at most 40)"),
    ("opacity", "0." + "5" * 4999, "options.opacity: number too long (5,001 characters"),
    ("percentile", "1e" + "9" * 100, "options.percentile: number too long (102 characters"),
    ("query", "-" + "1" * 41, "options.query: number too long (42 characters"),
])
def test_numbers_with_thousands_of_digits_name_their_field(setup, tmp_path, field, token, message):
    doc = _good(setup)
    doc["options"][field] = 0
    path = tmp_path / "long.vitviz.json"
    path.write_text(json.dumps(doc).replace(f'"{field}": 0', f'"{field}": {token}'))
    with pytest.raises(st.StateError) as e:
        st.read_state(path)
    assert str(e.value).startswith(f"{path}: {message}") and "set_int_max_str_digits" not in str(e.value)


@pytest.mark.parametrize("text,message", [
    ('{"x": [' + "[]," * 20_000 + "[]]}", "it holds 20,003 lists and objects (a session holds at most 11,000"),
    ('{"x": [' + "0," * 60_000 + "0]}", "it holds 60,001 values (a session holds at most 50,000)"),
    ('{"x": "' + "[" * 30_000 + '"}', "'format' must be 'vitviz-session'"),  # brackets in strings do not count
])
def test_lists_and_values_are_counted_before_parsing(tmp_path, text, message):
    path = tmp_path / "many.vitviz.json"
    path.write_text(text)
    with pytest.raises(st.StateError) as e:
        st.read_state(path)
    assert message in str(e.value)


def test_ten_thousand_missing_images_are_summarised(setup, tmp_path):
    doc = _good(setup)
    doc["images"] = [{"path": str(tmp_path / "gone" / f"{i}.png")} for i in range(10_000)]
    path = tmp_path / "s.vitviz.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(st.StateError) as e:
        st.locate(st.read_state(path))
    lines = str(e.value).splitlines()
    assert lines[0] == f"{path}: cannot be opened:"
    assert lines[1:6] == [f"- the image {tmp_path / 'gone' / f'{i}.png'} does not exist" for i in range(5)]
    assert lines[6:] == ["- and 9,995 more images cannot be found"]


def test_missing_folder_and_plain_figures_are_refused(tmp_path):
    with pytest.raises(st.StateError, match="file does not exist"):
        st.read_state(tmp_path / "nothing.vitviz.json")
    with pytest.raises(st.StateError, match="is a folder"):
        st.read_state(tmp_path)
    png = tmp_path / "plain.png"
    Image.new("RGB", (4, 4)).save(png)
    with pytest.raises(st.StateError, match="carries no vitviz session"):
        st.read_state(png)


def test_missing_files_are_all_named_before_anything_opens(setup, tmp_path):
    doc = _good(setup)
    doc["images"][1] = {"path": str(tmp_path / "gone.png")}
    doc["model"] = {"ref": f"file:{tmp_path / 'gone.safetensors'}"}
    path = tmp_path / "s.vitviz.json"
    path.write_text(json.dumps(doc))
    state = st.read_state(path)
    with pytest.raises(st.StateError) as e:
        st.locate(state)
    msg = str(e.value)
    assert f"the image {tmp_path / 'gone.png'} does not exist" in msg
    assert f"the model checkpoint {tmp_path / 'gone.safetensors'} does not exist" in msg
    with pytest.raises(st.StateError):
        st.reproduce(state)


@pytest.mark.parametrize("ref,message", [("pretrained:vit_nonexistent_99", "unknown model"),
                                         ("random:no_such_architecture", "unknown model"),
                                         ("memory", "handed to vitviz by a script")])
def test_models_that_cannot_be_opened_are_named(setup, tmp_path, ref, message):
    doc = _good(setup)
    doc["model"]["ref"] = ref
    path = tmp_path / "s.vitviz.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(st.StateError, match=message):
        st.locate(st.read_state(path))


def test_a_pasted_image_cannot_be_reopened(setup, tmp_path):
    from vitviz.imaging import image_from_array

    s, pipe = setup["session"], setup["pipe"]
    s.set_result(pipe.run(image_from_array(np.zeros((40, 40, 3), np.uint8)), source="pasted image"))
    state = st.capture_state(s, setup["ref"])
    path = tmp_path / "s.vitviz.json"
    st.save_state(state, path)
    with pytest.raises(st.StateError, match="'pasted image' was not a file"):
        st.locate(st.read_state(path))


def test_a_target_the_model_lacks_fails_when_run(setup, tmp_path):
    doc = _good(setup)
    doc["target"] = 7  # the tiny model has 5 classes
    path = setup["folder"] / "s.vitviz.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(Exception, match="7"):
        st.reproduce(st.read_state(path))



def test_reading_a_session_does_not_import_torch(tmp_path):
    """Reading and checking a session file is cheap: no torch (the window opens and checks it before any model)."""
    import subprocess
    import sys

    img = _photo(tmp_path / "x.png", 0)
    doc = {"format": "vitviz-session", "version": 1, "model": {"ref": "demo"}, "images": [{"path": img}],
           "current": 0, "options": {"view": "relevance", "cmap": "viridis"}}
    path = tmp_path / "s.vitviz.json"
    path.write_text(json.dumps(doc))
    code = ("import sys; from vitviz.document import state; "
            f"s = state.locate(state.read_state({str(path)!r})); assert s.options.view == 'relevance'; "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]
