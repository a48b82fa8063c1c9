"""The trainer, ``python -m vit_scratch.train`` (the command line: ``vit_scratch.train``).

    settings   TrainSettings, its defaults (the digits recipe) and the checks made before
               anything is built
    recipe     param_groups, lr_schedule, the objective, train_step, evaluate
    runners    who computes each step, behind one interface: PyTorch or the NumPy room
    distillation  the teacher of hard distillation (--teacher): loaded, checked, run in eval mode
    progress   the run so far, saved every epoch, restored by --resume
    loop       train(settings): set-up, the epochs, save
"""
