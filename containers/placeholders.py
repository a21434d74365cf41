"""Placeholders in a rendered recipe's text: what is known only after rendering (the recipe's
own hash, the bundle's commit) or only on the machine that builds (the stack image's digest
and path, the local CUDA bases). The recipe hash names the text with them in place, so it is
the same on every machine; containers.recipe.Recipe.filled() puts the values in."""

HASH_PLACEHOLDER = "@RECIPE_HASH@"
COMMIT_PLACEHOLDER = "@BUNDLE_COMMIT@"
STACK_DIGEST = "@STACK_DIGEST@"  # sha256 of the stack image, known once built
STACK_IMAGE, STACK_DEVEL_IMAGE = "@STACK_IMAGE@", "@STACK_DEVEL_IMAGE@"
LOCAL_DEVEL_BASE, LOCAL_RUNTIME_BASE = "@LOCAL_DEVEL_BASE@", "@LOCAL_RUNTIME_BASE@"
