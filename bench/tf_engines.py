"""The two TensorFlow data-parallel engines behind one small interface.

An engine says how one training step runs across ranks: in which scope model
and optimizer are created, how gradients are exchanged (a wrapped tape or the
strategy's own all-reduce), how a step is compiled, and what must follow the
first step. `Local` is the same interface with no exchange at all; the
benchmark uses it for the compute-only baseline. Engines also offer the two
collectives the benchmark itself needs (barrier, broadcast). `stop()` ends the
engine's own threads (Horovod's background thread) before the step without
exchange is timed, so nothing of the engine competes with it for the cores.

Keras 3 note: Horovod 0.28 cannot take Keras 3 variables (they have no `.ref()`,
upstream issue #4290). The step therefore differentiates with respect to the
`tf.Variable` behind each Keras variable (`v.value`), and Horovod only ever
sees `tf.Variable`s and tensors.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
from typing import TYPE_CHECKING, Callable

import numpy as np
import tensorflow as tf

if TYPE_CHECKING:  # keras is imported by bench.tf_train after TensorFlow is configured
    import keras

from bench.rendezvous import free_port, interface_address, mpi_comm
from bench import gpu_request, horovod_settings, numerics, placement
from bench.train_args import fail


def configure_runtime(local_rank: int, args: argparse.Namespace) -> tuple[bool, dict]:
    """One GPU per rank (by local rank), the launcher's CPU share, and the numerics asked
    (bench.numerics); whether it runs on a GPU, and the numerics used.

    Must run before TensorFlow initialises its runtime.
    """
    gpus = tf.config.list_physical_devices("GPU")
    requested = gpu_request.gpus_requested()
    if gpus and requested == 0:  # the run asked for no GPU: hide the ones TensorFlow found
        tf.config.set_visible_devices([], "GPU")
        gpus = []
    gpu_request.use_gpu("TensorFlow", len(gpus), getattr(args, "record_dir", None))  # asked, none seen: one line
    if not gpus and requested is None and placement.nvidia_gpus_visible():
        cuda = tf.sysconfig.get_build_info().get("cuda_version") or "none (a CPU build)"
        fail(
            f"this process has an NVIDIA GPU but TensorFlow {tf.__version__} registers none (built for "
            f"CUDA {cuda}): it would train on the CPU; use an image whose TensorFlow matches its CUDA"
        )
    if gpus:
        gpu = gpus[local_rank % len(gpus)]
        tf.config.set_visible_devices(gpu, "GPU")
        tf.config.experimental.set_memory_growth(gpu, True)
    threads = int(os.environ.get("OMP_NUM_THREADS", "0"))
    if threads > 0:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    used = numerics.record(args, "tf", bool(gpus), compiled="tf.function (graph, autograph off, no XLA)")
    if gpus:
        tf.config.experimental.enable_tensor_float_32_execution(args.tf32 == "on")
        os.environ["TF_CUDNN_USE_AUTOTUNE"] = "1" if args.cudnn_benchmark == "on" else "0"
    elif used["memory_format"] != "channels_last":
        fail("TensorFlow's CPU convolutions take channels_last (NHWC) only; drop --memory-format channels_first")
    return bool(gpus), used


class Local:
    """One rank alone: plain tape, plain tf.function, nothing to exchange."""

    loss_weight = 1.0  # what the per-rank mean loss is multiplied by before differentiation

    def scope(self) -> contextlib.AbstractContextManager[object]:
        return contextlib.nullcontext()

    def wrap_tape(self, tape: tf.GradientTape) -> tf.GradientTape:
        return tape

    def compile(self, step: Callable[..., tf.Tensor]) -> Callable[..., tf.Tensor]:
        # no AutoGraph: the step has no Python control flow on tensors, and converting
        # Horovod's tape code made the first trace ~5x slower
        return tf.function(step, autograph=False)

    def after_first_step(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
        pass

    def stop(self) -> None:
        pass


class HorovodEngine(Local):
    name = "horovod"

    def __init__(self, args: argparse.Namespace):
        try:
            import horovod.tensorflow as hvd
        except (ImportError, tf.errors.NotFoundError) as exc:
            fail(f"Horovod is not built with TensorFlow support here ({exc}); rebuild it with `make setup`")
        horovod_settings.apply_tuning(args)
        self.hvd = hvd
        self.fp16_allreduce = args.fp16_allreduce
        self.info: dict | None = None  # set when stopped
        hvd.init()
        self.rank, self.size, self.local_rank = hvd.rank(), hvd.size(), hvd.local_rank()
        self.gpu, self.numerics = configure_runtime(self.local_rank, args)

    def wrap_tape(self, tape: tf.GradientTape) -> tf.GradientTape:
        compression = self.hvd.Compression.fp16 if self.fp16_allreduce else self.hvd.Compression.none
        return self.hvd.DistributedGradientTape(tape, compression=compression)  # averages

    def after_first_step(self, model: keras.Model, optimizer: keras.optimizers.Optimizer) -> None:
        # rank 0's variables (and the optimizer slots the first step created) everywhere
        self.hvd.broadcast_variables([v.value for v in model.variables + optimizer.variables], root_rank=0)

    def barrier(self) -> None:
        self.hvd.allreduce(tf.zeros(1), name="barrier")

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        return self.hvd.broadcast(tf.constant(array), root_rank=0, name="param_check").numpy()

    def stop(self) -> None:
        """Join Horovod's background thread, every rank after the same barrier."""
        self.info = self.describe()
        self.barrier()
        self.hvd.shutdown()

    def describe(self) -> dict:
        if self.info is not None:  # stopped: hvd can no longer answer
            return self.info
        return horovod_settings.describe(self.hvd, self.fp16_allreduce)

    def shutdown(self) -> None:
        if self.info is None:
            self.hvd.shutdown()


def worker_address() -> str:
    """Where this rank's tf.distribute worker listens: the interface named by
    FABRIC_BENCH_MASTER_IFNAME (emulated nodes), else this host's name; a free port."""
    ifname = os.environ.get("FABRIC_BENCH_MASTER_IFNAME")
    return f"{interface_address(ifname) if ifname else socket.gethostname()}:{free_port()}"


class NativeEngine(Local):
    """tf.distribute.MultiWorkerMirroredStrategy, one worker per rank.

    The ranks are started by mpirun or srun; MPI only tells each rank its place and
    gathers every worker's address into TF_CONFIG. Gradients then travel over
    tf.distribute's own collectives (ring on CPU, NCCL on GPU).
    """

    name = "native"

    def __init__(self, args: argparse.Namespace):
        self.comm = mpi_comm()  # started by mpirun or srun (bench.rendezvous)
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        hosts, workers = zip(*self.comm.allgather((socket.gethostname(), worker_address())))
        self.local_rank = hosts[: self.rank].count(hosts[self.rank])
        os.environ["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": self.rank}}
        )
        self.gpu, self.numerics = configure_runtime(self.local_rank, args)
        implementation = tf.distribute.experimental.CommunicationImplementation
        self.collectives = implementation.NCCL if self.gpu else implementation.RING
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=self.collectives)
        )  # variables created in its scope start as the chief's (worker 0's) values
        self.loss_weight = 1.0 / self.strategy.num_replicas_in_sync  # Keras sums gradients across replicas

    def scope(self) -> contextlib.AbstractContextManager[object]:
        return self.strategy.scope()

    def compile(self, step: Callable[..., tf.Tensor]) -> Callable[..., tf.Tensor]:
        strategy = self.strategy
        distributed = tf.function(lambda *batch: strategy.run(step, args=batch), autograph=False)
        return lambda *batch: strategy.experimental_local_results(distributed(*batch))[0]

    def barrier(self) -> None:
        self.comm.Barrier()

    def broadcast(self, array: np.ndarray) -> np.ndarray:
        # a sum over tf.distribute's collectives in which only rank 0 contributes (x + 0 is exact)
        contribution = tf.constant(array if self.rank == 0 else np.zeros_like(array))

        def sum_over_replicas(x: tf.Tensor) -> tf.Tensor:
            # tf.identity places x on the replica's device, all_reduce needs one
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(x))

        return self.compile(sum_over_replicas)(contribution).numpy()

    def describe(self) -> dict:
        return {
            "strategy": "MultiWorkerMirroredStrategy",
            "collectives": self.collectives.name.lower(),
            "bootstrap": "mpi",
            "workers": json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"],
        }

    def stop(self) -> None:
        self.comm.Barrier()  # every rank times the exchange-free step at once; tf.distribute's
        # collectives are idle from here on (its servers wait in poll, they do not spin)

    def shutdown(self) -> None:
        self.comm.Barrier()  # no worker leaves while a peer may still talk to it


TFEngine = HorovodEngine | NativeEngine
ENGINES: dict[str, type[TFEngine]] = {"horovod": HorovodEngine, "native": NativeEngine}
