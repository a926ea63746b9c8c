# cmake -P script: install → build README.md's embedding snippet → configure, build and run the consumer
# under mpirun. Fails on the first error.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()

# readme_block(SECTION_TEXT LANGUAGE OUT_VAR): the first ```LANGUAGE fenced block of the text.
function(readme_block text language out_var)
  string(REGEX MATCH "```${language}\n([^`]*)```" block "${text}")
  if(NOT block)
    message(FATAL_ERROR "README.md's \"Embedding wallfacer in your program\" has no ```${language} block: the "
                        "install test builds the snippet users copy from there")
  endif()
  set(${out_var} "${CMAKE_MATCH_1}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WF_SCRATCH})
run(${CMAKE_COMMAND} --install ${WF_BUILD_DIR} --prefix ${WF_SCRATCH}/prefix)

# README.md's snippet exactly as written (its CMakeLists.txt and main.cpp), so the README and the
# installed package cannot drift apart: it sets no C++ standard, the exported target carries it.
file(READ ${WF_README} readme)
string(FIND "${readme}" "\n## Embedding wallfacer in your program" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no section \"## Embedding wallfacer in your program\"")
endif()
math(EXPR start "${start} + 1")
string(SUBSTRING "${readme}" ${start} -1 section)
string(FIND "${section}" "\n## " end)  # the next section, if any
string(SUBSTRING "${section}" 0 ${end} section)
readme_block("${section}" cmake snippet_cmake)
readme_block("${section}" cpp snippet_cpp)
string(REGEX MATCH "add_executable\\(([A-Za-z0-9_]+)" _ "${snippet_cmake}")
set(snippet_exe "${CMAKE_MATCH_1}")
if(NOT snippet_exe)
  message(FATAL_ERROR "README.md's embedding snippet declares no add_executable(NAME ...)")
endif()
file(WRITE ${WF_SCRATCH}/readme/CMakeLists.txt "${snippet_cmake}")
file(WRITE ${WF_SCRATCH}/readme/main.cpp "${snippet_cpp}")
run(${CMAKE_COMMAND} -S ${WF_SCRATCH}/readme -B ${WF_SCRATCH}/readme-build -G ${WF_GENERATOR}
    -DCMAKE_PREFIX_PATH=${WF_SCRATCH}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WF_SCRATCH}/readme-build)
run(${WF_SCRATCH}/readme-build/${snippet_exe})

run(${CMAKE_COMMAND} -S ${WF_CONSUMER_SRC} -B ${WF_SCRATCH}/build -G ${WF_GENERATOR}
    -DCMAKE_PREFIX_PATH=${WF_SCRATCH}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WF_SCRATCH}/build)
run(${WF_MPIEXEC} ${WF_SCRATCH}/build/consumer ${WF_CONSUMER_SRC}/consumer.yaml)
run(${WF_MPIEXEC} ${WF_SCRATCH}/build/consumer ${WF_CONSUMER_SRC}/consumer-tp.yaml)
