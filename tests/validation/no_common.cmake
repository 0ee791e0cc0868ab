# Read by CMake right after llama.cpp's project() (CMAKE_PROJECT_llama.cpp_INCLUDE, set by run.sh). llama-cpp-python
# forces the cache entry LLAMA_BUILD_COMMON ON, but its Python package loads only libllama and libggml: a normal
# variable of the same name shadows the cache entry (option() honours it, policy CMP0077), so llama.cpp's common
# library and the cpp-httplib it bundles are not compiled. The validation needs neither.
set(LLAMA_BUILD_COMMON OFF)
