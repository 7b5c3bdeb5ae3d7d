# Tokenizer parity with Hugging Face (included from tests/CMakeLists.txt). A CTest fixture first writes
# tokenizer.json files and expected ids with the .venv's tokenizers/transformers; the real Qwen2.5 and
# GPT-2 files come from ../shared/data and are reported as skipped when that directory is absent.
rqat_add_fixture_test(TARGET test_tokenizer_parity SCRIPT python/make_tokenizer_fixtures.py
                      FIXTURE tokenizer_fixtures ENV RQAT_TOKENIZER_FIXTURES
                      SCRIPT_ARGS --data ${PROJECT_SOURCE_DIR}/../shared/data
                      TESTS tokenizer_parity_tiny "[tiny]" tokenizer_parity_qwen2.5 "[qwen2.5]"
                            tokenizer_parity_gpt2 "[gpt2]")
