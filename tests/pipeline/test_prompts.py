"""Prompts on a pipeline: the zero-shot probabilities equal the reference library's (open_clip CLIP: softmax; HF
SigLIP: sigmoid), a Text target explains the same score as the prompt's class, SigLIP carries the neutral prompt for
LeGrad's correction, and prompt errors are one line."""

import numpy as np
import pytest
import text_builders as tb
import torch
import torch.nn.functional as F
from PIL import Image

from vitviz.capture import capture
from vitviz.capture.targets import TargetError, Text
from vitviz.pipeline import Pipeline, prompt_pipeline, split_prompts


def _pil(seed=0):
    return Image.fromarray((np.random.default_rng(seed).random((48, 40, 3)) * 255).astype(np.uint8))


def test_clip_prompts_give_clips_zero_shot_probabilities(tmp_path):
    pytest.importorskip("open_clip")
    cfg = tb.open_clip_cfg(True)
    ref = tb.open_clip_model(cfg)
    folder = tb.write_open_clip_folder(tmp_path / "oc", ref, cfg)
    p = Pipeline.open(folder)
    assert p.spec.is_feature_model  # the projection head: the output is CLIP's image embedding
    prompts = "a photo of a cat; a red car ;a dog"
    pp = prompt_pipeline(p, prompts)
    assert pp.spec.labels == ("a photo of a cat", "a red car", "a dog") and pp.model.blocks is p.model.blocks
    r = pp.run(_pil())
    import open_clip

    ids = open_clip.get_tokenizer(f"local-dir:{folder}")(list(pp.spec.labels))
    x, _ = p.spec.preprocess.apply(_pil())
    with torch.no_grad():
        img, txt = ref.encode_image(x[None]), ref.encode_text(ids)
        logits = ref.logit_scale.exp() * F.normalize(img, dim=-1) @ F.normalize(txt, dim=-1).T
    torch.testing.assert_close(r.logits, logits[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r.probabilities, logits[0].softmax(-1), rtol=1e-4, atol=1e-5)
    assert r.target == int(logits.argmax()) and r.head_kind == "prompts" and r.legrad
    # Text(prompt) on the image tower explains the same score as the prompt's class on the zero-shot model
    by_text = capture(p.model, x[None], target=Text("a red car"))
    by_class = capture(pp.model, x[None], target=1)
    torch.testing.assert_close(by_text.attention_grads, by_class.attention_grads, rtol=1e-4, atol=1e-6)
    assert by_text.target.name == "a red car" and dict(by_text.target.origin) == {"text": "a red car"}


def test_siglip_prompts_are_sigmoid_probabilities_with_the_neutral_prompt(tmp_path):
    from transformers import SiglipTokenizer

    sp = tb.sentencepiece_model(tmp_path / "sp")
    tok = SiglipTokenizer(str(sp))
    ref = tb.hf_siglip_model(len(tok))
    folder = tb.write_hf_siglip_folder(tmp_path / "siglip", ref, sp)
    p = Pipeline.open(folder)
    pp = prompt_pipeline(p, ["a cat", "two dogs"])
    r = pp.run(_pil(1))
    x, _ = p.spec.preprocess.apply(_pil(1))
    ids = SiglipTokenizer.from_pretrained(str(folder))(["a cat", "two dogs"], padding="max_length", max_length=64,
                                                       truncation=True, return_tensors="pt").input_ids
    with torch.no_grad():
        out = ref(input_ids=ids, pixel_values=x[None])
    torch.testing.assert_close(r.logits, out.logits_per_image[0], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(r.probabilities, torch.sigmoid(out.logits_per_image[0]), rtol=1e-4, atol=1e-5)
    assert pp.legrad_neutral is not None and {"mean", "mean|neutral"} <= set(r.legrad)


def test_prompt_errors_are_one_line(tiny_model, tmp_path):
    from vitviz.model import save_checkpoint
    from vitviz.model.text import TextTowerError

    for text, message in [("", "the prompt is empty"), (" ; ", "the prompt is empty"),
                          ("a cat;;a dog", "prompt 2 of 3 is empty"), ("a cat;", "prompt 2 of 2 is empty")]:
        with pytest.raises(TargetError, match=message):
            split_prompts(text)
    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    p = Pipeline.open(f"file:{ckpt}")
    with pytest.raises(TextTowerError) as e:
        prompt_pipeline(p, "a cat")
    assert "tiny.safetensors" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(TargetError, match="Text target: .*tiny.safetensors"):
        capture(p.model, torch.zeros(1, 3, 32, 32), target=Text("a cat"))
    with pytest.raises(TargetError, match="the prompt is empty"):
        capture(p.model, torch.zeros(1, 3, 32, 32), target=Text("  "))
