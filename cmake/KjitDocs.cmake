# The API reference: `cmake --build build --target docs` -> build/docs/html/index.html.
# Doxygen documents the public headers only (KJIT_PUBLIC_HEADERS: include/kjit/kjit.h,
# kjit_batch.h, kjit_cache.h; docs/Doxyfile.in) and fails on any warning
# (WARN_AS_ERROR = FAIL_ON_WARNINGS, doxygen 1.9.0 or newer; Debian 12 has 1.9.4), so the target
# is also the check that every public declaration, parameter, return value, field, enumerator
# and macro is documented. ctest runs the same check (tests/CMakeLists.txt: api_docs).
find_package(Doxygen 1.9.0)
if(DOXYGEN_FOUND)
  set(KJIT_DOXYGEN_OUTPUT "${PROJECT_BINARY_DIR}/docs")
  configure_file("${PROJECT_SOURCE_DIR}/docs/Doxyfile.in" "${KJIT_DOXYGEN_OUTPUT}/Doxyfile" @ONLY)
  add_custom_target(docs
    # Start from an empty html/ so pages of removed declarations do not linger.
    COMMAND "${CMAKE_COMMAND}" -E rm -rf "${KJIT_DOXYGEN_OUTPUT}/html"
    COMMAND ${DOXYGEN_EXECUTABLE} "${KJIT_DOXYGEN_OUTPUT}/Doxyfile"
    WORKING_DIRECTORY "${KJIT_DOXYGEN_OUTPUT}"
    DEPENDS ${KJIT_PUBLIC_HEADERS} "${PROJECT_SOURCE_DIR}/docs/Doxyfile.in"
    COMMENT "doxygen: API reference in ${KJIT_DOXYGEN_OUTPUT}/html (fails on any warning)"
    VERBATIM)
else()
  # A target all the same, that says what to do: doxygen installed after this build was
  # configured is only found by configuring again.
  message(STATUS "doxygen 1.9.0 or newer not found: the `docs` target says so (Debian: apt-get install doxygen)")
  add_custom_target(docs
    COMMAND "${CMAKE_COMMAND}" -E echo
      "docs: doxygen 1.9.0 or newer was not found when this build was configured; install it (Debian: apt-get install doxygen), then configure again (cmake -S ${PROJECT_SOURCE_DIR} -B ${PROJECT_BINARY_DIR}) and build the docs target"
    COMMAND "${CMAKE_COMMAND}" -E false
    VERBATIM)
endif()
