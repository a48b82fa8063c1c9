"""Attention rollout multiplies the blocks' matrices in one order only: later blocks on the left.

A hand-worked case with two tokens (0 = the class token, 1 = a patch), one head and two blocks
that do opposite things (notebook 03 works it out):

    block 1 reads the patch        A1 = [[0, 1], [0, 1]]   ->  (A1 + I) / 2 = [[1/2, 1/2], [0, 1]]
    block 2 reads the class token  A2 = [[1, 0], [1, 0]]   ->  (A2 + I) / 2 = [[1, 0], [1/2, 1/2]]

    rollout = Â2 · Â1 = [[1/2, 1/2], [1/4, 3/4]]      the reversed product Â1 · Â2 = [[3/4, 1/4], [1/2, 1/2]]

After both blocks the class token draws half on itself and half on the patch.  Both of the
library's entry points are checked: ``numpy_nn.attention.attention_rollout`` and
``plotting.attention_rollout_grid`` (which reads a model's maps through its interface).
"""
import numpy as np
import pytest

from vit_scratch import plotting
from vit_scratch.numpy_nn.attention import attention_rollout

A1 = np.array([[[[0.0, 1.0], [0.0, 1.0]]]])  # (B=1, h=1, N=2, N=2)
A2 = np.array([[[[1.0, 0.0], [1.0, 0.0]]]])
BY_HAND = np.array([[1 / 2, 1 / 2], [1 / 4, 3 / 4]])
REVERSED = np.array([[3 / 4, 1 / 4], [1 / 2, 1 / 2]])


def test_the_case_tells_the_two_orders_apart():
    step1, step2 = (A1[0, 0] + np.eye(2)) / 2, (A2[0, 0] + np.eye(2)) / 2
    np.testing.assert_allclose(step2 @ step1, BY_HAND, rtol=0, atol=1e-15)
    np.testing.assert_allclose(step1 @ step2, REVERSED, rtol=0, atol=1e-15)
    assert np.abs(BY_HAND - REVERSED).max() >= 0.25


def test_library_rollout_puts_later_blocks_on_the_left():
    got = attention_rollout([A1, A2])
    assert got.shape == (1, 2, 2)
    np.testing.assert_allclose(got[0], BY_HAND, rtol=0, atol=1e-15)


class _TwoTokenModel:
    """A NumPy-room stand-in with the interface ``attention_rollout_grid`` reads: one patch (a
    1 × 1 grid) after one class token, and the two blocks' maps above."""

    num_prefix_tokens = 1

    class cfg:  # noqa: N801 -- mirrors model.cfg.grid_size
        grid_size = (1, 1)

    def get_attention_maps(self, images):
        return [np.repeat(A1, len(images), axis=0), np.repeat(A2, len(images), axis=0)]


def test_rollout_grid_reads_the_class_token_row_in_the_same_order():
    grid = plotting.attention_rollout_grid(_TwoTokenModel(), np.zeros((3, 1, 1, 1), np.float32))
    assert grid.shape == (3, 1, 1)
    # the class token's weight on the patch: 1/2 (the reversed product would give 1/4)
    np.testing.assert_allclose(grid[:, 0, 0], BY_HAND[0, 1], rtol=0, atol=1e-15)


@pytest.mark.parametrize("order", ["left", "right"])
def test_a_reversed_rollout_fails_the_hand_worked_case(order):
    # the mutant this file guards against: the same steps, multiplied on the other side
    def rollout(maps):
        out = None
        for m in maps:
            a = m.mean(axis=1) + np.eye(m.shape[-1])
            a = a / a.sum(-1, keepdims=True)
            out = a if out is None else (a @ out if order == "left" else out @ a)
        return out

    matches = np.allclose(rollout([A1, A2])[0], BY_HAND, rtol=0, atol=1e-15)
    assert matches == (order == "left")
