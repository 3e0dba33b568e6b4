# CMake toolchain file of the nncov coverage kit:
#   cmake -DCMAKE_TOOLCHAIN_FILE=<kit>/cmake/nncov-toolchain.cmake [-DNNCOV_MODE=profile] ...
#
# Compiles C and C++ with the kit's wrappers. The NNCOV_* settings (see the kit's
# README) are taken from -D options or, failing that, from the environment at
# configure time, and fixed into the generated build through compiler and linker
# launchers, so that a later `make` or `ninja` without them builds the same way.

get_filename_component(_nncov_kit "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(CMAKE_C_COMPILER "${_nncov_kit}/bin/nncov-cc")
set(CMAKE_CXX_COMPILER "${_nncov_kit}/bin/nncov-c++")

set(_nncov_env)
foreach(_var NNCOV_MODE NNCOV_CC NNCOV_CXX NNCOV_OPT NNCOV_ALLOW NNCOV_ALLOWLIST NNCOV_PROFILE_LIST NNCOV_PREFIX_MAP)
  if(NOT DEFINED ${_var} AND DEFINED ENV{${_var}})
    set(${_var} "$ENV{${_var}}")
  endif()
  if(DEFINED ${_var})
    # try_compile projects read this file again; pass the settings on to them.
    list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ${_var})
    list(APPEND _nncov_env "${_var}=${${_var}}")
  endif()
endforeach()

if(_nncov_env)
  foreach(_lang C CXX)
    set(CMAKE_${_lang}_COMPILER_LAUNCHER env ${_nncov_env})
    set(CMAKE_${_lang}_LINKER_LAUNCHER env ${_nncov_env})
  endforeach()
endif()
