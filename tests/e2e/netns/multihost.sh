#!/usr/bin/env bash
# A multi-host cluster on one machine, with membership in etcd and two routers. Each "host" is a network
# namespace with its own address on a bridge (10.77.0.0/24) and its own hostname (a UTS namespace per
# process, so the transfer engine's host ids differ between hosts and shared memory cannot be chosen across
# them):
#   host e: a 3-member etcd cluster (and the test's clients)
#   host a: router-a, encoder-0, prefill-0, decode-1
#   host b: router-b, decode-0 (and decode-2, started late)
# Checks, in order:
#   1. answers through either router equal epd-run's tokens, with and without an image;
#   2. encoder -> prefill moved over shm only (same host); prefill -> decode over shm to decode-1 (same host)
#      and over tcp to decode-0 (other host), from the transfer metrics by backend;
#   3. one etcd member killed under load: no request fails, and an instance started meanwhile (decode-2)
#      becomes placeable by both routers;
#   4. etcd stopped altogether for 10 s under load (every member killed, restarted on its data): no request
#      fails, no process restarts (pids and incarnations unchanged), every record is back in etcd;
#   5. kill -9 of decode-0: both routers stop placing on it (in-band) and unlist it once its lease expires;
#   6. kill -9 of router-a under load: router-b's clients lose nothing; router-a's clients lose at most their
#      in-flight request each, and that request completes when retried on router-b.
#   multihost.sh BIN_DIR SOURCE_DIR     (root: it creates namespaces, a bridge and veth pairs)
# Everything it creates carries the prefix below and is removed on exit, pass or fail; leftovers of an
# earlier run that was killed are removed first.
set -euo pipefail
BIN=$(realpath "$1")
SRC=$(realpath "$2")
HERE=$(dirname "$(realpath "$0")")
PREFIX=epdmh
SUBNET=10.77.0
ETCD_BIN=/usr/bin/etcd
LEASE_TTL_MS=2000

if [[ $(id -u) != 0 ]]; then
  echo "multihost: needs root (network namespaces); CI runs as root" >&2
  exit 77
fi
[[ -x $ETCD_BIN ]] || { echo "multihost: $ETCD_BIN missing (scripts/setup-deps installs etcd-server)" >&2; exit 1; }

# Hosts: name, address. Instances: id, role, host; LATE ones start during the test.
declare -A HOST_ADDR=([e]=${SUBNET}.10 [a]=${SUBNET}.11 [b]=${SUBNET}.12)
INSTANCES=("router-a router a" "encoder-0 encoder a" "prefill-0 prefill a" "decode-1 decode a"
           "router-b router b" "decode-0 decode b" "decode-2 decode b")
LATE=decode-2
ETCD_MEMBERS=(m0 m1 m2)

WORK=$(mktemp -d /tmp/${PREFIX}.XXXXXX)
declare -A PID_OF ETCD_PID
remove_everything() {
  for ns in $(ip netns list | awk '{print $1}' | grep "^${PREFIX}-" || true); do
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}" || true); do
    ip link del "$l" 2>/dev/null || true
  done
}
cleanup() {
  local rc=$?
  for p in "${PID_OF[@]}" "${ETCD_PID[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  remove_everything
  if [[ $rc != 0 ]]; then
    echo "multihost: FAILED (rc $rc); logs:" >&2
    for f in "$WORK"/*.log; do [[ -e $f ]] && { echo "== $f" >&2; tail -n 25 "$f" >&2; }; done
  fi
  [[ -n ${EPD_MULTIHOST_KEEP:-} ]] && echo "multihost: kept $WORK" >&2 || rm -rf "$WORK"
  exit $rc
}
remove_everything  # leftovers of a run that was killed before its trap ran
trap cleanup EXIT INT TERM

fail() { echo "multihost: $*" >&2; exit 1; }
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
in_ns() { ip netns exec "${PREFIX}-$1" "${@:2}"; }
host_of() {
  local i id h
  for i in "${INSTANCES[@]}"; do
    read -r id _ h <<<"$i"
    if [[ $id == "$1" ]]; then echo "$h"; return 0; fi
  done
  return 1
}

# The network: a bridge in the root namespace, one veth pair per host.
ip link add ${PREFIX}-br type bridge
ip link set ${PREFIX}-br up
for h in "${!HOST_ADDR[@]}"; do
  ns=${PREFIX}-$h
  ip netns add "$ns"
  ip link add ${PREFIX}-$h-o type veth peer name ${PREFIX}-$h-i
  ip link set ${PREFIX}-$h-i netns "$ns"
  ip link set ${PREFIX}-$h-o master ${PREFIX}-br up
  ip -n "$ns" addr add "${HOST_ADDR[$h]}/24" dev ${PREFIX}-$h-i
  ip -n "$ns" link set ${PREFIX}-$h-i up
  ip -n "$ns" link set lo up
done

# etcd: three members on host e, client ports 2379/2479/2579, peer ports one above.
E=${HOST_ADDR[e]}
client_url() { echo "http://$E:$((2379 + 100 * $1))"; }
peer_url() { echo "http://$E:$((2380 + 100 * $1))"; }
initial=""
for k in "${!ETCD_MEMBERS[@]}"; do initial+="${initial:+,}${ETCD_MEMBERS[$k]}=$(peer_url "$k")"; done
start_etcd_member() {
  local k=$1 name=${ETCD_MEMBERS[$1]}
  # Not through in_ns: a function in the background is a subshell, and $! must be etcd's own pid (ip netns
  # exec and unshare exec what they run).
  ip netns exec ${PREFIX}-e "$ETCD_BIN" --name "$name" --data-dir "$WORK/etcd-$name" --listen-client-urls "$(client_url "$k")" \
    --advertise-client-urls "$(client_url "$k")" --listen-peer-urls "$(peer_url "$k")" \
    --initial-advertise-peer-urls "$(peer_url "$k")" --initial-cluster "$initial" \
    --initial-cluster-token ${PREFIX} --initial-cluster-state new --log-level warn --logger zap \
    >>"$WORK/etcd-$name.log" 2>&1 &
  ETCD_PID[$name]=$!
}
etcd_range_count() {  # records under the cluster's instances/ prefix, as etcd (member $1) holds them
  local key range_end
  key=$(printf '/epd/netns/instances/' | base64 -w0)
  range_end=$(printf '/epd/netns/instances0' | base64 -w0)
  in_ns e curl -sf -m 2 -X POST "$(client_url "$1")/v3/kv/range" \
    -d "{\"key\":\"$key\",\"range_end\":\"$range_end\",\"count_only\":true}" |
    python3 -c 'import json,sys; print(int(json.load(sys.stdin).get("count", 0)))'
}
for k in "${!ETCD_MEMBERS[@]}"; do start_etcd_member "$k"; done
for _ in $(seq 200); do etcd_range_count 0 >/dev/null 2>&1 && break; sleep 0.1; done
etcd_range_count 0 >/dev/null || fail "etcd did not serve in 20 s"

# The cluster file.
ids=()
for i in "${INSTANCES[@]}"; do read -r id _ _ <<<"$i"; ids+=(--id "$id"); done
"$BIN/epd-keygen" --out "$WORK/keys" "${ids[@]}" >/dev/null
cfg=$WORK/cluster.toml
endpoints=""
for k in "${!ETCD_MEMBERS[@]}"; do endpoints+="${endpoints:+, }\"$(client_url "$k")\""; done
cat >"$cfg" <<TOML
[cluster]
name = "netns"
registry = "etcd"
etcd_endpoints = [$endpoints]
etcd_lease_ttl_ms = $LEASE_TTL_MS
heartbeat_interval_ms = 100
heartbeat_misses = 10
request_timeout_ms = 20000
max_attempts = 4

[model]
preset = "tiny"

[security]
curve_keys = "keys/cluster.pub"

[defaults.prefill]
bootstrap_timeout_ms = 3000
TOML
port=17400
declare -A ROLE_OF ADDR_OF METRICS_OF
for i in "${INSTANCES[@]}"; do
  read -r id role h <<<"$i"
  addr=${HOST_ADDR[$h]}
  ROLE_OF[$id]=$role ADDR_OF[$id]=$addr METRICS_OF[$id]=$addr:$((port + 100))
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

# Each instance in its host's network namespace, with the host's name in its own UTS namespace.
start() {
  local id=$1 h
  h=$(host_of "$1")
  ip netns exec "${PREFIX}-$h" unshare --uts sh -c "hostname ${PREFIX}-$h && exec \"$BIN/epd-${ROLE_OF[$id]}\" --config \"$cfg\" --id $id" \
    >>"$WORK/$id.log" 2>&1 &
  PID_OF[$id]=$!
}
for i in "${INSTANCES[@]}"; do read -r id _ _ <<<"$i"; [[ $id == "$LATE" ]] || start "$id"; done

ROUTER_A=http://${ADDR_OF[router-a]}:18400
ROUTER_B=http://${ADDR_OF[router-b]}:18400
instances() { in_ns e curl -sf -m 2 "$1/v1/instances" || echo '[]'; }
# listed ROUTER [--healthy]: the ids the router lists (healthy ones only with --healthy), sorted, one line.
listed() {
  instances "$1" | python3 -c '
import json, sys
h = len(sys.argv) > 1
print(" ".join(sorted(i["id"] for i in json.load(sys.stdin) if not h or i.get("healthy"))))' "${@:2}"
}
incarnations() { instances "$1" | python3 -c 'import json,sys; print(sorted((i["id"], i["incarnation"]) for i in json.load(sys.stdin)))'; }
# wait_for SECONDS COMMAND...: polls every 50 ms; prints the ms it took, fails after SECONDS.
wait_for() {
  local limit=$1 t0
  t0=$(date +%s%N)
  shift
  while ! "$@"; do
    (($(ms_since "$t0") < limit * 1000)) || return 1
    sleep 0.05
  done
  ms_since "$t0"
}
all_healthy_on() {  # all_healthy_on ROUTER ID...
  local have
  have=" $(listed "$1" --healthy) "
  for id in "${@:2}"; do [[ $have == *" $id "* ]] || return 1; done
}
both_list_healthy() { all_healthy_on "$ROUTER_A" "$@" && all_healthy_on "$ROUTER_B" "$@"; }
not_healthy_on_either() {
  [[ " $(listed "$ROUTER_A" --healthy) " != *" $1 "* && " $(listed "$ROUTER_B" --healthy) " != *" $1 "* ]]
}
not_listed_on_either() { [[ " $(listed "$ROUTER_A") " != *" $1 "* && " $(listed "$ROUTER_B") " != *" $1 "* ]]; }

EARLY=(router-a encoder-0 prefill-0 decode-1 router-b decode-0)
ms=$(wait_for 40 both_list_healthy "${EARLY[@]}") || fail "both routers did not list every instance healthy in 40 s"
echo "multihost: both routers list all ${#EARLY[@]} instances healthy ${ms} ms after start"

# 1. Tokens through either router, with and without an image, equal epd-run's.
image=$SRC/configs/images/checker.ppm
run_tokens() { "$BIN/epd-run" --preset tiny --prompt "$1" "${@:2}" --max-tokens 12 --json |
  python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))'; }
want_image=$(run_tokens "Hello netns" --image "$image")
want_text=$(run_tokens "Hosts apart")
printf '{"prompt": "Hello netns", "max_tokens": 12, "image": "%s"}' "$(base64 -w0 "$image")" >"$WORK/image.json"
printf '{"prompt": "Hosts apart", "max_tokens": 12}' >"$WORK/text.json"
ask() {  # ask ROUTER BODY_FILE: the answer's tokens
  in_ns e curl -sf -m 30 -X POST "$1/v1/generate" --data-binary "@$2" |
    python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["tokens"]))'
}
for r in "$ROUTER_A" "$ROUTER_B"; do
  for n in 1 2 3; do
    got=$(ask "$r" "$WORK/image.json") || fail "$r: request $n with an image failed"
    [[ $got == "$want_image" ]] || fail "$r request $n: tokens $got, epd-run gave $want_image"
    got=$(ask "$r" "$WORK/text.json") || fail "$r: text request $n failed"
    [[ $got == "$want_text" ]] || fail "$r text request $n: tokens $got, epd-run gave $want_text"
  done
done
echo "multihost: 12 requests through both routers across hosts gave epd-run's tokens"

# 2. Transfers by backend.
jobs_of() {  # jobs_of ID BACKEND PEER_ROLE: delivered transfer jobs of ID to PEER_ROLE over BACKEND
  in_ns "$(host_of "$1")" curl -sf "http://${METRICS_OF[$1]}/metrics" >"$WORK/metrics.txt" || fail "no metrics from $1"
  { grep '^epd_transfer_size_bytes_count{' "$WORK/metrics.txt" || true; } | { grep "backend=\"$2\"" || true; } |
    { grep "peer_role=\"$3\"" || true; } | awk '{s += $2} END {print s + 0}'
}
e_shm=$(jobs_of encoder-0 shm prefill) e_tcp=$(jobs_of encoder-0 tcp prefill)
echo "multihost: transfer jobs encoder->prefill shm=$e_shm tcp=$e_tcp"
((e_shm > 0 && e_tcp == 0)) || fail "encoder -> prefill (same host) did not go over shm only"

# Load: clients on host e, half on each router; each summary is one JSON line in WORK/client-N.out.
CLIENTS=()
start_load() {  # start_load TAG: 2 clients per router, alternating image and text requests
  rm -f "$WORK/stop-$1"
  local n=0
  for r in "$ROUTER_A" "$ROUTER_B"; do
    for body in image text; do
      local want=$want_image
      [[ $body == text ]] && want=$want_text
      local other=$ROUTER_B
      [[ $r == "$ROUTER_B" ]] && other=$ROUTER_A
      in_ns e python3 "$HERE/load_client.py" --url "$r" --fallback "$other" --body "$WORK/$body.json" \
        --want "$want" --stop-file "$WORK/stop-$1" --max-seconds 90 >"$WORK/client-$1-$n.out" \
        2>>"$WORK/clients.log" &
      CLIENTS+=($!)
      n=$((n + 1))
    done
  done
}
# stop_load TAG: stops the clients and waits for them (so not in a subshell); writes the summed summary,
# "ok wrong errors lost retried_ok retried_failed", to WORK/summary-TAG.
stop_load() {
  touch "$WORK/stop-$1"
  for c in "${CLIENTS[@]}"; do wait "$c" || true; done
  CLIENTS=()
  cat "$WORK"/client-"$1"-*.out | python3 -c '
import json, sys
t = {"ok": 0, "wrong": 0, "errors": 0, "lost": 0, "retried_ok": 0, "retried_failed": 0}
for line in sys.stdin:
    s = json.loads(line)
    for k in t:
        t[k] += sum(s[k].values()) if k == "errors" else s[k]
print(t["ok"], t["wrong"], t["errors"], t["lost"], t["retried_ok"], t["retried_failed"])' >"$WORK/summary-$1"
}
expect_clean() {  # expect_clean WHAT TAG: the clients of load TAG lost nothing
  stop_load "$2"
  read -r ok wrong errors lost rok rfail <"$WORK/summary-$2"
  echo "multihost: $1: $ok answered, $wrong wrong, $errors errors, $lost lost"
  ((ok > 0)) || fail "$1: no request was answered"
  ((wrong == 0 && errors == 0 && lost == 0 && rok == 0 && rfail == 0)) || fail "$1: requests failed"
}
alive() { for id in "$@"; do kill -0 "${PID_OF[$id]}" 2>/dev/null || fail "$id (pid ${PID_OF[$id]}) is not running"; done; }

# 3. One etcd member killed under load; an instance started meanwhile registers and is placed.
incarnations_before=$(incarnations "$ROUTER_A")
start_load member
sleep 1
kill -9 "${ETCD_PID[m2]}"
start "$LATE"
ms=$(wait_for 30 both_list_healthy "$LATE") || fail "$LATE was not placeable by both routers with one etcd member down"
echo "multihost: etcd member m2 killed; $LATE placeable by both routers ${ms} ms after its start"
sleep 2
expect_clean "one etcd member down" member
start_etcd_member 2
ALL=("${EARLY[@]}" "$LATE")
alive "${ALL[@]}"
[[ $(etcd_range_count 0) == "${#ALL[@]}" ]] || fail "etcd holds $(etcd_range_count 0) records, want ${#ALL[@]}"
# Sequential requests all tie on load and go to one decode; under load both decodes served rooms, so the
# prefill wrote KV to both hosts: over tcp to decode-0 (host b), over shm to decode-1 (its own host).
p_tcp=$(jobs_of prefill-0 tcp decode) p_shm=$(jobs_of prefill-0 shm decode)
echo "multihost: transfer jobs prefill->decode tcp=$p_tcp shm=$p_shm"
((p_tcp > 0)) || fail "prefill -> decode on the other host never went over tcp"
((p_shm > 0)) || fail "prefill -> decode-1 on its own host never went over shm"

# 4. etcd stopped altogether for 10 s under load: every member killed, then restarted on its data.
incarnations_before=$(incarnations "$ROUTER_A")
start_load outage
sleep 1
for m in "${ETCD_MEMBERS[@]}"; do kill -9 "${ETCD_PID[$m]}"; done
for m in "${ETCD_MEMBERS[@]}"; do wait "${ETCD_PID[$m]}" 2>/dev/null || true; done
t_down=$(date +%s%N)
sleep 10
for k in "${!ETCD_MEMBERS[@]}"; do start_etcd_member "$k"; done
back() { [[ $(etcd_range_count 0 2>/dev/null) == "${#ALL[@]}" ]]; }
ms=$(wait_for 30 back) || fail "not every record was back in etcd 30 s after it restarted"
echo "multihost: etcd down $(( $(ms_since "$t_down") - ms )) ms; every record back ${ms} ms after its restart"
sleep 1
expect_clean "etcd stopped for 10 s" outage
alive "${ALL[@]}"
[[ $(incarnations "$ROUTER_A") == "$incarnations_before" ]] || fail "incarnations changed over the outage"
[[ $(incarnations "$ROUTER_B") == "$incarnations_before" ]] || fail "router-b's incarnations differ from router-a's"
echo "multihost: no process restarted, incarnations unchanged"

# 5. kill -9 of decode-0: routed around in-band, unlisted when its lease expires.
kill -9 "${PID_OF[decode-0]}"
t0=$(date +%s%N)
wait_for 10 not_healthy_on_either decode-0 >/dev/null || fail "decode-0 still placeable 10 s after kill -9"
inband=$(ms_since "$t0")
wait_for 10 not_listed_on_either decode-0 >/dev/null || fail "decode-0 still listed 10 s after kill -9"
unlisted=$(ms_since "$t0")
echo "multihost: decode-0 unplaceable on both routers ${inband} ms after kill -9, unlisted ${unlisted} ms (lease ${LEASE_TTL_MS} ms)"
[[ $(etcd_range_count 0) == $((${#ALL[@]} - 1)) ]] || fail "decode-0's record is still in etcd"
unset "PID_OF[decode-0]"

# 6. kill -9 of router-a under load: only its in-flight requests are lost, and each completes on router-b.
start_load router
sleep 2
kill -9 "${PID_OF[router-a]}"
unset "PID_OF[router-a]"
sleep 3
stop_load router
read -r ok wrong errors lost rok rfail <"$WORK/summary-router"
echo "multihost: router-a killed under load: $ok answered, $wrong wrong, $errors errors, $lost lost, of which $rok completed on router-b"
((wrong == 0 && errors == 0 && rfail == 0)) || fail "router kill: wrong answers or errors"
((lost <= 2)) || fail "router kill: $lost requests lost, router-a had at most 2 in flight"
((rok == lost)) || fail "router kill: $rok of $lost lost requests completed on router-b"
got=$(ask "$ROUTER_B" "$WORK/image.json") || fail "router-b does not answer after router-a's death"
[[ $got == "$want_image" ]] || fail "router-b after router-a's death: tokens $got"
echo "multihost: passed"
