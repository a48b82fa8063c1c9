"""Exercises for notebook 11 -- DeiT's distillation token, and stochastic depth.

Write your code where it says ``TODO Exercise N.M`` (replace the ``raise NotImplementedError``).
Rules: NumPy only (no torch: autograd is what the grader checks you against), nothing from
``vit_scratch`` (the library's ``hard_distillation`` and ``drop_path`` are the answers), and no
Python loops over images, tokens or classes -- the grader runs your function at two sizes and
counts the Python steps your own code takes.

Notebook 11 computes the hard-distillation loss and its gradient with respect to the two
heads' logits, and DropPath's backward on a branch's output. These exercises take each one
step further back: through the two heads to the tokens and the heads' weights, and through a
whole residual branch, in training and in evaluation.

DeiT: Touvron, Cord, Douze, Massa, Sablayrolles, Jégou, "Training data-efficient image
transformers & distillation through attention", ICML 2021, https://arxiv.org/abs/2012.12877.
Stochastic depth: Huang, Sun, Liu, Sedra, Weinberger, "Deep Networks with Stochastic Depth",
ECCV 2016, https://arxiv.org/abs/1603.09382.

Check your work:   python -m exercises.check 11
"""
import numpy as np


def hard_distillation_heads(tokens: np.ndarray, head_weight: np.ndarray, head_bias: np.ndarray,
                            head_dist_weight: np.ndarray, head_dist_bias: np.ndarray,
                            labels: np.ndarray, teacher_logits: np.ndarray,
                            label_smoothing: float = 0.0):
    """Exercise 11.1 -- DeiT's hard distillation through its two heads: the loss, and its
    gradient back to the final tokens and to both heads' weights.

    Forward (notebook 11, sections 1 and 5), with K classes:

        z = tokens[:, 0] Wᵀ + b                the class token's head     (B, K)
        z_dist = tokens[:, 1] W_distᵀ + b_dist the distillation token's   (B, K)
        y_t = argmax of the teacher's logits   the teacher's decision     (B,)
        loss = ½ · CE_ε(z, labels) + ½ · CE(z_dist, y_t)    each CE a mean over the batch

    CE_ε is the cross-entropy with label smoothing ε on the true labels only: the target is
    (1 − ε)·one_hot(label) + ε/K. The teacher's term has no smoothing.

    tokens:           (B, 2 + N, C), the final (normed) tokens: class, distillation, patches
    head_weight, head_dist_weight: (K, C) (PyTorch's layout); head_bias, head_dist_bias: (K,)
    labels:           (B,) ints, the true classes
    teacher_logits:   (B, K), the teacher's outputs on the same images
    label_smoothing:  ε in [0, 1)
    returns: (loss, dtokens, dhead_weight, dhead_bias, dhead_dist_weight, dhead_dist_bias):
             loss a float, the rest shaped like their inputs, in the tokens' dtype
    Raises ValueError (naming the value) for a label_smoothing outside [0, 1), fewer than 2
    tokens, or labels or teacher_logits whose shape does not fit the batch.

    Hints: each head's logits get ½ · (softmax − target) / B (notebook 11, section 5); a head
    is a Linear, whose backward is notebook 10's section 1. Only two rows of each image's
    tokens reach a head. Compute the log-softmax stably (subtract each row's maximum).
    """
    # TODO Exercise 11.1: your code here (replace the line below)
    raise NotImplementedError("Exercise 11.1: hard_distillation_heads")


def drop_path_residual(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, keep: np.ndarray,
                       drop_prob: float, training: bool = True) -> np.ndarray:
    """Exercise 11.2 -- stochastic depth on a residual branch: the forward.

    Notebook 11 (section 7) drops a residual branch per sample. Here the branch is a Linear
    layer, and the whole residual step is yours:

        training:    out_b = x_b + m_b · (x_b Wᵀ + bias),   m_b = keep_b / (1 − drop_prob)
        evaluation:  out = x + (x Wᵀ + bias)                 (nothing dropped, nothing scaled)

    x:         (B, ..., C), any axes between the batch and the channels (tokens)
    weight:    (C, C), PyTorch's layout; bias: (C,)
    keep:      (B,) booleans, the coins: True where sample b keeps its branch this step
    drop_prob: p in [0, 1)
    training:  whether to drop (True) or to run the branch for every sample (False)
    returns:   shaped like x, in x's dtype
    Raises ValueError (naming the value) for a drop_prob outside [0, 1) or a keep that is not
    (B,).

    Exercise 11.2 (second half) is its backward, ``drop_path_residual_backward``.
    """
    # TODO Exercise 11.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 11.2: drop_path_residual")


def drop_path_residual_backward(dout: np.ndarray, x: np.ndarray, weight: np.ndarray,
                                keep: np.ndarray, drop_prob: float, training: bool = True):
    """Exercise 11.2 (second half) -- the backward of ``drop_path_residual``.

    dout:    ∂L/∂out, shaped like x; the other arguments as in ``drop_path_residual``
    returns: (dx, dweight, dbias), shaped like x, weight and bias, in x's dtype
    Raises ValueError as ``drop_path_residual`` does.

    Hints: the sum x + branch sends dout to both paths. A dropped sample's branch did not run
    this step: what does it contribute to the weight's gradient? The weight's and the bias's
    gradients sum over every position that used them (images and tokens).
    """
    # TODO Exercise 11.2: your code here (replace the line below)
    raise NotImplementedError("Exercise 11.2: drop_path_residual_backward")
