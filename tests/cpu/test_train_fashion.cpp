// End to end on real data (issue #7, item 10, CPU part): a small CNN (two 3x3 conv + ReLU +
// max-pool stages, one linear layer) trains with Adam on the first 5000 Fashion-MNIST training
// images for two epochs and must reach 80% accuracy on the first 1000 test images. Seeded and
// deterministic (shuffle, initialisation and the CPU conv algorithms all are), and sized to run in
// well under a minute on two busy cores. Reads Debian's dataset-fashion-mnist files (installed by
// scripts/setup.sh); skipped with a message when they are absent.
#include <doctest/doctest.h>

#include <filesystem>

#include "ember/ember.h"
#include "ember/nn/data.h"
#include "ember/nn/datasets.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kTrainImages = 5000, kTestImages = 1000, kEpochs = 2, kBatch = 50;
// Normalisation of Fashion-MNIST pixels (the training set's mean and standard deviation).
constexpr double kMean = 0.2860, kStd = 0.3530;

Tensor normalized(const Tensor& images) { return div(sub(images, kMean), kStd); }

// Fraction of `images` whose arg-max logit is the label, evaluated in batches without autograd.
double accuracy(nn::Sequential& net, const Tensor& images, const Tensor& labels) {
  autograd::NoGradGuard no_grad;
  net->eval();
  int64_t correct = 0;
  for (int64_t start = 0; start < images.size(0); start += 250) {
    const int64_t n = std::min<int64_t>(250, images.size(0) - start);
    Tensor predicted = argmax(net->forward(normalized(images.narrow(0, start, n))), 1);
    correct += int64_t(sum(eq(predicted, labels.narrow(0, start, n))).item());
  }
  net->train();
  return double(correct) / double(images.size(0));
}

}  // namespace

TEST_CASE("a small CNN trains on Fashion-MNIST to >= 80% test accuracy (CPU)") {
  const std::string folder = data::default_fashion_mnist_folder();
  if (!fs::exists(fs::path(folder) / "train-images-idx3-ubyte.gz") ||
      !fs::exists(fs::path(folder) / "t10k-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: Fashion-MNIST is not installed in "
            << folder << " (apt-get install dataset-fashion-mnist, as scripts/setup.sh does)");
    return;
  }
  data::MNIST train_set(folder, data::Split::train), test_set(folder, data::Split::test);
  const Tensor train_images = train_set.images().narrow(0, 0, kTrainImages);
  const Tensor train_labels = train_set.targets().narrow(0, 0, kTrainImages);
  const Tensor test_images = test_set.images().narrow(0, 0, kTestImages);
  const Tensor test_labels = test_set.targets().narrow(0, 0, kTestImages);

  manual_seed(2024);
  nn::Sequential net(nn::Conv2d(nn::Conv2dOptions(1, 16, 3).padding(1)), nn::ReLU(),
                     nn::MaxPool2d(2),  // 16 x 14 x 14
                     nn::Conv2d(nn::Conv2dOptions(16, 32, 3).padding(1)), nn::ReLU(),
                     nn::MaxPool2d(2),  // 32 x 7 x 7
                     nn::Flatten(), nn::Linear(32 * 7 * 7, 10));
  optim::Adam opt(net->parameters(), optim::AdamOptions(2e-3));
  auto train =
      std::make_shared<data::TensorDataset>(std::vector<Tensor>{train_images, train_labels});
  data::DataLoader loader(train, data::DataLoaderOptions(kBatch).shuffle(true).seed(7));

  const double before = accuracy(net, test_images, test_labels);
  double first_loss = 0, last_epoch_loss = 0;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    double epoch_loss = 0;
    int64_t steps = 0;
    for (data::Batch& batch : loader) {
      opt.zero_grad();
      Tensor loss = nn::cross_entropy(net->forward(normalized(batch[0])), batch[1]);
      loss.backward();
      opt.step();
      const double value = loss.item();
      if (epoch == 0 && steps == 0) first_loss = value;
      epoch_loss += value;
      ++steps;
    }
    last_epoch_loss = epoch_loss / double(steps);
  }
  const double after = accuracy(net, test_images, test_labels);
  CAPTURE(before);
  CAPTURE(first_loss);
  CAPTURE(last_epoch_loss);
  CAPTURE(after);
  CHECK(before < 0.3);  // an untrained net guesses
  CHECK(last_epoch_loss < 0.5 * first_loss);
  CHECK(after >= 0.80);
}
