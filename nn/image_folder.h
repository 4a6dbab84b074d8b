// Images on disk, as torchvision.io and torchvision.datasets.ImageFolder: PNG decoding through
// libpng and JPEG through libjpeg(-turbo), and a dataset of root/<class>/<image> files. Images are
// decoded to RGB (grey images replicated, alpha dropped) as uint8 [H, W, 3] or float32 [3, H, W] in
// [0, 1]. Image support is optional at build time (CMake finds libpng and libjpeg, then defines
// EMBER_WITH_IMAGE); without it these functions throw an ember::Error saying what to install. A
// malformed or truncated file throws an ember::Error naming the file.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ember/nn/data.h"

namespace ember::data {

// What read_image (and ImageFolder) return an image as.
enum class ImageLayout {
  uint8_hwc,  // uint8 [H, W, 3], as decoded
  float_chw,  // float32 [3, H, W] in [0, 1] (ToTensor's output)
};

// Whether this build decodes images (libpng and libjpeg were found).
bool image_support();

// Decodes a PNG or JPEG file (told apart by its first bytes, not its name).
Tensor read_image(const std::string& path, ImageLayout layout = ImageLayout::uint8_hwc);
// Encodes uint8 [H, W, 3] (or [H, W] grey) as a PNG file, or as a baseline JPEG of `quality`.
void write_png(const std::string& path, const Tensor& image);
void write_jpeg(const std::string& path, const Tensor& image, int quality = 90);

// The options of ImageFolder (torchvision's transform and is_valid_file, in Ember's terms).
struct ImageFolderOptions {
  EMBER_ARG(ImageLayout, layout) = ImageLayout::float_chw;  // how images are decoded
  // File name endings (case-insensitive) that count as images.
  EMBER_ARG(std::vector<std::string>, extensions) = {".png", ".jpg", ".jpeg"};
  // Applied to each decoded image as a batch of one ([1, ...]); its seed is the example index, so
  // use it for deterministic steps (Resize, CenterCrop) that bring images to one size, and put
  // per-epoch augmentation in the DataLoader's transform.
  EMBER_ARG(Transform, transform);
};

// root/<class>/.../<image>: the classes are the sub-folders of root in sorted order, class_to_idx
// maps each to its position, and the samples are every image file below a class folder (walked
// recursively, sorted by path). Example i: {image, label int64 scalar}. Images are decoded on
// get(), so the loader's workers decode in parallel.
class ImageFolder : public Dataset {
 public:
  // Lists root's class folders and their image files (decoding none); errors when root is not a
  // folder, has no class folder, or a class folder holds no image.
  explicit ImageFolder(const std::string& root, const ImageFolderOptions& options = {});
  int64_t size() const override { return int64_t(samples_.size()); }
  Example get(int64_t index) const override;
  // The class names (root's sub-folders), sorted; the label of class k is k.
  const std::vector<std::string>& classes() const { return classes_; }
  // Class name -> label.
  const std::map<std::string, int64_t>& class_to_idx() const { return class_to_idx_; }
  // (path, class index) of every example.
  const std::vector<std::pair<std::string, int64_t>>& samples() const { return samples_; }

 private:
  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::map<std::string, int64_t> class_to_idx_;
  std::vector<std::pair<std::string, int64_t>> samples_;
};

}  // namespace ember::data
