# Every third-party dependency is a Debian 12 package (scripts/install-deps.sh installs them).
find_package(fmt REQUIRED)
find_package(spdlog REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Eigen3 3.3 REQUIRED NO_MODULE)
find_package(OpenMP REQUIRED)
find_package(MPI REQUIRED COMPONENTS CXX)
find_package(CLI11 REQUIRED)
# zlib reads gzip-compressed IDX image files, libpng writes sample grids (src/data/).
find_package(ZLIB REQUIRED)
find_package(PNG REQUIRED)

# OpenBLAS: called through cblas directly (see docs/kernels-gemm.md for the measured choice).
find_package(PkgConfig REQUIRED)
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
add_library(BLAS::openblas ALIAS PkgConfig::OPENBLAS)

# oneDNN (Debian's libdnnl-dev): a second f32 GEMM backend that picks its kernels from the CPU
# itself (kernels/cpu/gemm_onednn.cpp); which one runs is measured at run time
# (docs/kernels-gemm.md). Optional: without it the OpenBLAS backend runs everything.
# Found by header and library rather than through dnnl-config.cmake: Debian's config asks for
# OpenCL (its GPU runtime) as a hard requirement, and fails the configure on a machine without
# the OpenCL headers, although the CPU GEMM we call needs none of it.
find_path(DNNL_INCLUDE_DIR dnnl.h)
find_library(DNNL_LIBRARY dnnl)
set(WF_HAVE_ONEDNN OFF)
if(DNNL_INCLUDE_DIR AND DNNL_LIBRARY)
  set(WF_HAVE_ONEDNN ON)
  add_library(DNNL::dnnl SHARED IMPORTED)
  set_target_properties(DNNL::dnnl PROPERTIES IMPORTED_LOCATION ${DNNL_LIBRARY}
                                              INTERFACE_INCLUDE_DIRECTORIES ${DNNL_INCLUDE_DIR})
  message(STATUS "wallfacer: oneDNN ${DNNL_LIBRARY} (GEMM backend)")
else()
  message(STATUS "wallfacer: no oneDNN found (apt-get install libdnnl-dev): OpenBLAS runs every GEMM")
endif()

# CUDA toolkit: optional. AUTO builds the backend when the toolkit is found.
set(WF_HAVE_CUDA OFF)
if(NOT WF_CUDA STREQUAL "OFF")
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS "/usr/local/cuda")
    set(CUDAToolkit_ROOT "/usr/local/cuda")
  endif()
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(WF_HAVE_CUDA ON)
    message(STATUS "wallfacer: CUDA toolkit ${CUDAToolkit_VERSION} (${CUDAToolkit_BIN_DIR})")
    # The kernels (kernels/cuda/*.cu, src/core/cuda/*.cu) are compiled for Ampere and Hopper; a
    # GPU of another generation runs the sm_90 PTX through the driver's JIT.
    set(WF_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures the kernels are compiled for")
    set(CMAKE_CUDA_ARCHITECTURES ${WF_CUDA_ARCHITECTURES})
    if(NOT CMAKE_CUDA_COMPILER)
      set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
    endif()
    if(CCACHE_PROGRAM)
      set(CMAKE_CUDA_COMPILER_LAUNCHER "${CCACHE_PROGRAM}")
    endif()
    enable_language(CUDA)
    # CMake 3.25 (Debian 12's) knows no CUDA20 dialect flag for nvcc 13: without one, a target
    # with CUDA sources and cxx_std_20 fails to generate. The flag is given here, after the
    # compiler check, and CMake passes it once.
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  elseif(WF_CUDA STREQUAL "ON")
    message(FATAL_ERROR "WF_CUDA=ON but no CUDA toolkit was found: set CUDAToolkit_ROOT or use -DWF_CUDA=AUTO")
  else()
    message(STATUS "wallfacer: no CUDA toolkit found, building the CPU backend only")
  endif()
endif()

# NCCL: the GPU collectives and P2P (src/comm/nccl_backend.cpp). Looked for next to the CUDA
# toolkit (the NVIDIA wheels and the CUDA images ship it there) and in the system paths; set
# NCCL_ROOT to point elsewhere. Without it the CUDA build still works, with no NCCL backend:
# wf::comm::make_nccl_backend then throws an error that says so.
set(WF_HAVE_NCCL OFF)
if(WF_HAVE_CUDA)
  find_path(NCCL_INCLUDE_DIR nccl.h
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY nccl
    HINTS ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    set(WF_HAVE_NCCL ON)
    # The define travels with the target, so only code that links NCCL sees WF_HAVE_NCCL=1.
    add_library(NCCL::nccl SHARED IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}"
      INTERFACE_COMPILE_DEFINITIONS "WF_HAVE_NCCL=1"
      INTERFACE_LINK_LIBRARIES CUDA::cudart)
    message(STATUS "wallfacer: NCCL ${NCCL_LIBRARY}")
  else()
    message(STATUS "wallfacer: CUDA without NCCL (set NCCL_ROOT to enable it): no GPU communication backend")
  endif()
endif()

# cuDNN: fused attention beside the project's own kernels (kernels/cuda/cudnn_attention.cpp, through
# its backend C API). Looked for as NCCL is (set CUDNN_ROOT to point elsewhere); without it the
# CUDA build runs its own attention kernels only. WF_CUDNN=OFF leaves it out even when found.
option(WF_CUDNN "Use cuDNN's fused attention where it is found (CUDA builds)" ON)
set(WF_HAVE_CUDNN OFF)
if(WF_HAVE_CUDA AND WF_CUDNN)
  find_path(CUDNN_INCLUDE_DIR cudnn_graph.h
    HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES include)
  find_library(CUDNN_LIBRARY cudnn
    HINTS ${CUDNN_ROOT} $ENV{CUDNN_ROOT} ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES lib lib64)
  if(CUDNN_INCLUDE_DIR AND CUDNN_LIBRARY)
    set(WF_HAVE_CUDNN ON)
    add_library(CUDNN::cudnn SHARED IMPORTED)
    set_target_properties(CUDNN::cudnn PROPERTIES
      IMPORTED_LOCATION "${CUDNN_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}"
      INTERFACE_COMPILE_DEFINITIONS "WF_HAVE_CUDNN=1"
      INTERFACE_LINK_LIBRARIES CUDA::cudart)
    message(STATUS "wallfacer: cuDNN ${CUDNN_LIBRARY}")
  else()
    message(STATUS "wallfacer: CUDA without cuDNN (set CUDNN_ROOT to enable it): the own attention kernels only")
  endif()
endif()
