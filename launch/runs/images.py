"""Which image a run named by a file that travels may start here: one rule for every door.

An experiment file travels between sites as an archive does (launch.plan.experiment), and an
image is code: whoever names it chooses what runs. So the image a file names, with the runtime
it names, runs here only where

- this site has it: a sha256 its runtime knows it by (a SIF's digest; podman's digest or image
  id) is recorded in this site's image store (containers.image_store: what `make image` built), or
- this site names it: `sweep --accept-image IMAGE`, as `replay --image` names this site's image
  for an archive's run (an archive's own image is never run: launch.runs.replay).

The image and the runtime typed on this site's command line (`run --image --runtime`) are the
site's own choice. A dry run shows the images a sweep would run without this check: a plan may
name images not built yet.
"""

from __future__ import annotations

from containers.image_store import recorded_digests, registry_path
from containers.untrusted import UntrustedInput, regular_file
from launch import shapes
from launch.ranks.runspec import RunSpec
from launch.ranks.runtimes import Runtime, runtime_name, runtime_named
from launch.shapes import ImageRef


def stored(runtime: Runtime, image: ImageRef) -> bool:
    """Whether this site's image store records a digest `runtime` knows `image` by. An image
    file that is not a regular file is not read (a FIFO or a device would never end a hash)."""
    if runtime.image_is_file:
        try:
            regular_file(image, "image")
        except UntrustedInput:
            return False
    return bool(runtime.identities(image) & recorded_digests())


def refusal(spec: RunSpec, accepted: tuple[str, ...]) -> str | None:
    """Why the image of `spec`, named by a travelling file, may not run here, or None where it
    may: no image (the host's software), an image this site has, or one it accepted by name
    (`accepted`: --accept-image)."""
    if not spec.containerised or not spec.image:
        return None
    image = shapes.image("--image", spec.image)
    if image in accepted:
        return None
    runtime = runtime_named(runtime_name("--runtime", spec.runtime))
    if stored(runtime, image):
        return None
    return (
        f"image {image} ({runtime.name}) is not one this site has built (no digest {runtime.name} knows it by "
        f"is in {registry_path()}): an image a travelling file names runs only where this site has it "
        f"or accepts it by name (--accept-image {image})"
    )
