// Checks that a program outside Ember's tree can include the umbrella header, link ember::ember
// and compute with the public API. Exits non-zero when the answer is wrong.
#include <cmath>
#include <exception>
#include <iostream>

#include "ember/ember.h"

int main() {
  try {
    const ember::Tensor ones = ember::ones({2, 3});
    const double total = (ones * 2).sum().item();
    std::cout << "ember_consumer: (ones({2,3}) * 2).sum() = " << total << "\n";
    if (std::abs(total - 12.0) > 1e-9) {
      std::cerr << "ember_consumer: expected 12\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "ember_consumer: " << e.what() << "\n";
    return 1;
  }
}
