// Paged decode attention, flash-decoding style: one query token per sequence against its cached
// keys and values, read through the block table (layouts and maths: lib/ops/paged_attention.h).
//
// Two kernels. The first has one CTA per (partition of kPartition positions, kv head, chunk of at
// most C query heads of that kv head, sequence); it scores the partition's keys for all the
// chunk's query heads from one load of each key (grouped-query attention), keeps the scores in
// shared memory, takes their max and sum of exponentials, then reads the values once and writes
// the un-normalized partial output with the max and the sum into the workspace. The second merges
// the partitions of each (sequence, query head). When the longest possible context fits in one
// partition, the first kernel normalizes and writes the output itself and the second is not run.
//
// The grid depends on the shapes only (batch, heads, max_blocks, block_size), never on the
// context lengths, which live on the device: a launch can be captured in a CUDA graph and replayed
// after the lengths change. A partition that starts at or past its sequence's length returns at
// once and the merge reads only the partitions below the length, so no partition without a valid
// key (whose max would be -inf) ever enters the arithmetic.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "cuda/paged_decode_attention.cuh"

namespace rqat::cuda {

namespace {

// Positions per CTA: 128 KiB of bf16 keys and as many values at head_dim 128, which amortizes a
// CTA's fixed costs (query, block ids, softmax, partial write, merge), while batch 16 x 8 kv heads
// x 8,192 positions still makes 2,048 CTAs (about two waves of 8 per SM on 132 SMs).
constexpr int kPartition = 512;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kMergeThreads = 128;
// Scores are kept in the log2 domain (q pre-multiplied by scale * log2(e)) so exp is one exp2f.
constexpr float kLog2e = 1.4426950408889634f;

// 16 bytes of `T` as float32.
__device__ __forceinline__ void unpack(const uint4& u, float (&f)[4]) {
  f[0] = __uint_as_float(u.x);
  f[1] = __uint_as_float(u.y);
  f[2] = __uint_as_float(u.z);
  f[3] = __uint_as_float(u.w);
}
__device__ __forceinline__ void unpack_bf16(const uint4& u, float (&f)[8]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // a bf16 is the high half of a float32: exact, two ALU ops
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack_f16(const uint4& u, float (&f)[8]) {
  const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {  // the low half is the lower address, as in memory
    f[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xffffu)));
    f[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
  }
}

template <typename T>
struct Elem;
template <>
struct Elem<float> {
  static constexpr int kVec = 4;
  __device__ static void load(const uint4& u, float (&f)[4]) { unpack(u, f); }
  __device__ static float to_out(float v) { return v; }
};
template <>
struct Elem<__nv_bfloat16> {
  static constexpr int kVec = 8;
  __device__ static void load(const uint4& u, float (&f)[8]) { unpack_bf16(u, f); }
  __device__ static __nv_bfloat16 to_out(float v) { return __float2bfloat16_rn(v); }
};
template <>
struct Elem<__half> {
  static constexpr int kVec = 8;
  __device__ static void load(const uint4& u, float (&f)[8]) { unpack_f16(u, f); }
  __device__ static __half to_out(float v) { return __float2half_rn(v); }
};

// How a warp covers keys of D elements: a group of kTpk lanes reads one key row with 16-byte loads
// (kVpt per lane), so a warp reads kKpw rows at once and kKpw * kUnroll rows per iteration
// (several independent loads in flight per lane).
template <typename T, int D>
struct Tiling {
  static constexpr int kVec = Elem<T>::kVec;
  static constexpr int kVecsPerRow = D / kVec;
  static_assert(D % kVec == 0 && kVecsPerRow >= 1 && (kVecsPerRow & (kVecsPerRow - 1)) == 0,
                "a key row must be a power-of-two number of 16-byte vectors");
  static constexpr int kTpk = kVecsPerRow < 32 ? kVecsPerRow : 32;
  static constexpr int kVpt = kVecsPerRow / kTpk;
  static constexpr int kElems = kVpt * kVec;  // floats of one row held by one lane
  static constexpr int kKpw = 32 / kTpk;
  static constexpr int kUnroll = kVpt >= 4 ? 1 : 4 / kVpt;
  static constexpr int kWarpStep = kKpw * kUnroll;  // positions per warp iteration
};

struct Params {
  const void* q;
  const void* key_pool;
  const void* value_pool;
  const int32_t* block_tables;
  const int32_t* context_lens;
  void* out;
  float* ws_out;  // (batch, heads, partitions, head_dim): sum_p exp2(s_p - m) v_p
  float* ws_max;  // (batch, heads, partitions): m, the partition's max of the log2-domain scores
  float* ws_sum;  // (batch, heads, partitions): sum_p exp2(s_p - m)
  int heads, kv_heads, group, chunks, max_blocks, log2_block_size, max_context, partitions;
  float scale_log2;  // scale * log2(e)
};

__device__ __forceinline__ int context_length(const Params& p, int b) {
  const int n = p.context_lens[b];  // trusted to be in [1, max_context]; clamped all the same
  return n < 0 ? 0 : (n > p.max_context ? p.max_context : n);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// Sums v[0, C) over the lanes of a row's lane group (lane bits below 2 * off) with C - 1 +
// log2(kTpk / C) shuffles instead of C log2(kTpk): at each butterfly step a lane keeps half of its
// values (the upper half when its bit is set), adds its partner's copy of that half and sends the
// other. GroupReduce says where the totals end up.
template <int c, int off>
__device__ __forceinline__ void reduce_step(float* v, int li) {
  if constexpr (off > 0) {
    if constexpr (c > 1) {
      const bool upper = (li & off) != 0;
#pragma unroll
      for (int i = 0; i < c / 2; ++i) {
        const float send = upper ? v[i] : v[i + c / 2];
        const float keep = upper ? v[i + c / 2] : v[i];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
      }
      reduce_step<c / 2, off / 2>(v, li);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], off);
      reduce_step<1, off / 2>(v, li);
    }
  }
}
template <int C, int kTpk>
struct GroupReduce {
  static constexpr int kSplit = C < kTpk ? C : kTpk;  // lanes the C totals are spread over
  static constexpr int kLeft = C / kSplit;            // totals per lane: v[0, kLeft)
  static constexpr int kSpan = kTpk / kSplit;         // lanes holding the same totals
  // v[i] is the total of value first_head(li) + i; one lane of each span writes them.
  __device__ static int first_head(int li) { return li / kSpan * kLeft; }
  __device__ static bool writer(int li) { return li % kSpan == 0; }
};

// grid (partitions, kv_heads * chunks, batch), kThreads threads. C: query heads per CTA (the
// chunk); chunk c of kv head k holds query heads k * group + c * C + [0, min(C, group - c * C)).
template <typename T, int D, int C>
__global__ void __launch_bounds__(kThreads) paged_decode_partition_kernel(const Params p) {
  using Tl = Tiling<T, D>;
  constexpr int kScoreFloats = C * kPartition;
  constexpr int kReduceFloats = kWarps * C * D;
  // The scores, then (once every warp has used them) the warps' partial outputs.
  __shared__ float s_buf[kScoreFloats > kReduceFloats ? kScoreFloats : kReduceFloats];
  __shared__ int s_blocks[kPartition];  // the partition's block ids (block_size 1 needs them all)
  __shared__ float s_max[C], s_sum[C];

  const int part = blockIdx.x;
  const int kvh = static_cast<int>(blockIdx.y) / p.chunks;
  const int g0 = (static_cast<int>(blockIdx.y) % p.chunks) * C;
  const int gcount = min(C, p.group - g0);
  const int b = blockIdx.z;
  const int64_t head0 = static_cast<int64_t>(b) * p.heads + kvh * p.group + g0;  // first (b, h)
  const int ctx = context_length(p, b);
  const int p0 = part * kPartition;
  const bool direct = p.partitions == 1;
  T* out = static_cast<T*>(p.out);
  if (p0 >= ctx) {
    if (direct) {  // only for a length of 0, outside the contract: zeros rather than garbage
      for (int i = threadIdx.x; i < gcount * D; i += kThreads)
        out[head0 * D + i] = Elem<T>::to_out(0.0f);
    }
    return;  // the merge never reads this partition
  }
  const int p1 = min(p0 + kPartition, ctx);
  const int n = p1 - p0;  // >= 1 valid key

  const int lbs = p.log2_block_size;
  const int first_block = p0 >> lbs;
  const int nblocks = ((p1 - 1) >> lbs) - first_block + 1;
  const int32_t* table = p.block_tables + static_cast<int64_t>(b) * p.max_blocks + first_block;
  for (int i = threadIdx.x; i < nblocks; i += kThreads) s_blocks[i] = table[i];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int gi = lane / Tl::kTpk;  // which key of the warp's kKpw
  const int li = lane % Tl::kTpk;  // which vectors of the row: li + j * kTpk, j < kVpt

  // This lane's slice of the chunk's queries, scaled; absent heads (chunk tail) score 0, unused.
  float qr[C][Tl::kElems];
  {
    const T* q = static_cast<const T*>(p.q) + head0 * D;
#pragma unroll
    for (int g = 0; g < C; ++g) {
#pragma unroll
      for (int j = 0; j < Tl::kVpt; ++j) {
        float f[Tl::kVec];
        if (g < gcount) {
          Elem<T>::load(__ldg(reinterpret_cast<const uint4*>(q + g * D) + li + j * Tl::kTpk), f);
        } else {
#pragma unroll
          for (int e = 0; e < Tl::kVec; ++e) f[e] = 0.0f;
        }
#pragma unroll
        for (int e = 0; e < Tl::kVec; ++e) qr[g][j * Tl::kVec + e] = f[e] * p.scale_log2;
      }
    }
  }
  __syncthreads();  // s_blocks

  const int64_t row_stride = static_cast<int64_t>(p.kv_heads) * D;  // elements between positions
  const int block_mask = (1 << lbs) - 1;
  // Element offset of position pos's row of this kv head in a pool.
  auto row_offset = [&](int pos) {
    const int64_t block = s_blocks[(pos >> lbs) - first_block];
    return ((block << lbs) + (pos & block_mask)) * row_stride + static_cast<int64_t>(kvh) * D;
  };
  // Loads of kUnroll rows (those past p1 read as zeros): all issued before any is used.
  auto load_rows = [&](const T* pool, int base, uint4(&rows)[Tl::kUnroll][Tl::kVpt]) {
#pragma unroll
    for (int u = 0; u < Tl::kUnroll; ++u) {
      const int pos = base + u * Tl::kKpw + gi;
      if (pos < p1) {
        const uint4* row = reinterpret_cast<const uint4*>(pool + row_offset(pos));
#pragma unroll
        for (int j = 0; j < Tl::kVpt; ++j) rows[u][j] = __ldg(row + li + j * Tl::kTpk);
      } else {
#pragma unroll
        for (int j = 0; j < Tl::kVpt; ++j) rows[u][j] = make_uint4(0, 0, 0, 0);
      }
    }
  };
  // Warp-uniform trip counts: every lane reaches the shuffles; rows past p1 are masked instead.
  const int warp_first = p0 + warp * Tl::kWarpStep;
  constexpr int kBlockStep = kWarps * Tl::kWarpStep;

  // Scores s[g][pos - p0] = log2(e) * scale * q_g . k_pos.
  const T* keys = static_cast<const T*>(p.key_pool);
  for (int base = warp_first; base < p1; base += kBlockStep) {
    uint4 rows[Tl::kUnroll][Tl::kVpt];
    load_rows(keys, base, rows);
#pragma unroll
    for (int u = 0; u < Tl::kUnroll; ++u) {
      float k[Tl::kElems];
#pragma unroll
      for (int j = 0; j < Tl::kVpt; ++j) {
        float f[Tl::kVec];
        Elem<T>::load(rows[u][j], f);
#pragma unroll
        for (int e = 0; e < Tl::kVec; ++e) k[j * Tl::kVec + e] = f[e];
      }
      const int pos = base + u * Tl::kKpw + gi;
      float dot[C];
#pragma unroll
      for (int g = 0; g < C; ++g) {
        dot[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < Tl::kElems; ++e) dot[g] = fmaf(qr[g][e], k[e], dot[g]);
      }
      using Reduce = GroupReduce<C, Tl::kTpk>;
      reduce_step<C, Tl::kTpk / 2>(dot, li);
      if (Reduce::writer(li) && pos < p1) {
#pragma unroll
        for (int i = 0; i < Reduce::kLeft; ++i)
          s_buf[(Reduce::first_head(li) + i) * kPartition + (pos - p0)] = dot[i];
      }
    }
  }
  __syncthreads();

  // Per head: the max over the partition's n (>= 1) valid scores, so it is finite for finite
  // inputs; the scores become exp2(s - max).
  for (int g = warp; g < C; g += kWarps) {
    float* s = s_buf + g * kPartition;
    float m = -INFINITY;
    for (int i = lane; i < n; i += 32) m = fmaxf(m, s[i]);
    m = warp_max(m);
    float l = 0.0f;
    for (int i = lane; i < n; i += 32) {
      const float e = exp2f(s[i] - m);
      s[i] = e;
      l += e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      s_max[g] = m;
      s_sum[g] = l;
    }
  }
  __syncthreads();

  // Weighted values: each lane sums its rows' slices for every head of the chunk.
  float acc[C][Tl::kElems];
#pragma unroll
  for (int g = 0; g < C; ++g) {
#pragma unroll
    for (int e = 0; e < Tl::kElems; ++e) acc[g][e] = 0.0f;
  }
  const T* values = static_cast<const T*>(p.value_pool);
  for (int base = warp_first; base < p1; base += kBlockStep) {
    uint4 rows[Tl::kUnroll][Tl::kVpt];
    load_rows(values, base, rows);
#pragma unroll
    for (int u = 0; u < Tl::kUnroll; ++u) {
      const int pos = base + u * Tl::kKpw + gi;
      if (pos >= p1) continue;  // no shuffles in this loop: lanes may skip
      float w[C];
#pragma unroll
      for (int g = 0; g < C; ++g) w[g] = s_buf[g * kPartition + (pos - p0)];
#pragma unroll
      for (int j = 0; j < Tl::kVpt; ++j) {
        float v[Tl::kVec];
        Elem<T>::load(rows[u][j], v);
#pragma unroll
        for (int g = 0; g < C; ++g) {
#pragma unroll
          for (int e = 0; e < Tl::kVec; ++e) {
            float& a = acc[g][j * Tl::kVec + e];
            a = fmaf(w[g], v[e], a);
          }
        }
      }
    }
  }
  // Sum over the warp's lane groups (lanes li, li + kTpk, ... hold the same dims).
#pragma unroll
  for (int g = 0; g < C; ++g) {
#pragma unroll
    for (int e = 0; e < Tl::kElems; ++e) {
#pragma unroll
      for (int off = Tl::kTpk; off < 32; off <<= 1)
        acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], off);
    }
  }
  __syncthreads();  // every warp is done with the scores: s_buf now takes the warps' sums
  if (gi == 0) {
#pragma unroll
    for (int g = 0; g < C; ++g) {
#pragma unroll
      for (int j = 0; j < Tl::kVpt; ++j) {
#pragma unroll
        for (int e = 0; e < Tl::kVec; ++e) {
          const int d = (li + j * Tl::kTpk) * Tl::kVec + e;
          s_buf[(warp * C + g) * D + d] = acc[g][j * Tl::kVec + e];
        }
      }
    }
  }
  __syncthreads();

  for (int i = threadIdx.x; i < gcount * D; i += kThreads) {
    const int g = i / D, d = i % D;
    float total = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += s_buf[(w * C + g) * D + d];
    const int64_t bh = head0 + g;
    if (direct) {
      out[bh * D + d] = Elem<T>::to_out(total / s_sum[g]);
    } else {
      const int64_t slot = bh * p.partitions + part;
      p.ws_out[slot * D + d] = total;
      if (d == 0) {
        p.ws_max[slot] = s_max[g];
        p.ws_sum[slot] = s_sum[g];
      }
    }
  }
}

// grid (heads, batch), kMergeThreads threads: merges the partitions below the sequence's length.
// out = sum_i exp2(m_i - M) o_i / sum_i exp2(m_i - M) l_i with M = max_i m_i (finite: every merged
// partition had a valid key).
template <typename T>
__global__ void __launch_bounds__(kMergeThreads) paged_decode_merge_kernel(const Params p, int D) {
  const int b = blockIdx.y;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + blockIdx.x;
  const int ctx = context_length(p, b);
  const int parts = (ctx + kPartition - 1) / kPartition;
  const float* m = p.ws_max + bh * p.partitions;
  const float* l = p.ws_sum + bh * p.partitions;
  const float* o = p.ws_out + bh * p.partitions * D;
  // Every lane reads the few maxima itself (cached broadcasts) instead of a block reduction.
  float mx = -INFINITY;
  for (int i = 0; i < parts; ++i) mx = fmaxf(mx, m[i]);
  T* out = static_cast<T*>(p.out) + bh * D;
  for (int d = threadIdx.x; d < D; d += kMergeThreads) {
    float num = 0.0f, den = 0.0f;
    for (int i = 0; i < parts; ++i) {
      const float w = exp2f(m[i] - mx);
      den = fmaf(w, l[i], den);
      num = fmaf(w, o[static_cast<int64_t>(i) * D + d], num);
    }
    out[d] = Elem<T>::to_out(parts > 0 ? num / den : 0.0f);  // 0 parts: a length 0, as above
  }
}

int64_t partitions_for(int64_t max_blocks, int64_t block_size) {
  return (max_blocks * block_size + kPartition - 1) / kPartition;
}

bool is_power_of_two(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

template <typename T, int D, int C>
int launch_chunked(const Params& p, int64_t batch, cudaStream_t stream) {
  Params q = p;
  q.chunks = (p.group + C - 1) / C;
  const int64_t y = static_cast<int64_t>(p.kv_heads) * q.chunks;
  if (y > 65535 || batch > 65535) return static_cast<int>(cudaErrorInvalidConfiguration);
  const dim3 grid(static_cast<unsigned>(p.partitions), static_cast<unsigned>(y),
                  static_cast<unsigned>(batch));
  paged_decode_partition_kernel<T, D, C><<<grid, kThreads, 0, stream>>>(q);
  if (p.partitions > 1) {
    const cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return static_cast<int>(err);
    const dim3 merge_grid(static_cast<unsigned>(p.heads), static_cast<unsigned>(batch));
    paged_decode_merge_kernel<T><<<merge_grid, kMergeThreads, 0, stream>>>(q, D);
  }
  return static_cast<int>(cudaGetLastError());
}

// Query heads per CTA: the whole group up to 8 (each key and value loaded once for all of them);
// larger groups take several chunks of 8, which read the same rows again (mostly from L2).
template <typename T, int D>
int launch_head_dim(const Params& p, int64_t batch, cudaStream_t stream) {
  if (p.group == 1) return launch_chunked<T, D, 1>(p, batch, stream);
  if (p.group == 2) return launch_chunked<T, D, 2>(p, batch, stream);
  if (p.group <= 4) return launch_chunked<T, D, 4>(p, batch, stream);
  return launch_chunked<T, D, 8>(p, batch, stream);
}

template <typename T>
int launch_dtype(const Params& p, int64_t head_dim, int64_t batch, cudaStream_t stream) {
  switch (head_dim) {
    case 8:
      return launch_head_dim<T, 8>(p, batch, stream);
    case 16:
      return launch_head_dim<T, 16>(p, batch, stream);
    case 32:
      return launch_head_dim<T, 32>(p, batch, stream);
    case 64:
      return launch_head_dim<T, 64>(p, batch, stream);
    case 128:
      return launch_head_dim<T, 128>(p, batch, stream);
    case 256:
      return launch_head_dim<T, 256>(p, batch, stream);
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
}

}  // namespace

bool paged_decode_head_dim_supported(int64_t head_dim) {
  switch (head_dim) {
    case 8:
    case 16:
    case 32:
    case 64:
    case 128:
    case 256:
      return true;
    default:
      return false;
  }
}

size_t paged_decode_workspace_bytes(int64_t batch, int64_t heads, int64_t head_dim,
                                    int64_t max_blocks, int64_t block_size) {
  const int64_t parts = partitions_for(max_blocks, block_size);
  if (parts <= 1) return 0;  // one partition: the first kernel writes the output itself
  // Partial outputs, then the maxima, then the sums, all float32.
  return static_cast<size_t>(batch * heads * parts * (head_dim + 2)) * sizeof(float);
}

int launch_paged_decode_attention(const PagedDecodeArgs& args, cudaStream_t stream) {
  if (args.batch < 0 || args.heads < 1 || args.kv_heads < 1 || args.heads % args.kv_heads != 0 ||
      !paged_decode_head_dim_supported(args.head_dim) || !is_power_of_two(args.block_size) ||
      args.max_blocks < 1 || args.max_blocks * args.block_size > INT_MAX - kPartition ||
      args.batch * args.heads > INT_MAX)
    return static_cast<int>(cudaErrorInvalidValue);
  if (args.batch == 0) return 0;
  if (!aligned16(args.q) || !aligned16(args.key_pool) || !aligned16(args.value_pool))
    return static_cast<int>(cudaErrorMisalignedAddress);  // rows are read as 16-byte vectors
  Params p{};
  p.q = args.q;
  p.key_pool = args.key_pool;
  p.value_pool = args.value_pool;
  p.block_tables = args.block_tables;
  p.context_lens = args.context_lens;
  p.out = args.out;
  p.heads = static_cast<int>(args.heads);
  p.kv_heads = static_cast<int>(args.kv_heads);
  p.group = static_cast<int>(args.heads / args.kv_heads);
  p.max_blocks = static_cast<int>(args.max_blocks);
  int lbs = 0;
  while ((int64_t{1} << lbs) < args.block_size) ++lbs;
  p.log2_block_size = lbs;
  p.max_context = static_cast<int>(args.max_blocks * args.block_size);
  const int64_t parts = partitions_for(args.max_blocks, args.block_size);
  p.partitions = static_cast<int>(parts);
  if (parts > 1) {
    if (args.workspace == nullptr) return static_cast<int>(cudaErrorInvalidValue);
    const int64_t slots = args.batch * args.heads * parts;
    p.ws_out = static_cast<float*>(args.workspace);
    p.ws_max = p.ws_out + slots * args.head_dim;
    p.ws_sum = p.ws_max + slots;
  }
  p.scale_log2 = args.scale * kLog2e;
  switch (args.dtype) {
    case PagedDType::kF32:
      return launch_dtype<float>(p, args.head_dim, args.batch, stream);
    case PagedDType::kBF16:
      return launch_dtype<__nv_bfloat16>(p, args.head_dim, args.batch, stream);
    case PagedDType::kF16:
      return launch_dtype<__half>(p, args.head_dim, args.batch, stream);
  }
  return static_cast<int>(cudaErrorInvalidValue);
}

}  // namespace rqat::cuda
