"""Registry logins, looked up per registry host the way ORAS, skopeo and cosign look them up.

    login_for(host, given="")  -> "Basic <base64 user:password>" or "" (anonymous)

Where a login comes from, first found wins:
  1. `given`: a `user:password` the command was handed for the registry it names (the results
     client passes $FABRIC_BENCH_REGISTRY_AUTH for its one registry host, and no other);
  2. the auth files, each an `{"auths": {HOST: {"auth": base64(user:password)}}}` object:
     $REGISTRY_AUTH_FILE, $XDG_RUNTIME_DIR/containers/auth.json, ~/.config/containers/auth.json,
     $DOCKER_CONFIG/config.json (else ~/.docker/config.json), ~/.apptainer/docker-config.json;
  3. a credential helper those files name for the host (`credHelpers`) or for every host
     (`credsStore`): `docker-credential-NAME get`, the host on its stdin, a JSON answer.

A key matches a host exactly (host[:port]; a scheme and a path in the key are ignored), so a
login for one registry is never offered to another. What the files and helpers say is read
bounded; an identity token (Username `<token>`) is not a password and is not used.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

from containers.untrusted import UntrustedInput, load_json, read_json

AUTH_FILE_MAX_BYTES = 1 << 20
HELPER_ANSWER_MAX_BYTES = 1 << 16
HELPER_TIMEOUT_S = 10
HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def auth_files() -> list[Path]:
    """The auth files, in the order they are consulted (podman/skopeo, docker, apptainer)."""
    home = Path.home()
    docker = Path(os.environ["DOCKER_CONFIG"]) if os.environ.get("DOCKER_CONFIG") else home / ".docker"
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    files = [
        os.environ.get("REGISTRY_AUTH_FILE", ""),
        f"{runtime_dir}/containers/auth.json" if runtime_dir else "",
        str(home / ".config/containers/auth.json"),
        str(docker / "config.json"),
        str(home / ".apptainer/docker-config.json"),
    ]
    return [Path(f) for f in files if f]


def host_of_key(key: str) -> str:
    """An auths key's host[:port]: 'https://reg.example.org/v1/' -> 'reg.example.org'."""
    return re.sub(r"^[a-z]+://", "", key).split("/", 1)[0]


def _basic(user_password: str) -> str:
    return "Basic " + base64.b64encode(user_password.encode()).decode()


def _from_helper(helper: str, host: str) -> str:
    if not HELPER_NAME.fullmatch(helper):
        return ""
    binary = shutil.which(f"docker-credential-{helper}")
    if binary is None:
        return ""
    try:
        answer = subprocess.run(
            [binary, "get"], input=host.encode(), capture_output=True, timeout=HELPER_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if answer.returncode != 0 or len(answer.stdout) > HELPER_ANSWER_MAX_BYTES:
        return ""
    try:
        said = load_json(answer.stdout, f"docker-credential-{helper}", HELPER_ANSWER_MAX_BYTES)
    except UntrustedInput:
        return ""
    user, secret = (said.get("Username"), said.get("Secret")) if isinstance(said, dict) else (None, None)
    if not isinstance(user, str) or not isinstance(secret, str) or not user or user == "<token>":
        return ""
    return _basic(f"{user}:{secret}")


def login_for(host: str, given: str = "") -> str:
    """The Authorization value of a login for `host` (host[:port]), or '' for none."""
    if given:
        return _basic(given)
    helpers: list[str] = []
    for path in auth_files():
        try:
            config = read_json(path, AUTH_FILE_MAX_BYTES, "registry auth file")
        except (UntrustedInput, OSError):
            continue
        if not isinstance(config, dict):
            continue
        auths = config.get("auths")
        for key, entry in auths.items() if isinstance(auths, dict) else ():
            if host_of_key(str(key)) == host and isinstance(entry, dict) and isinstance(entry.get("auth"), str):
                return "Basic " + entry["auth"]
        named = config.get("credHelpers")
        if isinstance(named, dict) and isinstance(named.get(host), str):
            helpers.append(named[host])
        if isinstance(config.get("credsStore"), str):
            helpers.append(config["credsStore"])
    for helper in helpers:
        if found := _from_helper(helper, host):
            return found
    return ""
