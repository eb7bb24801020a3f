"""Bad checkpoints (issue 11): container detection by structure, malformed safetensors headers, settings of the
wrong type, settings declaring a model larger than the file (or the machine), and write failures.

Every bad file must raise CheckpointError whose message starts with the file's path and names the problem; never a
bare IndexError / TypeError / KeyError, and never an allocation of the declared size.
"""

from __future__ import annotations

import errno
import json
import struct

import pytest
import torch
from safetensors.torch import save_file

from vitviz.model import CheckpointError, ViT, load_checkpoint, save_checkpoint
from vitviz.model.checkpoints import common, read_raw, saving
from vitviz.model.spec import ModelSpec


def _tiny(depth: int = 1, **kw) -> ViT:
    torch.manual_seed(0)
    m = ViT(img_size=16, patch_size=8, embed_dim=8, depth=depth, num_heads=2, num_classes=3, **kw).eval()
    m.spec = ModelSpec(config=m.config, labels=("ant", "bee", "cat"), name="tiny")
    return m


def _logits(m: ViT) -> torch.Tensor:
    with torch.no_grad():
        return m(torch.linspace(-1, 1, 2 * 3 * 16 * 16).reshape(2, 3, 16, 16))


def _raises(path, *needles: str) -> str:
    """load_checkpoint(path) raises CheckpointError starting with ``path`` and containing every needle."""
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path)
    msg = str(e.value)
    assert msg.startswith(str(path)), msg
    for n in needles:
        assert n in msg[len(str(path)):], f"{n!r} not in {msg!r}"
    return msg


# ---------------------------------------------------------------------------------------------------------------------
# 1. the container is recognised by structure, not by its first byte
# ---------------------------------------------------------------------------------------------------------------------
def test_every_saved_file_reloads_whatever_its_header_length(tmp_path):
    """The safetensors header length's low byte is 0x80 for some spec lengths: such files once loaded as pickles."""
    m = _tiny(depth=0)  # depth 0 keeps 600 loads at a few seconds
    ref = _logits(m)
    first_bytes = set()
    for n in range(600):
        m.spec = m.spec.replace(name="n" * n)
        path = save_checkpoint(m, tmp_path / f"m{n}.safetensors")
        first_bytes.add(path.read_bytes()[0])
        back = load_checkpoint(path)
        assert back.spec.name == ("n" * n or path.name)  # an empty saved name shows the file name
        assert back.spec.labels == ("ant", "bee", "cat")
        assert back.spec.source_format == "native"
        assert torch.equal(_logits(back), ref)
    assert 0x80 in first_bytes  # the loop did exercise the once-misread case


def _native_file_starting_with(tmp_path, prefix: bytes, depth: int):
    """A native checkpoint (tensors and metadata as save_checkpoint writes them) whose first bytes are ``prefix``,
    reached by padding an extra metadata entry."""
    m = _tiny(depth)
    src = save_checkpoint(m, tmp_path / "src.safetensors")
    meta = read_raw(src).metadata
    tensors = {k: v.contiguous() for k, v in m.state_dict().items()}
    path = tmp_path / "x80.safetensors"
    for k in range(4096):
        save_file(tensors, str(path), metadata={**meta, "pad": " " * k})
        if path.read_bytes().startswith(prefix):
            return m, path
    raise AssertionError(f"no padding gives {prefix!r}")


@pytest.mark.parametrize("prefix,depth", [(b"\x80", 1), (b"\x80\x05", 0)])
def test_safetensors_starting_like_a_pickle_loads_as_vitviz(tmp_path, prefix, depth):
    """0x80 0x05 is also how a protocol-5 pickle starts (header length 0x0580): the JSON header decides."""
    m, path = _native_file_starting_with(tmp_path, prefix, depth)
    assert read_raw(path).container == "safetensors"
    back = load_checkpoint(path)
    assert back.spec.source_format == "native" and back.spec.name == "tiny"
    assert back.spec.labels == ("ant", "bee", "cat")
    assert torch.equal(_logits(back), _logits(m))


def test_real_pickles_are_still_pickles(tmp_path):
    m = _tiny()
    for legacy in (False, True):
        p = tmp_path / f"m{legacy}.pth"
        torch.save(m.state_dict(), p, _use_new_zipfile_serialization=not legacy)
        raw = read_raw(p)
        assert raw.container == ("torch-legacy" if legacy else "torch")
        assert torch.equal(_logits(load_checkpoint(p, num_heads=2)), _logits(m))


# ---------------------------------------------------------------------------------------------------------------------
# 2. malformed safetensors headers
# ---------------------------------------------------------------------------------------------------------------------
F32x2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


def _st_bytes(header, data: bytes = b"\0" * 8, length: int | None = None) -> bytes:
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(hb) if length is None else length) + hb + data


HEADER_CASES = {
    "offsets-three": ({"w": {**F32x2, "data_offsets": [0, 4, 8]}}, b"\0" * 8, "data_offsets"),
    "offsets-one": ({"w": {**F32x2, "data_offsets": [8]}}, b"\0" * 8, "data_offsets"),
    "offsets-strings": ({"w": {**F32x2, "data_offsets": ["0", "8"]}}, b"\0" * 8, "data_offsets"),
    "offsets-null": ({"w": {**F32x2, "data_offsets": None}}, b"\0" * 8, "data_offsets"),
    "offsets-missing": ({"w": {"dtype": "F32", "shape": [2]}}, b"\0" * 8, "data_offsets"),
    "offsets-reversed": ({"w": {**F32x2, "data_offsets": [8, 0]}}, b"\0" * 8, "data_offsets"),
    "offsets-negative": ({"w": {**F32x2, "data_offsets": [-8, 0]}}, b"\0" * 8, "data_offsets"),
    "offsets-floats": ({"w": {**F32x2, "data_offsets": [0.0, 8.0]}}, b"\0" * 8, "data_offsets"),
    "offsets-bools": ({"w": {**F32x2, "data_offsets": [False, True]}}, b"\0" * 8, "data_offsets"),
    "offsets-past-end": ({"w": {**F32x2, "data_offsets": [0, 8]}}, b"\0" * 4, "truncated"),
    "offsets-far-past-end": ({"w": {"dtype": "F32", "shape": [2**40], "data_offsets": [0, 2**42]}}, b"", "truncated"),
    "dtype-unknown": ({"w": {**F32x2, "dtype": "F33"}}, b"\0" * 8, "unknown dtype"),
    "dtype-number": ({"w": {**F32x2, "dtype": 32}}, b"\0" * 8, "unknown dtype"),
    "dtype-missing": ({"w": {"shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, "unknown dtype"),
    "shape-string": ({"w": {**F32x2, "shape": "2"}}, b"\0" * 8, "shape"),
    "shape-negative": ({"w": {**F32x2, "shape": [-2]}}, b"\0" * 8, "shape"),
    "shape-vs-size": ({"w": {**F32x2, "shape": [3]}}, b"\0" * 8, "needs 12 bytes"),
    "entry-list": ({"w": [0, 8]}, b"\0" * 8, "expected an object"),
    "overlap": ({"a": F32x2, "b": F32x2}, b"\0" * 8, "overlaps"),
    "gap": ({"a": F32x2, "b": {**F32x2, "data_offsets": [12, 20]}}, b"\0" * 20, "gap"),
    "trailing-data": ({"a": F32x2}, b"\0" * 12, "holds 12"),
    "metadata-numbers": ({"__metadata__": {"x": 1}, "a": F32x2}, b"\0" * 8, "__metadata__"),
    "metadata-list": ({"__metadata__": ["x"], "a": F32x2}, b"\0" * 8, "__metadata__"),
    "json-list": ([F32x2], b"\0" * 8, "JSON list"),
    "json-string": (b'"w"', b"", "JSON string"),
    "not-json": (b"{this is not json}", b"\0" * 8, "not JSON"),
    "not-utf8": (b"{\xff\xfe}", b"", "not JSON"),
}


@pytest.mark.parametrize("case", sorted(HEADER_CASES))
def test_malformed_safetensors_header(tmp_path, case):
    header, data, needle = HEADER_CASES[case]
    p = tmp_path / "bad.safetensors"
    p.write_bytes(_st_bytes(header, data))
    _raises(p, needle)


@pytest.mark.parametrize("length,needle", [(10**6, "truncated"), (2**63 + 5, "truncated"), (0, "implausible")])
def test_safetensors_header_length_wrong(tmp_path, length, needle):
    p = tmp_path / "len.safetensors"
    p.write_bytes(_st_bytes({"w": F32x2}, length=length))
    _raises(p, needle)


def test_cut_inside_the_header_is_truncated(tmp_path):
    good = save_checkpoint(_tiny(), tmp_path / "good.safetensors").read_bytes()
    p = tmp_path / "cut.safetensors"
    p.write_bytes(good[:100])
    _raises(p, "truncated", "header says")


# ---------------------------------------------------------------------------------------------------------------------
# 3. saved native settings of the wrong type
# ---------------------------------------------------------------------------------------------------------------------
def _native_with_spec(tmp_path, edit) -> tuple:
    """A tiny native checkpoint whose spec JSON is ``edit(spec_dict)`` (or the string it returns)."""
    m = _tiny()
    src = save_checkpoint(m, tmp_path / "src.safetensors")
    meta = read_raw(src).metadata
    spec = json.loads(meta["vitviz_spec"])
    out = edit(spec)
    text = out if isinstance(out, str) else json.dumps(spec if out is None else out)
    p = tmp_path / "edited.safetensors"
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, str(p), metadata={**meta, "vitviz_spec": text})
    return m, p


def _set(path: str, value):
    def edit(spec):
        d = spec
        *parents, last = path.split(".")
        for k in parents:
            d = d[k]
        d[last] = value
    return edit


SPEC_CASES = [
    ("config.depth", "4", "integer >= 0", "the string '4'"),
    ("config.embed_dim", True, "integer >= 1", "true"),
    ("config.embed_dim", 0, "integer >= 1", "the integer 0"),
    ("config.patch_size", -8, "integer >= 1", "the integer -8"),
    ("config.num_heads", 2.0, "integer >= 1", "the number 2.0"),
    ("config.num_classes", None, "integer >= 0", "null"),
    ("config.img_size", "16", "positive integer", "the string '16'"),
    ("config.img_size", [16], "[height, width]", "a list [16]"),
    ("config.img_size", [16, 0], "[height, width]", "a list [16, 0]"),
    ("config.mlp_ratio", "4", "positive number", "the string '4'"),
    ("config.qkv_bias", "yes", "true or false", "the string 'yes'"),
    ("config.class_token", 1, "true or false", "the integer 1"),
    ("config.pos_embed", "rope", "'learned', 'sincos'", "the string 'rope'"),
    ("config.global_pool", 1, "'token', 'avg'", "the integer 1"),
    ("config.layer_norm_eps", -1e-6, "positive number", "-1e-06"),
    ("config.drop_rate", 1.5, "[0, 1)", "1.5"),
    ("config.init_values", "small", "a number", "the string 'small'"),
    ("config.fc_norm", "no", "true or false", "the string 'no'"),
    ("preprocess.crop", "thirty-two", "[height, width]", "the string 'thirty-two'"),
    ("preprocess.resize", -1, "positive integer", "the integer -1"),
    ("preprocess.interpolation", "cubic", "'bicubic'", "the string 'cubic'"),
    ("preprocess.mean", ["a", "b", "c"], "list of numbers", "a list"),
    ("preprocess.std", [0.5, 0, 0.5], "list of positive numbers", "a list"),
    ("labels", "ant bee cat", "list of strings", "the string"),
    ("labels", [1, 2, 3], "list of strings", "a list [1, 2, 3]"),
    ("name", 5, "a string", "the integer 5"),
]


@pytest.mark.parametrize("field,value,expected,found", SPEC_CASES, ids=[f"{c[0]}={c[1]!r}" for c in SPEC_CASES])
def test_saved_setting_of_wrong_type(tmp_path, field, value, expected, found):
    _, p = _native_with_spec(tmp_path, _set(field, value))
    _raises(p, repr(field), expected, found)


@pytest.mark.parametrize("edit,needle", [
    (lambda s: "{not json", "not JSON"),
    (lambda s: [s], "an object, found a list"),
    (lambda s: {**s, "config": [1, 2]}, "'config' should be an object"),
    (lambda s: {k: v for k, v in s.items() if k != "config"}, "has no 'config'"),
    (lambda s: {**s, "config": {**s["config"], "depthh": 1}}, "unknown settings 'depthh'"),
    (lambda s: {**s, "preprocess": "default"}, "'preprocess' should be an object"),
], ids=["not-json", "list", "config-list", "config-missing", "config-unknown-key", "preprocess-string"])
def test_saved_spec_of_wrong_shape(tmp_path, edit, needle):
    _, p = _native_with_spec(tmp_path, edit)
    _raises(p, needle)


# ---------------------------------------------------------------------------------------------------------------------
# 4. settings declaring more than the file holds, or more than the machine has
# ---------------------------------------------------------------------------------------------------------------------
@pytest.fixture
def no_allocation(monkeypatch):
    """Fail the test if a model is materialised (to_empty) at all."""
    def refuse(self, *a, **k):
        raise AssertionError("a model was allocated")
    monkeypatch.setattr(ViT, "to_empty", refuse)


@pytest.mark.parametrize("field,value,needle", [
    ("config.embed_dim", 131072, "embed_dim=131072"),
    ("config.depth", 4096, "depth=4096, but the file holds 1 blocks"),
    ("config.num_classes", 10**7, "num_classes=10000000"),
    ("config.img_size", [65536, 65536], "img_size=[65536, 65536]"),
    ("config.mlp_ratio", 4096.0, "mlp_ratio=4096"),
    ("config.patch_size", 4, "patch_size=4"),
    ("config.in_channels", 1, "in_channels=1"),
])
def test_declared_sizes_must_match_the_tensors(tmp_path, no_allocation, field, value, needle):
    _, p = _native_with_spec(tmp_path, _set(field, value))
    _raises(p, "the saved settings declare", needle)


def test_model_larger_than_memory_is_refused_before_allocating(tmp_path, no_allocation, monkeypatch):
    p = save_checkpoint(_tiny(), tmp_path / "m.safetensors")
    msg = _raises_with(p, {"num_classes": 10**10}, "more than this machine's")
    assert "num_classes=10000000000" in msg
    _raises_with(p, {"img_size": 8 * 10**6}, "more than this machine's")
    monkeypatch.setattr(common, "physical_memory", lambda: 1000)
    _raises_with(p, {}, "needs about", "more than this machine's")


def _raises_with(path, kwargs, *needles: str) -> str:
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(path, **kwargs)
    msg = str(e.value)
    assert msg.startswith(str(path)) and all(n in msg[len(str(path)):] for n in needles), msg
    return msg


# ---------------------------------------------------------------------------------------------------------------------
# 3 + 4 for Hugging Face folders: config.json and preprocessor_config.json
# ---------------------------------------------------------------------------------------------------------------------
def _hf_dir(tmp_path, config_edit=None, preprocessor=None):
    """A Hugging Face ViTForImageClassification folder (old key names) written by hand from a tiny vitviz ViT."""
    m = _tiny(layer_norm_eps=1e-12)
    s = m.state_dict()
    hf = {"vit.embeddings.patch_embeddings.projection.weight": s["patch_embed.proj.weight"],
          "vit.embeddings.patch_embeddings.projection.bias": s["patch_embed.proj.bias"],
          "vit.embeddings.cls_token": s["cls_token"], "vit.embeddings.position_embeddings": s["pos_embed"],
          "vit.layernorm.weight": s["norm.weight"], "vit.layernorm.bias": s["norm.bias"],
          "classifier.weight": s["head.weight"], "classifier.bias": s["head.bias"]}
    b, L = "blocks.0.", "vit.encoder.layer.0."
    for kind in ("weight", "bias"):
        q, k, v = s[b + f"attn.qkv.{kind}"].chunk(3)
        hf.update({L + f"attention.attention.query.{kind}": q, L + f"attention.attention.key.{kind}": k,
                   L + f"attention.attention.value.{kind}": v,
                   L + f"attention.output.dense.{kind}": s[b + f"attn.proj.{kind}"],
                   L + f"layernorm_before.{kind}": s[b + f"norm1.{kind}"],
                   L + f"layernorm_after.{kind}": s[b + f"norm2.{kind}"],
                   L + f"intermediate.dense.{kind}": s[b + f"mlp.fc1.{kind}"],
                   L + f"output.dense.{kind}": s[b + f"mlp.fc2.{kind}"]})
    d = tmp_path / "hf"
    d.mkdir()
    save_file({k: v.contiguous() for k, v in hf.items()}, str(d / "model.safetensors"))
    cfg = {"model_type": "vit", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
           "intermediate_size": 32, "hidden_act": "gelu", "image_size": 16, "patch_size": 8, "num_channels": 3,
           "layer_norm_eps": 1e-12, "id2label": {"0": "ant", "1": "bee", "2": "cat"}}
    if config_edit is not None:
        cfg = config_edit(cfg) or cfg
    (d / "config.json").write_text(json.dumps(cfg))
    if preprocessor is not None:
        (d / "preprocessor_config.json").write_text(json.dumps(preprocessor))
    return m, d


def test_hand_written_hf_folder_loads(tmp_path):
    m, d = _hf_dir(tmp_path, preprocessor={"do_resize": True, "size": {"height": 16, "width": 16}, "resample": 3,
                                           "image_mean": 0.5, "image_std": [0.25, 0.25, 0.25], "crop_size": None})
    back = load_checkpoint(d)
    assert back.config == m.config and back.spec.labels == ("ant", "bee", "cat")
    assert back.spec.preprocess.std == (0.25,) * 3 and back.spec.preprocess.mean == (0.5,) * 3
    assert torch.allclose(_logits(back), _logits(m), atol=1e-6)


def _cfg(key, value):
    def edit(cfg):
        cfg[key] = value
    return edit


HF_CONFIG_CASES = [
    ("num_attention_heads", "two", "integer >= 1", "the string 'two'"),
    ("num_attention_heads", 0, "integer >= 1", "the integer 0"),
    ("num_attention_heads", True, "integer >= 1", "true"),
    ("layer_norm_eps", "small", "positive number", "the string 'small'"),
    ("hidden_act", 3, "a string", "the integer 3"),
    ("hidden_size", "8", "integer >= 1", "the string '8'"),
    ("num_hidden_layers", -1, "integer >= 0", "the integer -1"),
    ("image_size", "sixteen", "positive integer", "the string 'sixteen'"),
    ("id2label", ["ant", "bee", "cat"], "an object", "a list"),
    ("id2label", {"0": 1, "1": 2, "2": 3}, "class names", "the integer 1"),
]


@pytest.mark.parametrize("key,value,expected,found", HF_CONFIG_CASES, ids=[f"{c[0]}={c[1]!r}" for c in HF_CONFIG_CASES])
def test_hf_config_of_wrong_type(tmp_path, key, value, expected, found):
    _, d = _hf_dir(tmp_path, _cfg(key, value))
    msg = _raises(d, repr(key), expected, found)
    assert msg.startswith(str(d / "config.json"))


@pytest.mark.parametrize("key,value,needle", [
    ("hidden_size", 131072, "hidden_size=131072"),
    ("num_hidden_layers", 1000, "num_hidden_layers=1000, but the weights hold 1"),
    ("intermediate_size", 10**9, "intermediate_size=1000000000"),
    ("image_size", 4096, "image_size=4096"),
    ("patch_size", 16, "patch_size=16"),
])
def test_hf_declared_sizes_must_match_the_tensors(tmp_path, no_allocation, key, value, needle):
    _, d = _hf_dir(tmp_path, _cfg(key, value))
    msg = _raises(d, needle)
    assert msg.startswith(str(d / "config.json"))


def test_hf_config_json_list(tmp_path):
    _, d = _hf_dir(tmp_path, lambda cfg: [cfg])
    msg = _raises(d, "config.json holds a JSON list, expected an object")
    assert msg.startswith(str(d / "config.json"))


@pytest.mark.parametrize("pp,needle", [
    ({"do_center_crop": True, "crop_size": "thirty-two"},
     "'crop_size' should be an integer >= 1, found the string 'thirty-two'"),
    ({"crop_size": {"height": 16}}, "'crop_size' should be an integer or {height, width}"),
    ({"size": -1}, "'size' should be an integer >= 1, found the integer -1"),
    ({"size": {"height": "16", "width": 16}}, "'size.height' should be an integer >= 1, found the string '16'"),
    ({"image_mean": "grey"}, "'image_mean' should be a number, found the string 'grey'"),
    ({"image_std": [0.5, 0, 0.5]}, "'image_std' should be a list of positive numbers"),
    ({"image_mean": [0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}, "image_mean has 2 values but image_std has 3"),
    ({"do_normalize": "yes"}, "'do_normalize' should be true or false, found the string 'yes'"),
    ({"resample": "bicubic"}, "'resample' should be an integer >= 0, found the string 'bicubic'"),
    (["size", 16], "preprocessor_config.json holds a JSON list"),
])
def test_hf_preprocessor_of_wrong_type(tmp_path, pp, needle):
    _, d = _hf_dir(tmp_path, preprocessor=pp)
    msg = _raises(d, needle)
    assert msg.startswith(str(d / "preprocessor_config.json"))


# ---------------------------------------------------------------------------------------------------------------------
# 5. saving: a file in the way, write failures
# ---------------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sub", [(), ("deeper", "still")])
def test_save_when_a_parent_is_a_file(tmp_path, sub):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("not a folder")
    path = blocker.joinpath(*sub, "m.safetensors")
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(_tiny(), path)
    msg = str(e.value)
    assert msg.startswith(str(path)) and f"{blocker} is a file, not a folder" in msg
    assert blocker.read_text() == "not a folder"


def test_save_onto_a_folder(tmp_path):
    with pytest.raises(CheckpointError, match="is a folder") as e:
        save_checkpoint(_tiny(), tmp_path, overwrite=True)
    assert str(e.value).startswith(str(tmp_path))


@pytest.mark.parametrize("existing", [False, True])
def test_write_failure_leaves_nothing_behind(tmp_path, monkeypatch, existing):
    path = tmp_path / "m.safetensors"
    if existing:
        path.write_bytes(b"the previous checkpoint")

    def failing_writer(tensors, tmp, metadata):
        with open(tmp, "wb") as f:
            f.write(b"\0" * 1000)  # a partial file, then the disk gives up
        raise OSError(errno.EFBIG, "File too large")

    monkeypatch.setattr(saving, "_write_safetensors", failing_writer)
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(_tiny(), path, overwrite=True)
    msg = str(e.value)
    assert msg.startswith(str(path)) and "File too large" in msg and "nothing was saved" in msg
    assert isinstance(e.value.__cause__, OSError) and e.value.__cause__.errno == errno.EFBIG
    assert sorted(p.name for p in tmp_path.iterdir()) == (["m.safetensors"] if existing else [])
    if existing:
        assert path.read_bytes() == b"the previous checkpoint"


def test_safetensors_io_error_is_reported_as_the_os_error(tmp_path, monkeypatch):
    """safetensors raises its own SafetensorError for I/O failures; the cause still reaches the message."""
    import safetensors.torch
    from safetensors import SafetensorError

    def full_disk(tensors, filename, metadata=None):
        raise SafetensorError(f"Error while serializing: I/O error: No space left on device (os error 28) at path "
                              f"\"{filename}\"")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    path = tmp_path / "m.safetensors"
    with pytest.raises(CheckpointError) as e:
        save_checkpoint(_tiny(), path)
    assert str(e.value).startswith(str(path)) and "No space left on device" in str(e.value)
    assert e.value.__cause__.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []
