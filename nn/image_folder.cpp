// PNG / JPEG decoding and encoding (libpng's simplified API, libjpeg with its errors and warnings
// turned into ember::Error) and the ImageFolder dataset of nn/image_folder.h.
#include "ember/nn/image_folder.h"

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "ember/ops/ops.h"

#if defined(EMBER_WITH_IMAGE)
#include <jpeglib.h>
#include <png.h>
#endif

namespace ember::data {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void no_image_support(const char* op) {
  EMBER_THROW(bad_param, op,
              ": this Ember was built without image support; install libpng-dev and "
              "libjpeg62-turbo-dev (bash scripts/setup.sh) and rebuild (CMake must find PNG and "
              "JPEG)");
}

#if defined(EMBER_WITH_IMAGE)

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EMBER_CHECK(in.good(), "read_image: cannot open '", path, "'");
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The image as a contiguous uint8 [H, W, C] tensor (C = 1 for [H, W] input), checked for writing.
Tensor writable_image(const Tensor& image, const char* op) {
  EMBER_CHECK(image.defined() && image.dtype() == DType::u8 &&
                  (image.dim() == 2 || (image.dim() == 3 && image.size(2) == 3)),
              op, ": expected a uint8 image [H, W, 3] or [H, W], got ",
              image.defined() ? image.shape_str() + " " + dtype_name(image.dtype()) : "undefined");
  EMBER_CHECK(image.numel() > 0, op, ": the image ", image.shape_str(), " is empty");
  Tensor dense = image.device().is_cpu() ? image : image.cpu();
  return dense.is_contiguous() ? dense : dense.contiguous();
}

// libjpeg reports errors through error_exit, which must not return: it long-jumps back here. Its
// warnings (a truncated file is only a warning, "premature end of JPEG file") are errors too.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  JpegError* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_fail(cinfo);  // a warning: corrupt or truncated data
}

// Decodes into `pixels` (RGB rows); false with `message` set on failure. No object with a
// destructor is created between setjmp and a longjmp to it.
bool decode_jpeg(const std::vector<uint8_t>& bytes, std::vector<uint8_t>& pixels, int64_t& height,
                 int64_t& width, std::string& message) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  err.mgr.emit_message = jpeg_message;
  if (setjmp(err.jump)) {
    message = err.message;
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  height = cinfo.output_height;
  width = cinfo.output_width;
  pixels.resize(size_t(height * width * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels.data() + size_t(cinfo.output_scanline) * size_t(width) * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

bool encode_jpeg(const std::string& path, const uint8_t* data, int64_t height, int64_t width,
                 int channels, int quality, std::string& message) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    message = "cannot open the file for writing";
    return false;
  }
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  if (setjmp(err.jump)) {
    message = err.message;
    jpeg_destroy_compress(&cinfo);
    std::fclose(file);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = JDIMENSION(width);
  cinfo.image_height = JDIMENSION(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        const_cast<uint8_t*>(data) + size_t(cinfo.next_scanline) * size_t(width) * size_t(channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return std::fclose(file) == 0;
}

#endif  // EMBER_WITH_IMAGE

}  // namespace

bool image_support() {
#if defined(EMBER_WITH_IMAGE)
  return true;
#else
  return false;
#endif
}

Tensor read_image(const std::string& path, ImageLayout layout) {
#if defined(EMBER_WITH_IMAGE)
  const std::vector<uint8_t> bytes = read_file(path);
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  const bool png = bytes.size() >= 8 && std::memcmp(bytes.data(), kPng, 8) == 0;
  const bool jpeg = bytes.size() >= 3 && bytes[0] == 0xff && bytes[1] == 0xd8 && bytes[2] == 0xff;
  EMBER_CHECK(png || jpeg, "read_image: '", path,
              "' is neither a PNG nor a JPEG file (its first bytes are no PNG or JPEG signature)");
  std::vector<uint8_t> pixels;
  int64_t height = 0, width = 0;
  if (png) {
    png_image image;
    std::memset(&image, 0, sizeof image);
    image.version = PNG_IMAGE_VERSION;
    bool ok = png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()) != 0;
    if (ok) {
      image.format = PNG_FORMAT_RGB;
      height = image.height;
      width = image.width;
      pixels.resize(PNG_IMAGE_SIZE(image));
      ok = png_image_finish_read(&image, nullptr, pixels.data(), 0, nullptr) != 0;
    }
    const std::string message = image.message;
    png_image_free(&image);
    EMBER_CHECK(ok, "read_image: '", path,
                "' is a malformed or truncated PNG file (libpng: ", message, ")");
  } else {
    std::string message;
    EMBER_CHECK(decode_jpeg(bytes, pixels, height, width, message), "read_image: '", path,
                "' is a malformed or truncated JPEG file (libjpeg: ", message, ")");
  }
  Tensor hwc = empty({height, width, 3}, DType::u8, Device::cpu());
  std::memcpy(hwc.data_ptr(), pixels.data(), size_t(height * width * 3));
  if (layout == ImageLayout::uint8_hwc) return hwc;
  Tensor chw = empty({3, height, width}, DType::f32, Device::cpu());
  float* dst = chw.data<float>();
  const int64_t plane = height * width;
  for (int64_t p = 0; p < plane; ++p)
    for (int64_t c = 0; c < 3; ++c) dst[c * plane + p] = float(pixels[size_t(p * 3 + c)]) / 255.0f;
  return chw;
#else
  (void)path;
  (void)layout;
  no_image_support("read_image");
#endif
}

void write_png(const std::string& path, const Tensor& image) {
#if defined(EMBER_WITH_IMAGE)
  const Tensor dense = writable_image(image, "write_png");
  png_image out;
  std::memset(&out, 0, sizeof out);
  out.version = PNG_IMAGE_VERSION;
  out.width = png_uint_32(dense.size(1));
  out.height = png_uint_32(dense.size(0));
  out.format = dense.dim() == 3 ? PNG_FORMAT_RGB : PNG_FORMAT_GRAY;
  const bool ok = png_image_write_to_file(&out, path.c_str(), 0, dense.data_ptr(), 0, nullptr) != 0;
  const std::string message = out.message;
  png_image_free(&out);
  EMBER_CHECK(ok, "write_png: cannot write '", path, "' (libpng: ", message, ")");
#else
  (void)path;
  (void)image;
  no_image_support("write_png");
#endif
}

void write_jpeg(const std::string& path, const Tensor& image, int quality) {
#if defined(EMBER_WITH_IMAGE)
  EMBER_CHECK(quality >= 1 && quality <= 100, "write_jpeg: quality ", quality,
              " must be in [1, 100]");
  const Tensor dense = writable_image(image, "write_jpeg");
  std::string message;
  EMBER_CHECK(encode_jpeg(path, static_cast<const uint8_t*>(dense.data_ptr()), dense.size(0),
                          dense.size(1), dense.dim() == 3 ? 3 : 1, quality, message),
              "write_jpeg: cannot write '", path, "' (", message, ")");
#else
  (void)path;
  (void)image;
  (void)quality;
  no_image_support("write_jpeg");
#endif
}

// ---- ImageFolder -----------------------------------------------------------------------------

ImageFolder::ImageFolder(const std::string& root, const ImageFolderOptions& options)
    : options_(options) {
  if (!image_support()) no_image_support("ImageFolder");
  std::error_code ec;
  EMBER_CHECK(fs::is_directory(root, ec), "ImageFolder: '", root, "' is not a folder");
  for (const fs::directory_entry& e : fs::directory_iterator(root))
    if (e.is_directory()) classes_.push_back(e.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  EMBER_CHECK(!classes_.empty(), "ImageFolder: '", root,
              "' holds no class folder; expected root/<class>/<image files>");
  auto is_image = [&](const fs::path& p) {
    std::string name = p.filename().string();
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    for (std::string ext : options_.extensions()) {
      std::transform(ext.begin(), ext.end(), ext.begin(),
                     [](unsigned char c) { return char(std::tolower(c)); });
      if (name.size() >= ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
        return true;
    }
    return false;
  };
  for (size_t k = 0; k < classes_.size(); ++k) {
    class_to_idx_[classes_[k]] = int64_t(k);
    std::vector<std::string> files;
    for (const fs::directory_entry& e : fs::recursive_directory_iterator(
             fs::path(root) / classes_[k], fs::directory_options::follow_directory_symlink))
      if (e.is_regular_file() && is_image(e.path())) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    EMBER_CHECK(!files.empty(), "ImageFolder: class folder '",
                (fs::path(root) / classes_[k]).string(), "' holds no image file (extensions ",
                options_.extensions().size(), " given)");
    for (std::string& f : files) samples_.emplace_back(std::move(f), int64_t(k));
  }
}

Example ImageFolder::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(), "ImageFolder::get: index ", index,
              " is out of range [0, ", size(), ")");
  const auto& [path, label] = samples_[size_t(index)];
  Tensor image = read_image(path, options_.layout());
  if (options_.transform()) {
    const Tensor out = options_.transform()(image.unsqueeze(0), uint64_t(index));
    EMBER_CHECK(out.defined() && out.dim() >= 1 && out.size(0) == 1,
                "ImageFolder: the transform must return a batch of one image, got ",
                out.defined() ? out.shape_str() : "undefined");
    image = out.select(0, 0);
  }
  return {image, full({}, double(label), TensorOptions(DType::i64))};
}

}  // namespace ember::data
