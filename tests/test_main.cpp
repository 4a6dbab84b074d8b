// The doctest main shared by Ember's test executables (cpu, cuda, distributed): compiled once and
// linked into each, so that test files hold only TEST_CASEs.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
