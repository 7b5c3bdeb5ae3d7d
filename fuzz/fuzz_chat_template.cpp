// Chat templates: a Jinja chat_template is recognized (or refused) and rendered; the same text as a
// placeholder template file (docs/chat_templates.md) is parsed and rendered. Input: the template.
#include <vector>

#include "chat/chat_template.h"
#include "fuzz_util.h"

namespace {

const std::vector<rqat::chat::Message>& conversation() {
  static const std::vector<rqat::chat::Message> messages = {
      {"system", "Reason step by step."}, {"user", "What is 2+2?"}, {"assistant", "4"},
      {"user", "And {content} {bos_token}?"}};
  return messages;
}

void render_both_ways(const rqat::chat::ChatTemplate& chat) {
  (void)chat.render(conversation());
  rqat::chat::RenderOptions options;
  options.add_generation_prompt = false;
  options.enable_thinking = false;
  (void)chat.render(conversation(), options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rqat;
  const std::string text(fuzz::as_text(data, size));
  fuzz::expect_clean_failure([&] {
    render_both_ways(chat::ChatTemplate::recognize(text, "<s>", "</s>", "fuzz/chat_template"));
  });
  fuzz::expect_clean_failure([&] {
    render_both_ways(chat::ChatTemplate::from_placeholder_text(text, "fuzz/template.yaml", "<s>", "</s>"));
  });
  return 0;
}
