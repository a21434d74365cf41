"""What the bench programs offer, as plain data (no framework import).

`launch` validates user input against this before starting any rank.
"""

from __future__ import annotations

# torchvision model name -> default square image size
TORCH_MODELS = {
    "resnet18": 224,
    "resnet34": 224,
    "resnet50": 224,
    "resnet101": 224,
    "vgg16": 224,
    "alexnet": 224,
    "inception_v3": 299,
    "mobilenet_v3_small": 224,
}

# keras.applications-style name -> default square image size
TF_MODELS = {
    "ResNet50": 224,
    "VGG16": 224,
    "InceptionV3": 299,
    "MobileNetV3Small": 224,
    "SmallCNN": 64,
}

# minimum input size a model accepts (inception's stem needs 75x75)
MIN_IMAGE_SIZE = {"inception_v3": 75, "InceptionV3": 75, "alexnet": 63, "VGG16": 32, "ResNet50": 32}

ENGINES = {"torch": ("horovod", "ddp"), "tf": ("horovod", "native")}
PRECISIONS = {"torch": ("fp32", "amp"), "tf": ("fp32", "mixed")}
MODELS = {"torch": TORCH_MODELS, "tf": TF_MODELS}
