# fabric-bench: CMake toolchain file for building Horovod 0.28.1 against torch >= 2.14.
#
# Horovod 0.28.1 asks CMake for C++14 (its own code, torch extension, bundled gloo),
# but torch >= 2.1 headers need C++17 and torch 2.14 needs C++20. Changing only the
# torch part breaks the link (gloo::rendezvous::Store::kDefaultTimeout is defined
# twice when gloo and the extension disagree on the standard), so we make every
# "C++14" request mean C++20, in every project() Horovod configures.
set(CMAKE_PROJECT_INCLUDE "${CMAKE_CURRENT_LIST_DIR}/cxx14-means-cxx20.cmake")
