"""Checks for exercises/ex01_patch_embedding.py.   Run:  pytest exercises/test_ex01_patch_embedding.py

A test is skipped while its exercise still raises NotImplementedError.
"""
from exercises import checks
from exercises import ex01_patch_embedding as ex
from exercises.checks import learner


def test_1_1_patchify_reshape():
    checks.check_patchify(learner(ex.patchify_reshape))


def test_1_1_patchify_reshape_is_a_conv():
    checks.check_patchify_matches_conv(learner(ex.patchify_reshape))


def test_1_2_unpatchify():
    checks.check_unpatchify(learner(ex.unpatchify))


def test_1_3_conv_weight_to_seed_linear():
    checks.check_conv_weight_to_seed_linear(learner(ex.conv_weight_to_seed_linear))


def test_1_4_pos_embed_similarity():
    checks.check_pos_embed_similarity(learner(ex.pos_embed_similarity))
