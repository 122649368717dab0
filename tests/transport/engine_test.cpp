#include <unistd.h>
#include <catch2/catch.hpp>

#include "epd/protocol/codec.hpp"
#include "epd/transport/backend_info.hpp"
#include "shm/shm_info.hpp"
#include "tcp/tcp_info.hpp"
#include "test_util.hpp"

using namespace epd::test;

TEST_CASE("regions are page-rounded, zeroed, distinct and findable", "[engine]") {
  EngineConfig c;
  c.offer = {"shm"};
  auto e = Engine::create(c);
  REQUIRE(e);
  auto a = (*e)->allocate("a", 1);
  auto b = (*e)->allocate("b", 3 * 4096 + 5);
  REQUIRE(a);
  REQUIRE(b);
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  CHECK(a->length == page);
  CHECK(b->length % page == 0);
  CHECK(b->length >= 3 * 4096 + 5);
  CHECK(a->id != b->id);
  for (uint64_t i = 0; i < b->length; ++i) REQUIRE(b->base[i] == 0);
  CHECK((*e)->find_local(b->addr(), b->length) != nullptr);
  CHECK((*e)->find_local(b->addr() + 1, b->length) == nullptr);
  CHECK((*e)->find_local(a->addr() + a->length - 1, 2) == nullptr);
  CHECK_FALSE((*e)->allocate("zero", 0));
  CHECK((*e)->regions().size() == 2);
}

TEST_CASE("descriptor round-trips through the protocol codec", "[engine]") {
  LocalTarget t("shm,tcp", 2, 8192);
  REQUIRE(t.ok());
  const auto& d = t.descriptor();
  CHECK(d.token != 0);
  CHECK(d.incarnation != 0);
  const auto shm = decode_info<epd::transport::shm::ShmInfo>(d, "shm");
  REQUIRE(shm);
  CHECK(shm->pid == getpid());
  CHECK(shm->control_fd >= 0);
  const auto tcp = decode_info<epd::transport::tcp::TcpInfo>(d, "tcp");
  REQUIRE(tcp);
  CHECK(tcp->endpoint.rfind("127.0.0.1:", 0) == 0);
  CHECK(d.regions.size() == 2);
  auto decoded =
      epd::protocol::decode_value<epd::protocol::SegmentDescriptor>(epd::protocol::encode_value(d));
  REQUIRE(decoded);
  CHECK(*decoded == d);
}

TEST_CASE("backend choice: shm on one host, tcp across hosts, force wins", "[engine]") {
  LocalTarget t("shm,tcp", 1, 4096);
  REQUIRE(t.ok());
  EngineConfig c;
  auto e = Engine::create(c);
  REQUIRE(e);
  CHECK(*(*e)->choose_backend(t.descriptor()) == "shm");

  auto other_host = t.descriptor();
  other_host.host_id = "elsewhere";
  CHECK(*(*e)->choose_backend(other_host) == "tcp");

  auto shm_only = other_host;
  shm_only.backends.erase("tcp");
  auto none = (*e)->choose_backend(shm_only);
  REQUIRE_FALSE(none);
  CHECK(none.error().code == ErrorCode::no_common_backend);

  EngineConfig forced;
  forced.force = "tcp";
  auto f = Engine::create(forced);
  REQUIRE(f);
  CHECK(*(*f)->choose_backend(t.descriptor()) == "tcp");
  auto no_tcp = t.descriptor();
  no_tcp.backends.erase("tcp");
  CHECK((*f)->choose_backend(no_tcp).error().code == ErrorCode::no_common_backend);

  EngineConfig rdma;
  rdma.force = "rdma";
  auto r = Engine::create(rdma);
  REQUIRE(r);  // shm/tcp still start; rdma is only offered when its backend starts
  CHECK((*r)->choose_backend(t.descriptor()).error().code == ErrorCode::no_common_backend);
}

TEST_CASE("sessions are closed when their engine goes away", "[engine]") {
  LocalTarget t("shm", 1, 4096);
  REQUIRE(t.ok());
  SessionPtr s;
  {
    auto init = make_initiator("shm", 4096);
    REQUIRE(init.engine);
    auto opened = init.engine->open_session(t.descriptor());
    REQUIRE(opened);
    s = *opened;
    CHECK(s->healthy());
  }
  CHECK_FALSE(s->healthy());
  auto r = s->submit({WriteOp{1, t.region(0).base, 1}});
  REQUIRE_FALSE(r);
  CHECK(r.error().code == ErrorCode::session_closed);
}

TEST_CASE("a rotated token cuts off every link opened under the old one", "[engine]") {
  for (const auto& backend : host_backends()) {
    DYNAMIC_SECTION(backend) {
      LocalTarget t(backend, 1, 8192);
      REQUIRE(t.ok());
      const auto old_desc = t.descriptor();
      auto init = make_initiator(backend, 4096);
      REQUIRE(init.engine);
      fill_random(init.src.base, init.src.length, 11);
      auto write = [&](Session& s, uint64_t dst) -> Status {
        const WriteOp op{init.src.addr(), dst, 4096, 0};
        auto batch = s.submit(std::span<const WriteOp>(&op, 1));
        if (!batch) return batch.error();
        REQUIRE((*batch)->wait(std::chrono::seconds(10)));
        return (*batch)->status();
      };
      auto old_session = init.engine->open_session(old_desc);
      REQUIRE(old_session);
      REQUIRE(write(**old_session, t.region(0).base));

      const uint64_t fresh = t.engine().rotate_token();
      CHECK(fresh != old_desc.token);
      CHECK(fresh != 0);
      CHECK(t.engine().token() == fresh);
      CHECK(t.engine().descriptor().token == fresh);

      // The link opened under the old token is refused, and so is a new one opened from the old descriptor.
      t.fill(t.region(0).base + 4096, 4096, 0xEE);
      const auto late = write(**old_session, t.region(0).base + 4096);
      REQUIRE_FALSE(late);
      CHECK((late.error().code == ErrorCode::bad_token || late.error().code == ErrorCode::peer_died));
      auto reopened = init.engine->open_session(old_desc);
      if (reopened) {
        const auto again = write(**reopened, t.region(0).base + 4096);
        REQUIRE_FALSE(again);
        CHECK(again.error().code == ErrorCode::bad_token);
      } else {
        CHECK(reopened.error().code == ErrorCode::bad_token);
      }
      CHECK(t.checksum(t.region(0).base + 4096, 4096) != xxh(init.src.base, 4096));  // nothing landed

      // The new descriptor works.
      auto fresh_session = init.engine->open_session(t.engine().descriptor());
      REQUIRE(fresh_session);
      REQUIRE(write(**fresh_session, t.region(0).base + 4096));
      CHECK(t.checksum(t.region(0).base + 4096, 4096) == xxh(init.src.base, 4096));
    }
  }
}
