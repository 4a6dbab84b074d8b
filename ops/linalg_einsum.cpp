// einsum (torch.einsum): the equation is parsed into one label per dim; repeated labels within an
// operand become diagonals, labels that no later operand or the output needs are summed early, and
// the operands are contracted left to right, each pair as one batched matrix product (bmm on the
// GEMM kernel) after a permute/reshape into [batch, free_a, contracted] x [batch, contracted,
// free_b]. "..." stands for the broadcast dims (right-aligned across operands). Differentiable
// through the composition.
#include <algorithm>
#include <array>
#include <optional>

#include "ember/ops/linalg.h"
#include "ember/ops/ops.h"

namespace ember {

namespace {

constexpr int kLetters = 52;  // A-Z then a-z; the ellipsis dims get labels kLetters + i

int letter_label(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return 26 + (c - 'a');
  return -1;
}

std::string label_name(int label) {
  if (label < 26) return std::string(1, char('A' + label));
  if (label < kLetters) return std::string(1, char('a' + label - 26));
  return "...[" + std::to_string(label - kLetters) + "]";
}

// One term of the equation: its letter labels, with -1 where "..." stands.
struct Term {
  std::vector<int> labels;
  bool has_ellipsis = false;
};

Term parse_term(const std::string& eq, const std::string& s) {
  Term t;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '.') {
      EMBER_CHECK(s.compare(i, 3, "...") == 0 && !t.has_ellipsis, "einsum: equation '", eq,
                  "': '.' must come as one '...' per term, got '", s, "'");
      t.has_ellipsis = true;
      t.labels.push_back(-1);
      i += 2;
      continue;
    }
    const int l = letter_label(s[i]);
    EMBER_CHECK(l >= 0, "einsum: equation '", eq, "': subscripts must be letters a-z / A-Z, got '",
                s[i], "'");
    t.labels.push_back(l);
  }
  return t;
}

struct Labeled {
  Tensor t;
  std::vector<int> labels;  // one per dim of t, unique after take_diagonals
};

// Replaces every label that appears twice by the diagonal of its two dims (moved to the end).
void take_diagonals(const std::string& eq, Labeled& x) {
  for (bool again = true; again;) {
    again = false;
    for (size_t i = 0; i < x.labels.size() && !again; ++i)
      for (size_t j = i + 1; j < x.labels.size() && !again; ++j) {
        if (x.labels[i] != x.labels[j]) continue;
        EMBER_CHECK(x.t.size(i) == x.t.size(j), "einsum: equation '", eq, "': subscript ",
                    label_name(x.labels[i]), " is repeated over dims of different sizes ",
                    x.t.size(i), " and ", x.t.size(j), " of an operand of shape ", x.t.shape_str());
        const int l = x.labels[i];
        x.t = x.t.diagonal(0, int64_t(i), int64_t(j));
        x.labels.erase(x.labels.begin() + j);
        x.labels.erase(x.labels.begin() + i);
        x.labels.push_back(l);
        again = true;
      }
  }
}

// Sums the dims of x whose labels `keep` does not list.
void sum_unneeded(Labeled& x, const std::array<bool, 128>& keep) {
  Shape dims;
  std::vector<int> rest;
  for (size_t d = 0; d < x.labels.size(); ++d) {
    if (keep[x.labels[d]])
      rest.push_back(x.labels[d]);
    else
      dims.push_back(int64_t(d));
  }
  if (dims.empty()) return;
  x.t = sum(x.t, dims);
  x.labels = rest;
}

int64_t find_dim(const Labeled& x, int l) {
  auto it = std::find(x.labels.begin(), x.labels.end(), l);
  return it == x.labels.end() ? -1 : int64_t(it - x.labels.begin());
}

// Contracts a and b over their shared labels not in `keep`; shared labels in `keep` are batch
// dims. Sizes of shared labels must agree or be 1 (broadcast).
Labeled contract(const std::string& eq, Labeled a, Labeled b, const std::array<bool, 128>& keep) {
  std::vector<int> batch, contracted, only_a, only_b;
  for (size_t d = 0; d < a.labels.size(); ++d) {
    const int l = a.labels[d];
    const int64_t db = find_dim(b, l);
    if (db < 0) {
      only_a.push_back(l);
      continue;
    }
    const int64_t sa = a.t.size(d), sb = b.t.size(db);
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1, "einsum: equation '", eq, "': subscript ",
                label_name(l), " has size ", sa, " in one operand and ", sb,
                " in another (operand shapes ", a.t.shape_str(), " and ", b.t.shape_str(),
                "); sizes must match or be 1");
    if (sa != sb) {  // broadcast the size-1 side
      if (sa == 1) {
        Shape s = a.t.sizes();
        s[d] = sb;
        a.t = a.t.expand(s);
      } else {
        Shape s = b.t.sizes();
        s[db] = sa;
        b.t = b.t.expand(s);
      }
    }
    (keep[l] ? batch : contracted).push_back(l);
  }
  for (int l : b.labels)
    if (find_dim(a, l) < 0) only_b.push_back(l);
  auto size_of = [](const Labeled& x, const std::vector<int>& ls, Shape* sizes) {
    int64_t n = 1;
    for (int l : ls) {
      const int64_t s = x.t.size(find_dim(x, l));
      if (sizes) sizes->push_back(s);
      n *= s;
    }
    return n;
  };
  auto perm_of = [](const Labeled& x, std::initializer_list<const std::vector<int>*> groups) {
    Shape p;
    for (const auto* g : groups)
      for (int l : *g) p.push_back(find_dim(x, l));
    return p;
  };
  Shape out_shape;
  const int64_t nb = size_of(a, batch, &out_shape);
  const int64_t m = size_of(a, only_a, &out_shape);
  const int64_t n = size_of(b, only_b, &out_shape);
  const int64_t k = size_of(a, contracted, nullptr);
  Tensor lhs = a.t.permute(perm_of(a, {&batch, &only_a, &contracted})).reshape({nb, m, k});
  Tensor rhs = b.t.permute(perm_of(b, {&batch, &contracted, &only_b})).reshape({nb, k, n});
  Labeled r;
  r.t = bmm(lhs, rhs).reshape(out_shape);
  r.labels = batch;
  r.labels.insert(r.labels.end(), only_a.begin(), only_a.end());
  r.labels.insert(r.labels.end(), only_b.begin(), only_b.end());
  return r;
}

}  // namespace

Tensor einsum(const std::string& equation, const std::vector<Tensor>& operands) {
  std::string eq;
  for (char c : equation)
    if (c != ' ') eq += c;
  EMBER_CHECK(!operands.empty(), "einsum: needs at least one operand for '", equation, "'");
  for (const Tensor& t : operands) {
    EMBER_CHECK(t.defined(), "einsum: undefined operand");
    EMBER_CHECK(t.device() == operands[0].device() && t.dtype() == operands[0].dtype(),
                "einsum: operands must share one device and dtype, got ", t.device().str(), " ",
                dtype_name(t.dtype()), " and ", operands[0].device().str(), " ",
                dtype_name(operands[0].dtype()));
  }
  const size_t arrow = eq.find("->");
  EMBER_CHECK(arrow == std::string::npos || eq.find("->", arrow + 2) == std::string::npos,
              "einsum: equation '", equation, "' has more than one '->'");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<Term> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(equation, lhs.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  EMBER_CHECK(terms.size() == operands.size(), "einsum: equation '", equation, "' has ",
              terms.size(), " operand terms but ", operands.size(), " operands were given");

  // Expand "..." into labels kLetters + i, right-aligned over the widest ellipsis.
  std::vector<int64_t> ell_dims(terms.size(), 0);
  int64_t ell_max = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const int64_t letters = int64_t(terms[i].labels.size()) - (terms[i].has_ellipsis ? 1 : 0);
    const int64_t nd = operands[i].dim();
    EMBER_CHECK(terms[i].has_ellipsis ? nd >= letters : nd == letters, "einsum: equation '",
                equation, "': operand ", i, " of shape ", operands[i].shape_str(), " has ", nd,
                " dims but its subscripts name ", letters);
    ell_dims[i] = nd - letters;
    ell_max = std::max(ell_max, ell_dims[i]);
  }
  EMBER_CHECK(ell_max <= 128 - kLetters, "einsum: too many broadcast dims");
  std::vector<Labeled> xs(terms.size());
  std::array<int, 128> count{};
  for (size_t i = 0; i < terms.size(); ++i) {
    xs[i].t = operands[i];
    for (int l : terms[i].labels) {
      if (l >= 0) {
        xs[i].labels.push_back(l);
        continue;
      }
      for (int64_t e = 0; e < ell_dims[i]; ++e)
        xs[i].labels.push_back(kLetters + int(ell_max - ell_dims[i] + e));
    }
    std::array<bool, 128> seen{};
    for (int l : xs[i].labels)
      if (!seen[l]) {
        seen[l] = true;
        ++count[l];
      }
  }

  // The output labels: explicit, or "..." then the letters used once, in alphabetical order.
  std::vector<int> out;
  if (arrow != std::string::npos) {
    Term o = parse_term(equation, eq.substr(arrow + 2));
    std::array<bool, 128> in_out{};
    for (int l : o.labels) {
      if (l < 0) {
        for (int64_t e = 0; e < ell_max; ++e) out.push_back(kLetters + int(e));
        continue;
      }
      EMBER_CHECK(count[l] > 0, "einsum: equation '", equation, "': output subscript ",
                  label_name(l), " does not appear in any operand");
      EMBER_CHECK(!in_out[l], "einsum: equation '", equation, "': output subscript ", label_name(l),
                  " appears more than once");
      in_out[l] = true;
      out.push_back(l);
    }
  } else {
    for (int64_t e = 0; e < ell_max; ++e) out.push_back(kLetters + int(e));
    std::array<int, 128> occurrences{};
    for (const Term& t : terms)
      for (int l : t.labels)
        if (l >= 0) ++occurrences[l];
    for (int l = 0; l < kLetters; ++l)
      if (occurrences[l] == 1) out.push_back(l);
  }

  for (Labeled& x : xs) take_diagonals(equation, x);
  // needed_after[i]: labels used by the output or by an operand after i.
  std::vector<std::array<bool, 128>> needed_after(xs.size());
  std::array<bool, 128> need{};
  for (int l : out) need[l] = true;
  for (size_t i = xs.size(); i-- > 0;) {
    needed_after[i] = need;
    for (int l : xs[i].labels) need[l] = true;
  }
  // Labels only this operand has (and nobody needs) are summed before any product.
  for (size_t i = 0; i < xs.size(); ++i) {
    std::array<bool, 128> keep = needed_after[i];
    for (size_t j = 0; j < xs.size(); ++j)
      if (j != i)
        for (int l : xs[j].labels) keep[l] = true;
    sum_unneeded(xs[i], keep);
  }
  Labeled r = xs[0];
  for (size_t i = 1; i < xs.size(); ++i) {
    sum_unneeded(r, [&] {
      std::array<bool, 128> keep = needed_after[i - 1];
      return keep;
    }());
    r = contract(equation, r, xs[i], needed_after[i]);
  }
  std::array<bool, 128> keep_out{};
  for (int l : out) keep_out[l] = true;
  sum_unneeded(r, keep_out);
  Shape perm;
  for (int l : out) perm.push_back(find_dim(r, l));
  return r.t.permute(perm);
}

}  // namespace ember
