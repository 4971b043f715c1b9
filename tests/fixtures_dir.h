// The repository's tests/fixtures directory, for the tests that read fixture files. Its absolute
// path is compiled into fixtures_dir.cpp alone, so that every other test source compiles to the
// same object in any checkout (ccache then shares them between clones of the repository).
#pragma once

#include <string>

namespace tensorpar::test {

// tests/fixtures of the checkout the tests were built from (absolute, no trailing slash).
const std::string& fixtures_dir();

}  // namespace tensorpar::test
