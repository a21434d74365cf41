"""Reference: TensorFlow 2 + Horovod, the documented synthetic benchmark's loop
(tf.keras.applications model, DistributedGradientTape, a tf.function step,
variables broadcast after the first step).

Horovod's documented way needs the legacy Keras: run with TF_USE_LEGACY_KERAS=1
(tf_keras installed). Without it the same loop runs on Keras 3, as our
bench/tf_train.py does: Horovod 0.28 cannot take Keras 3 variables, so the tape
differentiates, and the broadcast sends, the tf.Variable behind each one (its
`.value`), the one change Keras 3 forces. That variant is like-for-like with ours
down to the model code; the legacy one is like-for-like with Horovod's script.

    TF_USE_LEGACY_KERAS=1 horovodrun -np 2 -H localhost:2 --gloo python benchmarks/reference/tf_horovod.py --model ResNet50
"""

import os
import sys
from typing import Iterable

import tensorflow as tf
import horovod.tensorflow as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parser, report, timed  # noqa: E402

args = parser(__doc__).parse_args()
hvd.init()
threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
if threads > 0:  # the launcher's CPU share, as bench/tf_engines.py applies it
    tf.config.threading.set_intra_op_parallelism_threads(threads)
keras = tf.keras
model = getattr(keras.applications, args.model)(weights=None, input_shape=(args.image_size, args.image_size, 3))
optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
target = tf.random.uniform([args.batch_size], minval=0, maxval=999, dtype=tf.int64)
loss_fn = keras.losses.SparseCategoricalCrossentropy()
legacy = keras.__name__.startswith("tf_keras")
if not legacy:
    optimizer.build(model.trainable_variables)  # Keras 3: its slots exist before the step is traced


def tf_variables(variables: Iterable[tf.Variable]) -> list[tf.Variable]:
    return list(variables) if legacy else [v.value for v in variables]


@tf.function
def train_step(first_batch: bool) -> tf.Tensor:
    with tf.GradientTape() as tape:
        loss = loss_fn(target, model(data, training=True))
    tape = hvd.DistributedGradientTape(tape)
    gradients = tape.gradient(loss, tf_variables(model.trainable_variables))
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(tf_variables(model.variables), root_rank=0)
        hvd.broadcast_variables(tf_variables(optimizer.variables() if legacy else optimizer.variables), root_rank=0)
    return loss


train_step(True)
report(
    hvd.rank(),
    hvd.size(),
    timed(lambda: train_step(False).numpy(), args),
    keras=keras.__name__,
    threads=tf.config.threading.get_intra_op_parallelism_threads(),
)
