// The paged KV cache: block bookkeeping (reservation, forks sharing blocks, copy on write,
// release), the paged reference attention against the contiguous attention on awkward shapes (one
// position, block boundaries, GQA, shuffled block tables), and the model's paged forward (prefill
// in chunks after cached positions, forks, decode) against the plain full forward.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "model/decoder.h"
#include "model/paged_kv_cache.h"
#include "ops/attention.h"
#include "ops/paged_attention.h"
#include "test_util.h"

using rqat::model::Family;
using rqat::model::PagedKVCache;
using rqat::model::PagedSequence;

namespace {

double max_diff(const at::Tensor& a, const at::Tensor& b) {
  return (a.to(at::kDouble) - b.to(at::kDouble)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("blocks are reserved as sequences grow, shared by forks, copied on write, returned") {
  auto config = rqat::test::tiny_config(Family::kQwen3, true);
  PagedKVCache cache(config, /*num_blocks=*/9, /*block_size=*/4, at::TensorOptions(at::kFloat));
  CHECK(cache.usable_blocks() == 8);
  CHECK(cache.free_blocks() == 8);
  PagedSequence a;
  REQUIRE(cache.reserve(a, 6));  // 6 positions: 2 blocks
  CHECK(a.blocks.size() == 2);
  CHECK(std::find(a.blocks.begin(), a.blocks.end(), 0) == a.blocks.end());  // block 0 is reserved
  a.length = 6;
  for (size_t l = 0; l < cache.keys.size(); ++l) cache.keys[l][a.blocks[1]].fill_(7.0f);

  auto b = cache.fork(a);
  CHECK(b.blocks == a.blocks);
  CHECK(cache.refcount(a.blocks[0]) == 2);
  CHECK(cache.blocks_in_use() == 2);
  // b writes position 6, in the shared, partly filled block 1: it gets a copy first.
  CHECK(cache.blocks_needed(b, 7) == 1);
  REQUIRE(cache.reserve(b, 7));
  CHECK(b.blocks[0] == a.blocks[0]);
  CHECK(b.blocks[1] != a.blocks[1]);
  CHECK(cache.refcount(a.blocks[1]) == 1);
  CHECK(at::equal(cache.keys[0][b.blocks[1]], cache.keys[0][a.blocks[1]]));
  // A full shared block is never copied: growing past it takes a new block.
  auto c = cache.fork(a);
  c.length = a.length = 8;
  CHECK(cache.blocks_needed(c, 9) == 1);
  REQUIRE(cache.reserve(c, 9));
  CHECK(c.blocks[1] == a.blocks[1]);
  CHECK(cache.blocks_in_use() == 4);

  // Not enough blocks: nothing changes.
  PagedSequence big;
  CHECK_FALSE(cache.reserve(big, 4 * 5));
  CHECK(big.blocks.empty());
  CHECK(cache.free_blocks() == 4);

  cache.release(a);
  CHECK(cache.blocks_in_use() == 4);  // still held by b and c
  cache.release(b);
  cache.release(c);
  CHECK(cache.free_blocks() == 8);
  rqat::test::require_error([&] { PagedKVCache(config, 9, 6, at::TensorOptions(at::kFloat)); },
                            {"power of two"});
}

TEST_CASE("paged reference attention equals contiguous attention on awkward shapes") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(31);
  std::mt19937 shuffle(5);
  struct Case {
    int64_t heads, kv_heads, head_dim, block_size;
    std::vector<int64_t> lengths;
  };
  const Case cases[] = {
      {4, 4, 8, 16, {1, 16, 17, 31, 32, 33}},  // one position, block boundaries
      {6, 2, 16, 4, {5, 1, 12}},               // GQA 3, small blocks
      {8, 1, 32, 32, {100, 64, 3}},            // one kv head
      {14, 2, 64, 16, {257}},                  // GQA 7
  };
  for (const auto& c : cases) {
    INFO("heads " << c.heads << "/" << c.kv_heads << " D " << c.head_dim << " block "
                  << c.block_size);
    const int64_t batch = static_cast<int64_t>(c.lengths.size());
    const int64_t longest = *std::max_element(c.lengths.begin(), c.lengths.end());
    const int64_t max_blocks = (longest + c.block_size - 1) / c.block_size + 1;  // a spare column
    const int64_t num_blocks = batch * max_blocks + 3;
    auto key_pool = at::randn({num_blocks, c.block_size, c.kv_heads, c.head_dim}, gen);
    auto value_pool = at::randn_like(key_pool);
    // Each row gets distinct blocks in a shuffled order; unused table entries point anywhere.
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), shuffle);
    auto tables = at::zeros({batch, max_blocks}, at::kInt);
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t j = 0; j < max_blocks; ++j)
        tables[b][j] = ids[static_cast<size_t>(b * max_blocks + j)];
    auto q = at::randn({batch, c.heads, c.head_dim}, gen);
    auto lens = at::tensor(std::vector<int32_t>(c.lengths.begin(), c.lengths.end()), at::kInt);
    auto paged = rqat::ops::paged_decode_attention(q, key_pool, value_pool, tables, lens);
    REQUIRE(paged.sizes() == q.sizes());
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = c.lengths[static_cast<size_t>(b)];
      // The row's keys laid out contiguously by hand, position by position.
      auto k = at::empty({1, c.kv_heads, n, c.head_dim});
      auto v = at::empty_like(k);
      for (int64_t p = 0; p < n; ++p) {
        const int64_t block = tables[b][p / c.block_size].item<int32_t>();
        k[0].select(1, p).copy_(key_pool[block][p % c.block_size]);
        v[0].select(1, p).copy_(value_pool[block][p % c.block_size]);
      }
      auto expected = rqat::ops::attention_ref(q[b].view({1, c.heads, 1, c.head_dim}), k, v, {});
      INFO("row " << b << " length " << n);
      CHECK(max_diff(paged[b], expected.view({c.heads, c.head_dim})) < 1e-5);
      auto gathered = rqat::ops::gather_paged(key_pool, tables.narrow(0, b, 1), n);
      CHECK(at::equal(gathered, k));
    }
  }
  auto pool = at::zeros({4, 16, 2, 8});
  rqat::test::require_error(
      [&] {
        rqat::ops::paged_decode_attention(at::zeros({1, 3, 8}), pool, pool,
                                          at::zeros({1, 1}, at::kInt), at::ones({1}, at::kInt));
      },
      {"3 query heads", "2 kv heads"});
  rqat::test::require_error(
      [&] {
        rqat::ops::paged_decode_attention(at::zeros({1, 2, 8}), pool, pool,
                                          at::zeros({1, 1}, at::kLong), at::ones({1}, at::kInt));
      },
      {"block_tables", "int32"});
}

TEST_CASE("paged prefill in chunks, forks and decode equal the full forward") {
  torch::NoGradGuard no_grad;
  for (const auto& [family, tied] :
       {std::pair{Family::kQwen2, false}, std::pair{Family::kQwen3, true},
        std::pair{Family::kLlama, false}}) {
    INFO(rqat::enum_name(family));
    auto model = rqat::test::random_tiny_model(family, tied, 11);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(12);
    const int64_t block = 4;
    auto cache = model->make_paged_cache(/*num_blocks=*/40, block);
    // Two sequences of different lengths; a's prompt goes in two chunks (the second attends to
    // cached positions through the block table), b's in one.
    auto a_ids = at::randint(0, 97, {1, 14}, gen, at::kLong);
    auto b_ids = at::randint(0, 97, {1, 6}, gen, at::kLong);
    auto full_a = model->forward(a_ids)[0];
    auto full_b = model->forward(b_ids)[0];
    auto tokens_of = [](const at::Tensor& ids) {
      std::vector<int32_t> out;
      for (int64_t i = 0; i < ids.size(1); ++i)
        out.push_back(static_cast<int32_t>(ids[0][i].item<int64_t>()));
      return out;
    };
    const auto a = tokens_of(a_ids), b = tokens_of(b_ids);
    PagedSequence sa, sb;
    REQUIRE(cache.reserve(sa, 9));
    REQUIRE(cache.reserve(sb, 4));
    auto run = [&](std::vector<PagedSequence*> seqs, std::vector<std::span<const int32_t>> toks) {
      return rqat::test::paged_forward(*model, cache, seqs, toks);
    };
    auto first = run({&sa, &sb}, {std::span(a).first(9), std::span(b).first(4)});
    CHECK(max_diff(first[0], full_a[8]) < 1e-5);
    CHECK(max_diff(first[1], full_b[3]) < 1e-5);
    REQUIRE(cache.reserve(sa, 14));
    REQUIRE(cache.reserve(sb, 5));
    auto second = run({&sa, &sb}, {std::span(a).subspan(9, 5), std::span(b).subspan(4, 1)});
    CHECK(max_diff(second[0], full_a[13]) < 1e-5);
    CHECK(max_diff(second[1], full_b[4]) < 1e-5);

    // A fork of b continues differently from b: each sees its own last position (copy on write).
    auto fork = cache.fork(sb);
    auto c_ids = at::cat({b_ids.narrow(1, 0, 5), at::full({1, 1}, 3, at::kLong)}, 1);
    auto full_c = model->forward(c_ids)[0];
    const std::vector<int32_t> next_b{b[5]}, next_c{3};
    REQUIRE(cache.reserve(sb, 6));
    REQUIRE(cache.reserve(fork, 6));
    CHECK(fork.blocks.back() != sb.blocks.back());
    auto step = run({&sb, &fork}, {std::span(next_b), std::span(next_c)});
    CHECK(max_diff(step[0], full_b[5]) < 1e-5);
    CHECK(max_diff(step[1], full_c[5]) < 1e-5);
  }
}
