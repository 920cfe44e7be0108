#include "harness.h"
#include "gdn.h"
TEST_DEFINE_COUNTERS
int main(void) { CHECK(gdn_version_number() == GDN_VERSION_NUMBER, "version"); return test_summary("smoke"); }
