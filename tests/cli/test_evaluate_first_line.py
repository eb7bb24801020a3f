"""vitviz evaluate says first what it resolved (model, device, precision, images, the work per image), as export
and stats do, before minutes of perturbed forwards (issue 37)."""

import numpy as np
from PIL import Image

from vitviz.cli import main


def test_evaluate_prints_what_it_resolved_as_its_first_line(tmp_path, tiny_model, capsys):
    from vitviz.model import save_checkpoint

    ckpt = save_checkpoint(tiny_model, tmp_path / "tiny.safetensors")
    for i in range(2):
        pixels = np.random.default_rng(i).integers(0, 255, (40, 56, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(tmp_path / f"{i}.png")
    assert main(["evaluate", str(ckpt), str(tmp_path / "0.png"), str(tmp_path / "1.png"), "--views", "rollout",
                 "--steps", "2", "--seeds", "1"]) == 0
    err = capsys.readouterr().err.splitlines()
    first = err[0]
    assert first.startswith("vitviz evaluate: 2 images · 1 target each · views rollout · 2 steps, 1 random rankings, "
                            f"mean baseline; {tiny_model.spec.name} on cpu, auto: ")
