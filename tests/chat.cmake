# Chat templates against transformers' apply_chat_template: Python writes the references first.
rqat_add_fixture_test(TARGET test_chat_parity SCRIPT python/make_chat_fixtures.py FIXTURE chat_fixtures
                      ENV RQAT_CHAT_FIXTURES SCRIPT_ARGS --data ${PROJECT_SOURCE_DIR}/../shared/data
                      TESTS chat_parity -)
