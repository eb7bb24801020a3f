"""Where things are, for tests in any folder of tests/: the checkout, and the real weights beside it
(../shared/weights; tests that use them skip when they are absent)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED_WEIGHTS = REPO.parent / "shared" / "weights"
TINY_WEIGHTS = SHARED_WEIGHTS / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"
