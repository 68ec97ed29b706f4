// Chapter 09, Task 4: one turn of the serving loop (exercises/09_server/serving_loop.cpp,
// serve_step). A scripted engine plays fixed steps — interleaved outputs of concurrent requests,
// a failure — and records what the loop asked of it and when; scripted clients are Jobs that
// take what arrives. Then a real engine on a tiny model: a cancelled request's blocks are free
// after one turn, and concurrent submits all finish with their own tokens.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lio/cpu_backend.h"
#include "lio/engine.h"
#include "lio/model_loader.h"
#include "serving_loop.h"
#include "tiny_model.h"

namespace {
using lio::RequestOutput;
using lio::server::Job;
using lio::server::ServingEntry;
using lio::server::ServingState;

RequestOutput out(int64_t id, int64_t sample, std::vector<int32_t> tokens, bool finished = false) {
  RequestOutput o;
  o.request_id = id;
  o.sample_index = sample;
  o.new_token_ids = std::move(tokens);
  o.finished = finished;
  if (finished) o.finish_reason = lio::FinishReason::Length;
  return o;
}

/// Plays `steps` in order; logs "abort <id>" and "step" calls; checks the books are not held
/// across a step.
class ScriptedEngine final : public lio::server::StepSource {
 public:
  ScriptedEngine(ServingState& state, std::deque<std::vector<RequestOutput>> steps)
      : state_(state), steps_(std::move(steps)) {}
  bool has_unfinished() const override { return !steps_.empty(); }
  std::vector<RequestOutput> step() override {
    log.push_back("step");
    if (state_.mutex.try_lock()) {
      state_.mutex.unlock();
    } else {
      books_held_during_step = true;
    }
    if (fail_next) {
      fail_next = false;
      throw std::runtime_error("device lost");
    }
    if (steps_.empty()) return {};
    std::vector<RequestOutput> s = std::move(steps_.front());
    steps_.pop_front();
    return s;
  }
  void abort_request(int64_t id) override { log.push_back("abort " + std::to_string(id)); }
  std::vector<std::string> log;
  bool books_held_during_step = false;
  bool fail_next = false;

 private:
  ServingState& state_;
  std::deque<std::vector<RequestOutput>> steps_;
};

/// Registers engine request `id` with n samples for `job`, as EngineLoop::submit does.
void submit(ServingState& state, const std::shared_ptr<Job>& job, int64_t id, int64_t n) {
  std::lock_guard lock(state.mutex);
  job->add_engine_request(id, n);
  state.registry[id] = ServingEntry{job, n, false};
  state.n_queued += 1;
}

/// Token ids a job has received so far, per sample, in arrival order; `over` if it ended.
std::vector<std::vector<int32_t>> drain(Job& job, int64_t n, bool* over = nullptr, std::string* error = nullptr) {
  std::vector<RequestOutput> got;
  std::string e;
  const bool done = job.take(got, e, std::chrono::milliseconds(0));
  if (over) *over = done;
  if (error) *error = e;
  std::vector<std::vector<int32_t>> per(static_cast<size_t>(n));
  for (const RequestOutput& o : got)
    per.at(job.choice_index(o, n)).insert(per.at(job.choice_index(o, n)).end(), o.new_token_ids.begin(),
                                          o.new_token_ids.end());
  return per;
}

TEST(Ch09Task4, EveryDeltaReachesItsJobInOrderAndFinishedRequestsLeave) {
  ServingState state;
  auto a = std::make_shared<Job>(), b = std::make_shared<Job>();
  submit(state, a, 7, 1);
  submit(state, b, 9, 2);  // two samples
  ScriptedEngine engine(state, {{out(7, 0, {1}), out(9, 1, {50}), out(9, 0, {40})},
                                {out(9, 0, {41}), out(7, 0, {2, 3}), out(8, 0, {99})},  // 8: not ours
                                {out(9, 1, {51}, true), out(7, 0, {4}, true)},
                                {out(9, 0, {42}, true)}});
  const auto first = lio::server::serve_step(engine, state);
  EXPECT_EQ(first.size(), 3u) << "the step's outputs are returned (for the metrics)";
  bool over = true;
  EXPECT_EQ(drain(*a, 1, &over), (std::vector<std::vector<int32_t>>{{1}}));
  EXPECT_FALSE(over);
  lio::server::serve_step(engine, state);
  lio::server::serve_step(engine, state);
  EXPECT_EQ(drain(*a, 1, &over), (std::vector<std::vector<int32_t>>{{2, 3, 4}}));
  EXPECT_TRUE(over) << "request 7 finished";
  {
    std::lock_guard lock(state.mutex);
    EXPECT_EQ(state.registry.count(7), 0u) << "a finished request leaves the registry";
    EXPECT_EQ(state.registry.count(9), 1u) << "request 9 has a sample still running";
    EXPECT_EQ(state.n_queued, 1) << "request 7 was never marked started: it leaves the queue count";
  }
  lio::server::serve_step(engine, state);
  EXPECT_EQ(drain(*b, 2, &over), (std::vector<std::vector<int32_t>>{{40, 41, 42}, {50, 51}}));
  EXPECT_TRUE(over);
  std::lock_guard lock(state.mutex);
  EXPECT_TRUE(state.registry.empty());
  EXPECT_EQ(state.n_queued, 0);
}

TEST(Ch09Task4, CancellationsAreAbortedBeforeTheStepAndTheBooksAreFreeDuringIt) {
  ServingState state;
  auto a = std::make_shared<Job>();
  submit(state, a, 3, 1);
  {
    std::lock_guard lock(state.mutex);
    state.registry[3].started = true;
    state.n_queued = 0;
    state.cancelled = {3, 12};
  }
  ScriptedEngine engine(state, {{out(3, 0, {5}, true)}});
  lio::server::serve_step(engine, state);
  EXPECT_EQ(engine.log, (std::vector<std::string>{"abort 3", "abort 12", "step"}))
      << "aborts first, so the step that follows frees their blocks";
  EXPECT_FALSE(engine.books_held_during_step) << "HTTP threads must be able to submit while the engine steps";
  std::lock_guard lock(state.mutex);
  EXPECT_TRUE(state.cancelled.empty());
  EXPECT_TRUE(state.registry.empty());
  EXPECT_EQ(state.n_queued, 0) << "a started request was already off the queue count";
}

TEST(Ch09Task4, AnEngineFailureReachesEveryJobAndEscapesNothing) {
  ServingState state;
  auto a = std::make_shared<Job>(), b = std::make_shared<Job>();
  submit(state, a, 1, 1);
  submit(state, b, 2, 1);
  ScriptedEngine engine(state, {{out(1, 0, {9})}});
  engine.fail_next = true;
  std::vector<RequestOutput> got;
  EXPECT_NO_THROW(got = lio::server::serve_step(engine, state));
  EXPECT_TRUE(got.empty());
  std::string error;
  drain(*a, 1, nullptr, &error);
  EXPECT_EQ(error, "device lost");
  drain(*b, 1, nullptr, &error);
  EXPECT_EQ(error, "device lost");
  int aborts = 0;
  for (const std::string& line : engine.log) aborts += line.rfind("abort ", 0) == 0;
  EXPECT_EQ(aborts, 2) << "every request in flight is aborted";
}

// ---- a real engine ----------------------------------------------------------------------------

class ServingLoopEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    lio::testing::TinyModelSpec spec;
    spec.context_length = 512;
    lio::testing::write_tiny_gguf(dir_ + "/m.gguf", spec);
    model_ = std::make_unique<lio::LoadedModel>(lio::load_model(dir_ + "/m.gguf", lio::WeightMode::AsStored));
    runner_ = std::make_unique<lio::ModelRunner>(std::make_unique<lio::CpuBackend>(model_->config, model_->weights),
                                                 lio::KvPoolConfig{16, 64});
    engine_ = std::make_unique<lio::Engine>(*runner_, *model_->tokenizer);
  }
  static lio::SamplingParams fixed(int64_t max_tokens, int64_t n = 1) {
    lio::SamplingParams p;
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.n = n;
    return p;
  }
  std::string dir_ = lio::testing::make_temp_dir("lio_grade_ch09");
  std::unique_ptr<lio::LoadedModel> model_;
  std::unique_ptr<lio::ModelRunner> runner_;
  std::unique_ptr<lio::Engine> engine_;
};

TEST_F(ServingLoopEngine, ACancelledRequestsBlocksAreFreeAfterOneTurn) {
  ServingState state;
  lio::server::EngineSteps steps(*engine_);
  auto job = std::make_shared<Job>();
  submit(state, job, engine_->add_request({3, 4, 5, 6, 7}, fixed(400, 2)), 2);
  for (int i = 0; i < 4; ++i) lio::server::serve_step(steps, state);
  ASSERT_LT(engine_->n_free_blocks(), engine_->block_manager().n_blocks()) << "the request holds blocks";
  {
    std::lock_guard lock(state.mutex);
    state.cancelled = job->engine_ids();
  }
  lio::server::serve_step(steps, state);
  EXPECT_EQ(engine_->n_free_blocks(), engine_->block_manager().n_blocks()) << "one turn after the cancel";
  std::vector<RequestOutput> got;
  std::string error;
  EXPECT_TRUE(job->take(got, error, std::chrono::milliseconds(0))) << "both samples ended";
  int aborted = 0;
  for (const RequestOutput& o : got) aborted += o.finished && o.finish_reason == lio::FinishReason::Abort;
  EXPECT_EQ(aborted, 2);
  std::lock_guard lock(state.mutex);
  EXPECT_TRUE(state.registry.empty());
}

TEST_F(ServingLoopEngine, ConcurrentSubmitsAllFinishWithTheirOwnTokens) {
  // Alone first: each prompt's tokens from a loop that serves it by itself.
  const std::vector<std::vector<int32_t>> prompts = {{3, 4}, {5, 6, 7}, {8}, {9, 10, 11, 12}, {13, 14}, {15}};
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    ServingState state;
    lio::server::EngineSteps steps(*engine_);
    auto job = std::make_shared<Job>();
    submit(state, job, engine_->add_request(p, fixed(12)), 1);
    while (steps.has_unfinished()) lio::server::serve_step(steps, state);
    alone.push_back(drain(*job, 1)[0]);
    ASSERT_EQ(alone.back().size(), 12u);
  }
  // Then submitted from threads while the loop turns.
  ServingState state;
  lio::server::EngineSteps steps(*engine_);
  std::vector<std::shared_ptr<Job>> jobs(prompts.size());
  std::atomic<int> submitted{0};
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * static_cast<int>(i)));
      jobs[i] = std::make_shared<Job>();
      std::lock_guard lock(state.mutex);  // as EngineLoop::submit: add and register together
      const int64_t id = engine_->add_request(prompts[i], fixed(12));
      jobs[i]->add_engine_request(id, 1);
      state.registry[id] = ServingEntry{jobs[i], 1, false};
      state.n_queued += 1;
      submitted += 1;
    });
  }
  for (int turns = 0; turns < 100000 && (submitted < static_cast<int>(prompts.size()) || steps.has_unfinished());
       ++turns) {
    if (steps.has_unfinished()) {
      lio::server::serve_step(steps, state);
    } else {
      std::this_thread::yield();
    }
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    bool over = false;
    std::vector<RequestOutput> got;
    std::string error;
    over = jobs[i]->take(got, error, std::chrono::milliseconds(0));
    EXPECT_TRUE(over) << "request " << i;
    std::vector<int32_t> tokens;
    lio::FinishReason reason = lio::FinishReason::Abort;
    for (const RequestOutput& o : got) {
      tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      if (o.finished) reason = *o.finish_reason;
    }
    EXPECT_EQ(tokens, alone[i]) << "request " << i;
    EXPECT_EQ(reason, lio::FinishReason::Length) << "request " << i;
  }
  std::lock_guard lock(state.mutex);
  EXPECT_TRUE(state.registry.empty());
  EXPECT_EQ(state.n_queued, 0);
}

}  // namespace
