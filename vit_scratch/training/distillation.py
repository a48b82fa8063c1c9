"""The teacher of hard distillation (``--teacher RUN_OR_CHECKPOINT`` or ``--teacher auto``):
DeiT's recipe (Touvron et al., "Training data-efficient image transformers & distillation
through attention", ICML 2021, §4, https://arxiv.org/abs/2012.12877).

A distilled student (a model with a distillation token and a second head: the deit_*_distilled_*
names, or a config with ``distilled=True``) learns its class head from the labels and its
distillation head from a trained teacher's predictions:

    loss = ½ · CE(class head, labels, label smoothing) + ½ · CE(distillation head, y_t),
    y_t = argmax of the teacher's logits on the same (augmented) images

(``recipe.objective``; ``numpy_nn.training.hard_distillation`` in the NumPy room).  A student
without a distillation token (CoaT, CaiT, a plain ViT) learns both targets through its one
head, ½ · CE(head, labels, label smoothing) + ½ · CE(head, y_t) -- DeiT's hard distillation on
the class token alone (its Table 8), with the PyTorch backend.  The teacher is any model this
library can load -- a run folder of ``vit_scratch.train`` or a checkpoint file that records its
model (``run_folder.load_model``) -- or, with ``--teacher auto``, the small convnet
(``training.convnet``) the trainer fits first on the same split with the same augmentation
(``yardsticks.convnet_baseline``: the convnet yardstick).  It is kept in eval mode and run under
``no_grad``.  The runner of each backend holds it (``training.runners``).  Its classes must be
the student's: the same count, and the same names when the file records them.

The teacher sees the student's batch as its own preprocessing wants it: when the two models
differ in input size, channels or normalisation (a CoaT teacher at 8×8 for a ViT student at
24×24), the batch is un-normalised with the student's mean and std, resized with the teacher's
interpolation (antialiased when shrinking) and normalised with the teacher's mean and std -- the
steps of ``data.to_model_input`` (``data.preprocessing.fit_input_size``), on the batch's device.
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..data.preprocessing import fit_input_size
from ..models import MODEL_OPTIONS, get_config, list_models


def distilled_names() -> list[str]:
    """The registered names whose default config has a distillation token."""
    return [n for n in list_models() if getattr(get_config(n), "distilled", False)]


#: ``--teacher auto``: the small convnet the trainer fits first (``yardsticks.convnet_baseline``).
AUTO = "auto"


def has_distillation_token(settings) -> bool:
    """Whether ``settings``' model has a distillation token (its config's ``distilled``)."""
    cfg = get_config(settings.model, **{k: v for k, v in settings.model_kwargs.items()
                                        if k != "num_classes" and k not in MODEL_OPTIONS})
    return bool(getattr(cfg, "distilled", False))


def check_teacher(settings) -> None:
    """``--teacher``: ``auto``, or a run folder or checkpoint file that exists; a student
    without a distillation token learns the teacher through its class head, with the PyTorch
    backend -- checked before anything is built; a ``ValueError`` naming the option and the
    value otherwise.  (The classes are checked when the teacher is loaded.)"""
    if settings.teacher is None:
        return
    if not isinstance(settings.teacher, str) or (settings.teacher != AUTO
                                                 and not Path(settings.teacher).exists()):
        raise ValueError(f"--teacher {settings.teacher!r}: no such run folder or checkpoint "
                         f"file (or 'auto': a small convnet trained first on the same pictures)")
    if settings.backend == "numpy" and not has_distillation_token(settings):
        cfg = get_config(settings.model)
        how = "--model-arg distilled=True, or " if hasattr(cfg, "distilled") else ""
        raise ValueError(f"--teacher {settings.teacher!r} with --backend numpy: --model "
                         f"{settings.model} has no distillation token, and the NumPy room "
                         f"distils through one; use --backend torch (which distils through the "
                         f"class head) or a model with one ({how}--model NAME with NAME one "
                         f"of {', '.join(distilled_names())})")


class Teacher:
    """A trained model whose argmax the student's distillation head learns.

    ``teacher(images)`` -> its predicted classes (B,) for a batch prepared for the student,
    computed in eval mode under ``no_grad``.  ``model`` is the teacher; ``path`` where it came
    from."""

    def __init__(self, model, student_pretrained_cfg: dict, path: str = ""):
        self.model = model.eval().requires_grad_(False)
        self.path = path
        self.student_cfg = student_pretrained_cfg
        self.teacher_cfg = model.pretrained_cfg
        self.same_input = all(tuple(self.student_cfg[k]) == tuple(self.teacher_cfg[k])
                              for k in ("input_size", "mean", "std"))

    def view(self, images: torch.Tensor) -> torch.Tensor:
        """The student's batch (B, C, H, W), normalised for the student, as the teacher's input."""
        if self.same_input:
            return images
        s, t = self.student_cfg, self.teacher_cfg

        def per_channel(values):
            return torch.tensor(values, dtype=images.dtype, device=images.device).view(1, -1, 1, 1)

        x = images * per_channel(s["std"]) + per_channel(s["mean"])  # the [0, 1] pictures
        x = fit_input_size(x, t)  # the teacher's size and channels
        return (x - per_channel(t["mean"])) / per_channel(t["std"])

    @torch.no_grad()
    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.model(self.view(images)).argmax(dim=-1)


def load_teacher(settings, student, device, log=print, classes=None,
                 trained=None) -> Teacher | None:
    """The teacher of ``--teacher`` for ``student`` (the PyTorch model of the run) on
    ``device``, or None without one.  Its class count must be the student's, and its class
    names ``classes`` (the data's, when given) unless the file records none (then its classes
    are numbered, and class i is taken as the student's class i); a file that does not record
    its model is a ``CheckpointError`` (``run_folder.load_model``).  ``--teacher auto``:
    ``trained``, the convnet the trainer fitted first on the same split."""
    if settings.teacher is None:
        return None
    if settings.teacher == AUTO:
        if trained is None:
            raise ValueError("--teacher auto: the convnet teacher is trained by the trainer "
                             "(vit_scratch.train) before the first epoch; a runner made "
                             "without it has no teacher to use")
        teacher = Teacher(trained, student.pretrained_cfg, AUTO)
        log("teacher: the small convnet trained on the same pictures (--teacher auto)")
        return teacher
    from ..checkpoint_checks import CheckpointError
    from ..run_folder import load_model

    try:
        model = load_model(settings.teacher, device)
    except (ValueError, CheckpointError) as error:
        raise type(error)(f"--teacher {settings.teacher!r}: {error}") from None
    name = model.pretrained_cfg.get("architecture", type(model).__name__)
    if model.num_classes != student.num_classes:
        raise ValueError(f"--teacher {settings.teacher!r}: its model ({name}) predicts "
                         f"{model.num_classes} classes, the student {student.num_classes}; the "
                         f"teacher must be trained on the student's classes")
    numbered = [str(i) for i in range(model.num_classes)]
    if classes is not None and list(model.class_names) not in (list(classes), numbered):
        raise ValueError(f"--teacher {settings.teacher!r}: its classes are "
                         f"{', '.join(model.class_names)}, the data's "
                         f"{', '.join(map(str, classes))}; the teacher must be trained on the "
                         f"student's classes, in the same order")
    teacher = Teacher(model, student.pretrained_cfg, settings.teacher)
    if classes is not None and list(model.class_names) != list(classes):
        log(f"teacher: its classes are numbered 0..{model.num_classes - 1} (its file names "
            f"none); its class i is taken as the data's class i "
            f"({', '.join(map(str, classes[:3]))}, ...)")
    log(f"teacher: {name} from {settings.teacher}"
        f"{'' if teacher.same_input else ' (the batch resized and normalised for it)'}")
    return teacher
