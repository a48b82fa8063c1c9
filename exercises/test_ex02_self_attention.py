"""Checks for exercises/ex02_self_attention.py.   Run:  pytest exercises/test_ex02_self_attention.py

A test is skipped while its exercise still raises NotImplementedError.
"""
from exercises import checks
from exercises import ex02_self_attention as ex
from exercises.checks import learner


def test_2_1_softmax():
    checks.check_softmax(learner(ex.softmax))


def test_2_2_scaled_dot_product_attention():
    checks.check_scaled_dot_product_attention(learner(ex.scaled_dot_product_attention))


def test_2_3_causal_mask():
    checks.check_causal_mask(learner(ex.causal_mask))


def test_2_4_split_and_merge_heads():
    checks.check_split_merge_heads(learner(ex.split_heads), learner(ex.merge_heads))
