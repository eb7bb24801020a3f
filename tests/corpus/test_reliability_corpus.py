"""Bad input over the surfaces of issue 36, each answered with one clear line naming the argument or file and the
problem (exit 1 or 2), no traceback, no hang (each case bounded: :mod:`bounded_runs`), memory bounded, nothing
written: model references naming the user's own file without a class, prompts far longer than the context, non-finite
or degenerate targets and thresholds, oversized values echoed back, and the rest of the issue's fourteen classes."""

from __future__ import annotations

import errno
import json
import os
import tracemalloc

import numpy as np
import pytest
from bounded_runs import cli
from PIL import Image

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


# --------------------------------------------------------------------------------------------------------- merge
@pytest.fixture
def tiny_inputs(tmp_path, tiny_model):
    from vitviz.model import save_checkpoint

    model = tmp_path / "m.safetensors"
    save_checkpoint(tiny_model, model)
    images = tmp_path / "imgs"
    images.mkdir()
    rng = np.random.default_rng(5)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / f"i{i}.png")
    return model, images


@pytest.mark.parametrize("world_size", [10**6, 10**12])
def test_merge_of_a_huge_world_size_is_summarised_in_bounded_memory(tiny_inputs, tmp_path, capsys, monkeypatch,
                                                                    world_size):
    """One shard of a launcher's WORLD_SIZE=10^6 or 10^12, then merge: a few bounded lines (was a million-line
    report, 240 MB; 10^12 passed 6 GiB), nothing written, in bounded time and traced memory."""
    model, images = tiny_inputs
    out = tmp_path / "out"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", str(world_size))
    for command in (["export", "--format", "npy", "--views", "cls"], ["stats"]):
        status, err, _ = cli([command[0], "--model", str(model), str(images), "--out", str(out), "--quiet",
                              *command[1:]], capsys, timeout=HANG_BOUND_S)
        assert status == 0, err
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    before = sorted(p.name for p in out.iterdir())
    tracemalloc.start()
    try:
        status, err, _ = cli(["merge", str(out)], capsys, timeout=HANG_BOUND_S)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert status == 1, err  # shards missing: nothing merged
    assert len(err) <= 8 and all(len(x) < 1000 for x in err), (len(err), max(map(len, err)))
    assert any(f"{world_size - 1} of {world_size} shards are missing" in x and "... and " in x for x in err), err
    assert err[-1] == "vitviz merge: nothing written" and "Traceback" not in "".join(err)
    assert peak < 64 << 20, f"traced memory peak {peak >> 20} MiB"
    assert sorted(p.name for p in out.iterdir()) == before


# ------------------------------------------------------------------------------------------------ full disk, memory
@pytest.mark.parametrize("where", ["open", "write", "short"])
def test_a_full_disk_at_the_lock_names_it_and_leaves_nothing(tiny_inputs, tmp_path, capsys, monkeypatch, where):
    """No space for the lock file (no inode for it, no byte, a short write): one line naming the lock's path and the
    cause, exit 2, no ``.vitviz-export.lock.*.tmp`` left (was "[Errno 28] No space left on device" and a .tmp)."""
    from vitviz.batch import locking

    model, images = tiny_inputs
    out = tmp_path / "out"
    out.mkdir()
    real_open, real_write = locking.os.open, locking.os.write

    def full(*a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    if where == "open":
        monkeypatch.setattr(locking.os, "open", lambda path, *a, **k: full() if ".lock." in str(path)
                            else real_open(path, *a, **k))
    else:
        short = lambda fd, data: real_write(fd, data[:3])  # noqa: E731
        monkeypatch.setattr(locking.os, "write", full if where == "write" else short)
    status, err, _ = cli(["export", "--model", str(model), str(images), "--out", str(out), "--quiet", "--format",
                          "npy", "--views", "cls"], capsys, timeout=HANG_BOUND_S)
    line = _one_line(status, err, (2,))
    assert line == (f"vitviz export: error: cannot write the lock {out / '.vitviz-export.lock'}: the disk is full "
                    "(No space left on device)"), line
    assert sorted(p.name for p in out.iterdir()) == []


def test_onednn_primitive_failure_counts_as_out_of_memory():
    from vitviz.capture.streaming import is_out_of_memory

    assert is_out_of_memory(RuntimeError("could not create a primitive descriptor for a matmul primitive"))


# ------------------------------------------------------------------------------------------------- feature PCA
@pytest.mark.parametrize("threshold", [float("nan"), 2.0, -0.1, float("inf"), "0.5"])
def test_feature_pca_threshold_out_of_range_is_refused(threshold):
    import torch

    from vitviz.analysis.pca import feature_pca

    tokens = torch.randn(1 + 16, 8, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"threshold must be a number in \[0, 1\]") as e:
        feature_pca(tokens, grid=(4, 4), num_prefix_tokens=1, mask_background=True, threshold=threshold)
    assert len(str(e.value)) < 200
    feature_pca(tokens, grid=(4, 4), num_prefix_tokens=1, mask_background=True, threshold=0.0)  # the bounds are fine


def test_feature_pca_of_non_finite_tokens_says_so_and_the_other_views_are_exported(tiny_model, tmp_path):
    """One NaN weight: feature PCA names the non-finite tokens (was "linalg.svd: The algorithm failed to converge")
    and the image's other views are still written (the PCA entry says why it is missing)."""
    import torch

    from vitviz.analysis.pca import feature_pca
    from vitviz.batch.export import ExportOptions, export_images
    from vitviz.pipeline import Pipeline

    tokens = torch.randn(17, 8)
    tokens[3, 2] = float("nan")
    with pytest.raises(ValueError, match=r"1 of the 16 tokens hold NaN or infinite values"):
        feature_pca(tokens, grid=(4, 4), num_prefix_tokens=1)
    with torch.no_grad():
        tiny_model.blocks[0].mlp.fc1.weight[0, 0] = float("nan")
    images = tmp_path / "imgs"
    images.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / "a.png")
    s = export_images(Pipeline(tiny_model), [str(images)], tmp_path / "out",
                      ExportOptions(views=("cls", "feature_pca"), format="npy", precision="fp32", quiet=True),
                      log=lambda _: None)
    assert s.written == 1 and s.failed == 0
    record = [r for r in map(json.loads, (tmp_path / "out" / "manifest.jsonl").read_text().splitlines())
              if "source" in r][0]
    pca = next(m for m in record["maps"] if m["view"] == "feature_pca")
    assert "hold NaN or infinite values" in pca["unavailable"]
    assert any(m["view"] == "cls" and "npy" in m for m in record["maps"])


# ----------------------------------------------------------------------------------------- values echoed, '@' names
LONG = "x" * 10_000


@pytest.mark.parametrize("argv_tail,env", [
    (["--target", LONG], {}),
    (["--target", f"similar:{LONG}"], {}),
    (["--target", f"similar:{LONG}.npy"], {}),
    ([], {"SLURM_ARRAY_TASK_ID": "7" * 5000, "SLURM_ARRAY_TASK_COUNT": "4"}),
    ([], {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "9" * 5000}),
])
def test_huge_values_are_echoed_shortened(tiny_inputs, tmp_path, capsys, monkeypatch, argv_tail, env):
    """A 10,000-character --target or a 5,000-digit job id: one line of bounded length that still names the flag
    (was a 20 kB line, the value printed twice); nothing written."""
    model, images = tiny_inputs
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    status, err, _ = cli(["export", "--model", str(model), str(images), "--out", str(tmp_path / "out"), "--quiet",
                          "--views", "legrad", *argv_tail], capsys, timeout=HANG_BOUND_S)
    line = _one_line(status, err)
    assert len(line) < 1200, len(line)
    assert ("--target" in line) if argv_tail else ("SLURM" in line), line
    assert "characters)" in line  # the value's length is said where it is shortened
    assert not (tmp_path / "out").exists()


def test_a_reference_image_whose_name_has_an_at_sign_is_that_file(tiny_inputs, tmp_path, capsys):
    """``similar:ref@2x.png`` names the existing file (was read as the patch '2x.png' of 'ref'); ``similar:IMG@1,2``
    is still a patch of IMG when no file has that whole name."""
    model, images = tiny_inputs
    ref = tmp_path / "ref@2x.png"
    ref.write_bytes((images / "i0.png").read_bytes())
    for target, out in ((f"similar:{ref}", "a"), (f"similar:{images / 'i1.png'}@1,2", "b")):
        status, err, _ = cli(["export", "--model", str(model), str(images), "--out", str(tmp_path / out), "--quiet",
                              "--format", "npy", "--views", "legrad", "--target", target], capsys,
                             timeout=HANG_BOUND_S)
        assert status == 0, err
    record = next(r for r in map(json.loads, (tmp_path / "a" / "manifest.jsonl").read_text().splitlines())
                  if "source" in r)
    assert str(ref) in json.dumps(record["target"]) and "patch" not in record["target"].get("origin", {})
    status, err, _ = cli(["export", "--model", str(model), str(images), "--out", str(tmp_path / "c"), "--quiet",
                          "--views", "legrad", "--target", f"similar:{tmp_path / 'gone@2x.png'}"], capsys,
                         timeout=HANG_BOUND_S)
    line = _one_line(status, err)
    assert "--target" in line and "ROW,COL" in line, line


# ---------------------------------------------------------------------------------------------------- targets
def _outsider():
    import torch

    return torch.ones((), requires_grad=True) * 2.0  # a gradient of its own, not from the output


@pytest.mark.parametrize("fn,needle", [
    (lambda out: out[0] * float("nan"), "returned nan on image 1 (not a finite number"),
    (lambda out: out[0] * float("inf"), "returned inf on image 1 (not a finite number"),
    (lambda out: _outsider(), "does not depend on the model's output"),
])
def test_a_target_function_that_gives_no_usable_score_is_one_line(tiny_model, fn, needle):
    """NaN, inf, or a tensor with a gradient that does not come from the output: refused before any map is drawn
    (were NaN maps, and all-zero maps, with no message)."""
    import torch

    from vitviz.capture.targets import CallableTarget, TargetError, differentiable_scores

    x = torch.randn(2, 3, 32, 32)
    out = tiny_model(x)
    with pytest.raises(TargetError) as e:
        differentiable_scores(CallableTarget(fn, name="score"), out, None)
    assert needle in str(e.value) and "score" in str(e.value) and "\n" not in str(e.value)


def test_a_model_with_non_finite_output_is_named_at_the_target(tiny_model):
    import torch

    from vitviz.capture.targets import ClassTarget, TargetError, differentiable_scores

    with torch.no_grad():
        tiny_model.head.bias[2] = float("nan")
    out = tiny_model(torch.randn(1, 3, 32, 32))
    with pytest.raises(TargetError, match=r"the model's output is not finite"):
        differentiable_scores(ClassTarget(2), out, None, torch.tensor([2]))


@pytest.mark.parametrize("scale", [3e38, 1e-25])
def test_a_finite_reference_vector_of_extreme_size_keeps_its_direction(scale):
    """3e38 overflows float32's norm (was score 0.0, all-zero maps, exit 0), 1e-25 falls under the cosine's eps: the
    same scores as the unit vector of that direction."""
    import torch

    from vitviz.capture.targets import SimilarityTarget, target_scores

    direction = torch.tensor([3.0, -4.0, 0.0, 12.0])
    emb = torch.randn(3, 4, generator=torch.Generator().manual_seed(1))
    huge = SimilarityTarget(direction / 13 * scale, "extreme")
    unit = SimilarityTarget(direction / 13, "unit")
    assert torch.isfinite(huge.vector).all()
    assert torch.allclose(target_scores(huge, emb, emb), target_scores(unit, emb, emb), atol=1e-6)


@pytest.mark.parametrize("index", [10**30, 2**63, 2**62])
def test_a_huge_class_index_is_one_line(index):
    from vitviz.capture.targets import ClassTarget, TargetError

    with pytest.raises(TargetError, match="larger than any model's number of classes") as e:
        ClassTarget(index)
    assert len(str(e.value)) < 120


@pytest.mark.parametrize("other,needle", [
    (dict(embed_dim=48), "48-wide tokens, this model's are 32-wide"),
    (dict(depth=2), "2 layers, this model has 3"),
    (dict(num_reg_tokens=2), "3 prefix tokens, this model has 1"),
    (dict(), "other patch-embedding weights"),  # the same shape, other weights: a plausible wrong vector
])
@pytest.mark.parametrize("patch", [None, (1, 2)])
def test_a_reference_result_from_another_model_is_one_line(tiny_model, other, needle, patch):
    """An open image's result from another model as the reference (was a ``normalized_shape`` RuntimeError, or,
    with the same shapes, a vector from the wrong weights): one line naming the reference and the difference."""
    import torch

    from vitviz.capture.targets import TargetError
    from vitviz.model import create_model
    from vitviz.pipeline import Pipeline, reference_target

    torch.manual_seed(7)
    kw = dict(img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4, num_classes=5) | other
    theirs = Pipeline(create_model("vit_tiny_patch16_224", **kw).eval())
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (40, 40, 3), dtype=np.uint8))
    result = theirs.run(image, source="cat.png")
    ours = Pipeline(tiny_model)
    with pytest.raises(TargetError) as e:
        reference_target(ours, result, patch=patch)
    line = str(e.value)
    assert line.startswith("reference cat.png: this result is from another model") and needle in line, line
    assert "\n" not in line and "normalized_shape" not in line
    own = reference_target(ours, ours.run(image, source="cat.png"), patch=patch)  # its own result: taken
    assert own.vector.shape == (32,)


def test_a_stored_vector_from_another_model_is_one_line(tiny_inputs, tmp_path, capsys):
    """``--target similar:v.npy`` with a vector of another model's width: one line naming the two widths."""
    model, images = tiny_inputs
    vec = tmp_path / "wide.npy"
    np.save(vec, np.ones(48, np.float32))
    line = _one_line(*cli(["export", "--model", str(model), str(images), "--out", str(tmp_path / "o"), "--quiet",
                           "--views", "legrad", "--target", f"similar:{vec}"], capsys, timeout=HANG_BOUND_S)[:2])
    assert "48 values" in line and "has 32" in line and "another model" in line, line


def test_a_target_function_that_changes_the_weights_is_one_line_and_they_stay(tiny_model):
    """A callable that scales a weight in place (was an autograd error, with the weights changed): one line, the
    weights as they were; one that runs a capture again: one line (see tests/capture/test_target_guard.py)."""
    import torch

    from vitviz.capture.targets import TargetError
    from vitviz.pipeline import Pipeline

    pipe = Pipeline(tiny_model)
    image = Image.fromarray(np.random.default_rng(2).integers(0, 256, (40, 40, 3), dtype=np.uint8))
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}

    def grow(out):
        with torch.no_grad():
            tiny_model.head.weight.mul_(2.0)
        return out[0]

    def again(out):
        pipe.run(image, target=0)
        return out[0]

    for fn, needle in ((grow, "changes the model's head.weight in place (mul_)"),
                       (again, "starts a capture inside itself")):
        with pytest.raises(TargetError) as e:
            pipe.run(image, target=fn)
        assert str(e.value).startswith(f"target function {fn.__name__} ") and needle in str(e.value), str(e.value)
    assert all(torch.equal(before[k], v) for k, v in tiny_model.state_dict().items())


# ----------------------------------------------------------------------------------------------------- prompts
@pytest.mark.parametrize("prompts,needle", [
    (["a cat", None], "prompt 2 of 2 is NoneType, not text"),
    ([3, "a dog"], "prompt 1 of 2 is int, not text"),
    (None, "the prompts must be text or a list of texts, got NoneType"),
    (b"a cat", "got bytes"),
    (5, "got int"),
])
def test_prompts_that_are_not_text_are_named(prompts, needle):
    """``prompt_pipeline(pipe, ["a cat", None])`` made the prompt "None": now one line naming its place."""
    from vitviz.capture.targets import TargetError
    from vitviz.pipeline.prompts import split_prompts

    with pytest.raises(TargetError) as e:
        split_prompts(prompts)
    assert needle in str(e.value)
    assert split_prompts(("a cat", "a dog")) == ["a cat", "a dog"]  # any sequence of texts


# ------------------------------------------------------------------------------------------- damaged stats parts
def _spoil(part, change):
    with np.load(part, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(str(arrays["meta"][()]))
    change(arrays, meta)
    arrays["meta"] = np.array(json.dumps(meta))
    with open(part, "wb") as f:
        np.savez(f, **arrays)


def _huge(arrays, meta):
    arrays["distance_sum_hi"] = np.full_like(arrays["distance_sum_hi"], 2**62)


def _negative_sum(arrays, meta):
    arrays["entropy_sq_hi"] = -np.abs(arrays["entropy_sq_hi"]) - 1


def _fewer_layers(arrays, meta):
    for k in [k for k in arrays if k.startswith(("distance_", "entropy_"))]:
        arrays[k] = arrays[k][:2]


def _two_stats_parts(tiny_inputs, tmp_path, capsys):
    """``vitviz stats --shard k/2`` for k = 1, 2 into one folder (returned)."""
    model, images = tiny_inputs
    out = tmp_path / "out"
    for k in (1, 2):
        status, err, _ = cli(["stats", "--model", str(model), str(images), "--out", str(out), "--quiet",
                              "--shard", f"{k}/2"], capsys, timeout=HANG_BOUND_S)
        assert status == 0, err
    return out


@pytest.mark.parametrize("change,needle", [
    (_fewer_layers, "it holds sums of distance for 2 x 4 layers x heads, but says 3 x 4"),
    (lambda a, m: m.update(n=-5), "counts -5 image(s) analysed"),
    (lambda a, m: m.update(n=10**6), "counts 1000000 image(s) analysed"),
    (_huge, "the sums of distance are negative or beyond any dataset"),
    (_negative_sum, "the sums of entropy are negative or beyond any dataset"),
    (lambda a, m: m["grids"][0].update(images=-1), "counts outside"),
])
def test_a_damaged_stats_part_is_named_and_nothing_is_merged(tiny_inputs, tmp_path, capsys, change, needle):
    """A part counting -5 images, sums beyond int64's reach (was a mean distance of -7.7e17 px, exit 0), negative
    sums, negative patch counts: one line naming the part, nothing written."""
    out = _two_stats_parts(tiny_inputs, tmp_path, capsys)
    part = out / "attention_stats-2-of-2.npz"
    _spoil(part, change)
    before = sorted(p.name for p in out.iterdir())
    line = _one_line(*cli(["merge", str(out)], capsys, timeout=HANG_BOUND_S)[:2])
    assert str(part) in line and needle in line, line
    assert sorted(p.name for p in out.iterdir()) == before


def _all_bad(arrays, meta):
    for k in [k for k in arrays if k.endswith("_bad")]:
        arrays[k][:] = True  # every cell's sum had a non-finite value added (a model whose attention is NaN)


def test_merging_all_nan_parts_says_so_in_one_line_and_prints_no_numpy_warning(tiny_inputs, tmp_path, capsys):
    """Parts whose every layer x head cell is NaN (an image's attention was not finite): ``vitviz merge`` (a process
    of its own, its stderr read whole, every warning shown) says which cells are nan in its one line; no "All-NaN
    slice encountered" / "Mean of empty slice" RuntimeWarning reaches stderr, and the figure is drawn."""
    import subprocess
    import sys

    out = _two_stats_parts(tiny_inputs, tmp_path, capsys)
    for k in (1, 2):
        _spoil(out / f"attention_stats-{k}-of-2.npz", _all_bad)
    env = dict(os.environ, PYTHONWARNINGS="always")
    done = subprocess.run([sys.executable, "-m", "vitviz", "merge", str(out)], capture_output=True, text=True,
                          env=env, timeout=HANG_BOUND_S)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and "12 of 12 layer x head cells are nan" in lines[0], lines
    assert (out / "attention_stats.png").stat().st_size > 0
    rows = (out / "attention_stats.csv").read_text().splitlines()[1:]
    assert len(rows) == 12 and all(",nan,nan,nan,nan," in r + "," for r in rows)


def test_parts_of_other_layers_are_not_added():
    """Two parts each consistent with itself but of other layers x heads (another model's, its meta spoiled too):
    the second is refused naming both shapes (prepare_stats names the part), the first left as it was."""
    from vitviz.batch.fixed_point import FixedSum
    from vitviz.batch.stats import StatsAccumulator

    def part(shape):
        acc = StatsAccumulator()
        acc.n = 1
        for k in ("distance", "entropy"):
            acc.sums[k], acc.squares[k] = FixedSum(shape), FixedSum(shape)
        return acc

    mine = part((3, 4))
    mine.add_shard(part((3, 4)))
    with pytest.raises(ValueError, match=r"2 layers x 4 heads, but the first part had \(3, 4\)"):
        mine.add_shard(part((2, 4)))
    assert mine.n == 2 and mine.sums["distance"].shape == (3, 4)


def test_parts_whose_sums_overflow_together_name_the_part():
    from vitviz.batch.fixed_point import FixedSum

    a, b = FixedSum((2,)), FixedSum((2,))
    a.hi[:] = 2**61
    b.hi[:] = 2**61
    with pytest.raises(ValueError, match="the sums overflow"):
        a.add_sum(b)
    assert (a.hi == 2**61).all()  # unchanged


# ------------------------------------------------------------------------------------------------- memory bound
_UNDER_A_LIMIT = """
import resource, sys
import numpy, torch  # (their address space counted before the limit)
from vitviz.cli import main
vm = [int(x.split()[1]) * 1024 for x in open("/proc/self/status") if x.startswith("VmSize")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.RLIM_INFINITY))  # 1 GiB more than it holds now
sys.exit(main(sys.argv[1:]))
"""


def test_a_declared_20000_square_png_is_refused_within_a_memory_limit(tiny_inputs, tmp_path):
    """A tiny PNG whose header declares 20000x20000 (2.6 GiB to open, was a 4.2 GiB peak with 4 views) next to small
    images, exported in a process whose address space may grow by 1 GiB only (RLIMIT_AS): that image is one line
    naming it, its size and the memory, found from the header before any pixel is decoded; the others are
    exported, and the process ends by itself (no MemoryError, no kill)."""
    import subprocess
    import sys

    from bad_input_builders import png_header

    model, folder = tiny_inputs
    bomb = folder / "declared.png"
    bomb.write_bytes(png_header(20000, 20000))
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", _UNDER_A_LIMIT, "export", "--model", str(model), str(folder),
                           "--out", str(out), "--quiet", "--views", "cls,rollout,grad_rollout,relevance",
                           "--format", "npy"], capture_output=True, text=True, timeout=HANG_BOUND_S)
    errors = [x for x in done.stderr.splitlines() if "error" in x]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"{bomb}: opening this 20000x20000 image needs about 2.6 GiB, but only" in errors[0], errors[0]
    assert "GiB is free (memory, or this process's limit)" in errors[0]
    assert done.returncode == 64 + 1, done.stderr  # one image failed; the three others written
    assert sorted(p.name for p in out.glob("i*_cls_*.npy")) == [f"i{k}_cls_L2_mean.npy" for k in range(3)]


# ------------------------------------------------------------------------------------------------- text towers
@pytest.mark.parametrize("spoil,needle", [
    (lambda m: m.logit_scale.fill_(float("nan")), "the score's scale must be a finite log-scale"),
    (lambda m: m.logit_scale.fill_(1e4), "logit_scale 1e+04"),
    (lambda m: m.text_projection.weight.view(-1)[0].fill_(float("nan")), "the text tower's weights hold NaN"),
])
def test_a_text_tower_with_non_finite_or_absurd_values_is_named(tmp_path, spoil, needle):
    """NaN logit_scale or text weights printed nan probabilities (exit 0); logit_scale 1e4 overflowed math.exp."""
    import text_builders as tb
    import torch

    from vitviz.model.text import open_text_tower

    model = tb.hf_clip_model()
    with torch.no_grad():
        spoil(model)
    folder = tb.write_hf_clip_folder(tmp_path / "clip", model)
    with pytest.raises(ValueError) as e:
        open_text_tower(folder)
    assert needle in str(e.value) and str(folder) in str(e.value) and "\n" not in str(e.value), str(e.value)
