"""Bad checkpoints: container detection by structure, malformed safetensors headers, settings of the
wrong type, settings declaring a model larger than the file (or the machine), and write failures.

Every bad file must raise CheckpointError whose message starts with the file's path and names the problem; never a
bare IndexError / TypeError / KeyError, and never an allocation of the declared size.
"""

from __future__ import annotations

import dataclasses
import errno

import pytest
import torch
from bad_input_builders import HEADER_CASES, HF_CONFIG_CASES, SPEC_CASES, F32x2
from bad_input_builders import cfg_edit as _cfg
from bad_input_builders import hf_dir as _hf_dir
from bad_input_builders import logits_of as _logits
from bad_input_builders import native_starting_with as _native_file_starting_with
from bad_input_builders import native_with_spec as _native_with_spec
from bad_input_builders import set_field as _set
from bad_input_builders import st_bytes as _st_bytes
from bad_input_builders import tiny_vit as _tiny

from vitviz.model import CheckpointError, ViT, load_checkpoint, save_checkpoint
from vitviz.model.checkpoints import common, loader, read_raw, reading, saving


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
    def refuse(*a, **k):
        raise AssertionError("a model was allocated")
    monkeypatch.setattr(ViT, "to_empty", refuse)
    monkeypatch.setattr(loader, "_materialise", refuse)


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
def test_hand_written_hf_folder_loads(tmp_path):
    m, d = _hf_dir(tmp_path, preprocessor={"do_resize": True, "size": {"height": 16, "width": 16}, "resample": 3,
                                           "image_mean": 0.5, "image_std": [0.25, 0.25, 0.25], "crop_size": None})
    back = load_checkpoint(d)
    assert back.config.pos_embed_interp == "bicubic"  # transformers' resampling of the position embedding
    assert back.config == dataclasses.replace(m.config, pos_embed_interp="bicubic")
    assert back.spec.labels == ("ant", "bee", "cat")
    assert back.spec.preprocess.std == (0.25,) * 3 and back.spec.preprocess.mean == (0.5,) * 3
    assert torch.allclose(_logits(back), _logits(m), atol=1e-6)


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


# ---------------------------------------------------------------------------------------------------------------------
# memory of a load: one copy of the weights
# ---------------------------------------------------------------------------------------------------------------------
def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t.numel()}


@pytest.mark.parametrize("kind", ["safetensors", "torch"])
def test_a_file_load_adopts_the_tensors_it_read(tmp_path, monkeypatch, kind):
    """The weights read from the file become the model's parameters (no second, empty model to copy them into: a
    load peaks at one copy of the weights, not two)."""
    m = _tiny(depth=2)
    if kind == "safetensors":
        path = save_checkpoint(m, tmp_path / "m.safetensors")
    else:
        path = tmp_path / "m.pth"
        torch.save(m.state_dict(), path)
    read = []
    real = reading.read_file

    def spy(p):
        raw = real(p)
        read.append(raw)
        return raw

    monkeypatch.setattr(reading, "read_file", spy)
    back = load_checkpoint(path, num_heads=2)
    assert torch.equal(_logits(back), _logits(m))
    params = _storages(back.state_dict().values())
    assert params <= _storages(read[0].tensors.values()), "parameters were copied"


def test_a_state_dict_source_is_copied_not_shared():
    """An in-memory state dict belongs to the caller (often another model): the loaded model has its own tensors."""
    m = _tiny()
    back = load_checkpoint(m.state_dict(), num_heads=2)
    assert not (_storages(back.state_dict().values()) & _storages(m.state_dict().values()))
    before = _logits(m)
    with torch.no_grad():
        for p in back.parameters():
            p.mul_(2.0)
    assert torch.equal(_logits(m), before)


def test_tied_tensors_in_a_file_load_as_separate_parameters(tmp_path):
    """torch.save keeps shared storage: two parameters saved from one tensor must not stay tied after the load."""
    m = _tiny()
    state = m.state_dict()
    state["blocks.0.norm2.weight"] = state["blocks.0.norm1.weight"]  # one tensor under two names
    path = tmp_path / "tied.pth"
    torch.save(state, path)
    back = load_checkpoint(path, num_heads=2)
    with torch.no_grad():
        back.blocks[0].norm1.weight.add_(1.0)
    assert not torch.equal(back.blocks[0].norm1.weight, back.blocks[0].norm2.weight)


def test_a_loaded_model_does_not_follow_its_file(tmp_path):
    """The weights are read into the model's own memory, not left memory-mapped: rewriting the file in place (a
    training run saving to the same path) or cutting it short changes nothing and crashes nothing."""
    m = _tiny(depth=2)
    path = save_checkpoint(m, tmp_path / "m.safetensors")
    back = load_checkpoint(path)
    ref = _logits(back)
    n = int.from_bytes(path.read_bytes()[:8], "little")
    with open(path, "r+b") as f:  # the same inode, as safetensors' save_file or torch.save would rewrite it
        f.seek(8 + n)
        f.write(b"\x7f" * (path.stat().st_size - 8 - n))
        f.truncate(8 + n + 16)
    assert torch.equal(_logits(back), ref)
