"""What is IN an image: pinned stack, fabric profiles, hpccm recipe, build driver."""
