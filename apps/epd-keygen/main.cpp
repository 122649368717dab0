// epd-keygen: CURVE key pairs for the control plane (transport/channel/include/epd/transport/curve_keys.hpp).
#include <CLI/CLI.hpp>
#include <iostream>

#include "epd/transport/curve_keys.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "epd-keygen: writes DIR/ID.key (mode 0600) per instance and lists their public keys in "
      "DIR/cluster.pub"};
  std::string out;
  std::vector<std::string> ids;
  bool force = false;
  app.add_option("--out", out, "directory of the key files")->required();
  app.add_option("--id", ids, "instance id (repeat for several)")->required();
  app.add_flag("--force", force, "replace existing key files (their old keys stop working)");
  CLI11_PARSE(app, argc, argv);
  auto written = epd::transport::write_cluster_keys(out, ids, force);
  if (!written) {
    std::cerr << "epd-keygen: " << written.error().detail << "\n";
    return 2;
  }
  for (const auto& f : *written) std::cout << f.string() << "\n";
  return 0;
}
