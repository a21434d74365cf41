"""Names of nodes and network interfaces, checked by shape before they reach a tool or a path.

A node name read from a file (another site's locate.json, a Slurm log) or from Slurm itself
ends up in `srun --exclude`, `#SBATCH --exclude`, `salloc --nodelist`, and in folder names of
locate's steps, which run as root; an interface name ends up in `btl_tcp_if_include`,
`NCCL_SOCKET_IFNAME` and the like. So each is one token of letters, digits, `_`, `.` and `-`,
never starting with `-` (a tool would read it as an option) or `.` (`..` is a path), and short:

- a node name: at most NODE_NAME_MAX characters (a hostname label is 63, a FQDN 253);
- an interface name: at most 15 characters (Linux's IFNAMSIZ less its NUL), `:` allowed for
  an alias (eth0:1).

`node_names(values, where)` checks a list read from a file and says which entry is wrong.
"""

from __future__ import annotations

import re

from launch.errors import UsageError

NODE_NAME_MAX = 253
NODE_NAME = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.-]{{0,{NODE_NAME_MAX - 1}}}")
INTERFACE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,14}")
SHAPE = f"letters, digits, '_', '.', '-', not starting with '-' or '.', at most {NODE_NAME_MAX}"


def is_node_name(value: object) -> bool:
    return isinstance(value, str) and NODE_NAME.fullmatch(value) is not None


def is_interface_name(value: object) -> bool:
    return isinstance(value, str) and INTERFACE_NAME.fullmatch(value) is not None


def node_name(value: object, where: str) -> str:
    """value, when it has a node name's shape; else one UsageError line naming where it came from."""
    if not is_node_name(value):
        raise UsageError(f"{where}: {value!r:.60} is not a node name ({SHAPE})")
    return str(value)


def node_names(values: object, where: str) -> list[str]:
    """A list of node names (from a file): each by shape."""
    if not isinstance(values, list):
        raise UsageError(f"{where}: expected a list of node names, got {type(values).__name__}")
    return [node_name(v, where) for v in values]


def interface_name(value: object, where: str) -> str:
    if not is_interface_name(value):
        raise UsageError(
            f"{where}: {value!r:.60} is not a network interface name (letters, digits, '_', '.', "
            "':', '-', not starting with '-' or '.', at most 15)"
        )
    return str(value)
