"""The install works without a source checkout: the wheel carries the demo weights and the sample images, and an
installed copy (outside the repository) finds them.

The wheel is built offline (``--no-build-isolation``, setuptools from the test environment) from a copy of the
sources in ``tmp_path``, so that the build never writes ``build/`` or ``*.egg-info`` into the working tree.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from repo_paths import REPO

pytestmark = pytest.mark.slow

_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


def _source_packages() -> set[str]:
    """Every package of the source tree (a folder under vitviz/ with an ``__init__.py``)."""
    return {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "vitviz").rglob("__init__.py")
            if "__pycache__" not in p.parts}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    return env


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools")
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    for name in ("vitviz", "resources"):
        shutil.copytree(REPO / name, src / name, ignore=_IGNORE)
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                        "-q", "-w", str(out), str(src)],
                       cwd=src, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    wheels = list(out.glob("vitviz-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_resources_and_every_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "vitviz/_resources/demo/shapes_vit.safetensors" in names
    samples = sorted(n for n in names if n.startswith("vitviz/_resources/samples/") and n.endswith(".png"))
    assert len(samples) == 8, samples
    assert {"vitviz/notebook/viewer.js", "vitviz/notebook/viewer.css"} <= names  # the notebook viewer's browser half
    expected = sorted(p.name for p in (REPO / "resources" / "samples").glob("*.png"))
    assert [n.rsplit("/", 1)[-1] for n in samples] == expected
    # pyproject.toml lists the packages (a mapped resources folder rules out packages.find): a new subpackage that
    # is not listed there would silently be missing from every non-editable install
    missing = sorted(pkg for pkg in _source_packages() if f"{pkg.replace('.', '/')}/__init__.py" not in names)
    assert not missing, f"packages missing from the wheel (add them to [tool.setuptools] packages): {missing}"
    assert not any(n.startswith(("tests/", "resources/", "bench/")) for n in names)


def test_installed_wheel_finds_demo_model_and_samples(wheel, tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                        str(site), str(wheel)], cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    code = r"""
import json, sys
import vitviz, vitviz.demo
from vitviz.imaging import load_image
model = vitviz.demo.load_demo_model()
samples = vitviz.demo.sample_images()
img = load_image(samples[0])
x = model.spec.preprocess(img.image)
print(json.dumps({"file": vitviz.__file__, "model": str(vitviz.demo.default_model_path()),
                  "samples": [str(p) for p in samples], "shape": list(x.shape),
                  "repo_on_path": any("{repo}" == p for p in sys.path)}))
""".replace("{repo}", str(REPO))
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    env = _env()
    env["PYTHONPATH"] = str(site)
    r = subprocess.run([sys.executable, "-c", code], cwd=run_dir, env=env, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout.strip().splitlines()[-1])
    assert Path(info["file"]).resolve().is_relative_to(site.resolve()), info["file"]
    assert Path(info["model"]).resolve().is_relative_to(site.resolve()), info["model"]
    assert len(info["samples"]) == 8
    assert all(Path(p).resolve().is_relative_to(site.resolve()) for p in info["samples"])
    assert info["shape"][0] == 3 and len(info["shape"]) == 3
    assert not info["repo_on_path"]
