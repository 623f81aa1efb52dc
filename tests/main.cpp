// Catch2 main for dtr_tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
