// The prefill role executable: everything happens in epd::actors::run_role.
#include "epd/actors/run_role.hpp"

int main(int argc, char** argv) { return epd::actors::run_role(argc, argv, "prefill"); }
