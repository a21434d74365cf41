# fabric-bench: included after each project() (see toolchain-cxx20.cmake).
# Compiler detection has already set these; we override what "C++14" expands to.
set(CMAKE_CXX14_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CXX14_EXTENSION_COMPILE_OPTION "-std=gnu++20")
