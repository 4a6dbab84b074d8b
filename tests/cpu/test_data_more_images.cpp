// Images on the CPU: PNG and JPEG files written here through libpng / libjpeg (write_png,
// write_jpeg) read back by read_image and ImageFolder (classes, class_to_idx, layouts, truncated
// and malformed files), and the image transforms (ToTensor, Resize, CenterCrop, RandomResizedCrop,
// ColorJitter) on small known images. Skipped when Ember was built without image support.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/data.h"
#include "ember/nn/image_folder.h"
#include "ember/nn/transforms.h"
#include "support/errors.h"
#include "support/temp_dir.h"

using namespace ember;
using ember::testing::contains;
using ember::testing::error_of;
namespace fs = std::filesystem;

namespace {

// A uint8 [h, w, 3] image whose pixel (y, x, c) is (seed + 7y + 3x + 50c) mod 256.
Tensor pattern(int64_t h, int64_t w, int64_t seed = 0) {
  std::vector<double> v;
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < 3; ++c) v.push_back(double((seed + 7 * y + 3 * x + 50 * c) % 256));
  return from_vector(v, {h, w, 3}, TensorOptions(DType::u8));
}

double pixel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector();
  REQUIRE(x.size() == y.size());
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

}  // namespace

TEST_CASE("read_image and write_png / write_jpeg; malformed files name the file") {
  if (!data::image_support()) {
    CHECK(contains(error_of([] { data::read_image("x.png"); }), "libpng-dev"));
    MESSAGE("built without image support: skipped");
    return;
  }
  ember::test::TempDir dir("ember_image_test");
  const Tensor img = pattern(5, 7);
  data::write_png(dir.file("a.png"), img);
  const Tensor back = data::read_image(dir.file("a.png"));
  CHECK(back.dtype() == DType::u8);
  CHECK(back.sizes() == Shape{5, 7, 3});
  CHECK(back.to_vector() == img.to_vector());  // PNG is lossless
  const Tensor chw = data::read_image(dir.file("a.png"), data::ImageLayout::float_chw);
  CHECK(chw.sizes() == Shape{3, 5, 7});
  CHECK(chw.dtype() == DType::f32);
  CHECK(std::abs(chw.select(0, 2).select(0, 1).select(0, 4).item<double>() -
                 double((7 + 12 + 100) % 256) / 255) < 1e-6);
  // Grey PNG -> RGB with equal channels.
  data::write_png(dir.file("g.png"), full({2, 3}, 77, TensorOptions(DType::u8)));
  CHECK(data::read_image(dir.file("g.png")).to_vector() == std::vector<double>(18, 77));

  // JPEG is lossy: a flat image comes back (nearly) exactly, a pattern close.
  data::write_jpeg(dir.file("flat.jpg"), full({8, 8, 3}, 120, TensorOptions(DType::u8)), 95);
  const Tensor flat = data::read_image(dir.file("flat.jpg"));
  CHECK(flat.sizes() == Shape{8, 8, 3});
  CHECK(pixel_diff(flat, full({8, 8, 3}, 120)) <= 2);
  const Tensor smooth = pattern(16, 16).to(DType::f32);
  data::write_jpeg(dir.file("p.jpg"), pattern(16, 16), 100);
  CHECK(pixel_diff(data::read_image(dir.file("p.jpg")).to(DType::f32), smooth) <= 40);

  // Truncated and malformed files: an ember::Error naming the file.
  const std::string png_bytes = ember::test::read_bytes(dir.file("a.png"));
  const std::string cut_png = dir.write("cut.png", png_bytes.substr(0, png_bytes.size() / 2));
  std::string msg = error_of([&] { data::read_image(cut_png); });
  CHECK(contains(msg, "cut.png"));
  CHECK(contains(msg, "PNG"));
  const std::string jpg_bytes = ember::test::read_bytes(dir.file("p.jpg"));
  const std::string cut_jpg = dir.write("cut.jpg", jpg_bytes.substr(0, jpg_bytes.size() / 2));
  msg = error_of([&] { data::read_image(cut_jpg); });
  CHECK(contains(msg, "cut.jpg"));
  CHECK(contains(msg, "JPEG"));
  CHECK(contains(error_of([&] { data::read_image(dir.write("junk.png", "not an image")); }),
                 "junk.png"));
  CHECK(contains(error_of([&] { data::read_image(dir.file("missing.png")); }), "missing.png"));
  CHECK(contains(error_of([&] { data::write_png(dir.file("f.png"), zeros({2, 2, 3})); }), "uint8"));
}

TEST_CASE("ImageFolder: sorted classes, class_to_idx, samples, layouts, loader") {
  if (!data::image_support()) {
    CHECK(contains(error_of([] { data::ImageFolder("nowhere"); }), "rebuild"));
    return;
  }
  ember::test::TempDir dir("ember_image_folder_test");
  for (const char* cls : {"zebra", "ant", "cat"}) fs::create_directories(dir.path / cls);
  fs::create_directories(dir.path / "cat" / "inner");
  data::write_png((dir.path / "zebra" / "b.png").string(), pattern(4, 6, 1));
  data::write_png((dir.path / "zebra" / "a.PNG").string(), pattern(4, 6, 2));
  data::write_jpeg((dir.path / "ant" / "x.jpg").string(), pattern(4, 6, 3));
  data::write_png((dir.path / "cat" / "inner" / "deep.png").string(), pattern(4, 6, 4));
  ember::test::write_bytes((dir.path / "cat" / "notes.txt").string(), "not an image");
  ember::test::write_bytes((dir.path / "stray.png").string(), "outside any class");

  data::ImageFolder folder(dir.path.string());
  CHECK(folder.classes() == std::vector<std::string>{"ant", "cat", "zebra"});
  CHECK(folder.class_to_idx().at("zebra") == 2);
  REQUIRE(folder.size() == 4);
  CHECK(fs::path(folder.samples()[0].first).filename() == "x.jpg");
  CHECK(fs::path(folder.samples()[2].first).filename() == "a.PNG");
  CHECK(folder.samples()[3].second == 2);
  data::Example e = folder.get(3);
  CHECK(e[0].sizes() == Shape{3, 4, 6});
  CHECK(e[0].dtype() == DType::f32);
  CHECK(e[1].dim() == 0);
  CHECK(e[1].item<int64_t>() == 2);
  CHECK(pixel_diff(e[0], data::ToTensor()(pattern(4, 6, 1))) < 1e-6);

  data::ImageFolder raw(dir.path.string(),
                        data::ImageFolderOptions().layout(data::ImageLayout::uint8_hwc));
  CHECK(raw.get(1)[0].sizes() == Shape{4, 6, 3});
  CHECK(raw.get(1)[0].to_vector() == pattern(4, 6, 4).to_vector());

  // A per-image transform bringing images to one size, then a loader.
  data::ImageFolder resized(
      dir.path.string(),
      data::ImageFolderOptions().transform(data::compose({data::Resize(2), data::CenterCrop(2)})));
  data::DataLoader loader(std::make_shared<data::ImageFolder>(resized),
                          data::DataLoaderOptions(3).num_workers(2));
  std::vector<Shape> shapes;
  std::vector<double> labels;
  for (data::Batch& b : loader) {
    shapes.push_back(b[0].sizes());
    for (double l : b[1].to_vector()) labels.push_back(l);
  }
  CHECK(shapes == std::vector<Shape>{{3, 3, 2, 2}, {1, 3, 2, 2}});
  CHECK(labels == std::vector<double>{0, 1, 2, 2});

  // A truncated image fails at get(), naming the file; an empty class fails at construction.
  const std::string deep = (dir.path / "cat" / "inner" / "deep.png").string();
  const std::string bytes = ember::test::read_bytes(deep);
  ember::test::write_bytes(deep, bytes.substr(0, bytes.size() - 20));
  CHECK(contains(error_of([&] { folder.get(1); }), "deep.png"));
  fs::create_directories(dir.path / "empty");
  CHECK(contains(error_of([&] { data::ImageFolder(dir.path.string()); }), "no image file"));
  CHECK(
      contains(error_of([&] { data::ImageFolder((dir.path / "nope").string()); }), "not a folder"));
}

TEST_CASE("image transforms: shapes, values, seeds") {
  // ToTensor: uint8 HWC -> float CHW / 255.
  const Tensor img = pattern(3, 4);
  const Tensor t = data::ToTensor()(img);
  CHECK(t.sizes() == Shape{3, 3, 4});
  CHECK(std::abs(t.select(0, 1).select(0, 2).select(0, 3).item<double>() -
                 double(7 * 2 + 3 * 3 + 50) / 255) < 1e-7);
  CHECK(data::ToTensor()(img.unsqueeze(0)).sizes() == Shape{1, 3, 3, 4});
  CHECK(contains(error_of([&] { data::ToTensor()(zeros({3, 4, 3})); }), "uint8"));

  // Resize: a constant stays constant; shorter side; exact bilinear values on a ramp.
  const Tensor flat = full({2, 3, 5, 8}, 0.3);
  const Tensor r = data::Resize(3)(flat);
  CHECK(r.sizes() == Shape{2, 3, 3, 4});  // 8 * 3 / 5 = 4.8 -> 4
  for (double v : r.to_vector()) CHECK(v == doctest::Approx(0.3).epsilon(1e-7));
  CHECK(data::Resize(3)(full({1, 1, 9, 4}, 1.0)).sizes() == Shape{1, 1, 6, 3});
  CHECK(data::Resize(2, 7)(flat).sizes() == Shape{2, 3, 2, 7});
  // Upsampling 1x2 -> 1x4 (align_corners false): sources -0.25 (clamped 0), 0.25, 0.75, 1.25.
  const Tensor ramp = from_vector({0, 4}, {1, 1, 1, 2});
  CHECK(data::Resize(1, 4)(ramp).to_vector() == std::vector<double>{0, 1, 3, 4});
  // Downsampling 4 -> 2 picks the means of pixel pairs: sources 0.5 and 2.5.
  CHECK(data::Resize(1, 2)(from_vector({0, 2, 4, 6}, {1, 1, 1, 4})).to_vector() ==
        std::vector<double>{1, 5});
  const Tensor ru8 = data::Resize(1, 4)(from_vector({0, 3}, {1, 1, 2}, TensorOptions(DType::u8)));
  CHECK(ru8.dtype() == DType::u8);
  CHECK(ru8.to_vector() == std::vector<double>{0, 1, 2, 3});  // 0.75 -> 1, 2.25 -> 2

  // CenterCrop: indices with round-half-even offsets; zero padding when larger.
  const Tensor grid = arange(30.0).reshape({1, 1, 5, 6});
  // 3x3: top round(1.0) = 1, left round(1.5) = 2.
  CHECK(data::CenterCrop(3)(grid).to_vector() ==
        std::vector<double>{8, 9, 10, 14, 15, 16, 20, 21, 22});
  // 2x3: top round(1.5) = 2, left round(1.5) = 2.
  CHECK(data::CenterCrop(2, 3)(grid).to_vector() == std::vector<double>{14, 15, 16, 20, 21, 22});
  // 2x2 -> 2x... with one row cut: round(0.5) = 0 (ties to even).
  CHECK(data::CenterCrop(1, 2)(arange(4.0).reshape({1, 2, 2})).to_vector() ==
        std::vector<double>{0, 1});
  // Larger than the image: torchvision's padding (left (4-2)//2 = 1, top (3-2)//2 = 0).
  const Tensor padded = data::CenterCrop(3, 4)(arange(4.0).reshape({1, 2, 2}));
  CHECK(padded.sizes() == Shape{1, 3, 4});
  CHECK(padded.to_vector() == std::vector<double>{0, 0, 1, 0, 0, 2, 3, 0, 0, 0, 0, 0});

  // RandomResizedCrop: output size, the window's bounds and area, reproducible per seed.
  data::RandomResizedCrop rrc(4, {0.25, 1.0}, {0.5, 2.0});
  const Tensor batch = data::ToTensor()(stack({pattern(20, 30, 0), pattern(20, 30, 9)}));
  const Tensor a = rrc(batch, 5);
  CHECK(a.sizes() == Shape{2, 3, 4, 4});
  CHECK(a.to_vector() == rrc(batch, 5).to_vector());
  CHECK(a.to_vector() != rrc(batch, 6).to_vector());
  for (uint64_t seed = 0; seed < 50; ++seed) {
    const auto w = rrc.window(20, 30, seed, 1);
    CHECK(w.top >= 0);
    CHECK(w.left >= 0);
    CHECK(w.top + w.height <= 20);
    CHECK(w.left + w.width <= 30);
    const double area = double(w.height * w.width) / 600;
    CHECK(area >= 0.2);
    CHECK(area <= 1.05);
  }
  // Impossible ratios fall back to the central crop clamped to the ratio range.
  data::RandomResizedCrop wide(2, {0.99, 1.0}, {3.0, 4.0});
  const auto fb = wide.window(10, 10, 1, 0);
  CHECK(fb.height == 3);  // round(10 / 3)
  CHECK(fb.width == 10);
  CHECK(fb.top == 3);
  // A constant image stays constant through the crop and the resize.
  for (double v : rrc(full({1, 3, 9, 9}, 0.7), 3).to_vector())
    CHECK(v == doctest::Approx(0.7).epsilon(1e-7));

  // ColorJitter: brightness scales (clamped), saturation 0 -> grey, seeds reproduce.
  const Tensor colours = data::ToTensor()(pattern(4, 4).unsqueeze(0));
  const Tensor j1 = data::ColorJitter(0.5, 0.5, 0.5, 0.2)(colours, 11);
  CHECK(j1.sizes() == colours.sizes());
  CHECK(j1.to_vector() == data::ColorJitter(0.5, 0.5, 0.5, 0.2)(colours, 11).to_vector());
  CHECK(j1.to_vector() != data::ColorJitter(0.5, 0.5, 0.5, 0.2)(colours, 12).to_vector());
  for (double v : j1.to_vector()) {
    CHECK(v >= 0);
    CHECK(v <= 1);
  }
  const Tensor half = full({1, 3, 2, 2}, 0.4);
  const std::vector<double> bright = data::ColorJitter(0.5)(half, 3).to_vector();
  for (double v : bright) CHECK(v == doctest::Approx(bright[0]));
  CHECK(bright[0] >= 0.2 - 1e-6);
  CHECK(bright[0] <= 0.6 + 1e-6);
  // Hue and saturation leave grey pixels alone; hue alone keeps a pixel's max and min.
  // (torchvision's grey weights sum to 0.9999, so saturation moves grey by at most 4e-5).
  for (double v : data::ColorJitter(0, 0, 0.9, 0.5)(half, 4).to_vector())
    CHECK(std::abs(v - 0.4) < 1e-4);
  const Tensor px = from_vector({0.9, 0.2, 0.5}, {1, 3, 1, 1});
  std::vector<double> hued = data::ColorJitter(0, 0, 0, 0.3)(px, 8).to_vector();
  std::sort(hued.begin(), hued.end());
  CHECK(hued[0] == doctest::Approx(0.2));
  CHECK(hued[2] == doctest::Approx(0.9));
  CHECK(contains(error_of([] { data::ColorJitter(0, 0, 0, 0.7); }), "hue"));
}
