// See kernel_self_checks.h: what every check shares (the comparison, the guards, seeded inputs).
#include "ops/kernel_self_checks.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>

#include <limits>

#include "io/error.h"

namespace rqat::ops {

void SelfCheckCases::run(const std::string& name, const std::function<void()>& body) {
  // After a throw the device may be in an error state (a sticky CUDA fault): stop there.
  if (!check_.failure.empty()) return;
  current_ = name;
  ++check_.cases;
  try {
    body();
  } catch (const c10::Error& e) {
    const std::string message = e.what_without_backtrace();
    check_.failure = message.substr(0, message.find('\n'));
  } catch (const std::exception& e) {
    const std::string message = e.what();
    check_.failure = message.substr(0, message.find('\n'));
  }
  if (!check_.failure.empty()) {
    check_.passed = false;
    check_.worst_case = name;
  }
}

void SelfCheckCases::compare(const at::Tensor& got, const at::Tensor& want, const at::Tensor& scale,
                             double tolerance) {
  const auto g = got.detach().to(at::kDouble);
  const auto w = want.detach().to(g.device(), at::kDouble);
  if (g.sizes() != w.sizes())
    fail("self-check: the kernel gave shape {}, its twin {}", c10::str(g.sizes()),
         c10::str(w.sizes()));
  auto error = (g - w).abs();
  if (scale.defined()) error = error / scale.detach().to(g.device(), at::kDouble);
  // Equal values (NaN = NaN and inf = inf included) are no error; any other NaN is infinite.
  error.masked_fill_(at::eq(g, w).logical_or_(g.isnan().logical_and_(w.isnan())), 0.0);
  error.masked_fill_(error.isnan(), std::numeric_limits<double>::infinity());
  const double worst = error.numel() > 0 ? error.max().item<double>() : 0.0;
  const double ratio = tolerance > 0 ? worst / tolerance
                       : worst > 0   ? std::numeric_limits<double>::infinity()
                                     : 0.0;
  if (ratio > worst_ratio_) {
    worst_ratio_ = ratio;
    check_.worst_error = worst;
    check_.tolerance = tolerance;
    check_.worst_case = current_;
  }
  if (!(worst <= tolerance)) check_.passed = false;
}

void SelfCheckCases::compare_ids(const at::Tensor& got, const at::Tensor& want) {
  if (got.sizes() != want.sizes())
    fail("self-check: the kernel gave {} ids, its twin {}", c10::str(got.sizes()),
         c10::str(want.sizes()));
  const auto differing = at::ne(got, want.to(got.device())).sum().to(at::kDouble);
  compare(differing, at::zeros_like(differing), at::Tensor(), 0);
}

KernelCheck SelfCheckCases::finish() {
  check_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return check_;
}

struct SelfCheckScope::Guards {
  c10::InferenceMode not_inference{false};
  at::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard no_autocast{c10::autocast_dispatch_keyset};
};

SelfCheckScope::SelfCheckScope() : guards_(new Guards) {}
SelfCheckScope::~SelfCheckScope() { delete guards_; }

at::Tensor check_randn(at::IntArrayRef sizes, uint64_t seed, const c10::Device& device,
                       at::ScalarType dtype) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::randn(sizes, gen, at::kFloat).to(device, dtype);
}

}  // namespace rqat::ops
