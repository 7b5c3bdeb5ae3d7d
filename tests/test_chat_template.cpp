// Chat templates without Python: the placeholder file format, recognition errors and roles.
#include "chat/chat_template.h"
#include "io/json_file.h"
#include "test_util.h"

using rqat::chat::ChatTemplate;
using rqat::test::require_error;
using rqat::test::TempDir;

TEST_CASE("a placeholder template file renders conversations") {
  TempDir dir("chat_custom");
  rqat::test::write_bytes(dir / "t.yaml", R"(prefix: "{bos_token}"
system: "[SYS] {content}\n"
user: "[USER] {content}\n"
assistant: "[BOT] {content}{eos_token}\n"
generation_prompt: "[BOT] "
default_system: "Be brief."
)");
  auto t = ChatTemplate::from_file(dir / "t.yaml", "<s>", "</s>");
  CHECK(t.format() == rqat::chat::Format::kCustom);
  CHECK(t.render({{"user", "hi"}}) == "<s>[SYS] Be brief.\n[USER] hi\n[BOT] ");
  CHECK(t.render({{"system", "S"}, {"user", "q"}, {"assistant", "a"}}, {false, true}) ==
        "<s>[SYS] S\n[USER] q\n[BOT] a</s>\n");
}

TEST_CASE("an override file wins over the directory's template, which may be missing") {
  TempDir dir("chat_override");
  rqat::test::write_bytes(dir / "t.yaml", "user: \"U:{content}\"\nassistant: \"A:{content}\"\n");
  require_error([&] { ChatTemplate::load(dir.path()); },
                {dir.path().string(), "no chat template", "--chat-template"});
  auto t = ChatTemplate::load(dir.path(), dir / "t.yaml");
  CHECK(t.render({{"user", "x"}}, {false, true}) == "U:x");
}

TEST_CASE("template files with mistakes are one-line errors") {
  TempDir dir("chat_bad");
  rqat::test::write_bytes(dir / "a.yaml", "user: \"{content}\"\nasistant: \"{content}\"\n");
  require_error([&] { ChatTemplate::from_file(dir / "a.yaml"); },
                {"a.yaml", "line 2", "'asistant'"});
  rqat::test::write_bytes(dir / "b.yaml", "user: \"no placeholder\"\nassistant: \"{content}\"\n");
  require_error([&] { ChatTemplate::from_file(dir / "b.yaml"); }, {"b.yaml", "{content}"});
  rqat::test::write_bytes(dir / "c.yaml", "user: [1, 2\n");
  require_error([&] { ChatTemplate::from_file(dir / "c.yaml"); }, {"c.yaml", "line"});
  require_error([&] { ChatTemplate::from_file(dir / "missing.yaml"); },
                {"missing.yaml", "cannot open"});
}

TEST_CASE("an unknown Jinja template is an error that says how to give one") {
  require_error(
      [&] { ChatTemplate::recognize("{{ messages }}", "", "", "tok/tokenizer_config.json"); },
      {"tok/tokenizer_config.json", "not a recognized format", "--chat-template"});
}

TEST_CASE("the ChatML default system prompt is read from the template, escapes included") {
  const std::string jinja =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + "
      "messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nPut it in \\\\boxed{}.<|im_end|>\\n' "
      "}}{%- endif %}"
      "<|im_start|><|im_end|>";
  auto t = ChatTemplate::recognize(jinja, "", "<|im_end|>", "x");
  CHECK(t.render({{"user", "q"}}) ==
        "<|im_start|>system\nPut it in \\boxed{}.<|im_end|>\n<|im_start|>user\nq<|im_end|>\n"
        "<|im_start|>assistant\n");
  require_error([&] { t.render({{"tool", "r"}}); }, {"role 'tool'"});
}
