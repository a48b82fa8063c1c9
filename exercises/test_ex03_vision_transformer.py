"""Checks for exercises/ex03_vision_transformer.py.   Run:  pytest exercises/test_ex03_vision_transformer.py

A test is skipped while its exercise still raises NotImplementedError.
"""
from exercises import checks
from exercises import ex03_vision_transformer as ex
from exercises.checks import learner


def test_3_1_vit_num_params():
    checks.check_vit_num_params(learner(ex.vit_num_params))


def test_3_2_block_forward():
    checks.check_block_forward(learner(ex.block_forward))


def test_3_3_attention_rollout():
    checks.check_attention_rollout(learner(ex.attention_rollout))
