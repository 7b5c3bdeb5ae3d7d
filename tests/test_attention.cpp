// The fused CPU attention kernels (ops/attention.h) against the ATen composite computed in float64
// from the same float32 inputs: outputs and the gradients of q, k and v, over head sizes that are
// and are not multiples of the 16-lane vectors, grouped-query heads, more keys than queries (a
// prefill after cached keys), several key blocks (online softmax), causal, padded and holed masks.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <limits>
#include <vector>

#include "ops/attention.h"
#include "test_util.h"

namespace {

struct Shape {
  int64_t batch, heads, kv_heads, queries, keys, dim;
};

enum class MaskKind { none, causal, padded, holes, shared_causal };

// bool (B or 1, 1, T, S): causal aligned so that the last query sees every key; padded: each batch
// row b has its first b keys invalid (left padding) except that a query always sees its own key;
// holes: random keys dropped as well (masks rqat builds for right-padded batches have such gaps).
at::Tensor make_mask(MaskKind kind, const Shape& s, at::Generator& gen) {
  if (kind == MaskKind::none) return {};
  const auto query_key = at::arange(s.queries).view({-1, 1}) + (s.keys - s.queries);
  auto causal = at::arange(s.keys).view({1, -1}) <= query_key;  // (T, S)
  if (kind == MaskKind::shared_causal) return causal.view({1, 1, s.queries, s.keys});
  auto mask = causal.view({1, 1, s.queries, s.keys}).repeat({s.batch, 1, 1, 1});
  for (int64_t b = 0; b < s.batch; ++b) {
    mask[b].narrow(-1, 0, std::min(b, s.keys)).fill_(false);
    if (kind == MaskKind::holes) mask[b] &= at::rand({s.queries, s.keys}, gen) > 0.3;
  }
  const auto own = at::arange(s.keys).view({1, -1}) == query_key;
  return mask.logical_or(own.view({1, 1, s.queries, s.keys}));
}

double max_relative_error(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want).abs().max() / (want.abs().max() + 1e-12)).item<double>();
}

void check_against_reference(const Shape& s, MaskKind kind, uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  // Scores of a few units: softmax neither uniform nor one-hot.
  auto q = (at::randn({s.batch, s.heads, s.queries, s.dim}, gen) * 1.5).requires_grad_();
  auto k = at::randn({s.batch, s.kv_heads, s.keys, s.dim}, gen).requires_grad_();
  auto v = at::randn({s.batch, s.kv_heads, s.keys, s.dim}, gen).requires_grad_();
  const auto mask = make_mask(kind, s, gen);
  const auto dout = at::randn({s.batch, s.heads, s.queries, s.dim}, gen);

  auto out = rqat::ops::fused_attention(q, k, v, mask);
  const auto grads = torch::autograd::grad({out}, {q, k, v}, {dout});

  auto q64 = q.detach().to(at::kDouble).requires_grad_();
  auto k64 = k.detach().to(at::kDouble).requires_grad_();
  auto v64 = v.detach().to(at::kDouble).requires_grad_();
  auto ref = rqat::ops::attention_ref(q64, k64, v64, mask);
  const auto ref_grads = torch::autograd::grad({ref}, {q64, k64, v64}, {dout.to(at::kDouble)});

  // float32 sums over up to 1100 keys (typically sqrt(n) * 6e-8 ~ 2e-6, at worst n * 6e-8 ~ 7e-5)
  // and 2-ulp exponentials; relative to the largest entry: 1e-5 for the output and 5e-5 for the
  // gradients (which subtract nearly equal terms). A wrong term (a missed rescale, mask or head)
  // gives errors of order 1e-1.
  CHECK(max_relative_error(out, ref) < 1e-5);
  const char* names[] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) {
    INFO(names[i]);
    CHECK(max_relative_error(grads[i], ref_grads[i]) < 5e-5);
  }
}

}  // namespace

TEST_CASE("fused attention matches the float64 composite, outputs and gradients") {
  const std::vector<Shape> shapes = {
      {2, 4, 2, 9, 9, 8},      // stories260K-like head, GQA 2
      {1, 6, 2, 33, 33, 16},   // GQA 3, one vector per head row
      {2, 2, 2, 17, 40, 24},   // more keys than queries, head not a multiple of 16
      {1, 3, 1, 5, 300, 64},   // multi-query, two key blocks (256 keys each at head 64)
      {1, 2, 1, 70, 1100, 8},  // small head: 1100 keys in blocks of 1024
      {2, 2, 2, 3, 3, 1},      // head size 1
      {1, 2, 2, 20, 20, 100},  // beyond the dispatch limit: the kernels still work
  };
  uint64_t seed = 100;
  for (const auto& s : shapes) {
    for (auto kind : {MaskKind::none, MaskKind::causal, MaskKind::padded, MaskKind::holes,
                      MaskKind::shared_causal}) {
      INFO("shape B" << s.batch << " H" << s.heads << " KV" << s.kv_heads << " T" << s.queries
                     << " S" << s.keys << " D" << s.dim << ", mask " << static_cast<int>(kind));
      check_against_reference(s, kind, ++seed);
    }
  }
}

TEST_CASE("fused attention: a query that may see no key gives zeros and no gradient") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto q = at::randn({1, 2, 4, 8}, gen).requires_grad_();
  auto k = at::randn({1, 1, 6, 8}, gen).requires_grad_();
  auto v = at::randn({1, 1, 6, 8}, gen).requires_grad_();
  auto mask = at::ones({1, 1, 4, 6}, at::kBool);
  mask[0][0][2].fill_(false);
  auto out = rqat::ops::fused_attention(q, k, v, mask);
  CHECK(out.select(2, 2).abs().max().item<float>() == 0.0f);
  CHECK(out.select(2, 1).abs().max().item<float>() > 0.0f);
  CHECK(at::isfinite(out).all().item<bool>());
  out.sum().backward();
  CHECK(q.grad().select(2, 2).abs().max().item<float>() == 0.0f);
  CHECK(at::isfinite(k.grad()).all().item<bool>());
  // The composite agrees (its softmax alone would give NaN there).
  CHECK(max_relative_error(out.detach(), rqat::ops::attention_ref(
                                             q.detach().to(at::kDouble), k.detach().to(at::kDouble),
                                             v.detach().to(at::kDouble), mask)) < 2e-6);
}

TEST_CASE("fused attention: any input layout, and the same bits with any thread count") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  // (B, T, H, D) projections viewed as (B, H, T, D), as the decoder passes them.
  auto q = at::randn({2, 24, 4, 16}, gen).transpose(1, 2);
  auto k = at::randn({2, 24, 2, 16}, gen).transpose(1, 2);
  auto v = at::randn({2, 24, 2, 16}, gen).transpose(1, 2);
  const Shape s{2, 4, 2, 24, 24, 16};
  const auto mask = make_mask(MaskKind::padded, s, gen);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  const auto one = rqat::ops::fused_attention(q, k, v, mask);
  at::set_num_threads(2);
  const auto two = rqat::ops::fused_attention(q, k, v, mask);
  at::set_num_threads(threads);
  CHECK(at::equal(one, two));
  CHECK(max_relative_error(one, rqat::ops::attention_ref(q.to(at::kDouble), k.to(at::kDouble),
                                                         v.to(at::kDouble), mask)) < 2e-6);
}

TEST_CASE("attention dispatches by dtype, device and head size, and rejects bad shapes") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto q = at::randn({1, 2, 5, 8}, gen), k = at::randn({1, 1, 5, 8}, gen);
  const auto mask = at::ones({1, 1, 5, 5}, at::kBool).tril();
  const int threads = at::get_num_threads();  // restored below
  at::set_num_threads(1);
  CHECK(rqat::ops::fused_attention_supported(q, k, k, mask));
  CHECK_FALSE(rqat::ops::fused_attention_supported(q.to(at::kDouble), k.to(at::kDouble),
                                                   k.to(at::kDouble), mask));
  CHECK_FALSE(rqat::ops::fused_attention_supported(q, k, k, mask.to(at::kFloat)));
  const auto big_q = at::randn({1, 2, 5, 128}, gen), big_k = at::randn({1, 1, 5, 128}, gen);
  CHECK_FALSE(rqat::ops::fused_attention_supported(big_q, big_k, big_k, mask));
  // At least one (batch row, key/value head) task per thread: one task here.
  at::set_num_threads(2);
  CHECK_FALSE(rqat::ops::fused_attention_supported(q, k, k, mask));
  const auto two_q = at::randn({2, 2, 5, 64}, gen), two_k = at::randn({2, 1, 5, 64}, gen);
  CHECK(rqat::ops::fused_attention_supported(two_q, two_k, two_k, mask));
  at::set_num_threads(threads);
  // Both routes of attention() compute the reference.
  for (const auto& [qq, kk] : {std::pair{q, k}, std::pair{big_q, big_k}}) {
    const auto got = rqat::ops::attention(qq, kk, kk, mask);
    const auto want =
        rqat::ops::attention_ref(qq.to(at::kDouble), kk.to(at::kDouble), kk.to(at::kDouble), mask);
    CHECK(max_relative_error(got, want) < 2e-6);
  }
  rqat::test::require_error(
      [&] {
        rqat::ops::attention(q, at::randn({1, 3, 5, 8}), k, mask);
      },
      {"attention", "multiple of kv_heads"});
  rqat::test::require_error(
      [&] {
        rqat::ops::attention(q, k, k, at::ones({1, 1, 5, 4}, at::kBool));
      },
      {"attention", "mask must be"});
}

TEST_CASE("fused attention: NaN in a key reaches the output and the gradients, as in ATen") {
  // A NaN score must not be taken for a masked key: the trainer's NaN check relies on it.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  auto q = at::randn({1, 2, 6, 8}, gen).requires_grad_();
  auto k = at::randn({1, 1, 6, 8}, gen);
  k[0][0][1][3] = std::numeric_limits<float>::quiet_NaN();
  k.requires_grad_();
  auto v = at::randn({1, 1, 6, 8}, gen).requires_grad_();
  const auto mask = at::ones({6, 6}, at::kBool).tril().view({1, 1, 6, 6});
  auto out = rqat::ops::fused_attention(q, k, v, mask);
  // Query 0 does not see key 1; every later query does.
  CHECK(at::isfinite(out.select(2, 0)).all().item<bool>());
  CHECK(at::isnan(out.narrow(2, 1, 5)).all().item<bool>());
  out.sum().backward();
  CHECK(at::isnan(q.grad()).any().item<bool>());
  // Every key a query sees is NaN: still NaN, not the zeros of a fully masked row.
  auto all_nan = at::full({1, 1, 6, 8}, std::numeric_limits<float>::quiet_NaN());
  CHECK(at::isnan(rqat::ops::fused_attention(q.detach(), all_nan, v.detach(), mask))
            .all()
            .item<bool>());
}
