#!/bin/sh
# Open MPI plm_rsh_agent for emulated nodes (launch/fleet/emulate/), used instead of
# ssh: `agent HOST CMD...` runs CMD inside the network namespace named HOST, with
# HOST as its hostname. As with ssh, CMD is the shell command Open MPI composed
# for its daemon; nothing here comes from the user.
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
