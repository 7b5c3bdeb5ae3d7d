// See attention_kernel.h. Scores (and, in the backward, dout . v) run over keys, 16 lanes at a
// time, with the key and value blocks stored transposed (dim, keys): a score vector is `dim`
// multiply-adds of a broadcast query element with 16 keys, which keeps every lane busy for any head
// size (a loop over the head dimension would leave most of a vector idle at head_dim 8). Query rows
// go four at a time (columns_dot_rows): each vector of keys is loaded once for four rows, and the
// eight accumulators (two vectors of keys each) keep the multiply-add units busy. Sums over
// keys weighted by probabilities (out, dq) keep a row of the head in registers when the head is a
// multiple of 16, and fall back to dot products with the transposed block otherwise. Every loop
// keeps several independent chains of multiply-adds, so it runs at the rate of the units rather
// than at one per latency. The lane type is a GCC/Clang vector extension; on x86-64 each task
// function is compiled three times (AVX-512, AVX2+FMA and the baseline) and the loader picks the
// one the CPU runs, so the library itself keeps the baseline target.
#include "ops/attention_kernel.h"
#include "ops/vector_exp.h"
#include "ops/vector_lanes.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#define RQAT_INLINE inline __attribute__((always_inline))
// The 64-byte lane type only ever lives in registers of always-inlined helpers, so the calling
// convention GCC warns about (returning it without AVX-512) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace rqat::ops {

namespace {

constexpr int64_t kLanes = 16;
using Floats = float __attribute__((vector_size(kLanes * sizeof(float))));
using Ints = int32_t __attribute__((vector_size(kLanes * sizeof(int32_t))));
constexpr float kInf = std::numeric_limits<float>::infinity();

RQAT_INLINE Floats load(const float* p) { return load_lanes<Floats>(p); }
RQAT_INLINE void store(float* p, Floats v) { store_lanes(p, v); }
RQAT_INLINE Floats splat(float x) { return splat_lanes<Floats>(x); }
RQAT_INLINE float lane_sum(Floats v) { return lane_sum16(v); }
RQAT_INLINE float lane_max(Floats v) { return lane_max16(v); }

// exp(x) for x <= 0, within 2 ulp (ops/vector_exp.h).
RQAT_INLINE Floats exp_nonpositive(Floats x) { return ops::exp_nonpositive<Floats, Ints>(x); }

constexpr int64_t round_up_lanes(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// The keys one query row may see: all lie in [lo, hi); dense when every key of that span is
// allowed (then the mask bytes are not read again).
struct RowKeys {
  int64_t lo = 0, hi = 0;
  bool dense = true;
};

std::vector<RowKeys> row_keys(const AttentionProblem& p) {
  const int64_t rows = p.mask ? p.mask_batch * p.queries : 1;
  std::vector<RowKeys> out(static_cast<size_t>(rows));
  if (!p.mask) {
    out[0] = RowKeys{0, p.keys, true};
    return out;
  }
  at::parallel_for(0, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint8_t* allowed = p.mask + r * p.keys;
      int64_t lo = -1, hi = 0, count = 0;
      for (int64_t j = 0; j < p.keys; ++j) {
        if (!allowed[j]) continue;
        if (lo < 0) lo = j;
        hi = j + 1;
        ++count;
      }
      out[r] = lo < 0 ? RowKeys{0, 0, true} : RowKeys{lo, hi, count == hi - lo};
    }
  });
  return out;
}

// Query rows whose contributions to the key and value gradients are added in one pass.
constexpr int64_t kRowsTogether = 4;

// Keys per block: the transposed key and value blocks (and their gradients in the backward) stay
// within a few hundred KiB, the size of a core's L2.
int64_t keys_per_block(int64_t dim) {
  return std::clamp<int64_t>((16384 / dim) / kLanes * kLanes, 64, 2048);
}

// Scratch buffers of a task, carved from one per-thread allocation that is kept from call to call:
// allocating them per task costs an mmap, page faults and an munmap each time (they exceed
// malloc's mmap threshold), which also serializes threads in the kernel.
class Workspace {
 public:
  Workspace(std::initializer_list<int64_t> sizes) {
    thread_local std::vector<float> buffer;
    int64_t total = 0;
    for (int64_t n : sizes) total += round_up_lanes(n);  // every piece starts 64-byte aligned
    if (static_cast<int64_t>(buffer.size()) < total) buffer.resize(total);
    float* next = buffer.data();
    for (int64_t n : sizes) {
      pieces_.push_back(next);
      next += round_up_lanes(n);
    }
  }
  float* operator[](size_t i) const { return pieces_[i]; }

 private:
  std::vector<float*> pieces_;
};

// The operands of one task: batch row b, key/value head h; queries of its `group` heads.
struct Task {
  const AttentionProblem* p;
  const RowKeys* rows;   // per query (or one entry for all, without a mask)
  const uint8_t* mask;   // (queries, keys) of this batch row, or nullptr
  int64_t group, block;  // query heads per key/value head; keys per block
  const RowKeys& keys_of(int64_t i) const { return mask ? rows[i] : rows[0]; }
  // Floats per row of a transposed block: no longer than the keys need, and never a multiple of
  // 4 KiB, so that the head-dimension rows of a block do not all fall into the same L1 sets.
  int64_t width() const {
    int64_t w = round_up_lanes(std::min(block, p->keys));
    if (w * static_cast<int64_t>(sizeof(float)) % 4096 == 0) w += kLanes;
    return w;
  }
};

// Copies keys [first, first + n) of a (keys, dim) matrix into a (dim, width) one, zero beyond n.
void transpose_block(const float* src, int64_t first, int64_t n, int64_t dim, int64_t width,
                     float* dst) {
  std::fill(dst, dst + dim * width, 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    const float* row = src + (first + j) * dim;
    for (int64_t d = 0; d < dim; ++d) dst[d * width + j] = row[d];
  }
}

// The part of block [first, first + n) a query row visits: lanes [begin, end) of the block (whole
// vectors), and within them the allowed keys [lo, hi) (block-relative).
struct Span {
  int64_t begin, end, lo, hi;
};
RQAT_INLINE bool span_of(const RowKeys& keys, int64_t first, int64_t n, Span& span) {
  const int64_t lo = std::max(keys.lo, first) - first, hi = std::min(keys.hi, first + n) - first;
  if (lo >= hi) return false;
  span = Span{lo / kLanes * kLanes, round_up_lanes(hi), lo, hi};
  return true;
}

// results[x][j] = sum_d xs[x][d] * mt[d, j] for the kRowsTogether rows xs and the lanes
// [begin, end) (whole vectors) of a (dim, width) matrix. Each vector of mt is loaded once for all
// the rows, and two vectors of keys at a time give eight independent chains of multiply-adds: the
// loop runs at the rate of the multiply-add units, where one row at a time waited on its loads and
// on the latency of too few chains.
RQAT_INLINE void columns_dot_rows(const float* const* xs, const float* mt, int64_t dim,
                                  int64_t width, int64_t begin, int64_t end,
                                  float* const* results) {
  int64_t j = begin;
  for (; j + 2 * kLanes <= end; j += 2 * kLanes) {
    Floats a[kRowsTogether]{}, b[kRowsTogether]{};
    for (int64_t d = 0; d < dim; ++d) {
      const Floats k0 = load(mt + d * width + j), k1 = load(mt + d * width + j + kLanes);
      for (int64_t x = 0; x < kRowsTogether; ++x) {
        a[x] += xs[x][d] * k0;
        b[x] += xs[x][d] * k1;
      }
    }
    for (int64_t x = 0; x < kRowsTogether; ++x) {
      store(results[x] + j, a[x]);
      store(results[x] + j + kLanes, b[x]);
    }
  }
  if (j < end) {  // one vector left
    Floats a[kRowsTogether]{};
    for (int64_t d = 0; d < dim; ++d) {
      const Floats k0 = load(mt + d * width + j);
      for (int64_t x = 0; x < kRowsTogether; ++x) a[x] += xs[x][d] * k0;
    }
    for (int64_t x = 0; x < kRowsTogether; ++x) store(results[x] + j, a[x]);
  }
}

// out[d] += sum_j weights[j] * rows[j, d] over keys [lo, hi) of a (keys, dim) row-major block, for
// dim = 16 * kChunks: a row of the output lives in kChunks registers and two keys are taken at a
// time (two independent chains per register). No horizontal sums, unlike the transposed form.
template <int kChunks>
RQAT_INLINE void rows_weighted_sum(const float* weights, const float* rows, int64_t lo, int64_t hi,
                                   float* out) {
  constexpr int64_t dim = kChunks * kLanes;
  Floats a[kChunks]{}, b[kChunks]{};
  int64_t j = lo;
  for (; j + 1 < hi; j += 2) {
    const float wa = weights[j], wb = weights[j + 1];
    for (int c = 0; c < kChunks; ++c) {
      a[c] += wa * load(rows + j * dim + c * kLanes);
      b[c] += wb * load(rows + (j + 1) * dim + c * kLanes);
    }
  }
  if (j < hi) {
    for (int c = 0; c < kChunks; ++c) a[c] += weights[j] * load(rows + j * dim + c * kLanes);
  }
  for (int c = 0; c < kChunks; ++c) store(out + c * kLanes, load(out + c * kLanes) + a[c] + b[c]);
}

// rows_weighted_sum<dim / 16> when the head size is one of 16, 32, ..., 16 * sizeof...(kChunks);
// false (nothing done) otherwise.
template <int... kChunks>
RQAT_INLINE bool rows_weighted_sum_for(int64_t dim, const float* weights, const float* rows,
                                       const Span& span, float* out,
                                       std::integer_sequence<int, kChunks...>) {
  return ((dim == 16 * (kChunks + 1) &&
           (rows_weighted_sum<kChunks + 1>(weights, rows, span.lo, span.hi, out), true)) ||
          ...);
}

// out[d] += sum_j weights[j] * rows[j, d] for keys [lo, hi): the register form above when the head
// size is a multiple of 16 (up to 128), else dot products with the transposed block mt (dim,
// width) over whole vectors [begin, end), the weights being zero outside [lo, hi).
RQAT_INLINE void weighted_sum(const float* weights, const float* rows, const float* mt, int64_t dim,
                              int64_t width, const Span& span, float* out) {
  if (rows_weighted_sum_for(dim, weights, rows, span, out, std::make_integer_sequence<int, 8>{}))
    return;
  for (int64_t d = 0; d < dim; ++d) {
    const float* row = mt + d * width;
    Floats a0{}, a1{};
    int64_t j = span.begin;
    for (; j + 2 * kLanes <= span.end; j += 2 * kLanes) {
      a0 += load(weights + j) * load(row + j);
      a1 += load(weights + j + kLanes) * load(row + j + kLanes);
    }
    if (j < span.end) a0 += load(weights + j) * load(row + j);
    out[d] += lane_sum(a0 + a1);
  }
}

// Of a row's scores over the span's lanes, those of keys outside [lo, hi) or masked off become
// -inf.
RQAT_INLINE void mask_scores(const Span& span, const uint8_t* mask_row, float* scores) {
  for (int64_t j = span.begin; j < span.lo; ++j) scores[j] = -kInf;
  for (int64_t j = span.hi; j < span.end; ++j) scores[j] = -kInf;
  if (mask_row) {
    for (int64_t j = span.lo; j < span.hi; ++j)
      if (!mask_row[j]) scores[j] = -kInf;
  }
}

// The rows [r0, r0 + kRowsTogether) of a task that see keys of the block [first, first + n): each
// one's own span, and the union of their lanes [begin, end) (empty: begin >= end), which all of
// them visit (a row's keys outside its own span get probability 0).
struct RowGroup {
  Span spans[kRowsTogether];
  bool active[kRowsTogether];
  int64_t begin, end;
};

RQAT_INLINE RowGroup row_group(const Task& t, int64_t r0, int64_t rows, int64_t first, int64_t n,
                               const float* lse) {
  RowGroup g;
  g.begin = t.width();
  g.end = 0;
  for (int64_t x = 0; x < kRowsTogether; ++x) {
    const int64_t r = r0 + x;
    g.active[x] = r < rows && (lse == nullptr || lse[r] != kInf) &&
                  span_of(t.keys_of(r % t.p->queries), first, n, g.spans[x]);
    if (!g.active[x]) continue;
    g.begin = std::min(g.begin, g.spans[x].begin);
    g.end = std::max(g.end, g.spans[x].end);
  }
  return g;
}

// The group's queries times the scale, one row of `dim` each in `scaled` (zero for inactive rows,
// whose scores are then computed and ignored).
RQAT_INLINE void scaled_queries(const RowGroup& g, const float* q, int64_t r0, int64_t dim,
                                float scale, float* scaled) {
  for (int64_t x = 0; x < kRowsTogether; ++x) {
    float* query = scaled + x * dim;
    if (!g.active[x]) {
      std::fill(query, query + dim, 0.0f);
      continue;
    }
    for (int64_t d = 0; d < dim; ++d) query[d] = q[(r0 + x) * dim + d] * scale;
  }
}

RQAT_CPU_CLONES
void forward_task(const Task& t, const float* q, const float* k, const float* v, float* out,
                  float* lse) {
  const AttentionProblem& p = *t.p;
  const int64_t dim = p.dim, queries = p.queries, rows = t.group * queries;
  const int64_t width = t.width();
  Workspace w({dim * width, dim * width, kRowsTogether * width, kRowsTogether * dim, rows, rows});
  float *kt = w[0], *vt = w[1], *scores = w[2], *queries_scaled = w[3], *running_max = w[4],
        *running_sum = w[5];
  std::fill(running_max, running_max + rows, -kInf);
  std::fill(running_sum, running_sum + rows, 0.0f);
  std::fill(out, out + rows * dim, 0.0f);
  float* row_scores[kRowsTogether];
  const float* row_queries[kRowsTogether];
  for (int64_t x = 0; x < kRowsTogether; ++x) {
    row_scores[x] = scores + x * width;
    row_queries[x] = queries_scaled + x * dim;
  }
  for (int64_t first = 0; first < p.keys; first += t.block) {
    const int64_t n = std::min(t.block, p.keys - first);
    transpose_block(k, first, n, dim, width, kt);
    transpose_block(v, first, n, dim, width, vt);
    // Rows four at a time: their scores in one pass over the keys (columns_dot_rows), then each
    // row's online softmax and weighted sum of values on its own.
    for (int64_t r0 = 0; r0 < rows; r0 += kRowsTogether) {
      const RowGroup g = row_group(t, r0, rows, first, n, nullptr);
      if (g.begin >= g.end) continue;
      scaled_queries(g, q, r0, dim, p.scale, queries_scaled);
      columns_dot_rows(row_queries, kt, dim, width, g.begin, g.end, row_scores);
      for (int64_t x = 0; x < kRowsTogether; ++x) {
        if (!g.active[x]) continue;
        const int64_t r = r0 + x, i = r % queries;
        const RowKeys& keys = t.keys_of(i);
        const Span span{g.begin, g.end, g.spans[x].lo, g.spans[x].hi};
        float* row = row_scores[x];
        mask_scores(span, keys.dense ? nullptr : t.mask + i * p.keys + first, row);
        Floats block_max = splat(-kInf);
        Ints nan_lanes{};
        for (int64_t j = span.begin; j < span.end; j += kLanes) {
          const Floats s = load(row + j);
          block_max = s > block_max ? s : block_max;
          nan_lanes |= s != s;
        }
        // A NaN score (NaN or infinite inputs) makes the row NaN, as in ATen, rather than being
        // taken for a masked key: the trainer's NaN check relies on it.
        bool nan_seen = false;
        for (int64_t l = 0; l < kLanes; ++l) nan_seen |= nan_lanes[l] != 0;
        const float new_max = nan_seen ? std::numeric_limits<float>::quiet_NaN()
                                       : std::max(running_max[r], lane_max(block_max));
        if (new_max == -kInf) continue;  // every key of this block masked off
        // Online softmax: what was summed under the old maximum is rescaled to the new one.
        const float rescale = std::exp(running_max[r] - new_max);
        Floats total{};
        for (int64_t j = span.begin; j < span.end; j += kLanes) {
          const Floats s = load(row + j);
          const Floats e = exp_nonpositive(s - new_max);
          const Floats prob = s == splat(-kInf) ? Floats{} : e;  // NaN stays NaN
          store(row + j, prob);
          total += prob;
        }
        running_sum[r] = running_sum[r] * rescale + lane_sum(total);
        running_max[r] = new_max;
        float* out_row = out + r * dim;
        for (int64_t d = 0; d < dim; ++d) out_row[d] *= rescale;
        weighted_sum(row, v + first * dim, vt, dim, width, span, out_row);
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (running_sum[r] > 0.0f) {
      const float inverse = 1.0f / running_sum[r];
      for (int64_t d = 0; d < dim; ++d) out[r * dim + d] *= inverse;
      lse[r] = running_max[r] + std::log(running_sum[r]);
    } else {
      lse[r] = kInf;  // no key: output zero, probabilities exp(s - inf) = 0 in the backward
    }
  }
}

RQAT_CPU_CLONES
void backward_task(const Task& t, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv) {
  const AttentionProblem& p = *t.p;
  const int64_t dim = p.dim, queries = p.queries, rows = t.group * queries;
  const int64_t width = t.width();
  Workspace w({dim * width, dim * width, dim * width, dim * width, kRowsTogether * width,
               kRowsTogether * width, kRowsTogether * dim, kRowsTogether * dim, rows});
  float *kt = w[0], *vt = w[1], *dkt = w[2], *dvt = w[3], *probs = w[4], *dscores = w[5],
        *queries_scaled = w[6], *douts = w[7], *delta = w[8];
  float *row_probs[kRowsTogether], *row_dscores[kRowsTogether];
  const float *row_queries[kRowsTogether], *row_douts[kRowsTogether];
  for (int64_t x = 0; x < kRowsTogether; ++x) {
    row_probs[x] = probs + x * width;
    row_dscores[x] = dscores + x * width;
    row_queries[x] = queries_scaled + x * dim;
    row_douts[x] = douts + x * dim;
  }
  // delta_r = sum_d dout * out = sum_j p_j dp_j, the softmax's correction term.
  for (int64_t r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (int64_t d = 0; d < dim; ++d) s += dout[r * dim + d] * out[r * dim + d];
    delta[r] = s;
  }
  std::fill(dq, dq + rows * dim, 0.0f);
  for (int64_t first = 0; first < p.keys; first += t.block) {
    const int64_t n = std::min(t.block, p.keys - first);
    transpose_block(k, first, n, dim, width, kt);
    transpose_block(v, first, n, dim, width, vt);
    std::fill(dkt, dkt + dim * width, 0.0f);
    std::fill(dvt, dvt + dim * width, 0.0f);
    // Rows four at a time: each visits the union of their spans (a row's keys outside its own
    // span get probability 0): their scores and dout . v in one pass over the keys each
    // (columns_dot_rows), and the key and value gradients of a vector of keys are loaded and
    // stored once for four rows' contributions.
    for (int64_t r0 = 0; r0 < rows; r0 += kRowsTogether) {
      const RowGroup g = row_group(t, r0, rows, first, n, lse);
      const int64_t begin = g.begin, end = g.end;
      if (begin >= end) continue;
      scaled_queries(g, q, r0, dim, p.scale, queries_scaled);
      for (int64_t x = 0; x < kRowsTogether; ++x) {
        float* row_dout = douts + x * dim;
        if (g.active[x]) {
          std::copy(dout + (r0 + x) * dim, dout + (r0 + x + 1) * dim, row_dout);
        } else {
          std::fill(row_dout, row_dout + dim, 0.0f);
        }
      }
      columns_dot_rows(row_queries, kt, dim, width, begin, end, row_probs);
      columns_dot_rows(row_douts, vt, dim, width, begin, end, row_dscores);
      for (int64_t x = 0; x < kRowsTogether; ++x) {
        float* prob = row_probs[x];
        float* ds = row_dscores[x];
        const int64_t r = r0 + x;
        if (!g.active[x]) {  // contributes nothing: zero probabilities (its query was zero)
          std::fill(prob + begin, prob + end, 0.0f);
          std::fill(ds + begin, ds + end, 0.0f);
          continue;
        }
        const int64_t i = r % queries;
        const RowKeys& keys = t.keys_of(i);
        const Span span{begin, end, g.spans[x].lo, g.spans[x].hi};
        mask_scores(span, keys.dense ? nullptr : t.mask + i * p.keys + first, prob);
        // prob = exp(s - lse); dprob = dout . v_j; ds = prob * (dprob - delta)
        for (int64_t j = begin; j < end; j += kLanes) {
          const Floats s = load(prob + j);
          const Floats e = exp_nonpositive(s - lse[r]);
          const Floats pr = s == splat(-kInf) ? Floats{} : e;
          store(prob + j, pr);
          store(ds + j, pr * (load(ds + j) - delta[r]));
        }
        weighted_sum(ds, k + first * dim, kt, dim, width, span, dq + r * dim);
      }
      const float* p0 = probs;
      const float* s0 = dscores;
      for (int64_t d = 0; d < dim; ++d) {
        float* dkt_row = dkt + d * width;
        float* dvt_row = dvt + d * width;
        const float q0 = queries_scaled[d], q1 = queries_scaled[dim + d],
                    q2 = queries_scaled[2 * dim + d], q3 = queries_scaled[3 * dim + d];
        const float o0 = douts[d], o1 = douts[dim + d], o2 = douts[2 * dim + d],
                    o3 = douts[3 * dim + d];
        for (int64_t j = begin; j < end; j += kLanes) {
          store(dkt_row + j, load(dkt_row + j) + load(s0 + j) * q0 + load(s0 + width + j) * q1 +
                                 load(s0 + 2 * width + j) * q2 + load(s0 + 3 * width + j) * q3);
          store(dvt_row + j, load(dvt_row + j) + load(p0 + j) * o0 + load(p0 + width + j) * o1 +
                                 load(p0 + 2 * width + j) * o2 + load(p0 + 3 * width + j) * o3);
        }
      }
    }
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t d = 0; d < dim; ++d) {
        dk[(first + j) * dim + d] = dkt[d * width + j];
        dv[(first + j) * dim + d] = dvt[d * width + j];
      }
    }
  }
  for (int64_t e = 0; e < rows * dim; ++e) dq[e] *= p.scale;
}

// Runs one task per (batch row, key/value head), in parallel.
template <typename Body>
void for_each_task(const AttentionProblem& p, const Body& body) {
  const auto keys = row_keys(p);
  const int64_t group = p.heads / p.kv_heads, tasks = p.batch * p.kv_heads;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t b = task / p.kv_heads, h = task % p.kv_heads;
      const int64_t mask_b = p.mask_batch == 1 ? 0 : b;
      Task t{&p, keys.data() + (p.mask ? mask_b * p.queries : 0),
             p.mask ? p.mask + mask_b * p.queries * p.keys : nullptr, group, keys_per_block(p.dim)};
      // Offsets of the task's query heads (contiguous: h * group .. h * group + group - 1) and of
      // its key/value head.
      const int64_t query_offset = (b * p.heads + h * group) * p.queries * p.dim;
      const int64_t row_offset = (b * p.heads + h * group) * p.queries;
      const int64_t key_offset = (b * p.kv_heads + h) * p.keys * p.dim;
      body(t, query_offset, row_offset, key_offset);
    }
  });
}

}  // namespace

void attention_forward_cpu(const AttentionProblem& p, const float* q, const float* k,
                           const float* v, float* out, float* lse) {
  for_each_task(p, [&](const Task& t, int64_t qo, int64_t ro, int64_t ko) {
    forward_task(t, q + qo, k + ko, v + ko, out + qo, lse + ro);
  });
}

void attention_backward_cpu(const AttentionProblem& p, const float* q, const float* k,
                            const float* v, const float* out, const float* lse, const float* dout,
                            float* dq, float* dk, float* dv) {
  for_each_task(p, [&](const Task& t, int64_t qo, int64_t ro, int64_t ko) {
    backward_task(t, q + qo, k + ko, v + ko, out + qo, lse + ro, dout + qo, dq + qo, dk + ko,
                  dv + ko);
  });
}

}  // namespace rqat::ops
