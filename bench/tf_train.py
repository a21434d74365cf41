"""TensorFlow synthetic-data data-parallel training benchmark (Horovod or tf.distribute).

    mpirun -np 2 python -m bench.tf_train --engine native --model SmallCNN --record-dir DIR

Every rank trains the same keras.applications model (or the tiny SmallCNN) on
synthetic data created once on its device; the engine is the only difference
between runs. Each rank writes a `train` record (see bench.record) with its
per-iteration img/s, the img/s of the same step without gradient exchange (for
the communication share; timed after the engine's threads stopped), and a check that its variables equal rank 0's at the
end. Keras 3 is used as installed (no TF_USE_LEGACY_KERAS).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from types import ModuleType
from typing import TYPE_CHECKING, Callable

from bench import tf_cuda, train_args
from bench.record import errors_recorded
from bench.progress import Progress
from bench.timing import timed_iterations
from bench.train_record import finish
from bench.versions import common_versions, package_version

if TYPE_CHECKING:  # the frameworks themselves are imported in main(), after the CUDA paths are set
    from keras import Model
    from keras.optimizers import Optimizer
    from tensorflow import Tensor

    from bench.tf_engines import Local, TFEngine

CLASSES = 1000


def build_parser() -> argparse.ArgumentParser:
    return train_args.parser("tf")


def input_shape(keras: ModuleType, size: int) -> tuple[int, int, int]:
    """One image's shape in the layout Keras is set to (bench.numerics memory format)."""
    return (3, size, size) if keras.backend.image_data_format() == "channels_first" else (size, size, 3)


def small_cnn(keras: ModuleType, size: int) -> Model:
    """A CNN small enough to train on a couple of CPU cores (~90 k parameters)."""
    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(input_shape(keras, size)),
            layers.Conv2D(16, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(CLASSES),
        ],
        name="SmallCNN",
    )


def make_model(keras: ModuleType, name: str, size: int) -> Model:
    if name == "SmallCNN":
        return small_cnn(keras, size)
    constructor = getattr(keras.applications, name)
    return constructor(weights=None, input_shape=input_shape(keras, size), classes=CLASSES, classifier_activation=None)


def make_optimizer(keras: ModuleType, mixed_float16: bool) -> Optimizer:
    optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    return keras.optimizers.LossScaleOptimizer(optimizer) if mixed_float16 else optimizer


def make_step(
    tf: ModuleType, keras: ModuleType, model: Model, optimizer: Optimizer, engine: Local
) -> Callable[[Tensor, Tensor], Tensor]:
    """One SGD step on one batch: forward, loss, gradients (exchanged as the engine says), update."""

    def step(images: Tensor, labels: Tensor) -> Tensor:
        with tf.GradientTape() as tape:
            logits = tf.cast(model(images, training=True), tf.float32)
            loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True))
            scaled = optimizer.scale_loss(loss * engine.loss_weight)
        # the tf.Variables behind the Keras 3 variables: Horovod cannot take Keras variables
        gradients = engine.wrap_tape(tape).gradient(scaled, [v.value for v in model.trainable_variables])
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    return step


class Trainer:
    """One model + optimizer + synthetic batch; `run(n)` times n iterations."""

    def __init__(
        self,
        tf: ModuleType,
        keras: ModuleType,
        model: Model,
        optimizer: Optimizer,
        images: Tensor,
        labels: Tensor,
        engine: Local,
    ):
        self.model, self.optimizer, self.images, self.labels = model, optimizer, images, labels
        self.engine = engine
        self.step = engine.compile(make_step(tf, keras, model, optimizer, engine))
        self.steps_done = 0
        self.loss: Tensor | None = None

    def batch(self) -> None:
        self.loss = self.step(self.images, self.labels)
        self.steps_done += 1
        if self.steps_done == 1:
            self.engine.after_first_step(self.model, self.optimizer)

    def sync(self) -> None:
        if self.loss is not None:
            self.loss.numpy()  # waits for the step's device work

    def run(
        self, warmup: int, iters: int, batches_per_iter: int, batch_size: int, progress: Progress | None = None
    ) -> list[float]:
        """img/s of each timed iteration on this rank."""
        return timed_iterations(self.batch, self.sync, warmup, iters, batches_per_iter, batch_size, progress)


def parameter_check(np: ModuleType, model: Model, engine: TFEngine) -> tuple[float, str]:
    """Max |v - v_rank0| over all trainable variables, and a digest of this rank's variables."""
    flat = np.concatenate([np.ravel(v.numpy()).astype(np.float32) for v in model.trainable_variables])
    digest = hashlib.sha256(flat.tobytes()).hexdigest()
    reference = engine.broadcast(flat.copy())  # a copy: a tensor may share the array's memory
    return float(np.max(np.abs(flat - reference))), digest


def tf_versions(tf: ModuleType, keras: ModuleType) -> dict:
    versions = {**common_versions(), "tensorflow": tf.__version__, "keras": keras.__version__}
    build = tf.sysconfig.get_build_info()
    if tf.config.list_physical_devices("GPU"):
        versions["cuda"] = build.get("cuda_version")
        versions["cudnn"] = build.get("cudnn_version")
        versions["gpu"] = tf.config.experimental.get_device_details(tf.config.list_physical_devices("GPU")[0]).get(
            "device_name"
        )
    versions["horovod"] = package_version("horovod")
    return versions


def main(argv: list[str] | None = None) -> int:
    args = train_args.validate("tf", build_parser().parse_args(argv))
    tf_cuda.on_library_path()  # the cuda image: TensorFlow's CUDA 12 libraries first
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # keep TensorFlow's INFO lines out of the log
    import keras
    import tensorflow as tf

    from bench.tf_engines import ENGINES

    engine = ENGINES[args.engine](args)
    with errors_recorded(args.record_dir, engine.rank):
        return train(tf, keras, engine, args)


def train(tf: ModuleType, keras: ModuleType, engine: TFEngine, args: argparse.Namespace) -> int:
    import numpy as np

    from bench.tf_engines import Local

    device = f"gpu:{engine.local_rank}" if engine.gpu else "cpu"
    mixed_float16 = args.precision == "mixed" and engine.gpu
    if args.precision == "mixed":
        keras.mixed_precision.set_global_policy("mixed_float16" if engine.gpu else "mixed_bfloat16")
    keras.backend.set_image_data_format(engine.numerics["memory_format"])
    keras.utils.set_random_seed(args.seed + engine.rank)  # ranks start apart; the engine must make them equal

    with engine.scope():
        model = make_model(keras, args.model, args.image_size)
        optimizer = make_optimizer(keras, mixed_float16)
        optimizer.build(model.trainable_variables)
    compute_model = make_model(keras, args.model, args.image_size)  # the same step without any exchange
    compute_optimizer = make_optimizer(keras, mixed_float16)
    compute_optimizer.build(compute_model.trainable_variables)

    size = args.image_size
    images = tf.random.normal((args.batch_size, *input_shape(keras, size)))
    labels = tf.random.uniform((args.batch_size,), 0, CLASSES, dtype=tf.int32)
    run = (args.warmup, args.iters, args.batches_per_iter, args.batch_size)

    trainer = Trainer(tf, keras, model, optimizer, images, labels, engine)
    engine.barrier()
    started = time.time()
    progress = Progress(args.record_dir, engine.rank, engine.size, "train", args.iters)
    samples = trainer.run(*run, progress)
    train_seconds = time.time() - started

    params_max_abs_diff, params_sha256 = parameter_check(np, trainer.model, engine)
    # the same step without exchange, all ranks at once, with the engine's threads stopped
    compute = Trainer(tf, keras, compute_model, compute_optimizer, images, labels, Local())
    engine.stop()
    compute_samples = compute.run(*run, progress.next_phase("compute"))
    return finish(
        args,
        engine,
        framework="tf",
        device=device,
        threads=tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count(),
        versions=tf_versions(tf, keras),
        numerics_used=engine.numerics,
        parameters=sum(int(np.prod(v.shape)) for v in trainer.model.trainable_variables),
        samples=samples,
        compute_samples=compute_samples,
        train_seconds=train_seconds,
        params_max_abs_diff=params_max_abs_diff,
        params_sha256=params_sha256,
    )


if __name__ == "__main__":
    sys.exit(main())
