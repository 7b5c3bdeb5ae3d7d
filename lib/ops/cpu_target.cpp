// See cpu_target.h.
#include "ops/cpu_target.h"

#include <cstdlib>
#include <mutex>

#include "io/error.h"
#include "ops/vector_lanes.h"

namespace rqat::ops {

namespace {

std::mutex target_mutex;
std::optional<CpuTarget> forced;    // set_cpu_target's
std::optional<CpuTarget> from_env;  // $RQAT_CPU_TARGET's, once read
bool env_read = false;

std::string supported_list() {
  std::string out;
  for (int t = static_cast<int>(CpuTarget::kCount) - 1; t >= 0; --t) {
    const auto target = static_cast<CpuTarget>(t);
    if (!cpu_target_supported(target)) continue;
    if (!out.empty()) out += ", ";
    out += enum_name(target);
  }
  return out;
}

void require_supported(CpuTarget target, const char* where) {
  if (!cpu_target_supported(target))
    fail("{}: this CPU (or this build) cannot run {} (supported: {})", where, enum_name(target),
         supported_list());
}

}  // namespace

bool cpu_target_supported(CpuTarget target) {
  switch (target) {
    case CpuTarget::kBaseline:
      return true;
#ifdef RQAT_X86_TARGETS
    case CpuTarget::kAvx2:
      return __builtin_cpu_supports("x86-64-v3") != 0;
    case CpuTarget::kAvx512:
      return __builtin_cpu_supports("x86-64-v4") != 0;
#endif
    default:
      return false;
  }
}

CpuTarget best_cpu_target() {
  static const CpuTarget best = [] {
    for (int t = static_cast<int>(CpuTarget::kCount) - 1; t > 0; --t)
      if (cpu_target_supported(static_cast<CpuTarget>(t))) return static_cast<CpuTarget>(t);
    return CpuTarget::kBaseline;
  }();
  return best;
}

CpuTarget cpu_target() {
  std::lock_guard lock(target_mutex);
  if (forced) return *forced;
  if (!env_read) {
    env_read = true;
    if (const char* value = std::getenv("RQAT_CPU_TARGET"); value != nullptr && *value != '\0') {
      const auto target = parse_enum<CpuTarget>(value, "RQAT_CPU_TARGET");
      require_supported(target, "RQAT_CPU_TARGET");
      from_env = target;
    }
  }
  return from_env ? *from_env : best_cpu_target();
}

void set_cpu_target(std::optional<CpuTarget> target) {
  if (target) require_supported(*target, "set_cpu_target");
  std::lock_guard lock(target_mutex);
  forced = target;
}

std::string cpu_target_description() {
  return std::string(enum_name(cpu_target())) + " (supported: " + supported_list() + ")";
}

}  // namespace rqat::ops
