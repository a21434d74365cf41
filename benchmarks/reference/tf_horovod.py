"""Reference: TensorFlow 2 + Horovod, the documented synthetic benchmark's loop
(tf.keras.applications model, DistributedGradientTape, a tf.function step,
variables broadcast after the first step). Horovod's Keras support needs the
legacy Keras: run with TF_USE_LEGACY_KERAS=1 (tf_keras installed).

    TF_USE_LEGACY_KERAS=1 horovodrun -np 2 -H localhost:2 --gloo python benchmarks/reference/tf_horovod.py --model ResNet50
"""
import os
import sys

import tensorflow as tf
import horovod.tensorflow as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parser, report, timed  # noqa: E402

args = parser(__doc__).parse_args()
hvd.init()
threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
if threads > 0:  # the launcher's CPU share, as bench/tf_engines.py applies it
    tf.config.threading.set_intra_op_parallelism_threads(threads)
model = getattr(tf.keras.applications, args.model)(weights=None, input_shape=(args.image_size, args.image_size, 3))
optimizer = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
data = tf.random.uniform([args.batch_size, args.image_size, args.image_size, 3])
target = tf.random.uniform([args.batch_size], minval=0, maxval=999, dtype=tf.int64)
loss_fn = tf.keras.losses.SparseCategoricalCrossentropy()


@tf.function
def train_step(first_batch):
    with tf.GradientTape() as tape:
        loss = loss_fn(target, model(data, training=True))
    tape = hvd.DistributedGradientTape(tape)
    gradients = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(gradients, model.trainable_variables))
    if first_batch:
        hvd.broadcast_variables(model.variables, root_rank=0)
        hvd.broadcast_variables(optimizer.variables(), root_rank=0)
    return loss


train_step(True)
report(hvd.rank(), hvd.size(), timed(lambda: train_step(False).numpy(), args), keras=tf.keras.__name__,
       threads=tf.config.threading.get_intra_op_parallelism_threads())
