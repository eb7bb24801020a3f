import os

import pytest
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
for _name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_ARRAY_TASK_ID", "SLURM_PROCID"):  # run under torchrun or
    os.environ.pop(_name, None)  # SLURM, the commands under test would take a shard (vitviz.batch.launcher)
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

# shared fixtures that live in their own module: the fake Hugging Face Hub on 127.0.0.1 (fake_hub)
pytest_plugins = ["fake_hub"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def tiny_model():
    """ViT with a 4x4 grid of 8 px patches on 32 px input, 3 layers x 4 heads, 5 classes, labelled."""
    from vitviz.model import create_model

    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=5)
    m.spec = m.spec.replace(labels=("circle", "square", "star", "cross", "heart"), name="tiny test ViT")
    # make attention peaky so maps differ clearly between layers and heads
    with torch.no_grad():
        for b in m.blocks:
            b.attn.qkv.weight.mul_(25.0)
    return m.eval()


@pytest.fixture
def tiny_ckpt(tmp_path):
    """``(model, path)``: a 2-layer ViT on 32 px (4 heads, classes ant, bee, cat, named "tiny") saved in tmp_path."""
    from vitviz.model import ViT, save_checkpoint
    from vitviz.model.preprocess import Preprocess
    from vitviz.model.spec import ModelSpec

    m = ViT(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=3).eval()
    m.spec = ModelSpec(config=m.config, preprocess=Preprocess(resize=36, crop=(32, 32)), labels=("ant", "bee", "cat"),
                       name="tiny")
    path = tmp_path / "tiny.safetensors"
    save_checkpoint(m, path)
    return m, path


@pytest.fixture
def session_of(tiny_model):
    """``make(h=40, w=40, source="x.png")``: a Session showing tiny_model's result on a random photo of ``h x w``."""
    import numpy as np
    from PIL import Image

    from vitviz.document.session import Session
    from vitviz.pipeline import run_inference

    def make(h: int = 40, w: int = 40, source: str = "x.png") -> Session:
        rng = np.random.default_rng(0)
        s = Session()
        s.set_result(run_inference(tiny_model, Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)),
                                   source=source))
        return s

    return make


@pytest.fixture
def session(session_of):
    """The tiny model's result on a random 40 x 40 photo, in a Session."""
    return session_of()


@pytest.fixture
def tiny_model_file(tmp_path, tiny_model):
    """:func:`tiny_model` saved as ``tmp_path/tiny.safetensors`` (for the commands' tests)."""
    from vitviz.model import save_checkpoint

    path = tmp_path / "tiny.safetensors"
    save_checkpoint(tiny_model, path)
    return path
