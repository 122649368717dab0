#include "serve_runner.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "sse.hpp"

namespace epd::bench {

using nlohmann::json;

namespace {

double ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The string at `ptr`, or "" when it is absent, null or not a string (a delta without content).
std::string string_at(const json& j, const char* ptr) {
  const json::json_pointer p(ptr);
  if (!j.contains(p)) return "";
  const auto& v = j.at(p);
  return v.is_string() ? v.get<std::string>() : "";
}

// "<status> <code>" from an OpenAI error body, the counter key of a failed request.
std::string error_key(unsigned status, const json& j) {
  std::string what;
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const auto& e = j["error"];
    what = e.contains("code") && e["code"].is_string() ? e["code"].get<std::string>() : string_at(e, "/type");
  }
  if (what.empty()) what = "(no error code)";
  return status ? std::to_string(status) + " " + what : "stream error " + what;
}

void take_extras(const json& j, RequestRecord& r) {
  if (auto u = j.find("usage"); u != j.end() && u->is_object()) {
    r.output_tokens = u->value("completion_tokens", 0);
    r.prompt_tokens = u->value("prompt_tokens", 0);
  }
  if (auto e = j.find("epd"); e != j.end() && e->is_object()) {
    if (auto f = e->find("first_token_ms"); f != e->end() && f->is_number())
      r.router_ttft_ms = f->get<double>();
  }
}

}  // namespace

struct Runner::Live {
  size_t index = 0;
  SseParser sse;
  clock::time_point sent, last_delta;
  bool done_seen = false;
  std::string answer;  // the content deltas joined: what a client shows and resends as the history
  std::string body;    // a whole JSON answer or an error body
  std::string stream_error;
};

Runner::Runner(boost::asio::io_context& io, AsyncHttp& http, Workload& workload, RunOptions o)
    : io_(io),
      http_(http),
      workload_(workload),
      o_(std::move(o)),
      arrivals_(o_.rate, o_.seed),
      arrival_timer_(io),
      progress_timer_(io) {}

double Runner::duration_s() const {
  return ms_between(t0_, last_done_) / 1000;
}

void Runner::start() {
  t0_ = next_arrival_ = last_done_ = clock::now();
  schedule_arrival();
  if (o_.progress) tick();
}

bool Runner::more_arrivals() const {
  if (o_.requests && conversations()) {
    const size_t turns = size_t(workload_.options().turns);
    return conversations_.size() < (o_.requests + turns - 1) / turns;
  }
  if (o_.requests) return records_.size() < o_.requests;
  return clock::now() < t0_ + std::chrono::duration<double>(o_.seconds);
}

void Runner::schedule_arrival() {
  if (std::isinf(o_.rate)) {
    // All at once; in a --seconds run, as many as there are slots, topped up as answers come back.
    while (more_arrivals() && (o_.requests || in_flight_ + waiting_.size() < o_.max_concurrency)) arrive();
    arrivals_over_ = !more_arrivals();
    return maybe_finish();
  }
  next_arrival_ += arrivals_.next_gap();
  const bool within =
      o_.requests ? more_arrivals() : next_arrival_ < t0_ + std::chrono::duration<double>(o_.seconds);
  if (!within) {
    arrivals_over_ = true;
    return maybe_finish();
  }
  arrival_timer_.expires_at(next_arrival_);
  arrival_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) return;
    arrive();
    schedule_arrival();
  });
}

void Runner::arrive() {
  const size_t index = records_.size();
  RequestPlan plan;
  if (conversations()) {
    conversations_.emplace_back(workload_.options(), workload_.system_prompt(), conversations_.size());
    plan = conversations_.back().next_turn();
  } else {
    plan = workload_.next();
  }
  RequestRecord r;
  if (conversations()) r.conversation = long(conversations_.size() - 1);
  r.prompt_chars = plan.prompt_chars;
  r.max_tokens = plan.max_tokens;
  r.image = plan.image;
  records_.push_back(std::move(r));
  bodies_.push_back(plan.body);
  if (o_.max_concurrency && in_flight_ >= o_.max_concurrency)
    waiting_.emplace_back(index, clock::now());
  else
    send(index, clock::now());
}

void Runner::send(size_t index, clock::time_point arrived) {
  ++in_flight_;
  max_in_flight_ = std::max(max_in_flight_, in_flight_);
  auto live = std::make_shared<Live>();
  live->index = index;
  live->sent = live->last_delta = clock::now();
  records_[index].start_ms = ms_between(t0_, live->sent);
  records_[index].queued_ms = ms_between(arrived, live->sent);
  AsyncHttp::Handlers h;
  h.on_status = [this, live](unsigned status, std::string_view id) {
    records_[live->index].status = status;
    records_[live->index].request_id = std::string(id);
  };
  h.on_body = [this, live](std::string_view bytes) {
    auto& r = records_[live->index];
    if (r.status != 200 || !o_.stream) {
      live->body.append(bytes);
      return;
    }
    const auto now = clock::now();  // one time for every event of this read
    live->sse.feed(bytes, [&](std::string_view data) {
      if (data == "[DONE]") {
        live->done_seen = true;
        return;
      }
      const auto j = json::parse(data, nullptr, false);
      if (!j.is_object()) {
        live->stream_error = "stream: an event is not a JSON object";
        return;
      }
      if (j.contains("error")) live->stream_error = error_key(0, j);
      take_extras(j, r);
      const auto delta = string_at(j, o_.chat ? "/choices/0/delta/content" : "/choices/0/text");
      if (delta.empty()) return;
      live->answer += delta;
      if (r.deltas++ == 0)
        r.ttft_ms = ms_between(live->sent, now);
      else
        r.itl_ms.push_back(ms_between(live->last_delta, now));
      live->last_delta = now;
    });
  };
  h.on_done = [this, live](const std::string& error) { complete(*live, error); };
  std::vector<std::pair<std::string, std::string>> headers = {
      {"X-Request-Id", "bench-" + std::to_string(o_.seed) + "-" + std::to_string(index)}};
  if (o_.stream) headers.emplace_back("Accept", "text/event-stream");
  http_.request("POST", o_.prefix + workload_.path(), std::move(bodies_[index]), std::move(headers),
                std::move(h));
}

void Runner::complete(Live& live, const std::string& transport_error) {
  const auto now = clock::now();
  auto& r = records_[live.index];
  r.e2e_ms = ms_between(live.sent, now);
  if (!transport_error.empty()) {
    r.error = transport_error;
  } else if (r.status != 200) {
    r.error = error_key(r.status, json::parse(live.body, nullptr, false));
  } else if (o_.stream) {
    if (!live.stream_error.empty())
      r.error = live.stream_error;
    else if (!live.done_seen)
      r.error = "stream: no data: [DONE]";
    if (r.output_tokens == 0) r.output_tokens = r.deltas;  // no usage chunk: 1 token per delta
  } else {
    const auto j = json::parse(live.body, nullptr, false);
    if (!j.is_object()) {
      r.error = "answer is not a JSON object";
    } else {
      take_extras(j, r);
      r.ttft_ms = r.e2e_ms;
      live.answer = string_at(j, o_.chat ? "/choices/0/message/content" : "/choices/0/text");
    }
  }
  r.answer_bytes = live.answer.size();
  --in_flight_;
  ++done_;
  last_done_ = now;
  // A conversation goes on on the same slot; one whose turn failed has no history to go on with.
  if (r.conversation >= 0 && r.error.empty() && next_turn(size_t(r.conversation), live.answer))
    return maybe_finish();
  if (!waiting_.empty()) {
    const auto [index, arrived] = waiting_.front();
    waiting_.pop_front();
    send(index, arrived);
  }
  if (std::isinf(o_.rate) && !o_.requests && !arrivals_over_) schedule_arrival();
  maybe_finish();
}

bool Runner::next_turn(size_t conversation, const std::string& answer) {
  auto& c = conversations_[conversation];
  if (c.done()) return false;
  c.answered(answer);
  const size_t index = records_.size();
  const auto plan = c.next_turn();
  RequestRecord r;
  r.prompt_chars = plan.prompt_chars;
  r.max_tokens = plan.max_tokens;
  r.image = plan.image;
  r.conversation = long(conversation);
  r.turn = c.turns_sent() - 1;
  records_.push_back(std::move(r));
  bodies_.push_back(plan.body);
  send(index, clock::now());
  return true;
}

void Runner::maybe_finish() {
  if (!arrivals_over_ || done_ != records_.size() || finished_) return;
  finished_ = true;
  progress_timer_.cancel();
  if (o_.progress) std::fprintf(stderr, "\n");
}

void Runner::tick() {
  std::fprintf(stderr, "\r  %6.1f s: %zu sent, %zu answered, %zu in flight, %zu waiting   ",
               ms_between(t0_, clock::now()) / 1000, records_.size() - waiting_.size(), done_, in_flight_,
               waiting_.size());
  progress_timer_.expires_after(std::chrono::seconds(1));
  progress_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec && !finished_) tick();
  });
}

}  // namespace epd::bench
