# Warnings on for every target the project builds; sanitizers when WF_SANITIZE is set.
function(wf_set_warnings target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unknown-pragmas>
                                           $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra --Werror=all-warnings>)
endfunction()

if(WF_SANITIZE)
  message(STATUS "wallfacer: building with -fsanitize=${WF_SANITIZE}")
  add_compile_options(-fsanitize=${WF_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${WF_SANITIZE})
endif()
