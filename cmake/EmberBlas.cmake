# OpenBLAS for the CPU backend's GEMMs (cpu_kernels/gemm.h). Defines the imported target
# ember_openblas and sets EMBER_HAS_BLAS when the library and its cblas.h (with the OpenBLAS
# thread-count functions) are found; otherwise the CPU GEMMs run on Eigen. Found through
# pkg-config first (Debian's libopenblas-dev ships openblas.pc pointing at the variant chosen by
# update-alternatives), then CMake's FindBLAS with BLA_VENDOR=OpenBLAS plus a search for the header.
set(EMBER_HAS_BLAS OFF)
if(EMBER_WITH_BLAS)
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(EMBER_OPENBLAS QUIET IMPORTED_TARGET GLOBAL openblas)
  endif()
  if(EMBER_OPENBLAS_FOUND)
    add_library(ember_openblas INTERFACE IMPORTED)
    target_link_libraries(ember_openblas INTERFACE PkgConfig::EMBER_OPENBLAS)
    set(EMBER_HAS_BLAS ON)
  else()
    set(BLA_VENDOR OpenBLAS)
    find_package(BLAS QUIET)
    find_path(EMBER_OPENBLAS_INCLUDE_DIR cblas.h
              PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread
                            x86_64-linux-gnu/openblas-openmp x86_64-linux-gnu/openblas-serial)
    if(BLAS_FOUND AND EMBER_OPENBLAS_INCLUDE_DIR)
      add_library(ember_openblas INTERFACE IMPORTED)
      target_include_directories(ember_openblas INTERFACE ${EMBER_OPENBLAS_INCLUDE_DIR})
      target_link_libraries(ember_openblas INTERFACE ${BLAS_LIBRARIES})
      set(EMBER_HAS_BLAS ON)
    endif()
  endif()
  if(NOT EMBER_HAS_BLAS)
    message(STATUS "ember: OpenBLAS not found (install libopenblas-dev, or configure with "
                   "-DEMBER_WITH_BLAS=OFF to silence this); CPU GEMMs use Eigen")
  endif()
endif()
message(STATUS "ember: OpenBLAS GEMM ${EMBER_HAS_BLAS}")
