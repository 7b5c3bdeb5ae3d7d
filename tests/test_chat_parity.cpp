// Chat templates: for each family, the format is recognized from its Jinja template and rqat's
// rendering equals transformers' apply_chat_template on every conversation of
// tests/python/make_chat_fixtures.py (system/user/assistant turns, <think> blocks, CJK and emoji,
// whitespace to trim, with and without generation prompt and thinking).
#include <cstdlib>
#include <iostream>

#include "chat/chat_template.h"
#include "io/json_file.h"
#include "test_util.h"

TEST_CASE("chat templates render exactly as transformers' apply_chat_template") {
  const char* root = std::getenv("RQAT_CHAT_FIXTURES");
  REQUIRE(root != nullptr);
  const std::filesystem::path dir(root);
  REQUIRE(std::filesystem::exists(dir / ".complete"));
  const auto families = rqat::io::read_json_file(dir / "cases.json");
  REQUIRE(families.size() >= 6);
  for (const auto& family : families) {
    const std::string name = family["name"];
    INFO("family " << name);
    auto tmpl = rqat::chat::ChatTemplate::load(dir / name);
    CHECK(std::string(tmpl.format_name()) == family["format"].get<std::string>());
    int compared = 0;
    for (const auto& c : family["cases"]) {
      std::vector<rqat::chat::Message> messages;
      for (const auto& m : c["messages"]) messages.push_back({m["role"], m["content"]});
      rqat::chat::RenderOptions options{c["add_generation_prompt"], c["enable_thinking"]};
      INFO("conversation " << c["messages"].dump() << " generation prompt "
                           << options.add_generation_prompt << " thinking "
                           << options.enable_thinking);
      CHECK(tmpl.render(messages, options) == c["expected"].get<std::string>());
      ++compared;
    }
    std::cout << name << ": " << compared << " renderings identical to transformers ("
              << tmpl.format_name() << ")\n";
  }
}
