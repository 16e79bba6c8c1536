"""bake.served's check: what a registry serves under a selection's tags, against what bake published.

``check`` is pure: the images are built here as ``read`` returns them. Registries that lie are in
tests/reliability/test_served_hostile.py.
"""

from __future__ import annotations

import pytest

from bake import layers
from bake.errors import BuildError
from bake.served import Expected, Image, Refs, check

REPO = "registry.example/team/assets"
REFS = Refs((f"{REPO}:unit-a", f"{REPO}:unit-b"), f"{REPO}:index-m", f"{REPO}:m")


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


def blob(n: int) -> layers.Blob:
    """A layer whose blob digest is ``n`` and diff ID ``n + 100``."""
    return layers.Blob(layers.TAR, digest(n), 10 * n, digest(n + 100))


def image(ref: str, n: int, *layer_numbers: int) -> Image:
    return Image(ref, digest(1000 + n), tuple(blob(i) for i in layer_numbers))


def consistent() -> dict[str, Image | None]:
    """Each unit and the index one layer, the whole all three in order: what `bake publish` pushes."""
    return {
        REFS.units[0]: image(REFS.units[0], 1, 1),
        REFS.units[1]: image(REFS.units[1], 2, 2),
        REFS.index: image(REFS.index, 3, 3),
        REFS.whole: image(REFS.whole, 4, 1, 2, 3),
    }


def refused(images: dict[str, Image | None], built: dict[str, str] | None = None) -> list[str]:
    """The lines of the BuildError ``check`` raises, one per tag."""
    with pytest.raises(BuildError) as caught:
        check(REFS, images, built)
    message = str(caught.value)
    assert caught.value.exit_code == 5 and f"tag(s) of {REPO}; nothing was pushed or pinned" in message
    return [line.strip() for line in message.splitlines()[1:-1]]


def test_the_layered_tags_are_the_units_then_the_index() -> None:
    assert REFS.layered == (f"{REPO}:unit-a", f"{REPO}:unit-b", f"{REPO}:index-m")


def test_what_bake_published_passes_with_or_without_the_built_tree() -> None:
    check(REFS, consistent())
    check(REFS, consistent(), {ref: digest(i + 101) for i, ref in enumerate(REFS.layered)})
    check(REFS, {ref: None for ref in [*REFS.layered, REFS.whole]})  # nothing published yet


def test_a_unit_replaced_behind_its_tag_is_refused_against_the_wholes_layer() -> None:
    images = {**consistent(), REFS.units[1]: image(REFS.units[1], 5, 7)}
    assert refused(images) == [
        f"{REFS.units[1]}: expected 1 layer, diff ID {digest(102)}, blob {digest(2)} "
        f"(layer 2 of {REFS.whole}); served {digest(1005)}: 1 layer, diff ID {digest(107)}, blob {digest(7)}"
    ]


def test_against_the_built_tree_every_tag_must_hold_what_was_built() -> None:
    built = {ref: digest(i + 101) for i, ref in enumerate(REFS.layered)}
    built[REFS.index] = digest(999)
    lines = refused(consistent(), built)
    assert lines[0].startswith(f"{REFS.whole}: expected 3 layers, those of the tree bake built; served ")
    assert lines[1] == (
        f"{REFS.index}: expected 1 layer, diff ID {digest(999)} (the tree bake built); "
        f"served {digest(1003)}: 1 layer, diff ID {digest(103)}, blob {digest(3)}"
    )


def test_a_whole_with_the_wrong_layer_count_and_two_tags_of_one_image_are_refused() -> None:
    images = {**consistent(), REFS.whole: image(REFS.whole, 4, 1, 2), REFS.index: image(REFS.index, 1, 1)}
    lines = refused(images)
    assert f"{REFS.units[0]}, {REFS.index}: expected 2 distinct images; served one, {digest(1001)}" in lines
    assert (
        f"{REFS.whole}: expected 3 layers (one per unit, then the index's); served {digest(1004)}: 2 layers "
        f"(diff IDs {digest(101)}, {digest(102)})"
    ) in lines


def test_a_unit_of_two_layers_is_refused_even_without_a_record() -> None:
    images = {REFS.units[0]: image(REFS.units[0], 1, 1, 2)}
    assert refused(images) == [
        f"{REFS.units[0]}: expected 1 layer; served {digest(1001)}: 2 layers "
        f"(diff IDs {digest(101)}, {digest(102)})"
    ]


def test_what_is_served_is_shown_short() -> None:
    assert image("r:t", 1).shown() == f"{digest(1001)}: 0 layers"
    assert image("r:t", 1, 1, 2, 3, 4).shown() == (
        f"{digest(1001)}: 4 layers (diff IDs {digest(101)}, {digest(102)}, {digest(103)}, …)"
    )
    assert Expected(digest(5), None, "why").shown() == f"1 layer, diff ID {digest(5)} (why)"
