# Runs inside the Soft-RoCE VM (scripts/rdma-vm --script), after rxe0 is up, with `sh -e`.
# Every binary given to rdma-vm is on PATH (/epd/bin).
echo "== transport conformance cases on rdma (real verbs over rxe0, target in a child process)"
transport_tests '[verbs]' --warn NoTests --durations yes
echo "== rdma-specific cases (remote access, reconnect, bounded WRs, simultaneous connects, choice)"
rdma_tests '[verbs]' --warn NoTests --durations yes
if command -v epd-bench >/dev/null; then
  echo "== epd-bench transfer --backend rdma  [EMULATION ONLY: Soft-RoCE under qemu TCG, not NIC figures]"
  epd-bench transfer --backend rdma --quick --seconds 0.5
fi
