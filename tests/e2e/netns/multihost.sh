#!/usr/bin/env bash
# A multi-host cluster on one machine: each "host" is a network namespace with its own address on a bridge
# (10.77.0.0/24) and its own hostname (a UTS namespace per process, so the transfer engine's host id differs
# between hosts and shared memory cannot be chosen across them). The router, encoder and prefill share host a;
# decode runs on host b. Checks: answers equal epd-run's tokens; encoder -> prefill moved over shm (same
# host) and prefill -> decode over tcp (other host), from the transfer metrics by backend; kill -9 of the
# decode removes it from the router's /v1/instances.
#   multihost.sh BIN_DIR SOURCE_DIR     (root: it creates namespaces, a bridge and veth pairs)
# Everything it creates carries the prefix below and is removed on exit, pass or fail; leftovers of an
# earlier run that was killed are removed first.
set -euo pipefail
BIN=$(realpath "$1")
SRC=$(realpath "$2")
PREFIX=epdmh
SUBNET=10.77.0

# Which instances run on which host: "host address instance:role[:port] ...". The router hosts the registry;
# a second router is not possible with the embedded registry (only the registry's process can place
# requests), so host c stays empty until a registry backend other than the router's exists.
HOSTS=(
  "a ${SUBNET}.11 router:router encoder-0:encoder prefill-0:prefill"
  "b ${SUBNET}.12 decode-0:decode"
)
if [[ $(id -u) != 0 ]]; then
  echo "multihost: needs root (network namespaces); CI runs as root" >&2
  exit 77
fi

WORK=$(mktemp -d /tmp/${PREFIX}.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for ns in $(ip netns list | awk '{print $1}' | grep "^${PREFIX}-" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  if [[ $rc != 0 ]]; then
    echo "multihost: FAILED (rc $rc); logs:" >&2
    tail -n 30 "$WORK"/*.log >&2 || true
  fi
  rm -rf "$WORK"
  exit $rc
}
trap cleanup EXIT INT TERM
# Leftovers of a run that was killed before its trap ran.
PIDS=()
(trap - EXIT; for ns in $(ip netns list | awk '{print $1}' | grep "^${PREFIX}-" || true); do
   for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
   ip netns del "$ns"; done
 for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}" || true); do
   ip link del "$l" 2>/dev/null || true; done)

fail() { echo "multihost: $*" >&2; exit 1; }

# The network: a bridge in the root namespace, one veth pair per host.
ip link add ${PREFIX}-br type bridge
ip link set ${PREFIX}-br up
for h in "${HOSTS[@]}"; do
  read -r name addr _ <<<"$h"
  ns=${PREFIX}-$name
  ip netns add "$ns"
  ip link add ${PREFIX}-$name-o type veth peer name ${PREFIX}-$name-i
  ip link set ${PREFIX}-$name-i netns "$ns"
  ip link set ${PREFIX}-$name-o master ${PREFIX}-br up
  ip -n "$ns" addr add "$addr/24" dev ${PREFIX}-$name-i
  ip -n "$ns" link set ${PREFIX}-$name-i up
  ip -n "$ns" link set lo up
done

# The cluster file, from the table above.
"$BIN/epd-keygen" --out "$WORK/keys" $(for h in "${HOSTS[@]}"; do
  read -r _ _ insts <<<"$h"; for i in $insts; do echo --id "${i%%:*}"; done; done) >/dev/null
cfg=$WORK/cluster.toml
cat >"$cfg" <<TOML
[cluster]
name = "netns"
registry = "router"
heartbeat_interval_ms = 200
heartbeat_misses = 3
request_timeout_ms = 20000

[model]
preset = "tiny"

[security]
curve_keys = "keys/cluster.pub"
TOML
port=17400
declare -A NS_OF ADDR_OF ROLE_OF METRICS_OF
for h in "${HOSTS[@]}"; do
  read -r name addr insts <<<"$h"
  for i in $insts; do
    id=${i%%:*}
    role=${i#*:}
    NS_OF[$id]=${PREFIX}-$name
    ADDR_OF[$id]=$addr
    ROLE_OF[$id]=$role
    METRICS_OF[$id]=$addr:$((port + 100))
    {
      echo
      echo "[[instance]]"
      echo "id = \"$id\""
      echo "role = \"$role\""
      echo "control = \"tcp://$addr:$port\""
      echo "metrics = \"$addr:$((port + 100))\""
      [[ $role == router ]] && echo "http = \"$addr:18400\""
      echo "[instance.transport]"
      echo "host = \"$addr\""
    } >>"$cfg"
    port=$((port + 1))
  done
done

# Each instance in its host's network namespace, with the host's name in its own UTS namespace.
start() {
  local id=$1 host=${NS_OF[$1]#${PREFIX}-}
  ip netns exec "${NS_OF[$id]}" unshare --uts sh -c "hostname ${PREFIX}-$host && exec \"$BIN/epd-${ROLE_OF[$id]}\" --config \"$cfg\" --id $id" \
    >"$WORK/$id.log" 2>&1 &
  PIDS+=($!)
  eval "PID_$(echo "$id" | tr -- - _)=$!"
}
for id in "${!ROLE_OF[@]}"; do start "$id"; done

ROUTER=http://${ADDR_OF[router]}:18400
in_ns() { ip netns exec "${NS_OF[$1]}" "${@:2}"; }
# Ready: every role has a healthy instance (the router's readiness), within 30 s.
for _ in $(seq 300); do
  in_ns router curl -sf "$ROUTER/health/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
in_ns router curl -sf "$ROUTER/health/ready" >/dev/null || fail "the cluster did not get ready in 30 s"

# Requests with an image: tokens equal to the colocated run's.
image=$SRC/configs/images/checker.ppm
want=$("$BIN/epd-run" --preset tiny --prompt "Hello netns" --image "$image" --max-tokens 12 --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
for n in 1 2 3; do
  body=$(printf '{"prompt": "Hello netns", "max_tokens": 12, "image": "%s"}' "$(base64 -w0 "$image")")
  got=$(in_ns router curl -sf -X POST "$ROUTER/v1/generate" -d "$body" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])')
  [[ $got == "$want" ]] || fail "request $n: tokens $got, epd-run gave $want"
done
echo "multihost: 3 requests across hosts gave epd-run's tokens $want"

# The transfers by backend: encoder -> prefill within host a over shm; prefill -> decode across hosts over tcp.
jobs() {  # jobs ID BACKEND PEER_ROLE: delivered transfer jobs of ID to PEER_ROLE over BACKEND
  in_ns "$1" curl -sf "http://${METRICS_OF[$1]}/metrics" >"$WORK/metrics.txt" || fail "no metrics from $1"
  { grep '^epd_transfer_size_bytes_count{' "$WORK/metrics.txt" || true; } | { grep "backend=\"$2\"" || true; } |
    { grep "peer_role=\"$3\"" || true; } | awk '{s += $2} END {print s + 0}'
}
e_shm=$(jobs encoder-0 shm prefill) e_tcp=$(jobs encoder-0 tcp prefill)
p_tcp=$(jobs prefill-0 tcp decode) p_shm=$(jobs prefill-0 shm decode)
echo "multihost: transfer jobs encoder->prefill shm=$e_shm tcp=$e_tcp, prefill->decode tcp=$p_tcp shm=$p_shm"
((e_shm > 0 && e_tcp == 0)) || fail "encoder -> prefill (same host) did not go over shm only"
((p_tcp > 0 && p_shm == 0)) || fail "prefill -> decode (other host) did not go over tcp only"

# kill -9 of the decode: it leaves the router's /v1/instances.
kill -9 "$PID_decode_0"
t0=$(date +%s%N)
gone=
for _ in $(seq 100); do
  if ! in_ns router curl -sf "$ROUTER/v1/instances" | grep -q '"decode-0"'; then gone=1; break; fi
  sleep 0.05
done
[[ -n $gone ]] || fail "decode-0 still listed 5 s after kill -9"
echo "multihost: decode-0 gone from /v1/instances $(( ($(date +%s%N) - t0) / 1000000 )) ms after kill -9"
echo "multihost: passed"
