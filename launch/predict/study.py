"""Studies: the reference study's question re-asked with the cluster predictor
(launch.predict.predict_cluster). `hpec2020-today`: does the fabric still not matter for
data-parallel training on today's 8-GPU NVSwitch nodes (H100 / H200), comparing
8 x 400 Gb InfiniBand NDR, 8 x 400 GbE RoCE and one 100 / 200 GbE NIC with TCP, for
ResNet-50, a ViT and 1.3 B / 7 B-parameter transformers, at 2-64 nodes?

Every input is a fact with its source or an ASSUMED band, and the answer is a range:

- parameters: facts (torchvision resnet50; timm vit_base_patch16_224; GPT-3 XL 1.3 B, Brown et
  al. 2020 Table 2.1; Llama 2 7 B, 6.74 B in its released config).
- compute step per GPU: no H100/H200 training step is measured here (the GPU check records
  one where a device is lent: pass it with `predict --train`). ResNet-50: the V100 AMP
  measurement of benchmarks/published/dlperf-pytorch-rn50-amp.json (802.9 img/s at batch 256)
  times an ASSUMED H100/V100 speed-up of 3-5. Transformers: 6 x parameters x tokens FLOPs per
  sample over the H100 SXM's dense BF16 peak (989 TFLOPS, NVIDIA datasheet; H200 has the same
  compute) at an ASSUMED model-FLOPs utilisation band.
- the wire: float32 gradients for the vision models (AMP keeps float32 parameters), bfloat16
  for the transformers (ASSUMED; Megatron-style float32 gradient reduction doubles the bytes).
  The 7 B model does not fit plain data parallelism in 80 GB; with ZeRO-1/2 (or FSDP's
  reduce-scatter + all-gather) the bytes on the wire per step equal an allreduce's, which is
  what is modelled.
- the non-network term: uncalibrated (launch.predict.predict_cluster's ASSUMED bands).
"""

from __future__ import annotations

from dataclasses import dataclass

from launch.errors import UsageError
from launch.predict import cluster as clusters
from launch.predict import predict_cluster
from launch.predict.predict import DDP_BUCKET_CAP_MB, MIB, Workload

H100_BF16_DENSE_FLOPS = 989e12  # NVIDIA H100 SXM datasheet, dense (no sparsity)
V100_RN50_AMP_IMG_S = 802.9  # benchmarks/published/dlperf-pytorch-rn50-amp.json, 1 GPU, batch 256


@dataclass(frozen=True)
class StudyModel:
    name: str
    parameters: int
    batch_size: int  # samples per GPU per step (images, or sequences)
    wire_bytes: int  # per gradient element
    compute_s: tuple[float, float]  # the compute step per GPU: (fast, slow)
    unit: str
    why: str


def _flops_step(params: float, tokens_per_sample: int, batch: int, mfu: tuple[float, float]) -> tuple[float, float]:
    flops = 6 * params * tokens_per_sample * batch
    return (flops / (H100_BF16_DENSE_FLOPS * mfu[1]), flops / (H100_BF16_DENSE_FLOPS * mfu[0]))


MODELS = (
    StudyModel(
        "ResNet-50",
        25_557_032,
        256,
        4,
        (256 / (V100_RN50_AMP_IMG_S * 5), 256 / (V100_RN50_AMP_IMG_S * 3)),
        "img",
        "V100 AMP 802.9 img/s (DLPerf) x ASSUMED H100 speed-up 3-5; float32 gradients",
    ),
    StudyModel(
        "ViT-B/16",
        86_567_656,
        128,
        4,
        _flops_step(86_567_656, 197, 128, (0.25, 0.45)),
        "img",
        "6 x params x 197 tokens per image at ASSUMED MFU 25-45 %; float32 gradients",
    ),
    StudyModel(
        "GPT 1.3B",
        1_300_000_000,
        8,
        2,
        _flops_step(1.3e9, 2048, 8, (0.35, 0.55)),
        "seq",
        "8 x 2048-token sequences per GPU (ASSUMED) at ASSUMED MFU 35-55 %; bfloat16 gradients (ASSUMED)",
    ),
    StudyModel(
        "Llama-2 7B",
        6_740_000_000,
        4,
        2,
        _flops_step(6.74e9, 4096, 4, (0.35, 0.55)),
        "seq",
        "4 x 4096-token sequences per GPU (ASSUMED) at ASSUMED MFU 35-55 %; bfloat16 gradients (ASSUMED); "
        "ZeRO-style sharding (same bytes on the wire)",
    ),
)
NETWORKS = ("ib-ndr-8x400", "roce-8x400", "tcp-200", "tcp-100")
NODES = (2, 4, 8, 16, 32, 64)
STUDIES = ("hpec2020-today",)


def workload(m: StudyModel, compute_s: float) -> Workload:
    return Workload(
        engine="ddp",
        batch_size=m.batch_size,
        compute_step_s=compute_s,
        gradient_bytes=m.parameters * m.wire_bytes,
        bucket_bytes=DDP_BUCKET_CAP_MB * MIB,
        source={"study": "hpec2020-today", "model": m.name, "why": m.why},
    )


def run(name: str = "hpec2020-today", node_type: str = "hgx-h100", nodes: tuple[int, ...] = NODES) -> dict:
    """Every model x network x node count: efficiency and throughput with their ranges."""
    if name not in STUDIES:
        raise UsageError(f"study {name!r}: one of {', '.join(STUDIES)}")
    if node_type not in ("hgx-h100", "hgx-h200"):
        raise UsageError(f"the {name} study is for hgx-h100 or hgx-h200 nodes (same NVLink 4 and compute)")
    rows = []
    for m in MODELS:
        for net in NETWORKS:
            c = clusters.make(node_type, net)
            for n in nodes:
                ranks = n * c.gpus_per_node
                mid_s = sum(m.compute_s) / 2
                pts = [
                    predict_cluster.point(workload(m, t), c, ranks, predict_cluster.uncalibrated(workload(m, t)))
                    for t in (mid_s, *m.compute_s)
                ]
                eff = [x for p in pts for x in p["scaling_efficiency_range"]]
                thr = [x for p in pts for x in p["img_per_s_range"]]
                rows.append(
                    {
                        "model": m.name,
                        "network": net,
                        "nodes": n,
                        "ranks": ranks,
                        "efficiency": pts[0]["scaling_efficiency"],
                        "efficiency_range": [min(eff), max(eff)],
                        "throughput": pts[0]["img_per_s"],
                        "throughput_range": [min(thr), max(thr)],
                        "unit": f"{m.unit}/s",
                        "network_only_efficiency": pts[0]["network_only_efficiency"],
                        "algorithms": pts[0]["algorithms"],
                    }
                )
    return {
        "study": name,
        "node_type": node_type,
        "question": "does the fabric still not matter?",
        "inputs": __doc__.split("\n\n", 2)[2].strip(),
        "models": [
            {
                "name": m.name,
                "parameters": m.parameters,
                "batch_size": m.batch_size,
                "gradient_bytes": m.parameters * m.wire_bytes,
                "compute_step_s": list(m.compute_s),
                "why": m.why,
            }
            for m in MODELS
        ],
        "networks": {net: clusters.NETWORKS[net].name for net in NETWORKS},
        "non_network": predict_cluster.uncalibrated(workload(MODELS[0], 1.0)).source,
        "rows": rows,
        "answer": answer(rows),
    }


def answer(rows: list[dict]) -> list[str]:
    """Per model: InfiniBand vs each Ethernet at the largest scale, as throughput ratios with ranges."""
    lines = []
    for model in dict.fromkeys(r["model"] for r in rows):
        top = max(r["nodes"] for r in rows if r["model"] == model)
        at = {r["network"]: r for r in rows if r["model"] == model and r["nodes"] == top}
        ib = at["ib-ndr-8x400"]
        parts = []
        for net in NETWORKS[1:]:
            r = at[net]
            parts.append(f"{net} {r['efficiency']:.0%} [{r['efficiency_range'][0]:.0%}-{r['efficiency_range'][1]:.0%}]")
        lines.append(
            f"{model} at {top} nodes: scaling efficiency ib-ndr-8x400 {ib['efficiency']:.0%} "
            f"[{ib['efficiency_range'][0]:.0%}-{ib['efficiency_range'][1]:.0%}] vs " + ", ".join(parts)
        )
    return lines
