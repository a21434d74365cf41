"""RunSpec: everything that defines one benchmark run, as plain validated data."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench import catalog
from launch.errors import UsageError

CONTROLLERS = ("mpi", "gloo")


@dataclass(frozen=True)
class RunSpec:
    framework: str = "torch"
    engine: str = "ddp"
    model: str = "resnet18"
    ranks: int = 2
    batch_size: int = 32
    image_size: int | None = None
    warmup: int = 5
    iters: int = 10
    batches_per_iter: int = 5
    precision: str = "fp32"
    controller: str = "mpi"  # how Horovod ranks are started and coordinated
    fp16_allreduce: bool = False
    fusion_threshold_mb: float | None = None
    cycle_time_ms: float | None = None
    bucket_cap_mb: float | None = None
    seed: int = 1234
    benchmark: str = "train"
    extra_env: dict[str, str] = field(default_factory=dict)

    def validated(self) -> "RunSpec":
        if self.framework not in catalog.ENGINES:
            raise UsageError(f"unknown framework {self.framework!r}; choose from {', '.join(catalog.ENGINES)}")
        engines = catalog.ENGINES[self.framework]
        if self.engine not in engines:
            raise UsageError(f"unknown engine {self.engine!r} for {self.framework}; choose from {', '.join(engines)}")
        models = catalog.MODELS[self.framework]
        if self.model not in models:
            raise UsageError(f"unknown model {self.model!r} for {self.framework}; choose from {', '.join(models)}")
        precisions = catalog.PRECISIONS[self.framework]
        if self.precision not in precisions:
            raise UsageError(f"unknown precision {self.precision!r}; choose from {', '.join(precisions)}")
        if self.controller not in CONTROLLERS:
            raise UsageError(f"unknown controller {self.controller!r}; choose from {', '.join(CONTROLLERS)}")
        for name in ("ranks", "batch_size", "iters", "batches_per_iter"):
            if getattr(self, name) < 1:
                raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.warmup < 0:
            raise UsageError(f"--warmup must be >= 0, got {self.warmup}")
        minimum = catalog.MIN_IMAGE_SIZE.get(self.model, 32)
        if self.image_size is not None and self.image_size < minimum:
            raise UsageError(f"--image-size {self.image_size} is too small for {self.model} (minimum {minimum})")
        return self

    @property
    def effective_image_size(self) -> int:
        return self.image_size or catalog.MODELS[self.framework][self.model]

    def bench_args(self) -> list[str]:
        """The bench program's own arguments (the part after `python -m bench.X`)."""
        args = [
            "--engine", self.engine, "--model", self.model,
            "--batch-size", str(self.batch_size), "--image-size", str(self.effective_image_size),
            "--warmup", str(self.warmup), "--iters", str(self.iters),
            "--batches-per-iter", str(self.batches_per_iter),
            "--precision", self.precision, "--seed", str(self.seed),
        ]
        if self.fp16_allreduce:
            args.append("--fp16-allreduce")
        optional = {
            "--fusion-threshold-mb": self.fusion_threshold_mb,
            "--cycle-time-ms": self.cycle_time_ms,
            "--bucket-cap-mb": self.bucket_cap_mb,
        }
        for flag, value in optional.items():
            if value is not None:
                args += [flag, str(value)]
        return args

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
