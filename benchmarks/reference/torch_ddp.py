"""Reference: PyTorch DistributedDataParallel (gloo), the documented loop.

torchrun --standalone --nnodes 1 --nproc-per-node 2 benchmarks/reference/torch_ddp.py --model resnet18
"""

import os
import sys

import torch
import torch.distributed as dist
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import parser, report, timed, torch_step  # noqa: E402

args = parser(__doc__).parse_args()
dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(getattr(torchvision.models, args.model)())
optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # as bench/torch_train.py
step = torch_step(torch, model, optimizer, args)
report(dist.get_rank(), dist.get_world_size(), timed(step, args), threads=torch.get_num_threads())
dist.destroy_process_group()
