// An independent reference of the model's forward pass: the loss and the logits written straight
// from the math in double precision with plain nested loops (no ops, no BLAS, nothing shared with
// the model beyond reading its parameters by name), compared against GptModel<double> and
// GptModel<float> for a small GPT-2 and a small Llama configuration.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "catch.hpp"
#include "model/config.hpp"
#include "model/gpt.hpp"

using namespace meg;

namespace {

using Vec = std::vector<double>;

// A parameter tensor of MODEL, read by name and widened to double.
template <typename F>
Vec read_param(GptModel<F>& model, const std::string& name) {
  const ParamTensor& t = model.tensor(name);
  const F* p = model.param(name);
  Vec out(t.numel);
  for (size_t i = 0; i < t.numel; ++i) out[i] = static_cast<double>(p[i]);
  return out;
}

template <typename F>
bool has_param(const GptModel<F>& model, const std::string& name) {
  for (const auto& t : model.tensors())
    if (t.name == name) return true;
  return false;
}

// y[OC] = W[OC, IC] x[IC] (+ b[OC] when b is non-empty).
Vec matvec(const Vec& W, const Vec& b, const Vec& x, size_t OC, size_t IC) {
  Vec y(OC, 0.0);
  for (size_t o = 0; o < OC; ++o) {
    double s = 0;
    for (size_t i = 0; i < IC; ++i) s += W[o * IC + i] * x[i];
    y[o] = s + (b.empty() ? 0.0 : b[o]);
  }
  return y;
}

// LayerNorm (biased variance, eps inside the root) or RMSNorm of one row.
Vec norm_row(const Vec& x, const Vec& w, const Vec& b, bool layernorm, double eps) {
  const size_t C = x.size();
  Vec y(C);
  if (layernorm) {
    double mean = 0;
    for (size_t i = 0; i < C; ++i) mean += x[i];
    mean /= static_cast<double>(C);
    double var = 0;
    for (size_t i = 0; i < C; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (size_t i = 0; i < C; ++i) y[i] = (x[i] - mean) * rstd * w[i] + (b.empty() ? 0.0 : b[i]);
  } else {
    double ms = 0;
    for (size_t i = 0; i < C; ++i) ms += x[i] * x[i];
    ms /= static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(ms + eps);
    for (size_t i = 0; i < C; ++i) y[i] = x[i] * rstd * w[i];
  }
  return y;
}

double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// Rotates one head vector h[HS] at position t, pairs (i, i + HS/2), angle t * theta^(-2i/HS).
void rope_head(double* h, int HS, int t, double theta) {
  const int half = HS / 2;
  for (int i = 0; i < half; ++i) {
    const double angle = t * std::pow(theta, -2.0 * i / HS);
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = h[i], b = h[i + half];
    h[i] = a * c - b * s;
    h[i + half] = b * c + a * s;
  }
}

struct Reference {
  double loss = 0;
  std::vector<Vec> logits;  // [B*T][V]: logits over the real vocabulary
};

// The naive forward of MODEL's parameters on TOKENS/TARGETS [B,T].
template <typename F>
Reference reference_forward(GptModel<F>& model, const std::vector<int32_t>& tokens,
                            const std::vector<int32_t>& targets, int B, int T) {
  const ModelConfig& c = model.config();
  const size_t C = static_cast<size_t>(c.hidden_size);
  const int NH = static_cast<int>(c.num_heads);
  const int NKV = static_cast<int>(c.num_kv_heads);
  const int HS = static_cast<int>(c.hidden_size / c.num_heads);
  const size_t Fh = static_cast<size_t>(c.ffn_hidden_size);
  const size_t V = static_cast<size_t>(c.vocab_size);
  const bool gpt2 = c.family == ModelFamily::gpt2;
  const bool layernorm = c.norm == NormKind::layernorm;
  const bool swiglu = c.activation == Activation::swiglu;
  const size_t QKV = C + 2 * static_cast<size_t>(NKV * HS);
  const size_t N = static_cast<size_t>(B) * static_cast<size_t>(T);

  auto get = [&](const std::string& name) {
    return has_param(model, name) ? read_param(model, name) : Vec{};
  };

  const Vec wte = get("embedding.word_embeddings.weight");
  const Vec wpe = get("embedding.position_embeddings.weight");
  REQUIRE(wte.size() >= V * C);
  REQUIRE(wpe.empty() == !gpt2);

  // Residual stream x[N][C].
  std::vector<Vec> x(N, Vec(C));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t) {
      const size_t n = static_cast<size_t>(b * T + t);
      const size_t tok = static_cast<size_t>(tokens[n]);
      for (size_t i = 0; i < C; ++i)
        x[n][i] = wte[tok * C + i] + (gpt2 ? wpe[static_cast<size_t>(t) * C + i] : 0.0);
    }

  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string pre = "decoder.layers." + std::to_string(l) + ".";
    const Vec ln1_w = get(pre + "input_layernorm.weight");
    const Vec ln1_b = get(pre + "input_layernorm.bias");
    const Vec qkv_w = get(pre + "self_attention.linear_qkv.weight");
    const Vec qkv_b = get(pre + "self_attention.linear_qkv.bias");
    const Vec proj_w = get(pre + "self_attention.linear_proj.weight");
    const Vec proj_b = get(pre + "self_attention.linear_proj.bias");
    const Vec ln2_w = get(pre + "pre_mlp_layernorm.weight");
    const Vec ln2_b = get(pre + "pre_mlp_layernorm.bias");
    const Vec fc1_w = get(pre + "mlp.linear_fc1.weight");
    const Vec fc1_b = get(pre + "mlp.linear_fc1.bias");
    const Vec fc2_w = get(pre + "mlp.linear_fc2.weight");
    const Vec fc2_b = get(pre + "mlp.linear_fc2.bias");
    const size_t FC = swiglu ? 2 * Fh : Fh;
    REQUIRE(qkv_w.size() == QKV * C);
    REQUIRE(fc1_w.size() == FC * C);
    REQUIRE(fc2_w.size() == C * Fh);

    // q[n][NH*HS], k[n][NKV*HS], v[n][NKV*HS].
    std::vector<Vec> q(N), k(N), v(N);
    for (size_t n = 0; n < N; ++n) {
      const Vec h = norm_row(x[n], ln1_w, ln1_b, layernorm, c.norm_eps);
      const Vec qkv = matvec(qkv_w, qkv_b, h, QKV, C);
      q[n].assign(qkv.begin(), qkv.begin() + static_cast<std::ptrdiff_t>(C));
      k[n].assign(qkv.begin() + static_cast<std::ptrdiff_t>(C),
                  qkv.begin() + static_cast<std::ptrdiff_t>(C + NKV * HS));
      v[n].assign(qkv.begin() + static_cast<std::ptrdiff_t>(C + NKV * HS), qkv.end());
      if (c.uses_rope()) {
        const int t = static_cast<int>(n % static_cast<size_t>(T));
        for (int hh = 0; hh < NH; ++hh) rope_head(q[n].data() + hh * HS, HS, t, c.rope_theta);
        for (int hh = 0; hh < NKV; ++hh) rope_head(k[n].data() + hh * HS, HS, t, c.rope_theta);
      }
    }

    // Causal grouped-query attention, then the projection and the residual.
    const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
    const int group = NH / NKV;
    std::vector<Vec> x2 = x;
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < T; ++t) {
        const size_t n = static_cast<size_t>(b * T + t);
        Vec y(C, 0.0);
        for (int hh = 0; hh < NH; ++hh) {
          const int kvh = hh / group;
          Vec s(static_cast<size_t>(t + 1));
          double mx = -1e300;
          for (int u = 0; u <= t; ++u) {
            const size_t m = static_cast<size_t>(b * T + u);
            double d = 0;
            for (int i = 0; i < HS; ++i) d += q[n][hh * HS + i] * k[m][kvh * HS + i];
            s[static_cast<size_t>(u)] = d * scale;
            if (s[static_cast<size_t>(u)] > mx) mx = s[static_cast<size_t>(u)];
          }
          double z = 0;
          for (double& e : s) {
            e = std::exp(e - mx);
            z += e;
          }
          for (int u = 0; u <= t; ++u) {
            const size_t m = static_cast<size_t>(b * T + u);
            const double p = s[static_cast<size_t>(u)] / z;
            for (int i = 0; i < HS; ++i) y[hh * HS + i] += p * v[m][kvh * HS + i];
          }
        }
        const Vec o = matvec(proj_w, proj_b, y, C, C);
        for (size_t i = 0; i < C; ++i) x2[n][i] += o[i];
      }
    x = x2;

    // MLP and the residual.
    for (size_t n = 0; n < N; ++n) {
      const Vec h = norm_row(x[n], ln2_w, ln2_b, layernorm, c.norm_eps);
      const Vec f = matvec(fc1_w, fc1_b, h, FC, C);
      Vec a(Fh);
      for (size_t j = 0; j < Fh; ++j) a[j] = swiglu ? silu(f[j]) * f[Fh + j] : gelu_tanh(f[j]);
      const Vec o = matvec(fc2_w, fc2_b, a, C, Fh);
      for (size_t i = 0; i < C; ++i) x[n][i] += o[i];
    }
  }

  const Vec lnf_w = get("decoder.final_layernorm.weight");
  const Vec lnf_b = get("decoder.final_layernorm.bias");
  const Vec wout = c.tie_embeddings ? wte : get("output_layer.weight");
  REQUIRE(wout.size() >= V * C);

  Reference r;
  r.logits.resize(N);
  double sum = 0;
  int counted = 0;
  for (size_t n = 0; n < N; ++n) {
    const Vec h = norm_row(x[n], lnf_w, lnf_b, layernorm, c.norm_eps);
    r.logits[n] = matvec(wout, Vec{}, h, V, C);  // only the first V rows: the real vocabulary
    if (targets[n] < 0) continue;
    double mx = -1e300;
    for (double z : r.logits[n]) mx = z > mx ? z : mx;
    double se = 0;
    for (double z : r.logits[n]) se += std::exp(z - mx);
    sum += -(r.logits[n][static_cast<size_t>(targets[n])] - mx - std::log(se));
    ++counted;
  }
  r.loss = sum / counted;
  return r;
}

ModelConfig small_config(ModelFamily family) {
  ModelConfig c = ModelConfig::defaults(family);
  c.num_layers = 2;
  c.hidden_size = 24;
  c.num_heads = 4;  // HS 6
  c.num_kv_heads = family == ModelFamily::llama ? 2 : 4;
  c.ffn_hidden_size = family == ModelFamily::llama ? 40 : 48;
  c.seq_length = 9;  // more learned positions than the T used below
  c.vocab_size = 53;
  c.make_vocab_size_divisible_by = 16;  // padded to 64
  c.pad_vocab();
  c.init_std = 0.2;
  if (family == ModelFamily::llama) c.rope_theta = 100.0;  // angles that vary a lot over 7 steps
  c.validate();
  return c;
}

// Megatron's init for SEED, then biases and norm weights (zeros and ones at init) given random
// values too, so that every parameter takes part non-trivially. The same for float and double.
template <typename F>
void init_params(GptModel<F>& model, uint64_t seed) {
  model.init(seed);
  std::mt19937_64 rng(seed + 1000);
  std::uniform_real_distribution<double> u(-0.3, 0.3);
  for (const auto& t : model.tensors()) {
    if (t.init != ParamInit::zeros && t.init != ParamInit::ones) continue;
    F* p = model.params() + t.offset;
    for (size_t i = 0; i < t.numel; ++i)
      p[i] = static_cast<F>((t.init == ParamInit::ones ? 1.0 : 0.0) + u(rng));
  }
}

bool close_rel(double a, double b, double rel) { return std::abs(a - b) <= rel * std::abs(b); }

}  // namespace

TEST_CASE("gpt model: forward matches a naive double-precision reference", "[model]") {
  for (ModelFamily family : {ModelFamily::gpt2, ModelFamily::llama}) {
    const ModelConfig c = small_config(family);
    INFO((family == ModelFamily::gpt2 ? "gpt2" : "llama"));
    REQUIRE(c.padded_vocab_size > c.vocab_size);
    const int B = 2, T = 7;
    const size_t N = static_cast<size_t>(B * T);
    const size_t V = static_cast<size_t>(c.vocab_size);
    const size_t Vp = static_cast<size_t>(c.padded_vocab_size);

    std::mt19937 rng(family == ModelFamily::gpt2 ? 11 : 12);
    std::vector<int32_t> tokens(N), targets(N);
    for (auto& t : tokens) t = static_cast<int32_t>(rng() % V);
    for (auto& t : targets) t = static_cast<int32_t>(rng() % V);
    targets[4] = -1;

    GptModel<double> md(c);
    init_params(md, 42);
    md.set_training(false);
    const Reference rd = reference_forward(md, tokens, targets, B, T);
    REQUIRE(std::isfinite(rd.loss));
    // The activations are not tiny: the loss is well away from the uniform log(V).
    INFO("reference loss " << rd.loss << ", log V " << std::log(static_cast<double>(V)));
    CHECK(std::abs(rd.loss - std::log(static_cast<double>(V))) > 0.1);

    const double loss_d = md.forward(tokens.data(), targets.data(), B, T);
    INFO("double model loss " << loss_d << ", relative error "
                               << std::abs(loss_d - rd.loss) / std::abs(rd.loss));
    CHECK(close_rel(loss_d, rd.loss, 1e-12));

    // Full logits of the last position of each sequence (the real vocabulary).
    for (int b = 0; b < B; ++b) {
      const size_t n = static_cast<size_t>(b * T + T - 1);
      double max_err = 0, max_abs = 0;
      for (size_t j = 0; j < V; ++j) {
        const double ref = rd.logits[n][j];
        max_err = std::max(max_err, std::abs(md.logits()[n * Vp + j] - ref));
        max_abs = std::max(max_abs, std::abs(ref));
      }
      INFO("b " << b << " max |logit error| " << max_err << " max |logit| " << max_abs);
      CHECK(max_err <= 1e-10 * max_abs);
    }

    GptModel<float> mf(c);
    init_params(mf, 42);
    mf.set_training(false);
    const Reference rf = reference_forward(mf, tokens, targets, B, T);
    const double loss_f = mf.forward(tokens.data(), targets.data(), B, T);
    INFO("float model loss " << loss_f << ", reference on its parameters " << rf.loss
                             << ", relative error " << std::abs(loss_f - rf.loss) / std::abs(rf.loss));
    CHECK(close_rel(loss_f, rf.loss, 1e-5));
    CHECK(close_rel(loss_f, rd.loss, 1e-5));
  }
}
