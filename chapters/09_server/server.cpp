// server.cpp — routes, request handling, whole and streamed (SSE) responses (see server.h).
#include "server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "chat_page_html.h"  // generated from web/index.html (see CMakeLists.txt)
#include "connection.h"
#include "engine_loop.h"
#include "lio/error.h"
#include "openai_response.h"
#include "sse.h"

namespace lio::server {

using json = nlohmann::ordered_json;

namespace {

/// How long an HTTP thread waits for engine output before it looks at its connection again.
constexpr auto kPollInterval = std::chrono::milliseconds(20);
/// Connections the kernel may hold for the accept thread (see OpenAiServer::bind).
constexpr int kListenBacklog = 1024;

/// What a validated generation request turned into.
struct Generation {
  GenerationRequest request;
  std::vector<std::vector<int32_t>> prompts;  ///< token ids per prompt
  std::vector<std::string> echo_texts;        ///< per choice (completions with echo), else empty
  ResponseMeta meta;
  int64_t n_prompt_tokens = 0;  ///< all prompts, each counted once
  size_t n_choices() const { return prompts.size() * static_cast<size_t>(request.params.n); }
  bool want_logprobs() const { return request.params.sampler.logprobs >= 0; }
};

/// Counts a request in flight from submission until its response ends (a stream's end, not its
/// handler's return): shutdown() reports the ones its deadline aborted.
struct InFlight {
  explicit InFlight(std::atomic<int64_t>& n) : n(n) { ++n; }
  ~InFlight() { --n; }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  std::atomic<int64_t>& n;
};

/// The error a request still running at the shutdown deadline ends with.
ApiError shutdown_error() {
  return ApiError(503, "The server shut down before the request finished (--shutdown-timeout).", "", "",
                  "server_error");
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  try {
    res.set_content(dump_json(error_body(e)), "application/json");
  } catch (const std::exception& failed) {  // error_body is chapter 09's Task 3: it may be a stub
    res.status = 500;
    res.set_content(e.what() + std::string("\n(error_body failed: ") + failed.what() + ")\n",
                    "text/plain");
  }
}

/// The method a known path answers ("GET" / "POST"), or nullptr for an unknown path.
const char* allowed_method(const std::string& path) {
  if (path == "/v1/models" || path.rfind("/v1/models/", 0) == 0 || path == "/health" ||
      path == "/metrics")
    return "GET";
  if (path == "/v1/completions" || path == "/v1/chat/completions") return "POST";
  return nullptr;
}

}  // namespace

// =====================================================================================
// The server's state
// =====================================================================================

struct OpenAiServer::Impl {
  Impl(Engine& engine, const Tokenizer& tokenizer, const ModelConfig& model,
       const ServerConfig& config)
      : tokenizer(tokenizer),
        model(model),
        config(config),
        metrics(config.slo),
        loop(engine, metrics, config.max_queue),
        grammars(tokenizer, model.vocab_size),
        rng(std::random_device{}()),
        created(static_cast<int64_t>(std::time(nullptr))) {}

  const Tokenizer& tokenizer;
  const ModelConfig& model;
  ServerConfig config;
  ServerMetrics metrics;
  httplib::Server http;
  int bound_port = -1;
  int listen_fd = -1;  ///< the listening socket (a POSIX fd), once bound

  EngineLoop loop;
  /// Structured outputs: response_format / grammar compiled against the vocabulary (cached).
  GrammarCompiler grammars;

  // ---- graceful shutdown (OpenAiServer::shutdown) ----
  std::atomic<bool> draining{false};  ///< shutdown() began: no new request is taken
  std::atomic<int64_t> in_flight{0};  ///< generation requests whose response has not ended

  std::mutex rng_mutex;
  std::mt19937_64 rng;  ///< seeds for requests without one, response ids
  int64_t created;      ///< start time (Unix seconds), the model's `created`

  // ---- requests -----------------------------------------------------------------------

  std::string random_id(const char* prefix) {
    std::lock_guard lock(rng_mutex);
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%016llx%016llx", static_cast<unsigned long long>(rng()),
                  static_cast<unsigned long long>(rng()));
    return std::string(prefix) + buf;
  }

  /// Parses, validates and tokenizes a generation request. Throws ApiError.
  Generation prepare(const httplib::Request& req, Endpoint endpoint) {
    Generation g;
    g.request = endpoint == Endpoint::ChatCompletions
                    ? parse_chat_request(req.body, config.limits)
                    : parse_completion_request(req.body, config.limits);
    GenerationRequest& r = g.request;
    if (!r.model.empty() && r.model != config.served_model_name) {
      throw ApiError(404,
                     "The model `" + r.model + "` does not exist. This server serves `" +
                         config.served_model_name + "`.",
                     "model", "model_not_found");
    }
    g.prompts = prompt_token_ids(r, tokenizer);
    int64_t longest = 0;
    for (const auto& p : g.prompts) {
      longest = std::max<int64_t>(longest, static_cast<int64_t>(p.size()));
      g.n_prompt_tokens += static_cast<int64_t>(p.size());
    }
    const int64_t max_input = max_input_tokens();
    if (longest > max_input) {
      const char* where = endpoint == Endpoint::ChatCompletions ? "messages" : "prompt";
      throw ApiError(400,
                     std::string("The ") + where + " has " + std::to_string(longest) +
                         " tokens; this server takes at most " + std::to_string(max_input) +
                         " (--max-input-tokens). Please reduce the length of the " + where + ".",
                     where);
    }
    r.params.max_tokens = resolve_max_tokens(r, longest, max_model_len());
    if (r.grammar.kind != GrammarSpec::Kind::None) {
      if (r.params.ignore_eos) {
        throw ApiError(400, "'ignore_eos' cannot be combined with '" + r.grammar_field +
                                "': a completed grammar allows only a stop token", "ignore_eos");
      }
      try {
        r.params.grammar = grammars.compile(r.grammar);
      } catch (const InvalidArgument& e) {
        throw ApiError(400, e.what(), r.grammar_field);
      }
    }
    if (!r.seed_given) {
      std::lock_guard lock(rng_mutex);
      r.params.sampler.seed = rng();
    }
    if (r.echo) {
      for (size_t p = 0; p < g.prompts.size(); ++p) {
        const PromptInput& in = r.prompts[p];
        const std::string text =
            in.is_tokens ? tokenizer.decode(in.token_ids, /*render_special=*/true) : in.text;
        for (int64_t s = 0; s < r.params.n; ++s) g.echo_texts.push_back(text);
      }
    }
    g.meta = ResponseMeta{endpoint,
                          random_id(endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-"),
                          static_cast<int64_t>(std::time(nullptr)), config.served_model_name};
    return g;
  }

  /// --max-model-len, or the model's context when 0.
  int64_t max_model_len() const { return config.max_model_len > 0 ? config.max_model_len : model.context_length; }
  /// --max-input-tokens, or max_model_len() - 1 when 0.
  int64_t max_input_tokens() const {
    return config.max_input_tokens > 0 ? config.max_input_tokens : max_model_len() - 1;
  }

  void handle_generation(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    // Counted before the draining check: shutdown() sets draining, then waits for the count.
    auto counted = std::make_shared<InFlight>(in_flight);
    try {
      if (draining) {  // shutdown() began: no new work
        throw ApiError(503, "The server is shutting down and takes no new requests.", "", "", "server_error");
      }
      auto g = std::make_shared<Generation>(prepare(req, endpoint));
      std::shared_ptr<Job> job =
          loop.submit(g->prompts, g->request.params,
                      endpoint == Endpoint::ChatCompletions ? "messages" : "prompt");
      const int fd = find_connection_socket(req.remote_addr, req.remote_port, req.local_port);
      if (g->request.stream) {
        stream(res, g, job, fd, std::move(counted));
      } else {
        respond_whole(res, *g, *job, fd);
      }
    } catch (const ApiError& e) {
      send_error(res, e);
    } catch (const std::exception& e) {
      send_error(res,
                 ApiError(500, std::string("internal error: ") + e.what(), "", "", "server_error"));
    }
  }

  void respond_whole(httplib::Response& res, const Generation& g, Job& job, int fd) {
    std::vector<Choice> choices(g.n_choices());
    for (;;) {
      std::vector<RequestOutput> outputs;
      std::string error;
      const bool over = job.take(outputs, error, kPollInterval);
      for (const RequestOutput& o : outputs)
        append_output(choices.at(job.choice_index(o, g.request.params.n)), o);
      if (!error.empty())
        throw ApiError(500, "the engine failed: " + error, "", "", "server_error");
      if (over) break;
      if (loop.stopped()) {  // the shutdown deadline passed
        loop.abort(job);
        throw shutdown_error();
      }
      if (peer_closed(fd)) {  // nobody left to answer
        loop.abort(job);
        throw ApiError(503, "the request was cancelled", "", "", "server_error");
      }
    }
    res.set_content(dump_json(response_json(g.meta, choices, g.echo_texts, g.want_logprobs(),
                                            tokenizer, g.n_prompt_tokens)),
                    "application/json");
  }

  /// A streamed response: SSE chunks as the engine's outputs arrive.
  struct Stream {
    Impl* server;
    std::shared_ptr<Generation> g;
    std::shared_ptr<Job> job;
    std::shared_ptr<InFlight> counted;  ///< released when the response ends
    int fd = -1;
    std::vector<Choice> choices;
    bool head_sent = false;
    bool done = false;

    bool write(httplib::DataSink& sink, const std::string& event) {
      return sink.write(event.data(), event.size());
    }
    bool write(httplib::DataSink& sink, const json& chunk) { return write(sink, sse_event(chunk)); }

    /// Called by cpp-httplib until it returns false (cancelled) or sink.done() was called.
    bool pump(httplib::DataSink& sink) {
      const ResponseMeta& meta = g->meta;
      const bool chat = meta.endpoint == Endpoint::ChatCompletions;
      const bool usage = g->request.include_usage;
      if (!head_sent) {
        head_sent = true;
        for (size_t i = 0; i < choices.size(); ++i) {
          const auto index = static_cast<int64_t>(i);
          bool ok = true;
          if (chat) {
            ok = write(sink, chunk_json(meta, index, "", {{"role", "assistant"}, {"content", ""}},
                                        nullptr, nullptr, usage));
          } else if (!g->echo_texts.empty()) {
            ok = write(sink,
                       chunk_json(meta, index, g->echo_texts[i], nullptr, nullptr, nullptr, usage));
          }
          if (!ok) return cancel();
        }
      }
      std::vector<RequestOutput> outputs;
      std::string error;
      const bool over = job->take(outputs, error, kPollInterval);
      for (const RequestOutput& o : outputs) {
        const size_t i = job->choice_index(o, g->request.params.n);
        Choice& c = choices.at(i);
        const size_t lp_from = c.logprobs.size();
        append_output(c, o);
        json lp = nullptr;
        if (g->want_logprobs() && c.logprobs.size() > lp_from) {
          const int64_t base =
              g->echo_texts.empty() ? 0 : static_cast<int64_t>(g->echo_texts[i].size());
          lp = logprobs_json(meta.endpoint, server->tokenizer,
                             std::span(c.logprobs).subspan(lp_from),
                             std::span(c.text_offsets).subspan(lp_from), base);
        }
        const bool has_delta = !o.new_text.empty() || !lp.is_null();
        const auto index = static_cast<int64_t>(i);
        bool ok = true;
        if (chat) {
          // OpenAI ends a choice with its own chunk: an empty delta and the finish reason.
          if (has_delta)
            ok = write(sink,
                       chunk_json(meta, index, "", {{"content", o.new_text}}, lp, nullptr, usage));
          if (ok && o.finished)
            ok = write(sink, chunk_json(meta, index, "", json::object(), nullptr,
                                        finish_reason_json(c.finish_reason), usage));
        } else if (has_delta || o.finished) {
          ok = write(sink, chunk_json(meta, index, o.new_text, nullptr, lp,
                                      finish_reason_json(c.finish_reason), usage));
        }
        if (!ok) return cancel();
      }
      if (!error.empty()) {
        const ApiError e(500, "the engine failed: " + error, "", "", "server_error");
        write(sink, error_body(e));
        return finish(sink);
      }
      if (over) {
        if (usage) {
          int64_t completion_tokens = 0;
          for (const Choice& c : choices) completion_tokens += c.n_tokens;
          if (!write(sink, usage_chunk_json(meta, g->n_prompt_tokens, completion_tokens)))
            return cancel();
        }
        return finish(sink);
      }
      if (server->loop.stopped()) {  // the shutdown deadline passed: say so, end the stream cleanly
        server->loop.abort(*job);
        if (!write(sink, error_body(shutdown_error()))) return cancel();
        return finish(sink);
      }
      if (outputs.empty() && peer_closed(fd)) return cancel();
      return true;
    }

    bool finish(httplib::DataSink& sink) {
      if (!write(sink, sse_done_event())) return cancel();
      done = true;
      sink.done();
      return true;
    }

    bool cancel() {
      if (!done) server->loop.abort(*job);
      done = true;
      return false;
    }
  };

  void stream(httplib::Response& res, std::shared_ptr<Generation> g, std::shared_ptr<Job> job,
              int fd, std::shared_ptr<InFlight> counted) {
    auto st = std::make_shared<Stream>();
    st->server = this;
    st->g = std::move(g);
    st->job = std::move(job);
    st->counted = std::move(counted);
    st->fd = fd;
    st->choices.resize(st->g->n_choices());
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [st](size_t, httplib::DataSink& sink) { return st->pump(sink); },
        [st](bool) {  // the response ended: if the stream did not, the client went away
          if (!st->done) st->cancel();
        });
  }

  json model_json() const {
    return json{{"id", config.served_model_name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "lio"},
                {"max_model_len", max_model_len()}};
  }

  // ---- routes -------------------------------------------------------------------------

  void setup_routes() {
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const char* allowed = allowed_method(req.path);
      if (allowed && req.method != allowed &&
          !(req.method == "HEAD" && std::string(allowed) == "GET")) {
        res.set_header("Allow", allowed);
        send_error(res, ApiError(405,
                                 "Method " + req.method + " is not allowed on " + req.path +
                                     " (use " + allowed + ")",
                                 "", "method_not_allowed"));
        return httplib::Server::HandlerResponse::Handled;
      }
      if (!config.api_key.empty() && req.path.rfind("/v1/", 0) == 0 &&
          !api_key_matches(req.get_header_value("Authorization"), config.api_key)) {
        const bool given = req.has_header("Authorization");
        send_error(
            res,
            ApiError(401,
                     given
                         ? "Incorrect API key provided."
                         : "You didn't provide an API key. Send it as 'Authorization: Bearer KEY'.",
                     "", given ? "invalid_api_key" : ""));
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req,
                                                                       httplib::Response& res) {
      if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // ours already
      const std::string message =
          res.status == 404   ? "Not found: " + req.method + " " + req.path
          : res.status == 413 ? "The request body is larger than this server takes (" +
                                    std::to_string(config.max_request_bytes) + " bytes, --max-request-bytes)"
                              : "HTTP error " + std::to_string(res.status);
      send_error(res, ApiError(res.status, message, "", res.status == 404 ? "not_found" : ""));
      return httplib::Server::HandlerResponse::Handled;
    }));
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          send_error(res, ApiError(500, "internal error: " + what, "", "", "server_error"));
        });

    http.Get("/", [](const httplib::Request&, httplib::Response& res) {  // the chat page
      res.set_content(kChatPageHtml.data(), kChatPageHtml.size(), "text/html; charset=utf-8");
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      // Draining: a load balancer stops sending here while the requests in flight finish.
      res.set_content(loop.stopped() ? R"({"status":"stopping"})"
                      : draining     ? R"({"status":"draining"})"
                                     : R"({"status":"ok"})",
                      "application/json");
      if (loop.stopped() || draining) res.status = 503;
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(dump_json(json{{"object", "list"}, {"data", json::array({model_json()})}}),
                      "application/json");
    });
    http.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != config.served_model_name) {
        send_error(res,
                   ApiError(404, "The model `" + std::string(req.matches[1]) + "` does not exist.",
                            "model", "model_not_found"));
        return;
      }
      res.set_content(dump_json(model_json()), "application/json");
    });
    http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_generation(req, res, Endpoint::Completions);
    });
    http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle_generation(req, res, Endpoint::ChatCompletions);
    });
  }
};

// =====================================================================================
// Public interface
// =====================================================================================

OpenAiServer::OpenAiServer(Engine& engine, const Tokenizer& tokenizer, const ModelConfig& model,
                           const ServerConfig& config)
    : impl_(std::make_unique<Impl>(engine, tokenizer, model, config)) {
  if (config.http_threads < 1)
    throw InvalidArgument("--http-threads must be >= 1, got " +
                          std::to_string(config.http_threads));
  const int n_threads = config.http_threads;
  impl_->http.new_task_queue = [n_threads] {
    return new httplib::ThreadPool(static_cast<size_t>(n_threads));
  };
  // The listening socket: httplib's defaults (SO_REUSEADDR), and its fd kept so that bind() can
  // widen the accept queue (below).
  impl_->http.set_socket_options([this](int sock) {
    httplib::default_socket_options(sock);
    impl_->listen_fd = sock;
  });
  if (config.max_request_bytes < 1)
    throw InvalidArgument("--max-request-bytes must be >= 1, got " + std::to_string(config.max_request_bytes));
  if (config.max_model_len < 0 || config.max_model_len > model.context_length)
    throw InvalidArgument("--max-model-len must be in [1, " + std::to_string(model.context_length) +
                          "] (the model's context), or 0 for the context; got " +
                          std::to_string(config.max_model_len));
  if (config.max_input_tokens < 0 || config.max_input_tokens >= impl_->max_model_len())
    throw InvalidArgument("--max-input-tokens must be in [1, " + std::to_string(impl_->max_model_len() - 1) +
                          "] (below --max-model-len: room for one generated token), or 0; got " +
                          std::to_string(config.max_input_tokens));
  if (!(config.shutdown_timeout_s >= 0))
    throw InvalidArgument("--shutdown-timeout must be >= 0 seconds");
  impl_->http.set_payload_max_length(static_cast<size_t>(config.max_request_bytes));
  impl_->http.set_keep_alive_max_count(1000);
  impl_->setup_routes();
}

OpenAiServer::~OpenAiServer() { stop(); }

void OpenAiServer::bind() {
  Impl& s = *impl_;
  if (s.config.port == 0) {
    s.bound_port = s.http.bind_to_any_port(s.config.host);
  } else if (s.http.bind_to_port(s.config.host, s.config.port)) {
    s.bound_port = s.config.port;
  }
  if (s.bound_port <= 0) {
    throw InvalidArgument("cannot listen on " + s.config.host + ":" +
                          std::to_string(s.config.port) +
                          " (address in use, or not an address of this machine?)");
  }
  // The Debian build of cpp-httplib listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG,
  // compiled into the library). A burst of streaming requests against a busy engine overflows
  // that queue while the accept thread waits for a core; the dropped handshakes then time out as
  // failed reads on the client (measured: 8-15 of 64 requests sent at once). listen() again on a
  // listening socket only changes its backlog: the kernel's limit (somaxconn) caps it.
  if (s.listen_fd >= 0) ::listen(s.listen_fd, kListenBacklog);
}

int OpenAiServer::port() const { return impl_->bound_port; }

void OpenAiServer::serve() {
  Impl& s = *impl_;
  if (s.bound_port <= 0) throw InvalidArgument("OpenAiServer::serve() before bind()");
  s.loop.start();
  if (!s.loop.stopped()) s.http.listen_after_bind();
  stop();
}

int64_t OpenAiServer::shutdown(double timeout_s) {
  Impl& s = *impl_;
  if (!(timeout_s >= 0)) throw InvalidArgument("shutdown: timeout must be >= 0 seconds");
  using Clock = std::chrono::steady_clock;
  // From here every new request is a 503 and /health says "draining"; the engine keeps stepping
  // for the requests in flight. The listening socket stays open until they are done: cpp-httplib
  // (0.11) ends every open stream as soon as its listening socket closes.
  s.draining = true;
  const auto wait_in_flight = [&](Clock::duration budget) {
    const Clock::time_point deadline = Clock::now() + budget;
    while (s.in_flight.load() > 0 && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  };
  wait_in_flight(std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s)));
  const int64_t aborted = s.in_flight.load();
  s.loop.stop();  // whatever still runs ends now: an error event and [DONE], or a 503
  wait_in_flight(std::chrono::seconds(5));  // their last bytes go out before the sockets close
  s.http.stop();  // serve() returns once the HTTP threads are done (an idle keep-alive: <= 5 s)
  return aborted;
}

void OpenAiServer::stop() {
  // The loop first: HTTP threads waiting on a request see stopped() and finish, so the HTTP
  // pool (which joins its threads when listen returns) can shut down.
  impl_->loop.stop();
  impl_->http.stop();
}

}  // namespace lio::server
