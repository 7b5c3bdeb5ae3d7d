# Generation parity with transformers (included by tests/CMakeLists.txt): a CTest fixture first writes
# tiny models and transformers' greedy generations; test_generation itself is picked up by the glob.
rqat_add_fixture_test(TARGET test_generation_parity SCRIPT python/make_generation_fixtures.py
                      FIXTURE generation_fixtures ENV RQAT_GENERATION_FIXTURES
                      TESTS generation_parity_qwen2 "[qwen2]" generation_parity_qwen3 "[qwen3]"
                            generation_parity_llama "[llama]")
