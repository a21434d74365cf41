"""Reference: PyTorch + Horovod, the documented synthetic benchmark's loop.

horovodrun -np 2 -H localhost:2 --gloo python benchmarks/reference/torch_horovod.py --model resnet18
"""

import os
import sys

import torch
import torchvision
import horovod.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parser, report, timed, torch_step  # noqa: E402

args = parser(__doc__).parse_args()
hvd.init()
model = getattr(torchvision.models, args.model)()
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # as bench/torch_train.py
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)
step = torch_step(torch, model, optimizer, args)
report(
    hvd.rank(),
    hvd.size(),
    timed(step, args),
    threads=torch.get_num_threads(),
    controller="mpi" if hvd.mpi_enabled() else "gloo",
)
