// CUDA implementation of delayed_codebook_argmax_embed_bf16 (only built by `build.py --cuda`).
//
// One block per codebook row k: a block-wide argmax over V (bf16 read as float; NaN wins
// and ties go to the lowest index, like torch.argmax), then the block copies
// codebook[k, code, :] into emb[k, :]. Rows with k > delay skip the reduction and use boc.
#include "audio_codebook.h"
#include "registration.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <climits>
#include <cmath>
#include <tuple>

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Candidate {
  float val;
  int idx;
};

__device__ __forceinline__ Candidate pick(Candidate a, Candidate b) {
  const bool a_nan = isnan(a.val), b_nan = isnan(b.val);
  if (a_nan != b_nan) return a_nan ? a : b;
  if (!a_nan && a.val != b.val) return a.val > b.val ? a : b;
  return a.idx <= b.idx ? a : b;
}

__device__ __forceinline__ Candidate warp_argmax(Candidate c) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const Candidate other{__shfl_down_sync(0xffffffffu, c.val, offset),
                          __shfl_down_sync(0xffffffffu, c.idx, offset)};
    c = pick(c, other);
  }
  return c;
}

__global__ void __launch_bounds__(kThreads)
    delayed_argmax_embed_kernel(const at::BFloat16* __restrict__ logits,
                                const at::BFloat16* __restrict__ codebook,
                                int64_t* __restrict__ codes, at::BFloat16* __restrict__ emb,
                                int V, int64_t D, int64_t delay, int64_t boc) {
  __shared__ Candidate warp_best[kWarps];
  __shared__ int64_t code;
  const int64_t k = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (k <= delay) {  // uniform within the block, so the barriers below are safe
    const at::BFloat16* row = logits + k * V;
    // Sentinel loses to every real element, including -inf (it has a larger index).
    Candidate best{-INFINITY, INT_MAX};
    for (int v = threadIdx.x; v < V; v += kThreads) {
      best = pick(best, Candidate{static_cast<float>(row[v]), v});
    }
    best = warp_argmax(best);
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
      best = lane < kWarps ? warp_best[lane] : Candidate{-INFINITY, INT_MAX};
      best = warp_argmax(best);
      if (lane == 0) code = best.idx;
    }
  } else if (threadIdx.x == 0) {
    code = boc;
  }
  __syncthreads();
  const int64_t c = code;
  if (threadIdx.x == 0) codes[k] = c;
  const at::BFloat16* src = codebook + (k * V + c) * D;
  at::BFloat16* dst = emb + k * D;
  for (int64_t d = threadIdx.x; d < D; d += kThreads) dst[d] = src[d];
}

std::tuple<at::Tensor, at::Tensor> delayed_codebook_argmax_embed_cuda(
    const at::Tensor& logits, const at::Tensor& codebook, int64_t delay, int64_t boc) {
  check_codebook_inputs(logits, codebook, delay, boc);
  TORCH_CHECK(logits.is_cuda(), "expected CUDA tensors, got ", logits.device());
  TORCH_CHECK(logits.size(1) <= INT_MAX, "V must fit in int32, got ", logits.size(1));
  TORCH_CHECK(logits.size(0) <= INT_MAX, "K must fit in int32, got ", logits.size(0));
  const c10::cuda::CUDAGuard guard(logits.device());
  const at::Tensor l = logits.contiguous();
  const at::Tensor cb = codebook.contiguous();
  const int64_t K = l.size(0), V = l.size(1), D = cb.size(2);
  at::Tensor codes = at::empty({K}, l.options().dtype(at::kLong));
  at::Tensor emb = at::empty({K, D}, cb.options());
  if (K == 0) return {codes, emb};
  delayed_argmax_embed_kernel<<<static_cast<unsigned>(K), kThreads, 0,
                                c10::cuda::getCurrentCUDAStream()>>>(
      l.const_data_ptr<at::BFloat16>(), cb.const_data_ptr<at::BFloat16>(),
      codes.mutable_data_ptr<int64_t>(), emb.mutable_data_ptr<at::BFloat16>(),
      static_cast<int>(V), D, delay, boc);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {codes, emb};
}

}  // namespace

FH_TORCH_LIBRARY_IMPL(FLASHHUB_OPS_NAMESPACE, CUDA, m) {
  m.impl(AUDIO_CODEBOOK_OP, &delayed_codebook_argmax_embed_cuda);
}
