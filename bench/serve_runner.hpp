#pragma once
// Drives one `epd-bench serve` run on an io_context: requests arrive on the Workload's Poisson schedule,
// wait for a slot when --max-concurrency are in flight, are sent with AsyncHttp and their answers (SSE
// streams or whole JSON bodies) turned into RequestRecords. With the workload's `turns` > 1 an arrival
// starts a conversation: its first turn waits for a slot like any request, and each later turn is sent on
// that slot as soon as the turn before it is answered, carrying that answer.
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "async_http.hpp"
#include "serve_conversation.hpp"
#include "serve_report.hpp"
#include "serve_workload.hpp"

namespace epd::bench {

struct RunOptions {
  size_t requests =
      0;  // 0: as many as arrive within `seconds`; with turns, rounded up to whole conversations
  double seconds = 0;
  double rate = 0;             // requests/s; infinity = all at once
  size_t max_concurrency = 0;  // 0 = unbounded
  bool stream = true, chat = true;
  std::string prefix;  // the URL's path before /v1/...
  uint64_t seed = 0;
  bool progress = true;
};

class Runner {
 public:
  Runner(boost::asio::io_context& io, AsyncHttp& http, Workload& workload, RunOptions o);
  // Schedules the arrivals; the io_context's run() returns once every request is answered.
  void start();
  const std::vector<RequestRecord>& records() const { return records_; }
  double duration_s() const;
  size_t max_in_flight() const { return max_in_flight_; }

 private:
  struct Live;
  using clock = std::chrono::steady_clock;

  bool conversations() const { return workload_.options().turns > 1; }
  bool more_arrivals() const;
  void schedule_arrival();
  void arrive();
  void send(size_t index, clock::time_point arrived);
  void complete(Live& live, const std::string& transport_error);
  // The next turn of a conversation whose last turn was answered with `answer`; false if it has none.
  bool next_turn(size_t conversation, const std::string& answer);
  void maybe_finish();  // stops the progress line once every arrival is answered
  void tick();

  boost::asio::io_context& io_;
  AsyncHttp& http_;
  Workload& workload_;
  RunOptions o_;
  Arrivals arrivals_;
  boost::asio::steady_timer arrival_timer_, progress_timer_;
  clock::time_point t0_, next_arrival_, last_done_;
  std::vector<RequestRecord> records_;
  std::vector<std::string> bodies_;  // index -> request body, dropped once sent
  std::vector<Conversation> conversations_;
  std::deque<std::pair<size_t, clock::time_point>> waiting_;
  size_t in_flight_ = 0, max_in_flight_ = 0, done_ = 0;
  bool arrivals_over_ = false, finished_ = false;
};

}  // namespace epd::bench
