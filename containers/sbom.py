"""The stack's bill of materials: a CycloneDX SBOM of an image, written with cyclonedx-python-lib.

Made at the end of a build (and on demand for an image built before this existed) from two
sources: what the image itself says (`dpkg-query`, the venv's `pip list`, the compiler) and the
pinned stack facts (containers/sources.py: canonical source URL and sha256 of each source-built
component; containers/recipe.py: its configure flags). The recipes' rendered text is not touched.
Kept beside the image (`X.sif` -> `X.sbom.cdx.json`; podman: CACHE/images/sbom/<id>.cdx.json),
carried by archives, shown by `image inspect --sbom`, and compared by `compare` and the report:

    diff(a, b) -> ["same components, rebuilt"] | ["ucx 1.13.1 vs 1.18.0", "+ foo 1.0", ...]

An SBOM from another site is data: `read` validates its shape and bounds its size and nesting
(containers/untrusted.py).
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from containers import sources, stack
from containers.digest import remembered_sha256
from containers.host import BuildError, cache_dir, runtime_binary
from containers.untrusted import UntrustedInput, load_json

SUFFIX = ".sbom.cdx.json"
RUNTIMES = ("apptainer", "podman")  # the runtimes whose images have an SBOM
MAX_BYTES = 8 << 20
PROPERTY = "fabric-bench"
# Debian source packages that make the communication stack (cpu-debian), by component name
STACK_SOURCES = ("openmpi", "ucx", "libfabric", "pmix", "rdma-core", "hwloc", "libpsm2", "python3.11")
# What runs inside the image (fixed text; no outside value reaches it)
PROBE = (
    r"dpkg-query -W -f '${Package}\t${Version}\t${source:Package}\t${source:Version}\n'; "
    "echo '@@pip'; " + stack.VENV + "/bin/python -m pip list --format json --disable-pip-version-check "
    "2>/dev/null; echo '@@cc'; gcc --version 2>/dev/null | head -n 1; echo '@@pycc'; "
    + stack.VENV
    + "/bin/python -c 'import platform; print(platform.python_compiler())'; "
    "echo '@@local'; ls /usr/local"
)


@dataclass
class Facts:
    """What an image says about itself."""

    debs: list[tuple[str, str, str, str]] = field(default_factory=list)  # package, version, source, src version
    python: list[tuple[str, str]] = field(default_factory=list)
    compiler: str = ""
    python_compiler: str = ""
    local: list[str] = field(default_factory=list)


def parse_probe(text: str) -> Facts:
    sections: dict[str, list[str]] = {"debs": []}
    current = "debs"
    for line in text.splitlines():
        if line.startswith("@@"):
            current = line[2:].strip()
            sections[current] = []
        else:
            sections.setdefault(current, []).append(line)
    facts = Facts()
    for line in sections["debs"]:
        parts = line.split("\t")
        if len(parts) == 4 and parts[0]:
            facts.debs.append((parts[0], parts[1], parts[2] or parts[0], parts[3] or parts[1]))
    try:
        facts.python = sorted((p["name"], p["version"]) for p in json.loads("\n".join(sections.get("pip", [])) or "[]"))
    except (ValueError, KeyError, TypeError):
        facts.python = []
    facts.compiler = " ".join(sections.get("cc", [])).strip()
    facts.python_compiler = " ".join(sections.get("pycc", [])).strip()
    facts.local = sorted(line.strip() for line in sections.get("local", []) if line.strip())
    return facts


def probe(image: str, runtime: str = "apptainer", store: Path | None = None) -> Facts:
    if runtime == "apptainer":
        argv = [runtime_binary(runtime), "exec", "--containall", image, "sh", "-c", PROBE]
        env = None
    else:
        from containers.oci import podman, podman_env

        argv = [*podman(store), "run", "--rm", "--network=none", image, "sh", "-c", PROBE]
        env = podman_env()
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=env, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        tail = (out.stderr.strip().splitlines() or [""])[-1]
        raise BuildError(f"cannot read the software list of {image} (exit {out.returncode}): {tail}")
    return parse_probe(out.stdout)


def upstream(debian_version: str) -> str:
    """1:4.1.4-3+b1 -> 4.1.4 (epoch and Debian revision dropped; +ds/+dfsg too)."""
    version = debian_version.split(":", 1)[-1]
    version = version.rsplit("-", 1)[0] if "-" in version else version
    return re.split(r"[+~]", version)[0]


def configure_flags(flavour: str) -> dict[str, str]:
    """Each source-built component's ./configure flags, as the flavour's stack recipe renders them."""
    from containers import recipe

    if flavour not in stack.FLAVOURS or flavour == "cpu-debian":
        return {}
    rendered = recipe.render_stack(flavour)
    text = rendered.definition + (rendered.devel_definition if rendered.devel_template else "")
    flags = {}
    for src in sources.flavour_sources(flavour):
        match = re.search(
            rf"cd /var/tmp/{re.escape(src.basename.split('.tar')[0])}[^\n]*?&&\s+(?:\S+=\S+\s+)*"
            rf"\./configure ([^\n&]*)",
            text,
        )
        if match is None:
            match = re.search(
                rf"/var/tmp/[^\s/]*{re.escape(src.component)}[^\s/]*-{re.escape(src.version)}"
                rf"[^\n]*?\./configure ([^\n&]*)",
                text,
            )
        if match:
            flags[src.component] = match.group(1).strip()
    return flags


def _prop(name: str, value: str):
    from cyclonedx.model import Property

    return Property(name=f"{PROPERTY}:{name}", value=value)


def document(
    facts: Facts, *, image_digest: str, flavour: str, fabric: str, base_digest: str, stack_digest: str = ""
) -> str:
    """The CycloneDX 1.6 JSON of an image (deterministic for the same facts)."""
    from cyclonedx.model import ExternalReference, ExternalReferenceType, HashAlgorithm, HashType, XsUri
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from packageurl import PackageURL

    bom = Bom(serial_number=uuid.uuid5(uuid.NAMESPACE_URL, f"fabric-bench:{image_digest}"))
    meta = [
        _prop("flavour", flavour),
        _prop("fabric", fabric),
        _prop("base-image-digest", base_digest or "unknown"),
        _prop("compiler", facts.compiler or "none in the image"),
        _prop("python-compiler", facts.python_compiler or "unknown"),
    ]
    if stack_digest:
        meta.append(_prop("stack-digest", stack_digest))
    bom.metadata.component = Component(
        name=f"fabric-bench-{fabric}-{flavour}",
        type=ComponentType.CONTAINER,
        bom_ref="image",
        version=image_digest,
        properties=meta,
    )
    flags = configure_flags(flavour)
    for src in sources.flavour_sources(flavour):  # built from source: /usr/local/<component> (cpu, cuda)
        if src.component not in facts.local:
            continue
        refs = [
            ExternalReference(
                type=ExternalReferenceType.SOURCE_DISTRIBUTION,
                url=XsUri(src.site_url),
                hashes=[HashType(alg=HashAlgorithm.SHA_256, content=src.rehearsal.sha256)] if src.rehearsal else None,
            )
        ]
        props = [_prop("role", "stack"), _prop("built", "from source"), _prop("compiler", facts.compiler or "unknown")]
        if src.component in flags:
            props.append(_prop("configure-flags", flags[src.component]))
        if src.rehearsal:
            props.append(_prop("source-file", src.rehearsal.file))
        bom.components.add(
            Component(
                name=src.component,
                version=src.version,
                bom_ref=f"src:{src.component}",
                external_references=refs,
                properties=props,
            )
        )
    seen_stack: set[str] = set()
    for package, version, source_pkg, source_version in sorted(facts.debs):
        role = "stack" if source_pkg in STACK_SOURCES and source_pkg not in seen_stack else "os"
        props = [
            _prop("role", role),
            _prop("debian-source", f"{source_pkg} {source_version}"),
            _prop("built", "Debian package"),
        ]
        if role == "stack":
            seen_stack.add(source_pkg)
            name, shown = source_pkg, upstream(source_version)
        else:
            name, shown = package, version
        bom.components.add(
            Component(
                name=name,
                version=shown,
                bom_ref=f"deb:{package}",
                purl=PackageURL("deb", "debian", package, version, qualifiers={"arch": "amd64"}),
                properties=props,
            )
        )
    for name, version in facts.python:
        bom.components.add(
            Component(
                name=name,
                version=version,
                bom_ref=f"pypi:{name.lower()}",
                purl=PackageURL("pypi", None, name.lower(), version),
                properties=[_prop("role", "python")],
            )
        )
    with warnings.catch_warnings():  # the image's dependency graph is not modelled, and the library says so
        warnings.simplefilter("ignore", UserWarning)
        text = JsonV1Dot6(bom).output_as_string(indent=1)
    data = json.loads(text)
    data["metadata"].pop("timestamp", None)  # the same image gives the same bytes
    data["metadata"].pop("tools", None)
    return json.dumps(data, indent=1, sort_keys=True) + "\n"


# ---------------------------------------------------------------- where it lives


def path_for(image: str, runtime: str = "apptainer", digest: str = "") -> Path:
    if runtime == "apptainer":
        return Path(str(image).removesuffix(".sif") + SUFFIX)
    return cache_dir() / "images" / "sbom" / f"{(digest or image).removeprefix('sha256:')[:64]}{SUFFIX}"


def _base_digest(labels: dict) -> str:
    base = labels.get("org.label-schema.usage.singularity.deffile.from", "")
    return "sha256:" + remembered_sha256(base, cache_dir()) if base and Path(base).is_file() else ""


def write_for(
    image: str,
    runtime: str,
    *,
    fabric: str,
    flavour: str,
    image_digest: str,
    base_digest: str = "",
    stack_digest: str = "",
    store: Path | None = None,
) -> Path:
    """Probe the image and write its SBOM beside it; returns the path."""
    facts = probe(image, runtime, store)
    stack_digest = f"sha256:{stack_digest}" if stack_digest and ":" not in stack_digest else stack_digest
    target = path_for(image, runtime, image_digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    digest = image_digest if image_digest.startswith("sha256:") else f"sha256:{image_digest}"
    partial = target.with_name(target.name + ".partial")
    partial.write_text(
        document(
            facts,
            image_digest=digest,
            flavour=flavour,
            fabric=fabric,
            base_digest=base_digest,
            stack_digest=stack_digest,
        )
    )
    partial.rename(target)
    return target


def ensure(image: str, runtime: str = "apptainer", store: Path | None = None) -> Path:
    """The image's SBOM, written now when the image has none yet (from its labels)."""
    from containers.oci import labels as image_labels
    from containers.oci import podman_id

    digest = "sha256:" + remembered_sha256(image, cache_dir()) if runtime == "apptainer" else podman_id(image, store)
    target = path_for(image, runtime, digest)
    if target.is_file():
        return target
    labels = image_labels(image, runtime, store)
    return write_for(
        image,
        runtime,
        fabric=labels.get("org.fabric-bench.fabric", "unknown"),
        flavour=labels.get("org.fabric-bench.flavour", "unknown"),
        image_digest=digest,
        base_digest=_base_digest(labels),
        stack_digest=labels.get("org.fabric-bench.stack-digest", ""),
        store=store,
    )


# ---------------------------------------------------------------- reading and comparing


@dataclass(frozen=True)
class Summary:
    image_digest: str
    base_digest: str
    compiler: str
    stack_digest: str
    stack: dict[str, str]  # communication-stack component -> version
    python: dict[str, str]
    os: dict[str, str]


class SbomError(ValueError):
    """One line: why an SBOM was refused."""


def read(text: str | bytes) -> Summary:
    """An SBOM's comparable content; anything malformed is one SbomError line."""
    try:
        data = load_json(text, "SBOM", MAX_BYTES)
    except UntrustedInput as exc:
        raise SbomError(str(exc)) from None
    if not isinstance(data, dict) or data.get("bomFormat") != "CycloneDX":
        raise SbomError("not a CycloneDX SBOM")
    metadata = _shaped(data.get("metadata"), dict, "metadata")
    meta = _shaped(metadata.get("component"), dict, "metadata.component")
    props = _properties(meta, "metadata.component")
    groups: dict[str, dict[str, str]] = {"stack": {}, "python": {}, "os": {}}
    for comp in _shaped(data.get("components"), list, "components"):
        if not isinstance(comp, dict) or not isinstance(comp.get("name"), str):
            raise SbomError("SBOM component without a name")
        role = _properties(comp, f"component {comp['name']!r:.40}").get(f"{PROPERTY}:role", "os")
        groups.get(role, groups["os"])[comp["name"]] = _text(comp.get("version"))
    return Summary(
        _text(meta.get("version")),
        props.get(f"{PROPERTY}:base-image-digest", ""),
        props.get(f"{PROPERTY}:compiler", ""),
        props.get(f"{PROPERTY}:stack-digest", ""),
        groups["stack"],
        groups["python"],
        groups["os"],
    )


def _shaped(value, kind: type, where: str):
    """value when it is of kind; absent (None) is an empty one; anything else is refused."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise SbomError(f"SBOM {where} is not a{'n object' if kind is dict else ' list'}")
    return value


def _text(value) -> str:
    """A scalar as text; a list or an object where a name or version belongs is refused."""
    if isinstance(value, (dict, list)):
        raise SbomError("SBOM has a list or an object where a name or a version belongs")
    return "" if value is None else str(value)


def _properties(owner: dict, where: str) -> dict[str, str]:
    return {
        str(p["name"]): _text(p.get("value"))
        for p in _shaped(owner.get("properties"), list, f"{where} properties")
        if isinstance(p, dict) and isinstance(p.get("name"), str)
    }


def _changes(a: dict[str, str], b: dict[str, str], label: str = "") -> list[str]:
    lines = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            lines.append(f"- {label}{name} {a[name]} (only in the first)")
        elif name not in a:
            lines.append(f"+ {label}{name} {b[name]} (only in the second)")
        elif a[name] != b[name]:
            lines.append(f"{label}{name} {a[name]} vs {b[name]}")
    return lines


def diff(a: Summary, b: Summary) -> list[str]:
    """What differs between two stacks' SBOMs, communication stack first."""
    if a.image_digest and a.image_digest == b.image_digest:
        return ["identical stack (same image digest)"]
    lines = _changes(a.stack, b.stack) + _changes(a.python, b.python, "python ") + _changes(a.os, b.os, "deb ")
    if a.compiler != b.compiler:
        lines.append(f"compiler {a.compiler or '?'} vs {b.compiler or '?'}")
    if a.base_digest and b.base_digest and a.base_digest != b.base_digest:
        lines.append(f"base image {a.base_digest[:19] or '?'} vs {b.base_digest[:19] or '?'}")
    return lines or ["same components, rebuilt (the image digests differ)"]


def for_archive(image: str, runtime: str, recorded: list[dict]) -> dict[str, bytes]:
    """The SBOMs an archive carries for its runs' image: `stack/sbom.cdx.json` (the image) and
    `stack/stack-sbom.cdx.json` (the stack image it was built FROM, found among the `recorded`
    images of this host's build registry). A runtime without images here (the host,
    charliecloud), or an image that is gone, gives none."""
    if runtime not in RUNTIMES or (str(image).endswith(".sif") and not Path(image).is_file()):
        return {}
    try:
        members = {"stack/sbom.cdx.json": ensure(image, runtime).read_bytes()}
        stack_digest = read(members["stack/sbom.cdx.json"]).stack_digest.removeprefix("sha256:")
        for entry in recorded:
            if (
                stack_digest
                and entry.get("sha256", "").removeprefix("sha256:") == stack_digest
                and entry.get("runtime") == runtime
                and (not str(entry.get("image")).endswith(".sif") or Path(entry["image"]).exists())
            ):
                members["stack/stack-sbom.cdx.json"] = ensure(entry["image"], runtime).read_bytes()
                break
    except (BuildError, SbomError, OSError):
        return {}
    return members
