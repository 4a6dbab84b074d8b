// Tensor basics: creation, dtypes, views and strides, memory formats, copies, printing.
#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "ember/ember.h"

using namespace ember;

TEST_CASE("factories make the requested shape, dtype and values") {
  CHECK(zeros({2, 3}).to_vector() == std::vector<double>(6, 0.0));
  CHECK(ones({4}, TensorOptions(DType::i32)).to_vector() == std::vector<double>(4, 1.0));
  CHECK(full({2}, 2.5, TensorOptions(DType::bf16)).to_vector() == std::vector<double>{2.5, 2.5});
  CHECK(arange(5).to_vector() == std::vector<double>{0, 1, 2, 3, 4});
  CHECK(arange(1, 2, 0.25).to_vector() == std::vector<double>{1, 1.25, 1.5, 1.75});
  Tensor e = empty({0, 3});
  CHECK(e.numel() == 0);
  CHECK(scalar_tensor(3).dim() == 0);
  CHECK(scalar_tensor(3).item() == 3);
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                  DType::u8, DType::boolean}) {
    Tensor z = ones({3}, TensorOptions(t));
    CHECK(z.dtype() == t);
    CHECK(z.element_size() == element_size(t));
    CHECK(z.sum().item() == 3);
  }
}

TEST_CASE("from_vector round trips and casts with PyTorch's rules") {
  Tensor a = from_vector({1.7, -1.7, 0.0, 300.5}, {4}, TensorOptions(DType::f32));
  CHECK(a.to(DType::i32).to_vector() == std::vector<double>{1, -1, 0, 300});
  CHECK(a.to(DType::boolean).to_vector() == std::vector<double>{1, 1, 0, 1});
  CHECK(from_vector({1.0 / 3}, {1}).to(DType::bf16).item() == doctest::Approx(0.333984375));
  CHECK(from_vector({65520.0}, {1}).to(DType::f16).item() ==
        std::numeric_limits<double>::infinity());
  CHECK(from_vector({1e-8}, {1}).to(DType::f16).item() == doctest::Approx(0.0).epsilon(1e-7));
  CHECK(promote_types(DType::i64, DType::f16) == DType::f16);
  CHECK(promote_types(DType::bf16, DType::f16) == DType::f32);
  CHECK((ones({2}, TensorOptions(DType::i32)) + ones({2}, TensorOptions(DType::f32))).dtype() ==
        DType::f32);
  CHECK((arange(4, TensorOptions(DType::i64)) / 2.0).dtype() == DType::f32);
}

TEST_CASE("views share storage; strides and offsets follow PyTorch") {
  Tensor a = arange(24).reshape({2, 3, 4});
  CHECK(a.strides() == Shape{12, 4, 1});
  Tensor p = a.permute({2, 0, 1});
  CHECK(p.sizes() == Shape{4, 2, 3});
  CHECK(p.strides() == Shape{1, 12, 4});
  CHECK_FALSE(p.is_contiguous());
  CHECK(p.contiguous().is_contiguous());
  CHECK(p.storage() == a.storage());
  Tensor n = a.narrow(2, 1, 2);
  CHECK(n.offset() == 1);
  CHECK(n.to_vector()[0] == 1);
  Tensor s = a.select(1, 2);
  CHECK(s.sizes() == Shape{2, 4});
  CHECK(s.to_vector()[0] == 8);
  Tensor sl = arange(10).slice(0, 1, 9, 3);
  CHECK(sl.to_vector() == std::vector<double>{1, 4, 7});
  Tensor e = arange(3).unsqueeze(1).expand({3, 2});
  CHECK(e.strides() == Shape{1, 0});
  CHECK(e.to_vector() == std::vector<double>{0, 0, 1, 1, 2, 2});
  CHECK(a.transpose(0, 2).sizes() == Shape{4, 3, 2});
  CHECK(a.flatten().sizes() == Shape{24});
  CHECK(a.flatten(1).sizes() == Shape{2, 12});
  CHECK(a.view({6, -1}).sizes() == Shape{6, 4});
  CHECK(a.unsqueeze(-1).squeeze(-1).sizes() == a.sizes());
  CHECK(ones({1, 3, 1}).squeeze().sizes() == Shape{3});
  // A view of a permuted tensor needs a copy: view() refuses, reshape() copies.
  CHECK_THROWS_AS(p.view({24}), Error);
  CHECK(p.reshape({24}).to_vector()[1] == 4);  // p[0][0][1] = a[0][1][0]
  // Writes through a view are seen by the base and bump the shared version.
  uint64_t v = a.version();
  Tensor w = a.select(0, 1);
  w.fill_(-1);
  CHECK(a.to_vector()[12] == -1);
  CHECK(a.version() > v);
}

TEST_CASE("channels_last is a memory format, not a shape") {
  Tensor x = arange(2 * 3 * 4 * 5).reshape({2, 3, 4, 5});
  Tensor cl = x.contiguous(MemoryFormat::channels_last);
  CHECK(cl.sizes() == x.sizes());
  CHECK(cl.strides() == Shape{60, 1, 15, 3});
  CHECK(cl.is_contiguous(MemoryFormat::channels_last));
  CHECK_FALSE(cl.is_contiguous());
  CHECK(cl.suggest_memory_format() == MemoryFormat::channels_last);
  CHECK(cl.to_vector() == x.to_vector());
  // Elementwise ops keep channels_last.
  Tensor y = relu(cl) + 1.0;
  CHECK(y.suggest_memory_format() == MemoryFormat::channels_last);
  CHECK(allclose(y, relu(x) + 1.0));
  CHECK_THROWS_AS(ones({2, 3}).contiguous(MemoryFormat::channels_last), Error);
}

TEST_CASE("cat, stack, split, chunk") {
  Tensor a = arange(6).reshape({2, 3}), b = arange(3).reshape({1, 3});
  Tensor c = cat({a, b}, 0);
  CHECK(c.sizes() == Shape{3, 3});
  CHECK(c.to_vector() == std::vector<double>{0, 1, 2, 3, 4, 5, 0, 1, 2});
  CHECK(cat({a, a}, 1).sizes() == Shape{2, 6});
  CHECK(stack({b, b}, 0).sizes() == Shape{2, 1, 3});
  auto parts = split(arange(7), 3);
  REQUIRE(parts.size() == 3);
  CHECK(parts[2].to_vector() == std::vector<double>{6});
  CHECK(chunk(arange(6), 4).size() == 3);
  CHECK(split_with_sizes(arange(6), {1, 5})[1].numel() == 5);
  CHECK_THROWS_AS(cat({a, ones({2, 2})}, 0), Error);
}

TEST_CASE("copy_ broadcasts and converts; clone copies") {
  Tensor dst = zeros({2, 3}, TensorOptions(DType::f16));
  dst.copy_(arange(3));
  CHECK(dst.to_vector() == std::vector<double>{0, 1, 2, 0, 1, 2});
  Tensor src = arange(4);
  Tensor cl = src.clone();
  cl.fill_(7);
  CHECK(src.to_vector()[0] == 0);
  CHECK(cl.storage() != src.storage());
}

TEST_CASE("tensors print as PyTorch prints them") {
  auto f32 = [](std::vector<double> v) {
    return from_vector(v, {int64_t(v.size())}, TensorOptions(DType::f32));
  };
  std::ostringstream os;
  os << arange(4).reshape({2, 2});
  CHECK(os.str() == "tensor([[0., 1.],\n        [2., 3.]])");
  CHECK(f32({1.5, -2.25}).str() == "tensor([ 1.5000, -2.2500])");
  CHECK(f32({1, NAN, INFINITY, -INFINITY}).str() == "tensor([1., nan, inf, -inf])");
  CHECK(f32({1e-5, 1}).str() == "tensor([1.0000e-05, 1.0000e+00])");
  CHECK(f32({0, 0}).str() == "tensor([0., 0.])");
  CHECK(f32({10, -3}).str() == "tensor([10., -3.])");
  CHECK(full({}, 3.0).str() == "tensor(3.)");
  CHECK(from_vector(std::vector<double>{1, 0}, {2}, TensorOptions(DType::boolean)).str() ==
        "tensor([ True, False])");
  CHECK(from_vector(std::vector<double>{7, -12, 3}, {3}, TensorOptions(DType::i64)).str() ==
        "tensor([  7, -12,   3])");
  CHECK(from_vector(std::vector<double>{1, 2}, {2}, TensorOptions(DType::f64)).str() ==
        "tensor([1., 2.], dtype=float64)");
  CHECK(zeros({0}).str() == "tensor([])");
  CHECK(zeros({0, 3}).str() == "tensor([], size=(0, 3))");
  CHECK(zeros({2, 1, 2}).str() == "tensor([[[0., 0.]],\n\n        [[0., 0.]]])");
  CHECK(f32({1}).set_requires_grad(true).str() == "tensor([1.], requires_grad=True)");
  // Over 1000 elements: the edges of each dim; rows wrap at 80 columns.
  CHECK(arange(5000).str() ==
        "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 4.9970e+03, 4.9980e+03,\n"
        "        4.9990e+03])");
  CHECK((arange(2000).reshape({1000, 2}) + 1000).str() ==
        "tensor([[1000., 1001.],\n        [1002., 1003.],\n        [1004., 1005.],\n"
        "        ...,\n        [2994., 2995.],\n        [2996., 2997.],\n"
        "        [2998., 2999.]])");
  CHECK(Tensor().str() == "Tensor(undefined)");
}

TEST_CASE("random numbers are reproducible from the seed") {
  manual_seed(42);
  Tensor a = rand({100});
  Tensor n1 = randn({1000});
  manual_seed(42);
  Tensor b = rand({100});
  CHECK(a.to_vector() == b.to_vector());
  Tensor c = rand({100});
  CHECK(c.to_vector() != a.to_vector());
  CHECK(mean(n1).item() == doctest::Approx(0).epsilon(0.15));
  Tensor r = randint(3, 7, {500});
  CHECK(amin(r).item() >= 3);
  CHECK(amax(r).item() <= 6);
  Tensor p = randperm(20);
  auto v = p.to_vector();
  std::sort(v.begin(), v.end());
  for (int i = 0; i < 20; ++i) CHECK(v[size_t(i)] == i);
  Tensor bern = bernoulli(zeros({4000}), 0.25);
  CHECK(mean(bern).item() == doctest::Approx(0.25).epsilon(0.1));
}

TEST_CASE("the library's version is the headers' MAJOR.MINOR.PATCH") {
  const Version v = version();
  CHECK(v.major == EMBER_VERSION_MAJOR);
  CHECK(v.minor == EMBER_VERSION_MINOR);
  CHECK(v.patch == EMBER_VERSION_PATCH);
  CHECK(std::string(version_string()) == EMBER_VERSION_STRING);
  CHECK(std::string(version_string()) ==
        std::to_string(v.major) + "." + std::to_string(v.minor) + "." + std::to_string(v.patch));
}
