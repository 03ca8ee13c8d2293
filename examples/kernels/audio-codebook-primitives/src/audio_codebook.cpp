// CPU (and Meta) implementation and schema of delayed_codebook_argmax_embed_bf16.
//
// codes[k] = argmax(logits[k]) if k <= delay else boc;  emb[k] = codebook[k, codes[k]].
#include "audio_codebook.h"
#include "registration.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

namespace {

// First index of the maximum; NaN counts as the maximum, like torch.argmax.
int64_t argmax_bf16(const at::BFloat16* row, int64_t n) {
  int64_t best = 0;
  float best_val = static_cast<float>(row[0]);
  if (std::isnan(best_val)) return 0;
  for (int64_t i = 1; i < n; ++i) {
    const float v = static_cast<float>(row[i]);
    if (std::isnan(v)) return i;
    if (v > best_val) {
      best_val = v;
      best = i;
    }
  }
  return best;
}

std::tuple<at::Tensor, at::Tensor> delayed_codebook_argmax_embed_cpu(
    const at::Tensor& logits, const at::Tensor& codebook, int64_t delay, int64_t boc) {
  check_codebook_inputs(logits, codebook, delay, boc);
  const at::Tensor l = logits.contiguous();
  const at::Tensor cb = codebook.contiguous();
  const int64_t K = l.size(0), V = l.size(1), D = cb.size(2);
  at::Tensor codes = at::empty({K}, l.options().dtype(at::kLong));
  at::Tensor emb = at::empty({K, D}, cb.options());
  const auto* lp = l.const_data_ptr<at::BFloat16>();
  const auto* cbp = cb.const_data_ptr<at::BFloat16>();
  auto* codes_p = codes.mutable_data_ptr<int64_t>();
  auto* emb_p = emb.mutable_data_ptr<at::BFloat16>();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(V + D, 1));
  at::parallel_for(0, K, grain, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t code = k <= delay ? argmax_bf16(lp + k * V, V) : boc;
      codes_p[k] = code;
      std::memcpy(emb_p + k * D, cbp + (k * V + code) * D, D * sizeof(at::BFloat16));
    }
  });
  return {codes, emb};
}

// Shapes only, for torch.compile / fake tensors.
std::tuple<at::Tensor, at::Tensor> delayed_codebook_argmax_embed_meta(
    const at::Tensor& logits, const at::Tensor& codebook, int64_t delay, int64_t boc) {
  check_codebook_inputs(logits, codebook, delay, boc);
  return {at::empty({logits.size(0)}, logits.options().dtype(at::kLong)),
          at::empty({logits.size(0), codebook.size(2)}, codebook.options())};
}

}  // namespace

FH_TORCH_LIBRARY(FLASHHUB_OPS_NAMESPACE, m) { m.def(AUDIO_CODEBOOK_SCHEMA); }

FH_TORCH_LIBRARY_IMPL(FLASHHUB_OPS_NAMESPACE, CPU, m) {
  m.impl(AUDIO_CODEBOOK_OP, &delayed_codebook_argmax_embed_cpu);
}

FH_TORCH_LIBRARY_IMPL(FLASHHUB_OPS_NAMESPACE, Meta, m) {
  m.impl(AUDIO_CODEBOOK_OP, &delayed_codebook_argmax_embed_meta);
}
