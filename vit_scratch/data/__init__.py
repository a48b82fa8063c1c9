"""Offline data: pictures that ship with matplotlib, training sets, preprocessing that follows
the model, and augmentation.  Nothing here downloads anything.

    preprocessing  resolve_pretrained_cfg, sample_image, normalize, preprocess, to_model_input
    datasets       load_digits, digits_on_canvas, DATASETS, check_data, data_classes,
                   make_datasets (a name or a folder -> PyTorch datasets shaped for a model)
    folders        open_picture, unreadable_pictures, image_folder, image_folder_datasets,
                   plain_pictures
    splits         stratified_split, validation_indices, validation_split, dataset_labels
    augment        random_affine (a batch), ModelTransform (a picture, with transforms v2),
                   SeededSamples and affine_draws (each picture's seeds: (seed, epoch, index))

Training data (``make_datasets(name, model)`` -> a train and a test PyTorch dataset of
``(image, label)`` pairs, images already shaped for the model; with ``val_fraction`` also a
validation set between them): ``"digits"`` (scikit-learn's bundled 8×8 digits),
``"digits_on_canvas"`` (the localisation set) or a folder of your own pictures, one subfolder
per class.  The data follows the model: images are resized to the model's ``input_size``,
turned into its number of channels and normalised with its mean and std (all from its
``pretrained_cfg``); the trainer then gives the model as many classes as the data has.
``sample_image()`` is Grace Hopper's portrait from matplotlib's bundled sample data.

Which is which: the preprocessing (``preprocess``: timm's evaluation transform, tested equal),
the test split (``stratified_split``) and the batch augmentation (``random_affine``) are written
by hand; the folders (``ImageFolder``), the photo augmentations (transforms v2) and the
validation split (``train_test_split``) are torchvision's and scikit-learn's.
"""
from .augment import ModelTransform, SeededSamples, affine, affine_draws, random_affine
from .datasets import (DATASETS, canvas_datasets, check_data, data_classes, digits_datasets,
                       digits_on_canvas, load_digits, make_datasets)
from .folders import (image_folder, image_folder_datasets, open_picture, plain_pictures,
                      unreadable_pictures)
from .preprocessing import (IMAGENET_MEAN, IMAGENET_STD, WIDE_MODES, normalize,
                            picture_for_model, picture_to_input, preprocess, resize_and_crop,
                            resolve_pretrained_cfg, sample_image, to_model_input)
from .splits import dataset_labels, stratified_split, validation_indices, validation_split

__all__ = [
    "DATASETS", "IMAGENET_MEAN", "IMAGENET_STD", "WIDE_MODES", "ModelTransform", "SeededSamples",
    "affine", "affine_draws", "canvas_datasets", "check_data", "data_classes", "dataset_labels",
    "digits_datasets", "digits_on_canvas", "image_folder", "image_folder_datasets",
    "load_digits", "make_datasets", "normalize", "open_picture", "picture_for_model",
    "picture_to_input", "plain_pictures", "preprocess", "random_affine", "resize_and_crop",
    "resolve_pretrained_cfg", "sample_image", "stratified_split", "to_model_input",
    "unreadable_pictures", "validation_indices", "validation_split",
]
