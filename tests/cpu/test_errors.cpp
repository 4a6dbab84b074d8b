// Bad input gets an ember::Error with the right status and a message naming the op and shapes.
#include <doctest/doctest.h>

#include "ember/ember.h"

using namespace ember;

namespace {
// Runs f, expects an Error with `status` whose message contains every fragment.
template <typename F>
void expect_error(F f, Status status, std::initializer_list<const char*> fragments) {
  try {
    f();
    FAIL("expected ember::Error");
  } catch (const Error& e) {
    CHECK(e.status() == status);
    for (const char* frag : fragments) {
      CAPTURE(e.what());
      CHECK(std::string(e.what()).find(frag) != std::string::npos);
    }
  }
}
}  // namespace

TEST_CASE("mismatched shapes") {
  expect_error(
      [] {
        (void)(ones({2, 3}) + ones({4}));
      },
      Status::bad_param, {"add", "[2, 3]", "[4]", "broadcast"});
  expect_error(
      [] {
        (void)mm(ones({2, 3}), ones({2, 3}));
      },
      Status::bad_param, {"mm", "[2, 3]", "cannot be multiplied"});
  expect_error([] { (void)ones({6}).view({4, -1}); }, Status::bad_param, {"view", "[4, -1]"});
  expect_error(
      [] {
        (void)linear(ones({2, 3}), ones({4, 5}));
      },
      Status::bad_param, {"linear", "[2, 3]", "[4, 5]"});
  expect_error([] { (void)ones({2}).permute({0, 0}); }, Status::bad_param, {"permute"});
  expect_error([] { (void)sum(ones({2, 3}), {2}); }, Status::bad_param, {"sum", "out of range"});
}

TEST_CASE("unsupported dtypes") {
  expect_error(
      [] {
        (void)mm(ones({2, 2}, TensorOptions(DType::i32)), ones({2, 2}, TensorOptions(DType::i32)));
      },
      Status::bad_param, {"mm", "int32"});
  expect_error([] { (void)mean(ones({2}, TensorOptions(DType::i64))); }, Status::bad_param,
               {"mean", "int64"});
  expect_error(
      [] {
        (void)mm(ones({2, 2}), ones({2, 2}, TensorOptions(DType::f64)));
      },
      Status::bad_param, {"mm", "float32", "float64"});
  expect_error([] { (void)relu(ones({2}, TensorOptions(DType::boolean))); }, Status::not_supported,
               {"relu", "bool"});
}

TEST_CASE("out-of-range indices") {
  Tensor w = ones({4, 3});
  expect_error([&] { (void)index_select(w, 0, from_vector({4}, {1}, TensorOptions(DType::i64))); },
               Status::bad_param, {"index_select", "4"});
  expect_error([&] { (void)embedding(w, from_vector({-1}, {1}, TensorOptions(DType::i64))); },
               Status::bad_param, {"-1"});
  expect_error([&] { (void)index_select(w, 0, ones({1})); }, Status::bad_param, {"int64"});
  expect_error([&] { (void)w.narrow(0, 3, 2); }, Status::bad_param, {"narrow", "out of range"});
}

TEST_CASE("devices") {
  expect_error([] { (void)Device("tpu:0"); }, Status::bad_param, {"tpu"});
  if (!cuda::is_available()) {
    // Without a GPU, asking for one is a clear error, not a crash.
    try {
      (void)ones({2}).to(Device::cuda(0));
      FAIL("expected an error");
    } catch (const Error& e) {
      CHECK((e.status() == Status::bad_param || e.status() == Status::not_supported));
    }
  }
}

TEST_CASE("undefined tensors and item on many elements") {
  expect_error([] { (void)(Tensor() + ones({1})); }, Status::bad_param, {"add", "undefined"});
  expect_error([] { (void)ones({2}).item(); }, Status::bad_param, {"item", "[2]"});
}
