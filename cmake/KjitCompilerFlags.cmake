# Warnings are errors in the project's own code (never in third-party headers, which come in as
# system headers), and the optional sanitizer build (KJIT_SANITIZE).

function(kjit_project_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wswitch -Wcast-align
    -Wnull-dereference -Werror
    $<$<COMPILE_LANGUAGE:CXX>:-Wold-style-cast -Wnon-virtual-dtor>
    $<$<COMPILE_LANGUAGE:C>:-Wstrict-prototypes>)
endfunction()

if(KJIT_SANITIZE)
  add_compile_options(-fsanitize=${KJIT_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${KJIT_SANITIZE})
endif()
