"""A class name that matches none says which are close ("did you mean"), as the README's --target "tabby cat"
on ImageNet, whose label is "tabby" (issue 37)."""

import pytest

from vitviz.batch.export_plan import resolve_target

LABELS = ["tench", "goldfish", "tabby", "tiger cat", "Persian cat", "Egyptian cat", "lynx, catamount"]


def test_a_name_that_matches_no_class_says_the_closest_ones():
    with pytest.raises(ValueError) as e:
        resolve_target("tabby cats", LABELS, len(LABELS))
    msg = str(e.value)
    assert msg.startswith("--target tabby cats: no class name contains 'tabby cats'; did you mean ")
    assert "tabby (2)" in msg and "tench" not in msg
    with pytest.raises(ValueError) as e:  # each comma-separated name counts
        resolve_target("catamunt", LABELS, len(LABELS))
    assert "did you mean lynx, catamount (6)?" in str(e.value)
    with pytest.raises(ValueError) as e:  # nothing close: no suggestion
        resolve_target("aeroplane", LABELS, len(LABELS))
    assert "did you mean" not in str(e.value)
    assert resolve_target("tabby", LABELS, len(LABELS)) == 2
