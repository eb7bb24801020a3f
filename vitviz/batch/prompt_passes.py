"""The passes of ``vitviz export --text``: every image once per prompt in the same pass, the k-th copy explaining
prompt k (a class of the zero-shot model, :func:`vitviz.pipeline.prompt_pipeline`), so that each gradient view has
one map per prompt. The copies go through the model as one batch of ``images x prompts`` (one class per copy, as
:meth:`vitviz.pipeline.Pipeline.run_batch` and the streamed passes take it; the batch size limits the copies per
pass as it limits images). No Qt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vitviz.batch.batch_passes import BatchPasses
from vitviz.document.session import Session

__all__ = ["PromptItems", "PromptPasses", "per_prompt", "prompt_word"]


class PromptItems:
    """What :meth:`PromptPasses.run` gives for one image: ``items[k]`` explains prompt k (each as
    :meth:`BatchPasses.run` gives it: a result, or a streamed image)."""

    def __init__(self, items: Sequence[Any]):
        self.items = list(items)


def per_prompt(item: Any) -> list[Any]:
    """The items of one image, one per prompt (``[item]`` for an image of an ordinary pass)."""
    return item.items if isinstance(item, PromptItems) else [item]


def prompt_word(result: Any) -> str:
    """The prompt a result explains as a file-name word, as the views' file names write a target ("a red car" ->
    ``a-red-car``: letters and digits kept, anything else one ``-``, at most 40 characters)."""
    text = result.target_text() or ""
    word = "-".join("".join(c if c.isalnum() else " " for c in text).split())
    return word[:40] or f"class{result.target}"


class PromptPasses:
    """:class:`~vitviz.batch.batch_passes.BatchPasses` with each image repeated once per prompt (``prompts``: how
    many), the k-th copy's target class k."""

    def __init__(self, passes: BatchPasses, prompts: int):
        if prompts < 1:
            raise ValueError(f"prompts must be at least 1, got {prompts}")
        self.passes = passes
        self.prompts = int(prompts)

    @property
    def route(self) -> str:
        return self.passes.route

    @property
    def keep_graph(self) -> bool | None:
        return self.passes.keep_graph

    def run(self, prepared: Sequence[Any], sources: Sequence[str]) -> list[PromptItems]:
        """One :class:`PromptItems` per image, in order."""
        n = self.prompts
        self.passes.target = [k for _ in prepared for k in range(n)]  # one class per copy (BatchPasses passes it on)
        done = self.passes.run([p for p in prepared for _ in range(n)], [s for s in sources for _ in range(n)])
        return [PromptItems(done[i * n:(i + 1) * n]) for i in range(len(prepared))]

    def session(self, item: Any) -> Session:
        return self.passes.session(item)
