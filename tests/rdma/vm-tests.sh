# Runs inside the Soft-RoCE VM (scripts/rdma-vm --script), after rxe0 is up, with `sh -e`.
# Every binary given to rdma-vm is on PATH (/epd/bin).
echo "== rdma conformance on real verbs (rxe0, two processes)"
epd-rdma-tests '[verbs]' --durations yes
if command -v epd-bench >/dev/null; then
  echo "== epd-bench transfer --backend rdma  [EMULATION ONLY: Soft-RoCE under qemu TCG, not NIC figures]"
  epd-bench transfer --backend rdma --sizes 65536,1048576,16777216 --seconds 2
fi
