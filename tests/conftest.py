import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))

REPO = Path(__file__).resolve().parent.parent
SHARED_WEIGHTS = REPO.parent / "shared" / "weights"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
