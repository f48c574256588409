# Builds the single object of libflashjit.a (run by api/CMakeLists.txt with -P):
#   ld -r       the C API and everything it needs from the archives, one object;
#               --force-group-allocation dissolves COMDAT groups, so no section of
#               ours can be discarded in favour of a user's copy at their link;
#   objcopy     every global symbol but fj_* made local. GNU-unique symbols ('u':
#               function-local statics of inline functions) resist --localize, so
#               they are weakened first.
# Fails if any global symbol other than fj_* is left.
# Inputs: LD, NM, OBJCOPY, OUT, WHOLE (the API archive), ARCHIVES (the rest, ;-list).
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "prelink: ${ARGN} failed (${rc}):\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

set(merged ${OUT}.merged.o)
set(weakened ${OUT}.weak.o)
run(${LD} -r --force-group-allocation -o ${merged} --whole-archive ${WHOLE} --no-whole-archive
    --start-group ${ARCHIVES} --end-group)

run(${NM} ${merged})
string(REGEX MATCHALL "[^\n]* u [^\n]+" unique_lines "${run_output}")
set(unique_names "")
foreach(line ${unique_lines})
  string(REGEX REPLACE ".* u " "" name "${line}")
  string(APPEND unique_names "${name}\n")
endforeach()
file(WRITE ${OUT}.unique.txt "${unique_names}")
run(${OBJCOPY} --weaken-symbols=${OUT}.unique.txt ${merged} ${weakened})
run(${OBJCOPY} --wildcard --keep-global-symbol=fj_* ${weakened} ${OUT})
file(REMOVE ${merged} ${weakened} ${OUT}.unique.txt)

run(${NM} --defined-only -g ${OUT})
string(REGEX MATCHALL "[^\n]+" globals "${run_output}")
foreach(line ${globals})
  if(NOT line MATCHES " fj_[A-Za-z0-9_]+$")
    file(REMOVE ${OUT})
    message(FATAL_ERROR "prelink: a global symbol other than fj_* survived: ${line}")
  endif()
endforeach()
