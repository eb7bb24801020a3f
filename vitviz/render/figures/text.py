"""Text in figures: the sizes in points, the width of a string and wrapping to a width. matplotlib is imported when
text is first measured."""

from __future__ import annotations

TITLE_PT, TEXT_PT, TICK_PT = 9.0, 8.0, 7.5


def text_width_pt(s: str, size: float) -> float:
    """The width of ``s`` at ``size`` pt, in points."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    w, _, _ = text_to_path.get_text_width_height_descent(s, FontProperties(size=size), ismath=False)
    return float(w) * 1.02  # hinting at small pixel sizes draws a little wider


def wrap_text(text: str, size: float, width_pt: float) -> list[str]:
    """Lines of ``text`` no wider than ``width_pt`` at ``size`` pt (a single word wider than that stays whole),
    filled word by word; a line is broken after a ``" · "`` separator (which stays at its end, even a little over
    the width) rather than inside a part when it is then still at least 60% full. ``" ".join(lines) == text`` for a
    single-spaced text."""
    out: list[str] = []
    for para in text.splitlines() or [""]:
        line: list[str] = []
        for word in para.split(" "):
            line.append(word)
            while len(line) > 1 and text_width_pt(" ".join(line), size) > width_pt:
                cut = len(line) - 1  # before the word that overflows
                for k in range(cut, 0, -1):
                    if line[k - 1] == "·" and text_width_pt(" ".join(line[:k]), size) >= 0.6 * width_pt:
                        cut = k
                        break
                if line[cut] == "·":  # never start a line with the separator: it ends this one (a little over)
                    cut += 1
                out.append(" ".join(line[:cut]))
                line = line[cut:]
                if not line:
                    break
        if line or not out:
            out.append(" ".join(line))
    return out
