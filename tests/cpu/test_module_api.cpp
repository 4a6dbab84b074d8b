// The Module API beyond layers: apply (libtorch's pre-order), clone (a deep copy for every layer
// type, containers and user modules), forward pre-hooks and hooks with removable handles,
// ModuleDict, and named_modules / named_children / named_parameters in PyTorch's order (the
// expected names below are what PyTorch prints for the same model, written by hand).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "ember/ember.h"
#include "ember/nn/nn.h"

using namespace ember;

namespace {

template <typename Named>
std::vector<std::string> names_of(const Named& named) {
  std::vector<std::string> out;
  for (auto& entry : named) out.push_back(entry.first);
  return out;
}

// class Inner(nn.Module): fc1 = Linear(4, 4); act = ReLU()
struct InnerImpl : nn::Module {
  InnerImpl() : nn::Module("Inner") {
    fc1 = register_module("fc1", nn::Linear(4, 4));
    act = register_module("act", nn::ReLU());
  }
  Tensor forward(const Tensor& x) { return act(fc1(x)); }
  nn::Linear fc1{nullptr};
  nn::ReLU act{nullptr};
};
EMBER_MODULE(Inner);

// The PyTorch model the expected names come from:
//   class Net(nn.Module):
//     def __init__(self):
//       self.stem = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
//       self.blocks = nn.ModuleList([Inner(), nn.Linear(4, 4)])
//       self.heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})
//       self.tied = self.blocks[1]          # the same module under a second name
struct NetImpl : nn::Module {
  NetImpl() : nn::Module("Net") {
    stem = register_module("stem",
                           nn::Sequential(nn::Conv2d(2, 4, 3), nn::BatchNorm2d(4), nn::ReLU()));
    blocks = register_module("blocks", nn::ModuleList(Inner(), nn::Linear(4, 4)));
    heads = register_module("heads", nn::ModuleDict());
    heads->insert("cls", nn::Linear(4, 2));
    heads->insert("reg", nn::Linear(4, 1));
    tied = register_module("tied", std::static_pointer_cast<nn::LinearImpl>(blocks[1]));
  }
  Tensor forward(const Tensor& x) {
    Tensor h = stem(x).mean({2, 3});
    h = std::static_pointer_cast<InnerImpl>(blocks[0])->forward(h);
    h = tied->forward(h);
    return heads->at<nn::LinearImpl>("cls").forward(h);
  }
  nn::Sequential stem{nullptr};
  nn::ModuleList blocks{nullptr};
  nn::ModuleDict heads{nullptr};
  std::shared_ptr<nn::LinearImpl> tied;
};
EMBER_MODULE(Net);

// A user module whose constructor needs an argument and that has no `options`: clone cannot
// rebuild it unless it overrides clone_instance.
struct WidthOnlyImpl : nn::Module {
  explicit WidthOnlyImpl(int64_t width) : nn::Module("WidthOnly"), width(width) {
    fc = register_module("fc", nn::Linear(width, width));
  }
  Tensor forward(const Tensor& x) { return fc(x); }
  int64_t width;
  nn::Linear fc{nullptr};
};
EMBER_MODULE(WidthOnly);

struct WidthClonableImpl : WidthOnlyImpl {
  using WidthOnlyImpl::WidthOnlyImpl;
  std::shared_ptr<nn::Module> clone_instance() const override {
    return std::make_shared<WidthClonableImpl>(width);
  }
};
EMBER_MODULE(WidthClonable);

// Clone checks shared by every layer type: same type, names, values and flags; new storage (a
// change to the copy leaves the original alone); the same output.
template <typename Holder, typename Run>
void check_clone(const Holder& original, Run run) {
  Holder copy = original.clone();
  REQUIRE(!copy.is_empty());
  CHECK(copy.ptr() != original.ptr());
  CHECK(copy->type_name() == original->type_name());
  CHECK(copy->str() == original->str());
  CHECK(copy->is_training() == original->is_training());
  for (bool params : {true, false}) {
    auto a = params ? original->named_parameters() : original->named_buffers();
    auto b = params ? copy->named_parameters() : copy->named_buffers();
    REQUIRE(names_of(a) == names_of(b));
    for (size_t i = 0; i < a.size(); ++i) {
      CHECK_MESSAGE(!a[i].second.is_same(b[i].second), a[i].first);
      CHECK(a[i].second.requires_grad() == b[i].second.requires_grad());
      CHECK(a[i].second.dtype() == b[i].second.dtype());
      CHECK_MESSAGE(allclose(a[i].second, b[i].second, 0, 0), a[i].first);
    }
  }
  Tensor y_original = run(original), y_copy = run(copy);
  CHECK(allclose(y_original, y_copy, 1e-6, 1e-6));
  // Independence: overwrite every tensor of the copy; the original keeps its values.
  auto before = original->state_dict();
  std::vector<Tensor> saved;
  for (auto& [n, t] : before) saved.push_back(t.clone());
  {
    autograd::NoGradGuard ng;
    for (auto& [n, t] : copy->state_dict()) t.fill_(7);
  }
  for (size_t i = 0; i < before.size(); ++i)
    CHECK_MESSAGE(allclose(before[i].second, saved[i], 0, 0), before[i].first);
}

}  // namespace

TEST_CASE("apply visits this module, then every descendant pre-order (libtorch)") {
  Net net;
  const std::vector<std::string> expected = {
      "",       "stem",      "stem.0",       "stem.1",       "stem.2",
      "blocks", "blocks.0",  "blocks.0.fc1", "blocks.0.act", "blocks.1",
      "heads",  "heads.cls", "heads.reg",    "tied"};
  std::vector<std::string> named;
  net->apply([&](const std::string& name, nn::Module&) { named.push_back(name); });
  CHECK(named == expected);

  std::vector<std::string> types;
  net->apply([&](nn::Module& m) { types.push_back(m.type_name()); });
  CHECK(types == std::vector<std::string>{"Net", "Sequential", "Conv2d", "BatchNorm2d", "ReLU",
                                          "ModuleList", "Inner", "Linear", "ReLU", "Linear",
                                          "ModuleDict", "Linear", "Linear", "Linear"});

  const NetImpl& const_net = *net;
  int count = 0;
  const_net.apply([&](const nn::Module&) { ++count; });
  CHECK(count == 14);

  std::vector<std::string> prefixed;
  net->apply(
      [&](const std::string& name, const std::shared_ptr<nn::Module>& m) {
        prefixed.push_back(name + ":" + m->type_name());
      },
      "model");
  CHECK(prefixed.front() == "model:Net");
  CHECK(prefixed[1] == "model.stem:Sequential");
  CHECK(prefixed.back() == "model.tied:Linear");

  std::vector<const nn::Module*> pointers;
  net->apply([&](const std::shared_ptr<nn::Module>& m) { pointers.push_back(m.get()); });
  CHECK(pointers.front() == net.ptr().get());
  CHECK(pointers.size() == 14);

  // The classic use: re-initialize every Linear.
  net->apply([](nn::Module& m) {
    if (auto* linear = dynamic_cast<nn::LinearImpl*>(&m)) nn::init::constant_(linear->weight, 0.5);
  });
  CHECK(net->heads->at<nn::LinearImpl>("reg").weight.mean().item() == doctest::Approx(0.5));
  CHECK(net->blocks->at<InnerImpl>(0).fc1->weight.mean().item() == doctest::Approx(0.5));
}

TEST_CASE("named_modules, named_children, modules and named_parameters follow PyTorch") {
  Net net;
  // [n for n, _ in Net().named_modules()]
  CHECK(names_of(net->named_modules()) ==
        std::vector<std::string>{"", "stem", "stem.0", "stem.1", "stem.2", "blocks", "blocks.0",
                                 "blocks.0.fc1", "blocks.0.act", "blocks.1", "heads", "heads.cls",
                                 "heads.reg"});
  // named_modules(prefix="net", remove_duplicate=False)
  auto all = net->named_modules("net", true, false);
  CHECK(all.size() == 14);
  CHECK(all.front().first == "net");
  CHECK(all.back().first == "net.tied");
  CHECK(all.back().second.get() == all[9].second.get());
  CHECK(names_of(net->named_modules("", /*include_self=*/false)).front() == "stem");
  CHECK(net->modules().size() == 13);
  CHECK(net->modules(false).size() == 12);
  // [n for n, _ in Net().named_children()]: the memo covers the direct children only, so "tied"
  // (a grandchild's module) is listed; a child registered twice directly is listed once.
  CHECK(names_of(net->named_children()) ==
        std::vector<std::string>{"stem", "blocks", "heads", "tied"});
  CHECK(net->children().size() == 4);
  nn::Module twice("Twice");
  nn::ReLU relu;
  twice.register_module("a", relu);
  twice.register_module("b", relu);
  CHECK(names_of(twice.named_children()) == std::vector<std::string>{"a"});
  CHECK(names_of(twice.named_modules()) == std::vector<std::string>{"", "a"});
  // [n for n, _ in Net().named_parameters()]
  CHECK(names_of(net->named_parameters()) ==
        std::vector<std::string>{"stem.0.weight", "stem.0.bias", "stem.1.weight", "stem.1.bias",
                                 "blocks.0.fc1.weight", "blocks.0.fc1.bias", "blocks.1.weight",
                                 "blocks.1.bias", "heads.cls.weight", "heads.cls.bias",
                                 "heads.reg.weight", "heads.reg.bias"});
  // named_parameters(remove_duplicate=False) adds the tied names at the end.
  auto with_dups = names_of(net->named_parameters(true, false));
  CHECK(with_dups.size() == 14);
  CHECK(with_dups[12] == "tied.weight");
  CHECK(with_dups[13] == "tied.bias");
  CHECK(net->parameters().size() == 12);
  CHECK(names_of(net->named_parameters(false)).empty());
  CHECK(names_of(net->named_buffers()) == std::vector<std::string>{"stem.1.running_mean",
                                                                   "stem.1.running_var",
                                                                   "stem.1.num_batches_tracked"});
  // state_dict keeps every name, as PyTorch's.
  auto state = names_of(net->state_dict());
  CHECK(state.size() == 17);
  CHECK(state.back() == "tied.bias");
  net->load_state_dict(net->state_dict());
  // The forward runs (the tied layer is blocks.1).
  CHECK(net(randn({2, 2, 5, 5})).sizes() == Shape{2, 2});
}

TEST_CASE("clone: every layer type copies deeply and computes the same") {
  manual_seed(3);
  Tensor x2 = randn({3, 4});
  Tensor img = randn({2, 4, 6, 6});
  auto run1 = [&](auto& m) { return m(x2); };
  auto run_img = [&](auto& m) { return m(img); };

  SUBCASE("Linear, Identity, Flatten") {
    nn::Linear lin(nn::LinearOptions(4, 3).bias(true));
    lin->bias.set_requires_grad(false);
    check_clone(lin, run1);
    CHECK(!lin.clone()->bias.requires_grad());
    CHECK(lin.clone()->weight.requires_grad());
    check_clone(nn::Linear(nn::LinearOptions(4, 2).bias(false)), run1);
    check_clone(nn::Identity(), run1);
    check_clone(nn::Flatten(), run_img);
  }
  SUBCASE("convolutions") {
    check_clone(nn::Conv1d(nn::Conv1dOptions(4, 3, 3).padding(1)),
                [&](auto& m) { return m(img.select(3, 0)); });
    check_clone(nn::Conv2d(nn::Conv2dOptions(4, 6, 3).stride(2).groups(2)), run_img);
    check_clone(nn::Conv3d(nn::Conv3dOptions(4, 2, 3).bias(false)), [&](auto& m) {
      return m(img.unsqueeze(2).expand({2, 4, 3, 6, 6}).contiguous());
    });
    check_clone(nn::ConvTranspose2d(nn::ConvTranspose2dOptions(4, 2, 3).stride(2)), run_img);
  }
  SUBCASE("normalization: parameters and running statistics") {
    nn::BatchNorm2d bn(4);
    bn(img);  // moves the running statistics away from their initial values
    bn->eval();
    check_clone(bn, run_img);
    CHECK(!bn.clone()->is_training());
    check_clone(nn::BatchNorm1d(nn::BatchNormOptions(4).affine(false)), run1);
    // A replaced training forward (convert_sync_batchnorm's) stays with the copy.
    nn::BatchNorm2d replaced(4);
    replaced->training_forward = [](const Tensor& x, const Tensor&, const Tensor&, const Tensor&,
                                    const Tensor&, const Tensor&, bool, double,
                                    double) { return x * 0.0; };
    CHECK(replaced.clone()(img).abs().sum().item() == 0);
    check_clone(nn::LayerNorm(nn::LayerNormOptions({4})), run1);
    check_clone(nn::GroupNorm(2, 4), run_img);
  }
  SUBCASE("recurrent layers") {
    Tensor seq = randn({5, 2, 4});
    auto run_rnn = [&](auto& m) { return m->forward(seq).output; };
    check_clone(nn::LSTM(nn::LSTMOptions(4, 3).num_layers(2).bidirectional(true)), run_rnn);
    check_clone(nn::GRU(4, 3), run_rnn);
    check_clone(nn::RNN(nn::RNNOptions(4, 3).nonlinearity(nn::RNNNonlinearity::relu)), run_rnn);
    nn::LSTM lstm(4, 3);
    CHECK(lstm.clone()->flat_weights().size() == lstm->flat_weights().size());
  }
  SUBCASE("embedding, dropout, pooling, activations, losses") {
    nn::Embedding emb(nn::EmbeddingOptions(10, 3).padding_idx(0));
    check_clone(emb, [&](auto& m) { return m(from_vector({0, 3, 9}, {3}, dtype(DType::i64))); });
    nn::Dropout drop(0.3);
    drop->eval();
    check_clone(drop, run1);
    CHECK(drop.clone()->options.p() == 0.3);
    check_clone(nn::MaxPool2d(nn::MaxPool2dOptions(3).stride(2).padding(1)), run_img);
    check_clone(nn::AvgPool2d(2), run_img);
    check_clone(nn::AdaptiveAvgPool2d(1), run_img);
    check_clone(nn::ReLU(), run1);
    check_clone(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.2)), run1);
    check_clone(nn::ELU(), run1);
    check_clone(nn::GELU(), run1);
    check_clone(nn::SiLU(), run1);
    check_clone(nn::Sigmoid(), run1);
    check_clone(nn::Tanh(), run1);
    check_clone(nn::Softmax(1), run1);
    check_clone(nn::LogSoftmax(1), run1);
    Tensor target = randn({3, 4});
    check_clone(nn::MSELoss(), [&](auto& m) { return m(x2, target); });
    check_clone(nn::L1Loss(), [&](auto& m) { return m(x2, target); });
    Tensor classes = from_vector({0, 3, 1}, {3}, dtype(DType::i64));
    check_clone(nn::CrossEntropyLoss(), [&](auto& m) { return m(x2, classes); });
    check_clone(nn::NLLLoss(), [&](auto& m) { return m(log_softmax(x2, 1), classes); });
    check_clone(nn::BCEWithLogitsLoss(), [&](auto& m) { return m(x2, sigmoid(target)); });
  }
  SUBCASE("containers and Functional") {
    check_clone(nn::Sequential(nn::Linear(4, 5), nn::ReLU(), nn::Linear(5, 2)), run1);
    check_clone(nn::Functional([](const Tensor& t) { return t * 2.0; }), run1);
    nn::ModuleList list(nn::Linear(4, 4), nn::Tanh());
    check_clone(list, [&](auto& m) { return m->template at<nn::LinearImpl>(0).forward(x2); });
    CHECK(list.clone()->size() == 2);
    nn::ModuleDict dict;
    dict->insert("a", nn::Linear(4, 2));
    dict->insert("b", nn::BatchNorm1d(4));
    check_clone(dict, [&](auto& m) { return m->template at<nn::LinearImpl>("a").forward(x2); });
    CHECK(dict.clone()->keys() == std::vector<std::string>{"a", "b"});
  }
  SUBCASE("a user module: nested containers, a shared submodule, per-module training flags") {
    Net net;
    net->blocks->ptr(0)->eval();
    net->heads["reg"]->parameters()[0].set_requires_grad(false);
    check_clone(net, [&](auto& m) { return m(img.narrow(1, 0, 2)); });
    Net copy = net.clone();
    CHECK(copy->is_training());
    CHECK(!copy->blocks->ptr(0)->is_training());
    CHECK(copy->blocks->ptr(1)->is_training());
    CHECK(!copy->heads["reg"]->parameters()[0].requires_grad());
    // The copy's members point into the copy's tree (not the original's).
    CHECK(copy->stem.ptr() == copy->named_children()[0].second);
    CHECK(copy->stem.ptr() != net->stem.ptr());
    // Its own tied module is shared inside the copy, as the constructor built it.
    CHECK(copy->tied == copy->blocks->ptr(1));
  }
}

TEST_CASE("clone: device, training mode, gradients, and modules that cannot be rebuilt") {
  nn::Sequential seq(nn::Linear(3, 3), nn::Dropout(0.5));
  seq->eval();
  nn::Sequential on_cpu = seq.clone(Device::cpu());
  CHECK(!on_cpu->is_training());
  CHECK(on_cpu->parameters()[0].device() == Device::cpu());
  CHECK(!on_cpu->parameters()[0].is_same(seq->parameters()[0]));
  // Gradients are not copied (libtorch's clone); the copy trains on its own.
  seq(ones({2, 3})).sum().backward();
  CHECK(seq->parameters()[0].grad().defined());
  nn::Sequential fresh = seq.clone();
  CHECK(!fresh->parameters()[0].grad().defined());
  fresh(ones({2, 3})).sum().backward();
  CHECK(fresh->parameters()[0].grad().defined());

  // Module::clone through a base pointer keeps the dynamic type.
  std::shared_ptr<nn::Module> base = nn::Linear(2, 2).ptr();
  CHECK(std::dynamic_pointer_cast<nn::LinearImpl>(base->clone()) != nullptr);
  // A layer made with make_shared (no holder) clones too.
  auto raw = std::make_shared<nn::Conv2dImpl>(nn::Conv2dOptions(1, 2, 3));
  CHECK(std::dynamic_pointer_cast<nn::Conv2dImpl>(raw->clone())->options.out_channels() == 2);

  // A user module without a default or options constructor: an error that says what to do.
  WidthOnly width_only(3);
  CHECK_THROWS_WITH_AS(width_only.clone(), doctest::Contains("override"), ember::Error);
  CHECK_THROWS_WITH_AS(width_only.clone(), doctest::Contains("clone_instance"), ember::Error);
  // ... and it clones once it overrides clone_instance.
  WidthClonable clonable(3);
  WidthClonable copy = clonable.clone();
  CHECK(copy->width == 3);
  CHECK(allclose(copy(ones({1, 3})), clonable(ones({1, 3}))));
  // A plain Module holding parameters registered after construction.
  auto bag = std::make_shared<nn::Module>("Bag");
  bag->register_parameter("w", ones({2}));
  bag->register_buffer("b", zeros({1}));
  auto bag_copy = bag->clone();
  CHECK(bag_copy->type_name() == "Bag");
  CHECK(names_of(bag_copy->state_dict()) == std::vector<std::string>{"w", "b"});
}

TEST_CASE("forward pre-hooks and hooks: replace input and output, removed by their handle") {
  nn::Linear lin(2, 2);
  {
    autograd::NoGradGuard ng;
    lin->weight.copy_(from_vector({1, 0, 0, 1}, {2, 2}));
    lin->bias.zero_();
  }
  Tensor x = from_vector({1, 2}, {1, 2});
  std::vector<std::string> calls;
  auto pre = lin->register_forward_pre_hook([&](nn::Module& m, const Tensor& in) {
    calls.push_back("pre:" + m.type_name());
    return in * 10.0;  // replaces the input
  });
  auto post = lin->register_forward_hook(
      [&](nn::Module&, const Tensor& in, const Tensor& out) -> std::optional<Tensor> {
        calls.push_back("post:" + std::to_string(in.to_vector()[0]));  // the replaced input
        return out + 1.0;                                              // replaces the output
      });
  auto observe = lin->register_forward_hook(
      [&](nn::Module&, const Tensor&, const Tensor& out) {  // returns void: keeps the output
        calls.push_back("observe:" + std::to_string(out.to_vector()[0]));
      });
  CHECK(lin->has_forward_hooks());
  CHECK(lin(x).to_vector() == std::vector<double>{11, 21});
  CHECK(calls == std::vector<std::string>{"pre:Linear", "post:10.000000", "observe:11.000000"});
  // A direct forward runs no hooks, as m.forward(x) in PyTorch.
  CHECK(lin->forward(x).to_vector() == std::vector<double>{1, 2});
  // Inside a Sequential each step runs its hooks.
  nn::Sequential seq(lin, nn::ReLU());
  CHECK(seq(x).to_vector() == std::vector<double>{11, 21});
  pre.remove();
  CHECK(lin(x).to_vector() == std::vector<double>{2, 3});
  pre.remove();  // a second remove is a no-op
  post.remove();
  CHECK(lin(x).to_vector() == std::vector<double>{1, 2});
  observe.remove();
  CHECK(!lin->has_forward_hooks());
  calls.clear();
  lin(x);
  CHECK(calls.empty());

  // A pre-hook returning nullopt keeps the input; a hook may remove itself while running.
  nn::RemovableHandle self_removing;
  int runs = 0;
  self_removing = lin->register_forward_pre_hook([&](nn::Module&, const Tensor&) {
    ++runs;
    self_removing.remove();
    return std::optional<Tensor>();
  });
  lin(x);
  lin(x);
  CHECK(runs == 1);
  // A handle outliving its module does nothing.
  nn::RemovableHandle orphan;
  {
    nn::ReLU relu;
    orphan = relu->register_forward_hook([](nn::Module&, const Tensor&, const Tensor&) {});
  }
  orphan.remove();
  // Hooks are not copied by clone.
  auto kept = lin->register_forward_hook(
      [](nn::Module&, const Tensor&, const Tensor& out) { return out * 0.0; });
  CHECK(!lin.clone()->has_forward_hooks());
  kept.remove();
  // Hooks run only around the one-tensor forward: another signature through the holder is an
  // error while hooks are registered.
  nn::GRU gru(2, 2);
  CHECK(gru(randn({3, 1, 2})).output.sizes() == Shape{3, 1, 2});
  gru->register_forward_pre_hook([](nn::Module&, const Tensor&) {});
  CHECK_THROWS_WITH_AS(gru(randn({3, 1, 2})), doctest::Contains("hooks"), ember::Error);
}

TEST_CASE("ModuleDict: ordered insert, update, pop, lookup and registration") {
  nn::ModuleDict dict(std::vector<nn::ModuleDictImpl::Item>{{"conv", nn::Conv2d(1, 2, 3).ptr()},
                                                            {"act", nn::ReLU().ptr()}});
  CHECK(dict->size() == 2);
  CHECK(!dict->empty());
  CHECK(dict->keys() == std::vector<std::string>{"conv", "act"});
  CHECK(dict->contains("act"));
  CHECK(!dict->contains("fc"));
  dict->insert("fc", nn::Linear(2, 1));
  CHECK(dict->keys() == std::vector<std::string>{"conv", "act", "fc"});
  CHECK(names_of(dict->named_parameters()) ==
        std::vector<std::string>{"conv.weight", "conv.bias", "fc.weight", "fc.bias"});
  CHECK(dict["fc"]->type_name() == "Linear");
  CHECK(dict->at<nn::LinearImpl>("fc").options.in_features() == 2);
  CHECK_THROWS_WITH_AS(dict["nope"], doctest::Contains("conv, act, fc"), ember::Error);
  CHECK_THROWS_AS(dict->at<nn::Conv2dImpl>("fc"), ember::Error);
  // Setting an existing key replaces the module in place (keeps the position).
  dict->insert("conv", nn::Conv2d(1, 5, 1));
  CHECK(dict->keys() == std::vector<std::string>{"conv", "act", "fc"});
  CHECK(dict->at<nn::Conv2dImpl>("conv").options.out_channels() == 5);
  CHECK(dict->named_parameters()[0].second.sizes() == Shape{5, 1, 1, 1});
  // update appends new keys and replaces existing ones, in order.
  dict->update({{"head", nn::Linear(1, 1).ptr()}, {"act", nn::Tanh().ptr()}});
  CHECK(dict->keys() == std::vector<std::string>{"conv", "act", "fc", "head"});
  CHECK(dict["act"]->type_name() == "Tanh");
  auto popped = dict->pop("fc");
  CHECK(popped->type_name() == "Linear");
  CHECK(dict->keys() == std::vector<std::string>{"conv", "act", "head"});
  CHECK(names_of(dict->named_children()) == std::vector<std::string>{"conv", "act", "head"});
  CHECK_THROWS_AS(dict->pop("fc"), ember::Error);
  std::vector<std::string> iterated;
  for (auto& [key, module] : *dict) iterated.push_back(key + "=" + module->type_name());
  CHECK(iterated == std::vector<std::string>{"conv=Conv2d", "act=Tanh", "head=Linear"});
  CHECK(dict->values().size() == 3);
  CHECK(dict->items()[2].first == "head");
  nn::ModuleDict other;
  other->update(*dict);
  CHECK(other->keys() == dict->keys());
  CHECK_THROWS_AS(dict->insert("a.b", nn::ReLU()), ember::Error);
  CHECK(dict->str().find("(head): Linear") != std::string::npos);
  dict->clear();
  CHECK(dict->empty());
  CHECK(dict->named_children().empty());
  CHECK(dict->parameters().empty());
}

TEST_CASE("replace_module and unregister_module") {
  nn::Sequential seq(nn::Linear(2, 2), nn::ReLU());
  auto& root = static_cast<nn::Module&>(*seq);
  nn::Module holder("Holder");
  holder.register_module("a", nn::Linear(2, 3));
  holder.register_module("b", nn::ReLU());
  holder.replace_module("a", nn::Linear(2, 4).ptr());
  CHECK(names_of(holder.named_parameters()) == std::vector<std::string>{"a.weight", "a.bias"});
  CHECK(holder.named_parameters()[0].second.sizes() == Shape{4, 2});
  holder.unregister_module("b");
  CHECK(names_of(holder.named_children()) == std::vector<std::string>{"a"});
  CHECK_THROWS_AS(holder.unregister_module("b"), ember::Error);
  CHECK_THROWS_AS(holder.replace_module("zz", nn::ReLU().ptr()), ember::Error);
  CHECK(root.children().size() == 2);
}
