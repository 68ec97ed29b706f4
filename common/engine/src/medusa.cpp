#include "lio/medusa.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <queue>
#include <set>
#include <string>

#include "lio/error.h"
#include "lio/safetensors.h"
#include "packed_matmul.h"

namespace lio {

namespace {

/// The tensor `name` of `st` with dtype `dtype` and shape `shape`, else FormatError naming both.
const SafetensorsTensor& tensor_of(const SafetensorsSet& st, const std::string& path, const std::string& name,
                                   const std::string& dtype, const std::vector<int64_t>& shape) {
  const SafetensorsTensor* t = st.find(name);
  if (t == nullptr) throw FormatError(path + ": Medusa heads file has no tensor '" + name + "'");
  if (t->dtype_name != dtype || t->shape != shape) {
    std::string want, got;
    for (const int64_t x : shape) want += (want.empty() ? "" : ", ") + std::to_string(x);
    for (const int64_t x : t->shape) got += (got.empty() ? "" : ", ") + std::to_string(x);
    throw FormatError(path + ": tensor '" + name + "' is " + t->dtype_name + " (" + got + "), expected " + dtype +
                      " (" + want + ")");
  }
  return *t;
}

template <typename T>
void copy_into(const SafetensorsTensor& t, std::vector<T>& out) {
  out.resize(static_cast<size_t>(t.size_bytes) / sizeof(T));
  std::memcpy(out.data(), t.data, out.size() * sizeof(T));  // the mapping may be unaligned
}

}  // namespace

MedusaHeads MedusaHeads::load(const std::string& path, int64_t target_d_model, int64_t target_vocab) {
  const SafetensorsSet st = SafetensorsSet::open_file(path);
  MedusaHeads h;
  const SafetensorsTensor* lm = st.find("medusa.lm_head");
  if (lm == nullptr || lm->shape.size() != 2) {
    throw FormatError(path + ": Medusa heads file has no 2-D tensor 'medusa.lm_head' (scripts/train_medusa.py writes it)");
  }
  const int64_t n_vocab = lm->shape[0];
  h.d_model = lm->shape[1];
  if (h.d_model != target_d_model) {
    throw InvalidArgument(path + ": the heads were trained for another model (d_model " + std::to_string(h.d_model) +
                          "; this model's is " + std::to_string(target_d_model) + ")");
  }
  copy_into(tensor_of(st, path, "medusa.vocab", "I32", {n_vocab}), h.vocab);
  copy_into(tensor_of(st, path, "medusa.lm_head", "F32", {n_vocab, h.d_model}), h.lm_head);
  std::set<int32_t> seen;
  for (const int32_t id : h.vocab) {
    if (id < 0 || id >= target_vocab || !seen.insert(id).second) {
      throw FormatError(path + ": medusa.vocab holds token id " + std::to_string(id) +
                        (id < 0 || id >= target_vocab ? " outside [0, " + std::to_string(target_vocab) + ")" : " twice"));
    }
  }
  for (int64_t k = 0; st.find("medusa." + std::to_string(k) + ".weight") != nullptr; ++k) {
    const std::string p = "medusa." + std::to_string(k) + ".";
    std::vector<float> w, b;
    copy_into(tensor_of(st, path, p + "weight", "F32", {h.d_model, h.d_model}), w);
    copy_into(tensor_of(st, path, p + "bias", "F32", {h.d_model}), b);
    h.weight.insert(h.weight.end(), w.begin(), w.end());
    h.bias.insert(h.bias.end(), b.begin(), b.end());
    h.n_heads = k + 1;
  }
  if (h.n_heads == 0) throw FormatError(path + ": Medusa heads file has no head (no tensor 'medusa.0.weight')");
  return h;
}

DraftProposal best_first_tree(std::span<const MedusaCandidates> depth_candidates, int64_t n_nodes) {
  if (n_nodes < 0) throw InvalidArgument("best_first_tree: n_nodes must be >= 0, got " + std::to_string(n_nodes));
  // A frontier entry: the candidate `rank` of depth `depth`'s list as a child of node `parent`.
  struct Entry {
    double score;
    int64_t order;  ///< push order: ties go to the earlier push, so the tree is deterministic
    int32_t parent;
    int32_t depth;
    int32_t rank;
    bool operator<(const Entry& o) const { return score != o.score ? score < o.score : order > o.order; }
  };
  DraftProposal out;
  out.parents.push_back(-1);
  std::vector<double> node_score{0.0};
  std::priority_queue<Entry> frontier;
  int64_t pushes = 0;
  auto push = [&](int32_t parent, int32_t depth, int32_t rank) {
    if (depth >= static_cast<int32_t>(depth_candidates.size())) return;
    const MedusaCandidates& c = depth_candidates[static_cast<size_t>(depth)];
    if (rank >= static_cast<int32_t>(c.tokens.size())) return;
    frontier.push({node_score[static_cast<size_t>(parent)] + c.log_probs[static_cast<size_t>(rank)], pushes++, parent,
                   depth, rank});
  };
  push(0, 0, 0);
  while (static_cast<int64_t>(out.tokens.size()) < n_nodes && !frontier.empty()) {
    const Entry e = frontier.top();
    frontier.pop();
    const auto node = static_cast<int32_t>(out.tokens.size() + 1);
    out.tokens.push_back(depth_candidates[static_cast<size_t>(e.depth)].tokens[static_cast<size_t>(e.rank)]);
    out.parents.push_back(e.parent);
    node_score.push_back(e.score);
    push(e.parent, e.depth, e.rank + 1);  // the next sibling candidate
    push(node, e.depth + 1, 0);           // the new node's best child
  }
  if (out.tokens.empty()) out.parents.clear();
  return out;
}

struct MedusaProposer::Packed {
  std::vector<std::unique_ptr<cpu::PackedMatrix>> w;  ///< (K) each (d, d) f32
  std::unique_ptr<cpu::PackedMatrix> lm_head;         ///< (V', d) f32
  cpu::PackedScratch scratch;
  cpu::CpuIsa isa = cpu::default_cpu_isa();
};

MedusaProposer::MedusaProposer(MedusaHeads heads, int64_t top_k)
    : heads_(std::move(heads)), top_k_(top_k), packed_(std::make_unique<Packed>()) {
  if (top_k_ < 1) throw InvalidArgument("--medusa-top-k must be >= 1, got " + std::to_string(top_k_));
  const int64_t d = heads_.d_model;
  auto matrix = [&](const std::string& name, const float* data, int64_t rows) {
    WeightMatrix m{name, DType::F32, rows, d, d * static_cast<int64_t>(sizeof(float)),
                   reinterpret_cast<const std::byte*>(data)};
    return std::make_unique<cpu::PackedMatrix>(m);
  };
  for (int64_t k = 0; k < heads_.n_heads; ++k)
    packed_->w.push_back(matrix("medusa." + std::to_string(k) + ".weight", heads_.weight.data() + k * d * d, d));
  packed_->lm_head = matrix("medusa.lm_head", heads_.lm_head.data(), static_cast<int64_t>(heads_.vocab.size()));
}

MedusaProposer::~MedusaProposer() = default;

std::vector<std::vector<MedusaCandidates>> MedusaProposer::candidates(std::span<const float> hidden) {
  const int64_t d = heads_.d_model, n_heads = heads_.n_heads;
  const auto n_vocab = static_cast<int64_t>(heads_.vocab.size());
  if (hidden.empty() || hidden.size() % static_cast<size_t>(d) != 0) {
    throw InvalidArgument("MedusaProposer::candidates: hidden must be (n, " + std::to_string(d) + ") floats, got " +
                          std::to_string(hidden.size()));
  }
  const auto n = static_cast<int64_t>(hidden.size()) / d;
  // z_k = h + SiLU(W_k h + b_k) for every head (rows k * n .. k * n + n - 1), then one product
  // with the reduced LM head for all K * n rows.
  std::vector<float> z(static_cast<size_t>(n_heads * n * d)), logits(static_cast<size_t>(n_heads * n * n_vocab));
  for (int64_t k = 0; k < n_heads; ++k) {
    float* zk = z.data() + k * n * d;
    cpu::packed_matmul(*packed_->w[static_cast<size_t>(k)], hidden.data(), zk, n, false, cpu::MatmulActivations::F32,
                  packed_->isa, packed_->scratch);
    const float* b = heads_.bias.data() + k * d;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const float u = zk[r * d + c] + b[c];
        zk[r * d + c] = hidden[static_cast<size_t>(r * d + c)] + u / (1.0f + std::exp(-u));
      }
  }
  cpu::packed_matmul(*packed_->lm_head, z.data(), logits.data(), n_heads * n, false, cpu::MatmulActivations::F32, packed_->isa,
                packed_->scratch);
  const int64_t top = std::min(top_k_, n_vocab);
  std::vector<std::vector<MedusaCandidates>> out(static_cast<size_t>(n), std::vector<MedusaCandidates>(n_heads));
  std::vector<int32_t> idx(static_cast<size_t>(n_vocab));
  for (int64_t k = 0; k < n_heads; ++k)
    for (int64_t r = 0; r < n; ++r) {
      const float* row = logits.data() + (k * n + r) * n_vocab;
      const float mx = *std::max_element(row, row + n_vocab);
      double sum = 0;
      for (int64_t j = 0; j < n_vocab; ++j) sum += std::exp(static_cast<double>(row[j] - mx));
      const double log_z = static_cast<double>(mx) + std::log(sum);
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + top, idx.end(),
                        [&](int32_t a, int32_t b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
      MedusaCandidates& c = out[static_cast<size_t>(r)][static_cast<size_t>(k)];
      for (int64_t j = 0; j < top; ++j) {
        c.tokens.push_back(heads_.vocab[static_cast<size_t>(idx[static_cast<size_t>(j)])]);
        c.log_probs.push_back(static_cast<float>(static_cast<double>(row[idx[static_cast<size_t>(j)]]) - log_z));
      }
    }
  return out;
}

void MedusaProposer::on_hidden(const Sequence& seq, std::span<const float> hidden) {
  const auto d = static_cast<size_t>(heads_.d_model);
  if (hidden.size() < d) return;
  hidden_[seq.id()].assign(hidden.end() - static_cast<std::ptrdiff_t>(d), hidden.end());  // the last token's row
}

std::vector<DraftProposal> MedusaProposer::propose(std::span<Sequence* const> seqs, std::span<const int64_t> ks) {
  std::vector<DraftProposal> out(seqs.size());
  std::vector<size_t> which;
  std::vector<float> rows;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto h = hidden_.find(seqs[i]->id());
    if (ks[i] < 1 || h == hidden_.end()) continue;
    which.push_back(i);
    rows.insert(rows.end(), h->second.begin(), h->second.end());
  }
  if (which.empty()) return out;
  const std::vector<std::vector<MedusaCandidates>> cands = candidates(rows);
  for (size_t j = 0; j < which.size(); ++j) out[which[j]] = best_first_tree(cands[j], ks[which[j]]);
  return out;
}

void MedusaProposer::release(const Sequence& seq) { hidden_.erase(seq.id()); }

}  // namespace lio
