// Op registration macros that expand the build's namespace first.
//
// TORCH_LIBRARY pastes its namespace argument with ## (which stops macro expansion), so
// these wrappers are needed to pass FLASHHUB_OPS_NAMESPACE, set by build.py to a name
// unique to this build (e.g. _audio_codebook_primitives_cpu_1a2b3c4d).
#pragma once

#include <torch/library.h>

#ifndef FLASHHUB_OPS_NAMESPACE
#error "FLASHHUB_OPS_NAMESPACE must be defined by the build (see build.py)"
#endif

#define FH_TORCH_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
#define FH_TORCH_LIBRARY_IMPL(ns, key, m) TORCH_LIBRARY_IMPL(ns, key, m)
