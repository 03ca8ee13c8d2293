// Shared declarations of the delayed codebook argmax + embedding op.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

#define AUDIO_CODEBOOK_OP "delayed_codebook_argmax_embed_bf16"
#define AUDIO_CODEBOOK_SCHEMA \
  AUDIO_CODEBOOK_OP "(Tensor logits, Tensor codebook, int delay, int boc) -> (Tensor, Tensor)"

namespace {

// Checks what every backend needs: logits (K, V) and codebook (K, V, D), both bf16 on one
// device, delay >= 0 and 0 <= boc < V. Internal linkage, so each .so keeps its own copy.
inline void check_codebook_inputs(const at::Tensor& logits, const at::Tensor& codebook,
                                  int64_t delay, int64_t boc) {
  TORCH_CHECK(logits.dim() == 2, "logits must have shape (K, V), got ", logits.sizes());
  TORCH_CHECK(codebook.dim() == 3, "codebook must have shape (K, V, D), got ", codebook.sizes());
  TORCH_CHECK(codebook.size(0) == logits.size(0) && codebook.size(1) == logits.size(1),
              "codebook shape ", codebook.sizes(), " does not match logits (K, V) = ",
              logits.sizes());
  TORCH_CHECK(logits.scalar_type() == at::kBFloat16 && codebook.scalar_type() == at::kBFloat16,
              "logits and codebook must be bfloat16, got ", logits.scalar_type(), " and ",
              codebook.scalar_type());
  TORCH_CHECK(logits.device() == codebook.device(), "logits (", logits.device(),
              ") and codebook (", codebook.device(), ") must be on the same device");
  TORCH_CHECK(delay >= 0, "delay must be >= 0, got ", delay);
  TORCH_CHECK(boc >= 0 && boc < logits.size(1), "boc must be in [0, V=", logits.size(1),
              "), got ", boc);
}

}  // namespace
