"""Bad input over the surfaces of issue 36, each answered with one clear line naming the argument or file and the
problem (exit 1 or 2), no traceback, no hang (each case bounded: :mod:`bounded_runs`), memory bounded, nothing
written: model references naming the user's own file without a class, prompts far longer than the context, non-finite
or degenerate targets and thresholds, oversized values echoed back, and the rest of the issue's fourteen classes."""

from __future__ import annotations

import pytest
from bounded_runs import cli

HANG_BOUND_S = 120  # a bound against a hang, not a speed (measured in bench/)


def _one_line(status: int, err: list[str], expected_status: tuple[int, ...] = (1, 2)) -> str:
    assert status in expected_status, (status, err)
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


# --------------------------------------------------------------------------------------- the user's own model file
@pytest.mark.parametrize("tail,needle", [
    ("", "no class name after ':'"),
    ("1x", "'1x' is not a class name"),
    (" ", "no class name after ':'"),
])
def test_own_model_file_without_a_class_names_what_is_missing(tmp_path, capsys, tail, needle):
    own = tmp_path / "mine.py"
    own.write_text("import torch\n\nclass MyViT(torch.nn.Module):\n    pass\n")
    line = _one_line(*cli(["info", f"{own}:{tail}"], capsys, timeout=HANG_BOUND_S)[:2])
    assert needle in line and str(own) in line and "no such file" not in line
    line = _one_line(*cli(["info", f"{tmp_path / 'gone.py'}:{tail}"], capsys, timeout=HANG_BOUND_S)[:2])
    assert f"no such file {tmp_path / 'gone.py'}" in line
