#pragma once
// This process's BuildIdentity (epd/protocol/compat.hpp): the protocol revisions it speaks, its build and a
// fingerprint of the model it serves, sent in HELLO and in its etcd record.
#include <string>
#include <string_view>

#include "epd/model/config.hpp"
#include "epd/protocol/messages.hpp"
#include "epd/protocol/result.hpp"

namespace epd::actors {

// "g6aec6050": the commit CMake configured from; "unknown" outside a git checkout.
std::string_view build_id();

// SHA-256 (hex) of what determines the model's weights and vocabulary: a checkpoint's files (every regular
// file of a Hugging Face directory, by name), or a seeded model's shape and seed.
protocol::Result<std::string> model_digest(const model::ModelConfig& model);

// Test-only: EPD_TEST_PROTOCOL_REVISIONS="3" or "4..5" makes this process claim those revisions, as an older
// or newer build would (the skew tests); logged loudly. A malformed value is an error.
protocol::Result<protocol::BuildIdentity> local_identity(const model::ModelConfig& model);

}  // namespace epd::actors
