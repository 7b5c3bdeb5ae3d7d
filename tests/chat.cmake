# Chat templates against transformers' apply_chat_template: Python writes the references first.
set(RQAT_CHAT_FIXTURES ${CMAKE_BINARY_DIR}/chat_fixtures)
add_executable(test_chat_parity test_chat_parity.cpp test_util.cpp $<TARGET_OBJECTS:rqat_catch_main>)
target_link_libraries(test_chat_parity PRIVATE rqat_lib Catch2::Catch2)
target_precompile_headers(test_chat_parity REUSE_FROM rqat_lib)
if(EXISTS "${RQAT_PYTHON}")
  add_test(NAME make_chat_fixtures
           COMMAND ${RQAT_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/make_chat_fixtures.py --out ${RQAT_CHAT_FIXTURES}
                   --data ${PROJECT_SOURCE_DIR}/../shared/data)
  set_tests_properties(make_chat_fixtures PROPERTIES FIXTURES_SETUP chat_fixtures)
  add_test(NAME chat_parity COMMAND test_chat_parity)
  set_tests_properties(chat_parity PROPERTIES FIXTURES_REQUIRED chat_fixtures
                       ENVIRONMENT "RQAT_CHAT_FIXTURES=${RQAT_CHAT_FIXTURES}")
else()
  add_test(NAME chat_parity COMMAND ${CMAKE_COMMAND} -E echo "SKIPPED: no ${RQAT_PYTHON}; run scripts/setup")
  set_tests_properties(chat_parity PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED")
endif()
