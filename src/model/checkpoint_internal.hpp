#pragma once
// Internal: the training state that save_checkpoint is writing on this thread, as JSON text
// (empty when none); Model::save puts it in the header under "training".
#include <string>

namespace soma::serialization::internal {
std::string pending_training_state_json();
}  // namespace soma::serialization::internal
