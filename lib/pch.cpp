// The translation unit that builds the precompiled header pch.h (see lib/CMakeLists.txt).
