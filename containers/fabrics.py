"""Fabric profiles as data: what each fabric adds to an image, and what it hands
to `launch/` at run time (the environment that selects it, the host paths it
binds into the container).

Pure data, importable without hpccm (launch/ imports it). Values may name
site-specific settings as `{placeholders}` that `environment()` and
`bind_mounts()` fill in from the site configuration:

    {nic}             IP interface for bootstrap / TCP traffic (eth0, ib0, hsn0)
    {hca}             RDMA device(s): one (mlx5_0, hfi1_0, rdmap0s6) or a rail list (mlx5_0,mlx5_1)
    {hca_ports}       the same as device:port for UCX (mlx5_0:1,mlx5_1:1)
    {host_libfabric}  directory of the host's libfabric (Slingshot: the cxi provider)
    {host_libcxi}     the host's libcxi.so.1 (Slingshot)

Facts, briefly: Open MPI 4.1 selects transports by pml (ob1 = BTLs such as
tcp/vader; ucx; cm = an MTL such as ofi or psm2); UCX by UCX_TLS (rc/ud/dc
verbs, sm, tcp, self, cuda_copy, cuda_ipc, gdr_copy) and UCX_NET_DEVICES;
libfabric by FI_PROVIDER (tcp, verbs, efa, psm2, opx, cxi); NCCL by NCCL_NET
("Socket", "IB", or a plugin's name: aws-ofi-nccl >= 1.12 answers to "OFI"),
NCCL_IB_DISABLE, NCCL_IB_HCA, NCCL_SOCKET_IFNAME, NCCL_NET_GDR_LEVEL.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional

from containers import ompi_rules

_PLACEHOLDER = re.compile(r"{(\w+)}")


def _frozen(mapping: Mapping | None = None) -> Mapping:
    return MappingProxyType(dict(mapping or {}))


def _layer_packages(*packages: str, debian: tuple[str, ...] = ()) -> Mapping:
    """A fabric layer's apt packages: the same in cuda and cpu (they share the stack); cpu-debian
    adds `debian`, the providers Debian's packaged stack leaves out (rdma-core, libpsm2 there)."""
    return _frozen({"cpu": packages, "cuda": packages, "cpu-debian": (*debian, *packages)})


@dataclass(frozen=True)
class Bind:
    """A host path bound into the container (`host` may hold a * glob or placeholders)."""
    host: str
    container: str = ""               # empty: the same path as on the host
    required: bool = True             # missing on the host -> launch refuses to start
    why: str = ""

    @property
    def target(self) -> str:
        return self.container or self.host


@dataclass(frozen=True)
class FabricProfile:
    name: str
    summary: str
    packages: Mapping[str, tuple[str, ...]] = field(default_factory=_frozen)   # flavour -> apt packages
    source_builds: tuple[str, ...] = ()                  # cuda flavour: stack.SourceBuild names
    configure_flags: Mapping[str, tuple[str, ...]] = field(default_factory=_frozen)
    env: Mapping[str, str] = field(default_factory=_frozen)          # MPI, UCX, libfabric, gloo
    nccl_env: Mapping[str, str] = field(default_factory=_frozen)     # when NCCL does the allreduce
    gpudirect_env: Mapping[str, Mapping[str, str]] = field(default_factory=_frozen)  # "on"/"off"
    binds: tuple[Bind, ...] = ()
    gpudirect_binds: tuple[Bind, ...] = ()               # bound when GPUDirect is on
    # Directories put first on the image's LD_LIBRARY_PATH (baked into the image,
    # empty unless bound at run time: the host-library route of Slingshot).
    library_path: tuple[str, ...] = ()
    # The site file's keys under [fabrics.NAME]: the one naming the device (None: no device),
    # and the host paths the presets bind (placeholders of the same names).
    site_device_key: Optional[str] = None
    site_path_keys: tuple[str, ...] = ()
    # Open MPI coll/tuned rules for this fabric (containers.ompi_rules), written per run
    ompi_coll_rules: tuple[ompi_rules.Rule, ...] = ()

    @property
    def binds_host_libfabric(self) -> bool:
        """The host's libfabric replaces the image's at run time (Slingshot's cxi)."""
        return "host_libfabric" in self.site_path_keys

    def placeholders(self) -> set[str]:
        """Site settings this profile needs (see the module docstring)."""
        texts = [*self.env.values(), *self.nccl_env.values(),
                 *(v for env in self.gpudirect_env.values() for v in env.values()),
                 *(b.host for b in (*self.binds, *self.gpudirect_binds)),
                 *(b.container for b in (*self.binds, *self.gpudirect_binds))]
        # {hca_ports} is derived from {hca}: the site names only the devices
        return {"hca" if name == "hca_ports" else name for text in texts for name in _PLACEHOLDER.findall(text)}

    def environment(self, site: Mapping[str, str], *, nccl: bool = True,
                    gpudirect: Optional[bool] = None) -> dict[str, str]:
        """The environment selecting this fabric, placeholders filled from `site`."""
        env = dict(self.env)
        if nccl:
            env |= self.nccl_env
        if gpudirect is not None:
            env |= self.gpudirect_env.get("on" if gpudirect else "off", {})
        return {name: _fill(value, site, self.name) for name, value in env.items()}

    def bind_mounts(self, site: Mapping[str, str], gpudirect: Optional[bool] = None) -> list[Bind]:
        binds = (*self.binds, *(self.gpudirect_binds if gpudirect else ()))
        return [Bind(_fill(b.host, site, self.name), _fill(b.container, site, self.name),
                     b.required, b.why) for b in binds]


def hca_ports(hca: str) -> str:
    """'mlx5_0,mlx5_1' -> 'mlx5_0:1,mlx5_1:1' (UCX_NET_DEVICES wants device:port per rail)."""
    return ",".join(d if ":" in d else f"{d}:1" for d in (d.strip() for d in hca.split(",")) if d)


def _fill(text: str, site: Mapping[str, str], fabric: str) -> str:
    if "hca" in site and "hca_ports" not in site:
        site = {**site, "hca_ports": hca_ports(site["hca"])}

    def value(match: re.Match) -> str:
        if match.group(1) not in site:
            wanted = "hca" if match.group(1) == "hca_ports" else match.group(1)
            raise KeyError(f"fabric {fabric!r} needs the site setting {wanted!r}")
        return site[match.group(1)]
    return _PLACEHOLDER.sub(value, text)


# Shared pieces -----------------------------------------------------------
_GLOO = {"GLOO_SOCKET_IFNAME": "{nic}", "HOROVOD_GLOO_IFACE": "{nic}"}
_VERBS_DEVICES = Bind("/dev/infiniband", why="verbs device nodes (uverbs*, rdma_cm)")
_VERBS_CONFIG = Bind("/etc/libibverbs.d", required=False,
                     why="host verbs provider config, for host-matched providers")
# gdrcopy's device: Apptainer's minimal /dev drops it, and UCX (gdr_copy), NCCL (GDRCOPY)
# and libfabric (FI_HMEM_CUDA_USE_GDRCOPY) then lose gdrcopy silently. Not required:
# preflight warns when the host has no gdrdrv module loaded.
_GDRDRV = Bind("/dev/gdrdrv", required=False, why="gdrcopy (GPU memory copies by CPU mapping)")

ETHERNET = FabricProfile(
    name="ethernet",
    summary="TCP/IP only: Open MPI ob1 + tcp BTL, UCX/libfabric tcp, NCCL sockets",
    env=_frozen({
        "OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,vader,tcp",
        "OMPI_MCA_btl_tcp_if_include": "{nic}", "OMPI_MCA_oob_tcp_if_include": "{nic}",
        # Two TCP connections per peer: over one, one iteration in six of the segmented ring
        # below stalled ~0.3 s on emulated 1 Gbit links (mpi and horovod; none seen over two)
        "OMPI_MCA_btl_tcp_links": "2",
        "UCX_TLS": "tcp,sm,self", "UCX_NET_DEVICES": "{nic}",
        "FI_PROVIDER": "tcp", "FI_TCP_IFACE": "{nic}", **_GLOO,
    }),
    nccl_env=_frozen({"NCCL_IB_DISABLE": "1", "NCCL_NET": "Socket", "NCCL_SOCKET_IFNAME": "{nic}"}),
    # Large allreduces as a segmented ring: the reduction of one segment overlaps the
    # transfer of the next. Open MPI 4.1's fixed choice for 2 ranks (emulated 5 Gbit links,
    # in place) reaches 0.87 of the link at 64 MiB, this 0.98. Segments of 1 MiB or more
    # halved Horovod's rate on 1 Gbit links (0.51: every iteration stalled); 256 KiB
    # reached 0.96 at 1 and 5 Gbit for mpi and horovod. Below 16 MiB the fixed choice was
    # as fast or faster (benchmarks/fabric_emulation.py).
    ompi_coll_rules=(ompi_rules.Rule("allreduce", 16 * 2**20, "segmented_ring", segment_bytes=256 * 2**10),),
)

INFINIBAND = FabricProfile(
    name="infiniband",
    summary="InfiniBand / RoCE: rdma-core verbs, Open MPI over UCX (rc/ud), NCCL IB verbs",
    site_device_key="hca",
    packages=_layer_packages("ibverbs-utils", "rdmacm-utils", "infiniband-diags", "perftest",
                             debian=("ibverbs-providers", "librdmacm1")),
    env=_frozen({
        "OMPI_MCA_pml": "ucx", "OMPI_MCA_osc": "ucx", "OMPI_MCA_btl": "^openib,tcp",
        # every rail as device:port (UCX_NET_DEVICES=mlx5_0:1 alone would pin UCX to one NIC)
        "UCX_TLS": "rc,ud,sm,self", "UCX_NET_DEVICES": "{hca_ports}", **_GLOO,
    }),
    # NCCL_IB_HCA is a prefix list: "mlx5_1" also matches mlx5_10, mlx5_11; a leading "="
    # makes it exact (NCCL's environment-variable documentation, NCCL_IB_HCA)
    nccl_env=_frozen({"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB", "NCCL_IB_HCA": "={hca}",
                      "NCCL_SOCKET_IFNAME": "{nic}"}),
    # GPUDirect RDMA for MPI over UCX is the HCA reading GPU memory: UCX_IB_GPU_DIRECT_RDMA
    # (`ucx_info -f`: yes|no|try, default try). "yes" fails the device, and MPI_Init with it,
    # wherever UCX finds no peer-memory driver file (UCX 1.13's ib_md.c looks for
    # /sys/kernel/mm/memory_peers/nv_mem/version only; DMA-BUF-only hosts have none), while
    # NCCL's own GPUDirect works there. MPI carries no GPU buffers in these benchmarks (NCCL
    # does), so "on" asks UCX to try; whether GPUDirect ran is read from NCCL's log.
    # Dropping gdr_copy/cuda_ipc from UCX_TLS alone leaves it on: "off" says no.
    gpudirect_env=_frozen({
        "on": _frozen({"NCCL_NET_GDR_LEVEL": "PHB", "UCX_IB_GPU_DIRECT_RDMA": "try",
                       "UCX_TLS": "rc,ud,sm,self,cuda_copy,cuda_ipc,gdr_copy"}),
        "off": _frozen({"NCCL_NET_GDR_LEVEL": "LOC", "UCX_IB_GPU_DIRECT_RDMA": "no",
                        "UCX_TLS": "rc,ud,sm,self,cuda_copy"}),
    }),
    binds=(_VERBS_DEVICES, _VERBS_CONFIG),
    gpudirect_binds=(_GDRDRV,),
)

OMNIPATH = FabricProfile(
    name="omnipath",
    summary="Omni-Path: libpsm2, Open MPI cm + psm2 MTL, libfabric psm2; NCCL over hfi1 verbs",
    site_device_key="hca",
    packages=_layer_packages("libnuma1", "ibverbs-utils",
                             debian=("libpsm2-2", "libpsm2-2-compat", "ibverbs-providers")),
    # libpsm2 and libfabric's psm2 provider are in the common stack (Open MPI's psm2
    # MTL is built against libpsm2 there); nothing is built in this layer.
    env=_frozen({
        "OMPI_MCA_pml": "cm", "OMPI_MCA_mtl": "psm2", "FI_PROVIDER": "psm2",
        "PSM2_DEVICES": "self,shm,hfi", **_GLOO,
    }),
    nccl_env=_frozen({"NCCL_IB_DISABLE": "0", "NCCL_NET": "IB", "NCCL_IB_HCA": "={hca}",
                      "NCCL_SOCKET_IFNAME": "{nic}"}),
    # No PSM2_CUDA / PSM2_GPUDIRECT: the stack's libpsm2 is built without PSM_CUDA (it needs
    # the CUDA hfi1 driver's headers; containers.recipe), and such a libpsm2 ignores both, so
    # MPI over psm2 carries host buffers only. GPUDirect here is NCCL's, over hfi1 verbs.
    gpudirect_env=_frozen({
        "on": _frozen({"NCCL_NET_GDR_LEVEL": "PHB"}),
        "off": _frozen({"NCCL_NET_GDR_LEVEL": "LOC"}),
    }),
    gpudirect_binds=(_GDRDRV,),
    binds=(Bind("/dev/hfi1_*", why="HFI device nodes used by libpsm2"),
           Bind("/dev/infiniband", required=False, why="hfi1 verbs (NCCL's IB transport)"),
           _VERBS_CONFIG),
)

EFA = FabricProfile(
    name="efa",
    summary="AWS EFA: libfabric efa provider, Open MPI cm + ofi MTL, NCCL via aws-ofi-nccl",
    site_device_key="device",
    packages=_layer_packages("ibverbs-utils", debian=("ibverbs-providers",)),
    source_builds=("aws-ofi-nccl",),
    configure_flags=_frozen({"aws-ofi-nccl": ("--enable-platform-aws",)}),
    env=_frozen({
        "OMPI_MCA_pml": "cm", "OMPI_MCA_mtl": "ofi", "OMPI_MCA_mtl_ofi_provider_include": "efa",
        "FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1", "RDMAV_FORK_SAFE": "1", **_GLOO,
    }),
    nccl_env=_frozen({"NCCL_NET": "OFI", "NCCL_SOCKET_IFNAME": "{nic}"}),
    # FI_EFA_USE_DEVICE_RDMA is not a GPUDirect switch (fi_efa(7)): =0 only makes the
    # provider emulate RMA reads while the NIC still DMAs GPU memory, and =1 aborts on
    # EFA devices without RDMA read. Left to its default (on where the device has RDMA read);
    # GPUDirect is NCCL's choice to hand GPU buffers to the plugin: NCCL_NET_GDR_LEVEL.
    gpudirect_env=_frozen({"on": _frozen({"NCCL_NET_GDR_LEVEL": "PHB"}),
                           "off": _frozen({"NCCL_NET_GDR_LEVEL": "LOC"})}),
    binds=(_VERBS_DEVICES,),
    gpudirect_binds=(_GDRDRV,),
)

SLINGSHOT = FabricProfile(
    name="slingshot",
    summary="HPE Slingshot 11: the host's libfabric (cxi provider) bound in; NCCL via aws-ofi-nccl",
    site_device_key="device",
    # the host's cxi libfabric links libjson-c and libcurl
    packages=_layer_packages("libjson-c5", "libcurl4"),
    source_builds=("aws-ofi-nccl",),
    configure_flags=_frozen({"aws-ofi-nccl": ("--disable-platform-aws",)}),
    env=_frozen({
        "OMPI_MCA_pml": "cm", "OMPI_MCA_mtl": "ofi", "OMPI_MCA_mtl_ofi_provider_include": "cxi",
        "FI_PROVIDER": "cxi", "FI_CXI_DISABLE_HOST_REGISTER": "1",
        "FI_MR_CACHE_MONITOR": "userfaultfd", "FI_CXI_DEFAULT_CQ_SIZE": "131072", **_GLOO,
    }),
    # NCCL over cxi: HPE's published settings (HewlettPackard/shs-ccl-docs ccl_env.sh, as
    # quoted by Sigma2's "NCCL on Olivia" page, documentation.sigma2.no/hpc_machines/olivia/nccl.html;
    # the same set in Isambard-AI's env_vars.sh, docs.isambard.ac.uk): rendezvous by
    # alt_read with no eager data, hybrid receive matching, a larger TX queue.
    # NCCL_NET_GDR_LEVEL=PHB is part of that set on every run (NCCL's default is stricter
    # and leaves GPUDirect off where the NIC and GPU are not under one PCIe switch).
    nccl_env=_frozen({"NCCL_NET": "OFI", "NCCL_SOCKET_IFNAME": "{nic}", "NCCL_CROSS_NIC": "1",
                      "NCCL_NET_GDR_LEVEL": "PHB", "FI_CXI_RDZV_PROTO": "alt_read", "FI_CXI_RDZV_EAGER_SIZE": "0",
                      "FI_CXI_RDZV_THRESHOLD": "0", "FI_CXI_RDZV_GET_MIN": "0",
                      "FI_CXI_DEFAULT_TX_SIZE": "2048", "FI_CXI_RX_MATCH_MODE": "hybrid"}),
    # gdrcopy for libfabric's CUDA copies (Isambard-AI env_vars.sh: FI_HMEM_CUDA_USE_GDRCOPY=1)
    gpudirect_env=_frozen({"on": _frozen({"NCCL_NET_GDR_LEVEL": "PHB", "FI_HMEM_CUDA_USE_GDRCOPY": "1"}),
                           "off": _frozen({"NCCL_NET_GDR_LEVEL": "LOC"})}),
    gpudirect_binds=(_GDRDRV,),
    binds=(Bind("{host_libfabric}", "/opt/host/libfabric", why="host libfabric with the cxi provider"),
           Bind("{host_libcxi}", "/opt/host/libcxi/libcxi.so.1", why="libcxi, used by the cxi provider"),
           Bind("/dev/cxi*", why="Cassini NIC device nodes")),
    library_path=("/opt/host/libfabric", "/opt/host/libcxi"),
    site_path_keys=("host_libfabric", "host_libcxi"),
)

UNIVERSAL = FabricProfile(
    name="universal",
    summary="control: every fabric's libraries in one image; transports left to auto-selection",
    packages=_frozen({flavour: tuple(dict.fromkeys(
        pkg for profile in (INFINIBAND, OMNIPATH, EFA) for pkg in profile.packages.get(flavour, ())))
        for flavour in INFINIBAND.packages}),
    source_builds=("aws-ofi-nccl",),
    configure_flags=_frozen({"aws-ofi-nccl": ()}),
    env=_frozen(_GLOO),
    nccl_env=_frozen({"NCCL_SOCKET_IFNAME": "{nic}"}),
    binds=tuple(Bind(b.host, b.container, False, b.why) for b in
                (_VERBS_DEVICES, _VERBS_CONFIG, Bind("/dev/hfi1_*", why="Omni-Path HFI device nodes"))),
)

PROFILES: Mapping[str, FabricProfile] = _frozen(
    {p.name: p for p in (ETHERNET, INFINIBAND, OMNIPATH, EFA, SLINGSHOT, UNIVERSAL)})
FABRICS = tuple(PROFILES)
HOST_FABRICS = tuple(name for name in FABRICS if name != UNIVERSAL.name)  # what a host has; universal is an image


def profile(name: str) -> FabricProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown fabric {name!r}; choose from {', '.join(FABRICS)}") from None
