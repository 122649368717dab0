# Runs inside the Soft-RoCE VM (scripts/rdma-vm --script), after rxe0 is up, with `sh -e`.
# Every binary given to rdma-vm is on PATH (/epd/bin).
echo "== device: kernel $(uname -r); what rxe0 reports about memory windows and registrations"
ibv_devinfo -v -d rxe0 | grep -iE 'max_mw|max_mr|MEM_WINDOW|MEM_MGT' || true
t0=$(date +%s)
echo "== transport conformance cases on rdma (real verbs over rxe0, target in a child process)"
transport_tests '[verbs]' --warn NoTests --durations yes
t1=$(date +%s)
echo "== rdma-specific cases (remote access, reconnect, bounded WRs, simultaneous connects, choice, handshakes)"
rdma_tests '[verbs]' --warn NoTests --durations yes
t2=$(date +%s)
echo "== the pipeline over rdma: router, encoder, prefill, decode as processes with backend = \"rdma\""
rdma_e2e_tests '[vm]' --warn NoTests --durations yes
t3=$(date +%s)
echo "epd-vm: timings: transport [verbs] $((t1 - t0))s, rdma [verbs] $((t2 - t1))s, pipeline [vm] $((t3 - t2))s"
