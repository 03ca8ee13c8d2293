// tensor-tricks: scale_shift(x, alpha) = x * alpha + SHIFT on CPU, SHIFT = +1 (v1) or -1 (v2).
//
// build.py compiles this file once per version with -DTENSOR_TRICKS_VERSION=<1|2> and a
// namespace unique to that build (FLASHHUB_OPS_NAMESPACE), so both load side by side.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#ifndef FLASHHUB_OPS_NAMESPACE
#error "FLASHHUB_OPS_NAMESPACE must be defined by the build (see build.py)"
#endif
#if TENSOR_TRICKS_VERSION == 1
constexpr double kShift = 1.0;
#elif TENSOR_TRICKS_VERSION == 2
constexpr double kShift = -1.0;
#else
#error "TENSOR_TRICKS_VERSION must be 1 or 2"
#endif

// TORCH_LIBRARY pastes its namespace with ##; expand the macro first.
#define TT_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define TT_TORCH_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)

namespace {

at::Tensor scale_shift_cpu(const at::Tensor& x, double alpha) {
  TORCH_CHECK(at::isFloatingType(x.scalar_type()),
              "scale_shift expects a floating point tensor, got ", x.scalar_type());
  const at::Tensor input = x.contiguous();
  at::Tensor out = at::empty_like(input);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, input.scalar_type(), "scale_shift", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const auto* in = input.const_data_ptr<scalar_t>();
    auto* o = out.mutable_data_ptr<scalar_t>();
    const auto a = static_cast<acc_t>(alpha);
    const auto shift = static_cast<acc_t>(kShift);
    at::parallel_for(0, input.numel(), 32768, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        o[i] = static_cast<scalar_t>(static_cast<acc_t>(in[i]) * a + shift);
      }
    });
  });
  return out;
}

int64_t version() { return TENSOR_TRICKS_VERSION; }

}  // namespace

TT_TORCH_LIBRARY(FLASHHUB_OPS_NAMESPACE, m) {
  m.def("scale_shift(Tensor x, float alpha) -> Tensor");
  m.def("version() -> int", &version);
}

TT_TORCH_LIBRARY_IMPL(FLASHHUB_OPS_NAMESPACE, CPU, m) { m.impl("scale_shift", &scale_shift_cpu); }
