// bench_tokenizer — encode and decode throughput of LIO's byte-level BPE tokenizer on the
// model's own vocabulary, for plain English and for mixed text (Korean, CJK, emoji, code),
// side by side. Medians over repeats; MB/s of UTF-8 input and tokens/s.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "bench_util.h"
#include "lio/cli_common.h"
#include "lio/error.h"
#include "lio/tokenizer.h"

namespace {

struct Case {
  const char* name;
  std::string text;
};

std::string repeat_to_bytes(const std::string& unit, size_t n_bytes) {
  std::string out;
  while (out.size() < n_bytes) out += unit;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tokenizer encode/decode throughput", "bench_tokenizer"};
  std::string model;
  int64_t kib = 64;
  int repeats = 11;
  app.add_option("--model", model, "A .gguf file, HF directory or tokenizer.json (default: the course model)");
  app.add_option("--kib", kib, "Input size per case (KiB)")->capture_default_str();
  app.add_option("--repeats", repeats, "Repeats; medians are reported")->capture_default_str();
  return lio::run_main(app, argc, argv, [&]() -> int {
    if (kib < 1 || repeats < 1) throw lio::InvalidArgument("--kib and --repeats must be >= 1");
    const std::string path = model.empty() ? lio::default_model_path() : model;
    const auto tok = lio::load_tokenizer(path);
    const size_t n_bytes = static_cast<size_t>(kib) * 1024;
    const std::vector<Case> cases = {
        {"english", repeat_to_bytes("The KV cache keeps the keys and values of earlier tokens, so each "
                                    "decode step computes only the newest one. ", n_bytes)},
        {"mixed", repeat_to_bytes("Hello, wörld! 세계 안녕하세요 世界 🙂 café 12345 "
                                  "for (int i = 0; i < n; ++i) { y[i] += a * x[i]; }\n", n_bytes)},
    };
    std::printf("%s | tokenizer of %s | %lld KiB per case, medians of %d\n", lio::bench::cpu_name().c_str(),
                path.c_str(), (long long)kib, repeats);
    std::printf("| case | tokens | bytes/token | encode MB/s | encode tok/s | decode MB/s |\n|---|---:|---:|---:|---:|---:|\n");
    for (const Case& c : cases) {
      std::vector<double> enc_s, dec_s;
      std::vector<int32_t> ids;
      for (int r = 0; r < repeats + 1; ++r) {  // run 0 warms up
        double t0 = lio::bench::now_s();
        ids = tok->encode(c.text, false, false);
        const double te = lio::bench::now_s() - t0;
        t0 = lio::bench::now_s();
        const std::string back = tok->decode(ids);
        const double td = lio::bench::now_s() - t0;
        if (back != c.text) throw lio::InternalError(std::string("decode(encode(x)) != x for case ") + c.name);
        if (r == 0) continue;
        enc_s.push_back(te);
        dec_s.push_back(td);
      }
      const double e = lio::bench::median(enc_s), d = lio::bench::median(dec_s);
      const double mb = static_cast<double>(c.text.size()) / 1e6;
      std::printf("| %s | %zu | %.2f | %.1f | %.0f | %.1f |\n", c.name, ids.size(),
                  static_cast<double>(c.text.size()) / static_cast<double>(ids.size()), mb / e,
                  static_cast<double>(ids.size()) / e, mb / d);
    }
    return 0;
  });
}
