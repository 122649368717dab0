// Generic role executable: runs any registered role (--role, or the instance's role from the config).
#include "epd/actors/run_role.hpp"

int main(int argc, char** argv) { return epd::actors::run_role(argc, argv, nullptr); }
