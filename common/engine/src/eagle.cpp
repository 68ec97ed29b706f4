#include "lio/eagle.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <set>
#include <string>

#include "lio/dtype.h"
#include "lio/error.h"
#include "lio/safetensors.h"
#include "packed_matmul.h"

namespace lio {

namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s;
  for (const int64_t x : shape) s += (s.empty() ? "" : ", ") + std::to_string(x);
  return s;
}

/// The tensor `name` of `st` as a copy, checked to be `dtype` of `shape`, else FormatError.
template <typename T>
std::vector<T> tensor(const SafetensorsSet& st, const std::string& path, const std::string& name, const std::string& dtype,
                      const std::vector<int64_t>& shape) {
  const SafetensorsTensor* t = st.find(name);
  if (t == nullptr) throw FormatError(path + ": EAGLE drafter file has no tensor '" + name + "'");
  if (t->dtype_name != dtype || t->shape != shape) {
    throw FormatError(path + ": tensor '" + name + "' is " + t->dtype_name + " (" + shape_text(t->shape) + "), expected " +
                      dtype + " (" + shape_text(shape) + ")");
  }
  std::vector<T> out(static_cast<size_t>(t->size_bytes) / sizeof(T));
  std::memcpy(out.data(), t->data, out.size() * sizeof(T));  // the mapping may be unaligned
  return out;
}

/// Metadata `key` as a number, else FormatError.
double number(const SafetensorsSet& st, const std::string& path, const std::string& key) {
  const auto it = st.metadata().find(key);
  if (it == st.metadata().end()) throw FormatError(path + ": EAGLE drafter file has no metadata '" + key + "'");
  try {
    size_t used = 0;
    const double v = std::stod(it->second, &used);
    if (used == it->second.size() && std::isfinite(v)) return v;
  } catch (const std::exception&) {
  }
  throw FormatError(path + ": metadata '" + key + "' is '" + it->second + "', not a number");
}

int64_t positive(const SafetensorsSet& st, const std::string& path, const std::string& key) {
  const double v = number(st, path, key);
  if (v < 1 || v != std::floor(v) || v > 1e9) {
    throw FormatError(path + ": metadata '" + key + "' must be a positive integer, got " + std::to_string(v));
  }
  return static_cast<int64_t>(v);
}

}  // namespace

EagleDrafter EagleDrafter::load(const std::string& path, int64_t target_d_model, int64_t target_vocab) {
  const SafetensorsSet st = SafetensorsSet::open_file(path);
  EagleDrafter w;
  const SafetensorsTensor* lm = st.find("eagle.lm_head");
  if (lm == nullptr || lm->shape.size() != 2) {
    throw FormatError(path + ": EAGLE drafter file has no 2-D tensor 'eagle.lm_head' (scripts/train_eagle.py writes it)");
  }
  const int64_t n_vocab = lm->shape[0];
  const int64_t d = w.d_model = lm->shape[1];
  if (d != target_d_model) {
    throw InvalidArgument(path + ": the EAGLE drafter was trained for another model (d_model " + std::to_string(d) +
                          "; this model's is " + std::to_string(target_d_model) + ")");
  }
  w.n_heads = positive(st, path, "n_heads");
  w.n_kv_heads = positive(st, path, "n_kv_heads");
  w.head_dim = positive(st, path, "head_dim");
  w.ffn = positive(st, path, "ffn");
  w.rope_theta = static_cast<float>(number(st, path, "rope_theta"));
  w.rms_eps = static_cast<float>(number(st, path, "rms_eps"));
  if (w.n_heads % w.n_kv_heads != 0 || w.head_dim % 2 != 0 || !(w.rope_theta > 0) || !(w.rms_eps > 0)) {
    throw FormatError(path + ": EAGLE drafter's n_heads " + std::to_string(w.n_heads) + " must be a multiple of n_kv_heads " +
                      std::to_string(w.n_kv_heads) + ", head_dim (" + std::to_string(w.head_dim) +
                      ") even, rope_theta and rms_eps positive");
  }
  const int64_t qd = w.n_heads * w.head_dim, kvd = w.n_kv_heads * w.head_dim, f = w.ffn;
  w.vocab = tensor<int32_t>(st, path, "eagle.vocab", "I32", {n_vocab});
  w.lm_head = tensor<float>(st, path, "eagle.lm_head", "F32", {n_vocab, d});
  std::set<int32_t> seen;
  for (const int32_t id : w.vocab) {
    if (id < 0 || id >= target_vocab || !seen.insert(id).second) {
      throw FormatError(path + ": eagle.vocab holds token id " + std::to_string(id) +
                        (id < 0 || id >= target_vocab ? " outside [0, " + std::to_string(target_vocab) + ")" : " twice"));
    }
  }
  w.fc_weight = tensor<float>(st, path, "eagle.fc.weight", "F32", {d, 2 * d});
  w.fc_bias = tensor<float>(st, path, "eagle.fc.bias", "F32", {d});
  w.wq = tensor<float>(st, path, "eagle.attn_q.weight", "F32", {qd, d});
  w.wk = tensor<float>(st, path, "eagle.attn_k.weight", "F32", {kvd, d});
  w.wv = tensor<float>(st, path, "eagle.attn_v.weight", "F32", {kvd, d});
  w.wo = tensor<float>(st, path, "eagle.attn_output.weight", "F32", {d, qd});
  w.ffn_norm = tensor<float>(st, path, "eagle.ffn_norm.weight", "F32", {d});
  w.w_gate = tensor<float>(st, path, "eagle.ffn_gate.weight", "F32", {f, d});
  w.w_up = tensor<float>(st, path, "eagle.ffn_up.weight", "F32", {f, d});
  w.w_down = tensor<float>(st, path, "eagle.ffn_down.weight", "F32", {d, f});
  if (const SafetensorsTensor* p = st.find("probe.features"); p != nullptr && p->shape.size() == 2) {
    const int64_t n = p->shape[0];
    w.probe_start = static_cast<int64_t>(number(st, path, "probe_start"));
    w.probe_features = tensor<float>(st, path, "probe.features", "F32", {n, d});
    w.probe_out = tensor<float>(st, path, "probe.out", "F32", {n, d});
    w.probe_tokens = tensor<int32_t>(st, path, "probe.tokens", "I32", {n + 1});
  }
  return w;
}

/// The drafter's matrices packed for the CPU's kernels (Q8_0, or f32 when asked).
struct EagleProposer::Packed {
  std::unique_ptr<cpu::PackedMatrix> fc, wq, wk, wv, wo, gate, up, down, lm_head;
  cpu::PackedScratch scratch;
  cpu::CpuIsa isa = cpu::default_cpu_isa();
  cpu::MatmulActivations act = cpu::MatmulActivations::Int8;

  void matmul(const cpu::PackedMatrix& w, const float* x, float* y, int64_t n) {
    cpu::packed_matmul(w, x, y, n, false, act, isa, scratch);
  }
  /// Several matrices of the same input: (matrix, output) pairs.
  void matmul_many(std::initializer_list<std::pair<const cpu::PackedMatrix*, float*>> outs, const float* x, int64_t n) {
    std::vector<cpu::PackedTarget> targets;
    for (const auto& [w, y] : outs) targets.push_back({w, y, false});
    cpu::packed_matmul(targets, x, n, act, isa, scratch);
  }
};

/// One sequence's drafter state: the K/V of its entries (positions start .. start + n_committed
/// - 1 verified; slots past them this round's tree nodes) and the verified features not run yet.
struct EagleProposer::SeqState {
  int64_t start = 0;
  int64_t n_committed = 0;
  std::vector<float> k, v;       ///< (slots, Hkv hd)
  std::vector<float> pending;    ///< (m, d) verified features, the last at position n_tokens - 2
  std::vector<float> root_g;     ///< (d) the last verified entry's output, valid at root_len tokens
  int64_t root_len = -1;
};

/// One drafter row: the entry (feature, token) at `position`, its K/V at `slot` of st's cache;
/// it attends to slots 0 .. prefix - 1, then `extra` (its tree ancestors), then itself.
struct EagleProposer::Row {
  SeqState* st = nullptr;
  int64_t slot = 0;
  int64_t prefix = 0;
  std::vector<int64_t> extra;
  int64_t position = 0;
  int32_t token = 0;
};

EagleProposer::EagleProposer(EagleDrafter drafter, std::function<void(std::span<const int32_t>, float*)> embed,
                             int64_t top_k, int64_t depth, bool f32_weights)
    : w_(std::move(drafter)), embed_(std::move(embed)), top_k_(top_k), depth_(depth), packed_(std::make_unique<Packed>()) {
  if (top_k_ < 1) throw InvalidArgument("--eagle-top-k must be >= 1, got " + std::to_string(top_k_));
  if (depth_ < 1) throw InvalidArgument("--eagle-depth must be >= 1, got " + std::to_string(depth_));
  const DType dtype = f32_weights ? DType::F32 : DType::Q8_0;
  packed_->act = f32_weights ? cpu::MatmulActivations::F32 : cpu::MatmulActivations::Int8;
  auto pack = [&](const std::string& name, const std::vector<float>& m, int64_t rows, int64_t cols) {
    std::vector<std::byte> bytes;
    const int64_t row_bytes = dtype_row_bytes(dtype, cols);
    bytes.resize(static_cast<size_t>(rows * row_bytes));
    for (int64_t r = 0; r < rows; ++r) quantize_row(dtype, m.data() + r * cols, bytes.data() + r * row_bytes, cols);
    return std::make_unique<cpu::PackedMatrix>(WeightMatrix{name, dtype, rows, cols, row_bytes, bytes.data()});
  };
  const int64_t d = w_.d_model, qd = w_.n_heads * w_.head_dim, kvd = w_.n_kv_heads * w_.head_dim;
  packed_->fc = pack("eagle.fc.weight", w_.fc_weight, d, 2 * d);
  packed_->wq = pack("eagle.attn_q.weight", w_.wq, qd, d);
  packed_->wk = pack("eagle.attn_k.weight", w_.wk, kvd, d);
  packed_->wv = pack("eagle.attn_v.weight", w_.wv, kvd, d);
  packed_->wo = pack("eagle.attn_output.weight", w_.wo, d, qd);
  packed_->gate = pack("eagle.ffn_gate.weight", w_.w_gate, w_.ffn, d);
  packed_->up = pack("eagle.ffn_up.weight", w_.w_up, w_.ffn, d);
  packed_->down = pack("eagle.ffn_down.weight", w_.w_down, d, w_.ffn);
  packed_->lm_head = pack("eagle.lm_head", w_.lm_head, static_cast<int64_t>(w_.vocab.size()), d);
}

EagleProposer::~EagleProposer() = default;

void EagleProposer::forward(std::vector<Row>& rows, std::vector<float>& g, std::vector<float>* logits) {
  // `g` holds the rows' input features (n, d) on entry and their outputs on return.
  const int64_t d = w_.d_model, hd = w_.head_dim, n_h = w_.n_heads, n_kv = w_.n_kv_heads;
  const int64_t qd = n_h * hd, kvd = n_kv * hd, f = w_.ffn;
  const auto n = static_cast<int64_t>(rows.size());
  LIO_CHECK(static_cast<int64_t>(g.size()) == n * d, "EagleProposer::forward: features do not match the rows");
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) ids[static_cast<size_t>(r)] = rows[static_cast<size_t>(r)].token;
  std::vector<float> emb(static_cast<size_t>(n * d)), a(static_cast<size_t>(n * 2 * d));
  embed_(ids, emb.data());
  for (int64_t r = 0; r < n; ++r) {  // a = [E x_{i+1}; f_i]
    std::copy_n(emb.data() + r * d, d, a.data() + r * 2 * d);
    std::copy_n(g.data() + r * d, d, a.data() + r * 2 * d + d);
  }
  std::vector<float> u(static_cast<size_t>(n * d)), q(static_cast<size_t>(n * qd)), k(static_cast<size_t>(n * kvd)),
      v(static_cast<size_t>(n * kvd)), att(static_cast<size_t>(n * qd)), h(static_cast<size_t>(n * d));
  packed_->matmul(*packed_->fc, a.data(), u.data(), n);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < d; ++c) u[static_cast<size_t>(r * d + c)] += w_.fc_bias[static_cast<size_t>(c)];
  packed_->matmul_many({{packed_->wq.get(), q.data()}, {packed_->wk.get(), k.data()}, {packed_->wv.get(), v.data()}},
                       u.data(), n);  // one parallel region, x rounded once
  // RoPE, rotate-half pairs (j, j + hd / 2) at the entry's position.
  const int64_t half = hd / 2;
  std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
  auto rotate = [&](float* x, int64_t heads) {
    for (int64_t hh = 0; hh < heads; ++hh) {
      float* p = x + hh * hd;
      for (int64_t j = 0; j < half; ++j) {
        const float x0 = p[j], x1 = p[j + half];
        p[j] = x0 * cs[static_cast<size_t>(j)] - x1 * sn[static_cast<size_t>(j)];
        p[j + half] = x0 * sn[static_cast<size_t>(j)] + x1 * cs[static_cast<size_t>(j)];
      }
    }
  };
  for (int64_t r = 0; r < n; ++r) {
    Row& row = rows[static_cast<size_t>(r)];
    for (int64_t j = 0; j < half; ++j) {
      const double inv = std::pow(static_cast<double>(w_.rope_theta), -2.0 * static_cast<double>(j) / static_cast<double>(hd));
      const double angle = static_cast<double>(row.position) * inv;
      cs[static_cast<size_t>(j)] = static_cast<float>(std::cos(angle));
      sn[static_cast<size_t>(j)] = static_cast<float>(std::sin(angle));
    }
    rotate(q.data() + r * qd, n_h);
    rotate(k.data() + r * kvd, n_kv);
    SeqState& st = *row.st;
    const auto need = static_cast<size_t>((row.slot + 1) * kvd);
    if (st.k.size() < need) {
      st.k.resize(std::max(need, st.k.size() * 2));
      st.v.resize(st.k.size());
    }
    std::copy_n(k.data() + r * kvd, kvd, st.k.data() + row.slot * kvd);
    std::copy_n(v.data() + r * kvd, kvd, st.v.data() + row.slot * kvd);
  }
  // Attention: each row over its keys (prefix, ancestors, itself), GQA.
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<int64_t> keys;
  std::vector<float> p;
  for (int64_t r = 0; r < n; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    keys.resize(static_cast<size_t>(row.prefix));
    std::iota(keys.begin(), keys.end(), int64_t{0});
    keys.insert(keys.end(), row.extra.begin(), row.extra.end());
    keys.push_back(row.slot);
    p.resize(keys.size());
    for (int64_t hh = 0; hh < n_h; ++hh) {
      const float* qh = q.data() + r * qd + hh * hd;
      const int64_t kvh = hh / (n_h / n_kv);
      float mx = -INFINITY;
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* kj = row.st->k.data() + keys[j] * kvd + kvh * hd;
        float s = 0;
        for (int64_t c = 0; c < hd; ++c) s += qh[c] * kj[c];
        p[j] = s * scale;
        mx = std::max(mx, p[j]);
      }
      float sum = 0;
      for (float& x : p) sum += (x = std::exp(x - mx));
      float* o = att.data() + r * qd + hh * hd;
      std::fill_n(o, hd, 0.0f);
      for (size_t j = 0; j < keys.size(); ++j) {
        const float* vj = row.st->v.data() + keys[j] * kvd + kvh * hd;
        const float pj = p[j] / sum;
        for (int64_t c = 0; c < hd; ++c) o[c] += pj * vj[c];
      }
    }
  }
  packed_->matmul(*packed_->wo, att.data(), h.data(), n);
  for (size_t i = 0; i < h.size(); ++i) h[i] += u[i];
  // MLP: g = h + W_down (SiLU(W_gate n) * W_up n), n = RMSNorm(h) * w.
  std::vector<float> xn(static_cast<size_t>(n * d)), gate(static_cast<size_t>(n * f)), up(static_cast<size_t>(n * f));
  for (int64_t r = 0; r < n; ++r) {
    const float* x = h.data() + r * d;
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(x[c]) * x[c];
    const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + w_.rms_eps));
    for (int64_t c = 0; c < d; ++c) xn[static_cast<size_t>(r * d + c)] = x[c] * inv * w_.ffn_norm[static_cast<size_t>(c)];
  }
  packed_->matmul_many({{packed_->gate.get(), gate.data()}, {packed_->up.get(), up.data()}}, xn.data(), n);
  for (size_t i = 0; i < gate.size(); ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  packed_->matmul(*packed_->down, gate.data(), g.data(), n);
  for (size_t i = 0; i < g.size(); ++i) g[i] += h[i];
  if (logits != nullptr) {
    logits->resize(static_cast<size_t>(n) * w_.vocab.size());
    packed_->matmul(*packed_->lm_head, g.data(), logits->data(), n);
  }
}

std::vector<float> EagleProposer::forward_window(std::span<const float> features, std::span<const int32_t> next_tokens,
                                                 int64_t start) {
  const int64_t d = w_.d_model;
  const auto n = static_cast<int64_t>(next_tokens.size());
  if (static_cast<int64_t>(features.size()) != n * d || start < 0) {
    throw InvalidArgument("EagleProposer::forward_window: features must be (n, d) for n next tokens and start >= 0");
  }
  SeqState st;
  std::vector<Row> rows(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) rows[static_cast<size_t>(r)] = {&st, r, r, {}, start + r, next_tokens[static_cast<size_t>(r)]};
  std::vector<float> g(features.begin(), features.end());
  forward(rows, g, nullptr);
  return g;
}

void EagleProposer::on_hidden(const Sequence& seq, std::span<const float> hidden) {
  std::unique_ptr<SeqState>& st = states_[seq.id()];
  if (!st) st = std::make_unique<SeqState>();
  st->pending.insert(st->pending.end(), hidden.begin(), hidden.end());
}

namespace {

/// A node of this round's tree: the token at depth `depth` (1 = right after the sequence's last
/// token), its path log-probability, its parent node (-1: the root), and once expanded its
/// drafter slot and output.
struct Node {
  int32_t token;
  double score;
  int32_t parent;
  int32_t depth;
  int64_t slot = -1;
  std::vector<float> g;
};

/// Top `k` (token, log-prob) of one row of draft-vocab logits, highest first (ties: lower index).
void top_tokens(const float* row, const std::vector<int32_t>& vocab, int64_t k, std::vector<int32_t>& idx,
                std::vector<std::pair<int32_t, double>>& out) {
  const auto nv = static_cast<int64_t>(vocab.size());
  const float mx = *std::max_element(row, row + nv);
  double sum = 0;
  for (int64_t j = 0; j < nv; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
  const double log_z = static_cast<double>(mx) + std::log(sum);
  idx.resize(static_cast<size_t>(nv));
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t top = std::min(k, nv);
  std::partial_sort(idx.begin(), idx.begin() + top, idx.end(),
                    [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  out.clear();
  for (int64_t j = 0; j < top; ++j) {
    const int32_t i = idx[static_cast<size_t>(j)];
    out.emplace_back(vocab[static_cast<size_t>(i)], static_cast<double>(row[i]) - log_z);
  }
}

}  // namespace

std::vector<DraftProposal> EagleProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) {
  const int64_t d = w_.d_model;
  const auto nv = static_cast<int64_t>(w_.vocab.size());
  std::vector<DraftProposal> out(seqs.size());
  struct Work {
    size_t i;
    SeqState* st;
    int64_t n;      ///< the sequence's tokens
    int64_t depth;  ///< levels to grow
    std::vector<Node> nodes;
  };
  std::vector<Work> work;
  // 1. Catch-up: the verified entries not run yet, every sequence's in one pass.
  std::vector<Row> rows;
  std::vector<float> feats;
  std::vector<size_t> last_row;  // per work item: its root row in `rows`, or SIZE_MAX (root_g reused)
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto it = states_.find(seqs[i]->id());
    if (ks[i] < 1 || it == states_.end()) continue;
    SeqState& st = *it->second;
    const Sequence& seq = *seqs[i];
    const int64_t n = seq.n_tokens();
    const auto m = static_cast<int64_t>(st.pending.size()) / d;
    const int64_t first = n - 1 - m;  // the pending rows' first position
    if (m == 0 && st.root_len != n) continue;  // nothing new and no output for this length
    if (first < 0) {  // cannot happen: a pending row per token at most; start over
      st.pending.clear();
      st.n_committed = 0;
      st.root_len = -1;
      continue;
    }
    if (m > 0 && (st.n_committed == 0 || st.start + st.n_committed != first)) {  // a gap: restart the window
      st.n_committed = 0;
      st.start = first;
    }
    const int64_t depth = top_k_ == 1 ? ks[i] : std::min(ks[i], depth_);
    work.push_back({i, &st, n, depth, {}});
    if (m == 0) {
      last_row.push_back(SIZE_MAX);
      continue;
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t slot = st.n_committed + r;
      rows.push_back({&st, slot, slot, {}, first + r, seq.token_ids()[static_cast<size_t>(first + r + 1)]});
    }
    feats.insert(feats.end(), st.pending.begin(), st.pending.end());
    last_row.push_back(rows.size() - 1);
    st.n_committed += m;
    st.pending.clear();
  }
  if (work.empty()) return out;
  if (!rows.empty()) forward(rows, feats, nullptr);
  // Depth 1: the roots' candidates.
  std::vector<float> roots(work.size() * static_cast<size_t>(d)), logits;
  for (size_t w = 0; w < work.size(); ++w) {
    SeqState& st = *work[w].st;
    if (last_row[w] != SIZE_MAX) {
      st.root_g.assign(feats.begin() + static_cast<std::ptrdiff_t>(last_row[w]) * d,
                       feats.begin() + static_cast<std::ptrdiff_t>(last_row[w] + 1) * d);
      st.root_len = work[w].n;
    }
    std::copy(st.root_g.begin(), st.root_g.end(), roots.begin() + static_cast<std::ptrdiff_t>(w) * d);
  }
  logits.resize(work.size() * static_cast<size_t>(nv));
  packed_->matmul(*packed_->lm_head, roots.data(), logits.data(), static_cast<int64_t>(work.size()));
  std::vector<int32_t> idx;
  std::vector<std::pair<int32_t, double>> top;
  for (size_t w = 0; w < work.size(); ++w) {
    top_tokens(logits.data() + w * static_cast<size_t>(nv), w_.vocab, top_k_, idx, top);
    for (const auto& [tok, lp] : top) work[w].nodes.push_back({tok, lp, -1, 1});
  }
  // 2. Each further level: expand the top_k nodes of the deepest level by path score.
  for (int32_t level = 1;; ++level) {
    rows.clear();
    feats.clear();
    std::vector<std::pair<size_t, int32_t>> expanded;  // (work item, node)
    for (size_t w = 0; w < work.size(); ++w) {
      Work& wk = work[w];
      if (level >= wk.depth) continue;
      std::vector<int32_t> level_nodes;
      for (int32_t j = 0; j < static_cast<int32_t>(wk.nodes.size()); ++j)
        if (wk.nodes[static_cast<size_t>(j)].depth == level) level_nodes.push_back(j);
      const auto n_expand = std::min<size_t>(level_nodes.size(), static_cast<size_t>(top_k_));
      std::partial_sort(level_nodes.begin(), level_nodes.begin() + static_cast<std::ptrdiff_t>(n_expand), level_nodes.end(),
                        [&](int32_t a, int32_t b) {
                          const double sa = wk.nodes[static_cast<size_t>(a)].score, sb = wk.nodes[static_cast<size_t>(b)].score;
                          return sa != sb ? sa > sb : a < b;
                        });
      int64_t next_slot = wk.st->n_committed;
      for (const Node& nd : wk.nodes) next_slot = std::max(next_slot, nd.slot + 1);
      for (size_t e = 0; e < n_expand; ++e) {
        const int32_t j = level_nodes[e];
        Node& nd = wk.nodes[static_cast<size_t>(j)];
        Row row{wk.st, next_slot++, wk.st->n_committed, {}, wk.n - 2 + level, nd.token};
        for (int32_t a = nd.parent; a >= 0; a = wk.nodes[static_cast<size_t>(a)].parent)
          row.extra.insert(row.extra.begin(), wk.nodes[static_cast<size_t>(a)].slot);
        nd.slot = row.slot;
        const std::vector<float>& parent_g = nd.parent < 0 ? wk.st->root_g : wk.nodes[static_cast<size_t>(nd.parent)].g;
        feats.insert(feats.end(), parent_g.begin(), parent_g.end());
        rows.push_back(std::move(row));
        expanded.emplace_back(w, j);
      }
    }
    if (rows.empty()) break;
    forward(rows, feats, &logits);
    for (size_t r = 0; r < expanded.size(); ++r) {
      const auto [w, j] = expanded[r];
      Work& wk = work[w];
      wk.nodes[static_cast<size_t>(j)].g.assign(feats.begin() + static_cast<std::ptrdiff_t>(r) * d,
                                                feats.begin() + static_cast<std::ptrdiff_t>(r + 1) * d);
      top_tokens(logits.data() + r * static_cast<size_t>(nv), w_.vocab, top_k_, idx, top);
      const double base = wk.nodes[static_cast<size_t>(j)].score;
      for (const auto& [tok, lp] : top) wk.nodes.push_back({tok, base + lp, j, level + 1});
    }
  }
  // 3. The ks[i] best nodes of all levels (EAGLE-2's reranking); a node's score is at most its
  // parent's, and ties go to the shallower, earlier node, so every chosen node's parent is chosen.
  for (Work& wk : work) {
    std::vector<int32_t> order(wk.nodes.size());
    std::iota(order.begin(), order.end(), 0);
    const auto keep = std::min<size_t>(order.size(), static_cast<size_t>(ks[wk.i]));
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep), order.end(), [&](int32_t a, int32_t b) {
      const Node& x = wk.nodes[static_cast<size_t>(a)];
      const Node& y = wk.nodes[static_cast<size_t>(b)];
      if (x.score != y.score) return x.score > y.score;
      return x.depth != y.depth ? x.depth < y.depth : a < b;
    });
    order.resize(keep);
    std::sort(order.begin(), order.end());  // creation order: parents first
    std::vector<int32_t> position(wk.nodes.size(), -1);
    DraftProposal& p = out[wk.i];
    p.parents.push_back(-1);
    for (const int32_t j : order) {
      const Node& nd = wk.nodes[static_cast<size_t>(j)];
      const int32_t parent = nd.parent < 0 ? 0 : position[static_cast<size_t>(nd.parent)];
      if (parent < 0) break;  // cannot happen (see above); the prefix so far is a valid tree
      position[static_cast<size_t>(j)] = static_cast<int32_t>(p.tokens.size() + 1);
      p.tokens.push_back(nd.token);
      p.parents.push_back(parent);
    }
    if (p.tokens.empty()) p.parents.clear();
  }
  return out;
}

void EagleProposer::release(const Sequence& seq) { states_.erase(seq.id()); }

}  // namespace lio
