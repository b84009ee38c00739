"""The weight-free appearance descriptor: unit rows, defined for every box, and the same object
alike while different objects are not."""

import numpy as np
import pytest

from streamlens.reid import DIM, describe, similarity
from streamlens.reid.appearance import DEGENERATE


def scene(seed=0):
    """A grey road with a red car (white roof) and a blue car (dark bottom), textured."""
    rng = np.random.default_rng(seed)
    image = np.full((240, 320, 3), 110, np.uint8)
    image += rng.integers(0, 12, image.shape, dtype=np.uint8)
    image[40:100, 20:120] = (30, 30, 200)
    image[40:60, 30:110] = (240, 240, 240)
    image[140:200, 180:300] = (200, 60, 20)
    image[185:200, 180:300] = (20, 20, 20)
    return image


def test_rows_are_unit_float32_and_never_zero():
    boxes = np.array([[20, 40, 120, 100], [180, 140, 300, 200], [0, 0, 320, 240],
                      [50, 50, 50, 90],          # no width
                      [-40, -40, -10, -10],      # outside
                      [np.nan, 0, 10, 10],       # not finite
                      [300, 220, 400, 300]])     # partly outside: clipped
    rows = describe(scene(), boxes)
    assert rows.shape == (len(boxes), DIM) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-5)
    for degenerate in rows[3:6]:
        assert np.array_equal(degenerate, DEGENERATE)
    assert not np.array_equal(rows[6], DEGENERATE)


def test_no_boxes_gives_no_rows():
    assert describe(scene(), np.zeros((0, 4))).shape == (0, DIM)


def test_a_box_clipped_to_the_image_is_its_part_inside():
    image = scene()
    outside = describe(image, np.array([[180, 140, 400, 260]]))
    inside = describe(image, np.array([[180, 140, 320, 240]]))
    assert np.allclose(outside, inside)


def test_the_same_object_is_alike_across_shift_noise_and_size():
    a, b = scene(0), scene(1)                       # another noise draw
    big = np.repeat(np.repeat(a, 2, 0), 2, 1)       # the same scene twice the size
    red = describe(a, np.array([[20, 40, 120, 100]]))[0]
    red_again = describe(b, np.array([[22, 38, 118, 102]]))[0]
    red_big = describe(big, np.array([[40, 80, 240, 200]]))[0]
    blue = describe(a, np.array([[180, 140, 300, 200]]))[0]
    assert similarity(red, red_again) > 0.97
    assert similarity(red, red_big) > 0.97
    assert similarity(red, blue) < similarity(red, red_again) - 0.2


def test_stripes_tell_a_top_from_a_bottom():
    """Two crops of the same colours in another vertical order are told apart."""
    image = np.zeros((60, 40, 3), np.uint8)
    image[:30, :20] = (0, 0, 255); image[30:, :20] = (255, 0, 0)
    image[:30, 20:] = (255, 0, 0); image[30:, 20:] = (0, 0, 255)
    up, down = describe(image, np.array([[0, 0, 20, 60], [20, 0, 40, 60]]))
    assert similarity(up, down) < 0.8


def test_similarity_shapes():
    rows = describe(scene(), np.array([[20, 40, 120, 100], [180, 140, 300, 200], [0, 0, 10, 10]]))
    assert similarity(rows, rows).shape == (3, 3)
    assert np.allclose(np.diag(similarity(rows, rows)), 1.0, atol=1e-5)
    assert similarity(rows[0], rows).shape == (3,)
    assert similarity(np.zeros(DIM), rows[0]) == pytest.approx(0.0)
