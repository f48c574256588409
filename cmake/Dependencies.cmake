# Third-party dependencies. LLVM Support and SQLite are linked statically so the
# binaries that travel to the GPU machine (which has neither) run there unchanged.
# libcuda is never linked: runtime/ loads it at run time. NVRTC is also loaded at
# run time, so only the CUDA toolkit's headers are needed here.

find_package(LLVM 14 REQUIRED CONFIG)
message(STATUS "LLVM ${LLVM_PACKAGE_VERSION} from ${LLVM_DIR}")
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)

# The imported LLVMSupport target drags in libz3.so (only LLVM's SMT solver uses
# it); link the static archives ourselves with what they really need.
add_library(flashjit_llvm INTERFACE)
target_include_directories(flashjit_llvm SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS})
target_compile_definitions(flashjit_llvm INTERFACE ${LLVM_DEFINITIONS})
find_library(FLASHJIT_TINFO NAMES tinfo ncurses REQUIRED)
target_link_libraries(flashjit_llvm INTERFACE
  ${LLVM_LIBRARY_DIR}/libLLVMSupport.a ${LLVM_LIBRARY_DIR}/libLLVMDemangle.a
  ZLIB::ZLIB ${FLASHJIT_TINFO} Threads::Threads ${CMAKE_DL_LIBS} rt m)

# SQLite: prefer the static archive.
find_path(SQLITE3_INCLUDE_DIR sqlite3.h REQUIRED)
find_library(SQLITE3_STATIC NAMES libsqlite3.a sqlite3 REQUIRED)
add_library(flashjit_sqlite INTERFACE)
target_include_directories(flashjit_sqlite SYSTEM INTERFACE ${SQLITE3_INCLUDE_DIR})
target_link_libraries(flashjit_sqlite INTERFACE ${SQLITE3_STATIC} Threads::Threads
                      ${CMAKE_DL_LIBS} m)

# CUDA toolkit headers only (cuda.h, nvrtc.h).
find_path(CUDA_INCLUDE_DIR cuda.h
  HINTS $ENV{CUDA_HOME}/include /usr/local/cuda/include /usr/local/cuda-13.0/include
  REQUIRED)
find_path(NVRTC_INCLUDE_DIR nvrtc.h HINTS ${CUDA_INCLUDE_DIR} REQUIRED)
add_library(flashjit_cuda_headers INTERFACE)
target_include_directories(flashjit_cuda_headers SYSTEM INTERFACE ${CUDA_INCLUDE_DIR}
                           ${NVRTC_INCLUDE_DIR})
find_program(FLASHJIT_NVCC nvcc HINTS $ENV{CUDA_HOME}/bin /usr/local/cuda/bin)

# GoogleTest: the packaged static library, else build it from Debian's sources.
if(FLASHJIT_BUILD_TESTS)
  find_package(GTest QUIET)
  if(NOT GTest_FOUND)
    if(EXISTS /usr/src/googletest/CMakeLists.txt)
      set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
      add_subdirectory(/usr/src/googletest ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
      add_library(GTest::gtest ALIAS gtest)
      add_library(GTest::gtest_main ALIAS gtest_main)
    else()
      message(FATAL_ERROR "GoogleTest not found: run scripts/setup.sh")
    endif()
  endif()
endif()

# Every library in the project: one per module folder, sources listed by the folder.
function(flashjit_module name)
  cmake_parse_arguments(M "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT M_SOURCES)  # a module with no code yet: headers only
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
    target_link_libraries(${name} INTERFACE ${M_DEPS})
    return()
  endif()
  add_library(${name} STATIC ${M_SOURCES})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
  target_link_libraries(${name} PUBLIC ${M_DEPS})
endfunction()
