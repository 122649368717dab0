// The record an instance keeps in etcd: its key, what it carries (the descriptor; load goes in-band to the
// routers), and that records read back from etcd are checked like frames from the network.
#include <catch2/catch.hpp>

#include "membership/etcd/instance_record.hpp"

using namespace epd;
using namespace epd::actors::etcd_backend;

namespace {

protocol::PeerInfo sample() {
  protocol::PeerInfo p;
  p.instance_id = "decode-0";
  p.role = "decode";
  p.control_endpoint = "tcp://127.0.0.1:17103";
  p.incarnation = 42;
  p.kv_layout = protocol::KvLayout{};
  return p;
}

}  // namespace

TEST_CASE("etcd record keys live under the cluster prefix and name a valid instance") {
  CHECK(instance_key("/epd/c/", "decode-0") == "/epd/c/instances/decode-0");
  CHECK(id_of_key("/epd/c/", "/epd/c/instances/decode-0") == "decode-0");
  CHECK_FALSE(id_of_key("/epd/c/", "/epd/c/instances/"));
  CHECK_FALSE(id_of_key("/epd/c/", "/epd/other/instances/decode-0"));
  CHECK_FALSE(id_of_key("/epd/c/", "/epd/c/instances/has space"));
}

TEST_CASE("etcd record round-trips the descriptor") {
  const auto p = sample();
  auto back = decode_record("decode-0", encode_record(p));
  REQUIRE(back);
  CHECK(back->instance_id == p.instance_id);
  CHECK(back->role == p.role);
  CHECK(back->control_endpoint == p.control_endpoint);
  CHECK(back->incarnation == 42);
  CHECK(back->kv_layout == p.kv_layout);
  CHECK(*back == p);
}

TEST_CASE("etcd records that do not decode or name another instance are refused") {
  CHECK_FALSE(decode_record("decode-0", "not msgpack"));
  CHECK_FALSE(decode_record("decode-0", ""));
  auto other = decode_record("decode-1", encode_record(sample()));
  REQUIRE_FALSE(other);
  CHECK(other.error().detail.find("decode-1") != std::string::npos);
  auto p = sample();
  p.control_endpoint.clear();
  CHECK_FALSE(decode_record("decode-0", encode_record(p)));
  p = sample();
  p.incarnation = 0;
  CHECK_FALSE(decode_record("decode-0", encode_record(p)));
}
