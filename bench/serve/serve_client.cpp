#include "serve_client.h"

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "bench_util.h"

namespace lio::bench {
namespace {

using json = nlohmann::json;

/// Feeds bytes of a text/event-stream in and calls on_data(payload) for each `data:` line
/// (the payload without "data:" and its leading space).
class SseReader {
 public:
  template <typename F>
  void feed(const char* data, size_t n, F&& on_data) {
    buf_.append(data, n);
    size_t line_end;
    while ((line_end = buf_.find('\n', pos_)) != std::string::npos) {
      std::string_view line(buf_.data() + pos_, line_end - pos_);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.rfind("data:", 0) == 0) {
        line.remove_prefix(5);
        if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
        on_data(line);
      }
      pos_ = line_end + 1;
    }
    if (pos_ > 65536) {  // keep the buffer small on long streams
      buf_.erase(0, pos_);
      pos_ = 0;
    }
  }

 private:
  std::string buf_;
  size_t pos_ = 0;
};

httplib::Headers auth_headers(const ServeTarget& t) {
  httplib::Headers h;
  if (!t.api_key.empty()) h.emplace("Authorization", "Bearer " + t.api_key);
  return h;
}

}  // namespace

RequestOutcome stream_completion(const ServeTarget& target, const std::string& prompt,
                                 int64_t max_tokens, double timeout_s, double run_t0_s) {
  RequestOutcome out;
  const json body = {{"model", target.model},
                     {"prompt", prompt},
                     {"max_tokens", max_tokens},
                     {"temperature", 0.0},
                     {"ignore_eos", true},
                     {"stream", true},
                     {"stream_options", {{"include_usage", true}}}};
  httplib::Client cli(target.url);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(static_cast<time_t>(timeout_s), 0);
  cli.set_keep_alive(false);

  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth_headers(target);
  req.headers.emplace("Accept", "text/event-stream");
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();

  SseReader sse;
  std::string raw;  // the body when the status is not 200
  bool done = false;
  std::vector<double> text_chunk_s;  // when each chunk with text arrived (steady clock, s)
  double t_send = 0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (raw.size() < 4096) raw.append(data, std::min<size_t>(n, 4096 - raw.size()));
    sse.feed(data, n, [&](std::string_view payload) {
      if (payload == "[DONE]") {
        done = true;
        return;
      }
      json chunk = json::parse(payload, nullptr, /*allow_exceptions=*/false);
      if (chunk.is_discarded()) {
        out.error = "a data event is not JSON: " + std::string(payload.substr(0, 200));
        return;
      }
      if (chunk.contains("error")) {
        out.error = "error event: " + chunk["error"].dump();
        return;
      }
      if (chunk.contains("usage") && chunk["usage"].is_object()) {
        const json& u = chunk["usage"];
        if (u.contains("completion_tokens")) {
          out.output_tokens = u["completion_tokens"].get<int64_t>();
          out.usage_reported = true;
        }
        if (u.contains("prompt_tokens"))
          out.usage_prompt_tokens = u["prompt_tokens"].get<int64_t>();
      }
      if (!chunk.contains("choices") || !chunk["choices"].is_array()) return;
      for (const json& choice : chunk["choices"]) {
        const std::string text = choice.value("text", std::string());
        if (!text.empty()) text_chunk_s.push_back(now_s());
        if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
          out.finish_reason = choice["finish_reason"].get<std::string>();
      }
    });
    return true;
  };

  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  t_send = now_s();
  out.start_s = t_send - run_t0_s;
  const bool sent = cli.send(req, res, err);
  out.http_status = sent ? res.status : 0;
  if (!sent) {
    out.error = "transport: " + httplib::to_string(err);
    return out;
  }
  if (res.status != 200) {
    out.error = "HTTP " + std::to_string(res.status) + ": " + raw.substr(0, 300);
    return out;
  }
  const auto n_text_chunks = static_cast<int64_t>(text_chunk_s.size());
  if (!out.usage_reported) out.output_tokens = n_text_chunks;
  if (out.error.empty() && !done) out.error = "the stream ended without [DONE]";
  if (out.error.empty() && out.finish_reason.empty()) out.error = "no finish_reason";
  if (out.error.empty() && n_text_chunks == 0) out.error = "no text";
  out.ok = out.error.empty();
  if (n_text_chunks > 0) {
    out.latency = lio::server::request_latency(t_send, text_chunk_s, out.output_tokens);
    out.ttft_ms = out.latency.ttft_s * 1e3;
    out.e2e_ms = out.latency.e2e_s * 1e3;
    out.tpot_ms = out.latency.tpot_s.value_or(0.0) * 1e3;
    for (const double itl : out.latency.itl_s) out.itl_ms.push_back(itl * 1e3);
  }
  return out;
}

std::string http_get(const ServeTarget& target, const std::string& path, double timeout_s) {
  httplib::Client cli(target.url);
  cli.set_connection_timeout(static_cast<time_t>(timeout_s), 0);
  cli.set_read_timeout(static_cast<time_t>(timeout_s), 0);
  auto res = cli.Get(path.c_str(), auth_headers(target));
  return res && res->status == 200 ? res->body : std::string();
}

}  // namespace lio::bench
