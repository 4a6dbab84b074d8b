// examples/common: the --help layout of the example programs and ember-launch (CLI11). Each option
// shows its value type and, after its description, its default ("(default: 0.1)"), taken from the
// variable it is bound to; flags show neither a type nor CLI11's "{false}" value marks.
// Call use_help_format(app) before adding options: defaults are captured as options are added.
#pragma once
#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace ember::examples {

class HelpFormatter : public CLI::Formatter {
 public:
  // "--no-augment{false}" -> "--no-augment": the {value} a flag stores is noise to a reader.
  std::string make_option_name(const CLI::Option* opt, bool positional) const override {
    const std::string name = CLI::Formatter::make_option_name(opt, positional);
    std::string out;
    int depth = 0;
    for (char ch : name) {
      if (ch == '{')
        ++depth;
      else if (ch == '}')
        --depth;
      else if (depth == 0)
        out += ch;
    }
    return out;
  }
  // The value's type only ("FLOAT"); the default moves to the description.
  std::string make_option_opts(const CLI::Option* opt) const override {
    std::string out;
    if (opt->get_type_size() != 0 && !opt->get_type_name().empty())
      out += " " + get_label(opt->get_type_name());
    if (opt->get_required()) out += " " + get_label("REQUIRED");
    return out;
  }
  std::string make_option_desc(const CLI::Option* opt) const override {
    std::string desc = opt->get_description();
    if (opt->get_type_size() != 0 && !opt->get_default_str().empty())
      desc += (desc.empty() ? "" : " ") + std::string("(default: ") + opt->get_default_str() + ")";
    return desc;
  }
};

inline void use_help_format(CLI::App& app) {
  auto f = std::make_shared<HelpFormatter>();
  f->column_width(26);
  app.formatter(f);
  app.option_defaults()->always_capture_default();
}

}  // namespace ember::examples
