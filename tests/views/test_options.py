"""The option table (vitviz.views.options): every option declared once, and a new display option registered through
the table alone is checked by the session, saved in a session file, read back, remembered and offered as a flag."""

import json
from dataclasses import fields, replace

import numpy as np
import pytest
from PIL import Image

from vitviz.document import state as st
from vitviz.document.session import Session
from vitviz.pipeline import run_inference
from vitviz.views import options as O
from vitviz.views.options import Option, ViewOptions


@pytest.fixture
def outline():
    """Two new display options, as a plug-in would add them: a number with a range and a choice."""
    rows = [O.register_option(Option("outline_width", "float", 1.5, range=(0.5, 8.0), label="Outline width",
                                     help="the mask outline's width in screen pixels", flag="outline width")),
            O.register_option(Option("outline_colour", "choice", "cyan", choices=("cyan", "white"),
                                     label="Outline colour", help="the mask outline's colour"))]
    yield rows
    for row in rows:
        O.unregister_option(row.name)


@pytest.fixture
def session(tiny_model, tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "x.png"
    Image.fromarray((rng.random((40, 40, 3)) * 255).astype(np.uint8)).save(path)
    s = Session()
    s.add_images([str(path)])
    s.set_result(run_inference(tiny_model, Image.open(path), source=str(path)))
    return s


def test_the_table_declares_every_field_of_view_options_in_order():
    assert [f.name for f in fields(ViewOptions)] == [row.name for row in O.all_options()]
    defaults = ViewOptions()
    for row in O.all_options():
        assert getattr(defaults, row.name) == row.default
    assert O.option("mask_style").choices == O.MASK_STYLES
    assert set(O.readable_options()) == {"layer", "head", "query", "head_fusion", "discard_ratio", "start_layer",
                                         "legrad_start", "legrad_pooling", "legrad_correction", "gradcam_layer",
                                         "mask_background", "pca_joint", "pca_style", "target"}
    with pytest.raises(ValueError, match="unknown option 'colour'"):
        O.option("colour")


def test_a_registered_option_is_checked_by_the_session(outline, session):
    assert "outline_width" in {f.name for f in fields(ViewOptions)}
    assert session.options.outline_width == 1.5  # made before the row was added: reads its default
    assert session.set_options(outline_width=3.0).outline_width == 3.0
    assert session.set_options(outline_width=100).outline_width == 8.0  # clamped to the row's range
    assert session.set_options(outline_width=0.0).outline_width == 0.5
    assert session.set_options(outline_colour="white").outline_colour == "white"
    with pytest.raises(ValueError, match="outline_colour must be 'cyan' or 'white', got 'pink'"):
        session.set_options(outline_colour="pink")
    assert session.options.outline_colour == "white"  # a refused change changes nothing


def test_a_registered_option_is_saved_in_a_session_file_and_read_back(outline, session, tmp_path):
    session.set_options(outline_width=3.25, outline_colour="white", mask_keep=0.5)
    path = st.save_state(st.capture_state(session, "demo"), tmp_path / "s.vitviz.json")
    doc = json.loads(path.read_text(encoding="utf-8"))
    assert doc["options"]["outline_width"] == 3.25 and doc["options"]["outline_colour"] == "white"
    back = st.read_state(path)
    assert back.options == session.options
    assert (back.options.outline_width, back.options.outline_colour) == (3.25, "white")
    # out of range, or not a choice, in a file: refused naming the file and the field
    for key, value, message in (("outline_width", 20, "options.outline_width is 20; it must lie in 0.5 .. 8"),
                                ("outline_colour", "pink", "options.outline_colour is 'pink'; valid: cyan, white"),
                                ("outline_width", "3", "options.outline_width must be a number, not a string")):
        bad = json.loads(json.dumps(doc))
        bad["options"][key] = value
        path.write_text(json.dumps(bad))
        with pytest.raises(st.StateError) as e:
            st.read_state(path)
        assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
    # a file without it (written before the option existed) reads the default
    del doc["options"]["outline_width"]
    assert st.parse_state(json.dumps(doc)).options.outline_width == 1.5


def test_a_registered_option_is_a_flag_and_a_remembered_word(outline):
    flags = {f.option: f for f in O.cli_flags()}
    assert flags["outline_width"].flag == "--outline-width"
    assert flags["outline_width"].add_argument_kwargs() == {"dest": "outline_width", "action": "store",
                                                            "help": "outline width", "default": 1.5}
    assert flags["outline_width"].value("2.5") == 2.5
    with pytest.raises(ValueError, match="--outline-width wide: expected a number from 0.5 to 8"):
        flags["outline_width"].value("wide")
    assert "outline_colour" not in flags  # no flag help: no flag
    assert O.parse("outline_colour", "white") == "white"
    with pytest.raises(ValueError):
        O.parse("outline_colour", "42")


def test_removing_a_registered_option_takes_its_field_away(outline, tmp_path):
    O.unregister_option("outline_colour")
    assert "outline_colour" not in {f.name for f in fields(ViewOptions)}
    with pytest.raises(TypeError):
        ViewOptions(outline_colour="white")
    with pytest.raises(ValueError, match="options has unknown key 'outline_colour'"):
        st.from_dict({"format": "vitviz-session", "version": 1, "model": {"ref": "demo"},
                      "images": [{"path": str(tmp_path / "x.png")}], "current": 0,
                      "options": {"outline_colour": "white"}})
    O.unregister_option("outline_colour")  # absent: no error


def test_registration_refuses_what_cannot_be_an_option():
    with pytest.raises(ValueError, match="an option named 'cmap' exists"):
        O.register_option(Option("cmap", "choice", "gray", choices=("gray",)))
    with pytest.raises(ValueError, match="built-in option"):
        O.unregister_option("mask_style")
    with pytest.raises(ValueError, match="kind must be one of"):
        Option("glow", "colour", "red")
    with pytest.raises(ValueError, match="needs its choices"):
        Option("glow", "choice", "red")
    with pytest.raises(ValueError, match="glow must be 'on' or 'off', got 'red'"):
        Option("glow", "choice", "red", choices=("on", "off"))  # the default must be one of them
    with pytest.raises(ValueError, match="the default 9 lies outside"):
        Option("glow", "float", 9, range=(0.0, 1.0))
    with pytest.raises(TypeError):
        O.register_option("glow")


def test_export_display_flags_come_from_the_table():
    flags = {f.flag: f for f in O.cli_flags()}
    assert set(flags) == {"--cmap", "--no-colorbar", "--no-caption"}
    assert flags["--no-colorbar"].add_argument_kwargs() == {"dest": "colorbar", "action": "store_false",
                                                            "help": "PNG without the colour bar"}
    assert flags["--cmap"].value("viridis") == "viridis"
    with pytest.raises(ValueError, match="--cmap rainbowish: unknown colormap; valid: viridis, "):
        flags["--cmap"].value("rainbowish")


def test_the_session_clamps_numbers_to_the_table_and_the_model(session):
    r = session.result
    o = session.set_options(view="cls", layer=99, head=99, query=-4, opacity=1.7, percentile=10.0,
                            discard_ratio=2.0, mask_keep=-1.0, start_layer=99)
    assert (o.layer, o.head, o.query, o.start_layer) == (r.num_layers - 1, r.num_heads - 1, 0, r.num_layers - 1)
    assert (o.opacity, o.percentile, o.discard_ratio, o.mask_keep) == (1.0, 50.0, 0.99, 0.0)
    assert O.checked(replace(o, opacity=-1)).opacity == 0.0  # without a model: the table's ranges
