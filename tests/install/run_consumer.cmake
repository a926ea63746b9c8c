# cmake -P script: install → configure consumer → build → run under mpirun. Fails on the first error.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGV}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()

file(REMOVE_RECURSE ${WF_SCRATCH})
run(${CMAKE_COMMAND} --install ${WF_BUILD_DIR} --prefix ${WF_SCRATCH}/prefix)
run(${CMAKE_COMMAND} -S ${WF_CONSUMER_SRC} -B ${WF_SCRATCH}/build -G ${WF_GENERATOR}
    -DCMAKE_PREFIX_PATH=${WF_SCRATCH}/prefix -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WF_SCRATCH}/build)
run(${WF_MPIEXEC} ${WF_SCRATCH}/build/consumer ${WF_CONSUMER_SRC}/consumer.yaml)
run(${WF_MPIEXEC} ${WF_SCRATCH}/build/consumer ${WF_CONSUMER_SRC}/consumer-tp.yaml)
