// fixtures_dir (see fixtures_dir.h): TP_FIXTURES_DIR is defined for this file only
// (tests/CMakeLists.txt).
#include "fixtures_dir.h"

namespace tensorpar::test {

const std::string& fixtures_dir() {
  static const std::string dir = TP_FIXTURES_DIR;
  return dir;
}

}  // namespace tensorpar::test
