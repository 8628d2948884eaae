# qccl_default_cuda_architectures(<nvcc> <out-var>)
#
# The default CMAKE_CUDA_ARCHITECTURES for the nvcc at <nvcc>, chosen from its version: real code
# for every architecture that toolkit can build from Turing on, plus PTX for the newest one so
# later GPUs can JIT it.
#   CUDA >= 12.8          75-real 80-real 90-real 100   (Blackwell, sm_100, arrived in 12.8)
#   CUDA 11.8 .. 12.7     75-real 80-real 90            (Hopper, sm_90, arrived in 11.8)
#   CUDA 11.0 .. 11.7     75-real 80
# CUDA 13 dropped Volta and older, so Turing (sm_75) is the oldest target everywhere. It runs
# before enable_language(CUDA), hence nvcc --version rather than CMAKE_CUDA_COMPILER_VERSION.
# Leaves <out-var> empty when the version cannot be read, so enable_language(CUDA) reports the
# compiler problem itself.
function(qccl_default_cuda_architectures nvcc out_var)
  set(${out_var} "" PARENT_SCOPE)
  if(NOT nvcc)
    return()
  endif()
  execute_process(COMMAND "${nvcc}" --version OUTPUT_VARIABLE _out ERROR_QUIET RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0 OR NOT _out MATCHES "release ([0-9]+\\.[0-9]+)")
    message(WARNING "qccl: could not read the CUDA version from '${nvcc} --version'; "
                    "set CMAKE_CUDA_ARCHITECTURES yourself")
    return()
  endif()
  set(_ver ${CMAKE_MATCH_1})
  if(_ver VERSION_GREATER_EQUAL 12.8)
    set(_archs 75-real 80-real 90-real 100)
  elseif(_ver VERSION_GREATER_EQUAL 11.8)
    set(_archs 75-real 80-real 90)
  elseif(_ver VERSION_GREATER_EQUAL 11.0)
    set(_archs 75-real 80)
  else()
    message(FATAL_ERROR "qccl: CUDA ${_ver} at ${nvcc} is too old: the kernels need CUDA 11 or newer "
                        "(C++17 device code); configure with -DQCCL_CUDA=OFF to build without them")
  endif()
  message(STATUS "qccl: CUDA ${_ver}: default CUDA architectures ${_archs}")
  set(${out_var} ${_archs} PARENT_SCOPE)
endfunction()
