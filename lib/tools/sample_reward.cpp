#include "tools/sample_reward.h"

#include <memory>

#include "rl/rewards.h"

namespace rqat::tools {

eval::SampleReward sample_reward(const std::string& spec, const std::string& flag) {
  std::shared_ptr<const rl::CombinedReward> reward = rl::make_reward(spec, flag);
  eval::SampleReward out;
  out.spec = reward->name();
  out.score = [reward](const std::string& completion, const std::string& gold, bool truncated) {
    return reward->score({completion, gold, /*prompt=*/"", truncated});
  };
  return out;
}

}  // namespace rqat::tools
