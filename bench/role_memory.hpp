#pragma once
// How much of a model's weights the roles of one host hold: a real local cluster (router, encoder, prefill,
// decode as processes, over shm) serving the file, one request through it so prefill and decode touch
// their weights, then each role's proportional set size (PSS, /proc/PID/smaps) of the model file's mapping
// and of ggml's repacked copies (kernels/ggml/packed_weights.hpp). Pages two processes share count half to
// each, so the sum over roles is what the host really holds.
#include <optional>
#include <string>
#include <vector>

namespace epd::bench {

struct RoleMemory {
  std::string id, role;
  double weights_mb = 0;  // PSS of the model file and the repacked copies
  double rss_mb = 0;      // the whole process
};

// nullopt (after saying why on stderr) if the cluster cannot start or serve.
std::optional<std::vector<RoleMemory>> measure_role_memory(const std::string& model_path, unsigned threads);

}  // namespace epd::bench
