// Parsing an op declaration, and the shape rule (see op_decl.h).
#include "op_decl.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <stdexcept>

namespace workbench {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out(1);
  for (char c : s) {
    if (c == sep) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

bool is_literal(const std::string& token) {
  if (token.empty()) return false;
  for (char c : token)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

[[noreturn]] void bad_decl(const std::string& why, const std::string& line) {
  throw std::invalid_argument("workbench: malformed op declaration (" + why + "): '" + line + "'");
}

}  // namespace

std::string shape_text(const std::vector<int64_t>& shape) {
  std::vector<std::string> parts;
  for (int64_t s : shape) parts.push_back(std::to_string(s));
  return "[" + join(parts, ", ") + "]";
}

DimPattern DimPattern::parse(const std::string& text) {
  DimPattern p;
  p.text = text;
  std::istringstream in(text);
  std::string token;
  while (in >> token) {
    if (token == "...") {
      if (p.ellipsis >= 0) bad_decl("two '...' in one pattern", text);
      p.ellipsis = static_cast<int>(p.tokens.size());
    }
    p.tokens.push_back(token);
    p.literals.push_back(is_literal(token) ? std::stoll(token) : -1);
  }
  if (p.tokens.size() > WB_DECL_MAX_TOKENS) bad_decl("more than " + std::to_string(WB_DECL_MAX_TOKENS) + " dims", text);
  return p;
}

std::string DimPattern::display() const { return "[" + join(tokens, ", ") + "]"; }

bool OpFields::operator==(const OpFields& o) const {
  return op == o.op && forward_schema == o.forward_schema && backward_schema == o.backward_schema &&
         inputs == o.inputs && input_dims == o.input_dims && differentiable == o.differentiable &&
         read_by_backward == o.read_by_backward && outputs == o.outputs && output_dims == o.output_dims &&
         attrs == o.attrs && attr_kinds == o.attr_kinds && attr_min == o.attr_min && attr_max == o.attr_max &&
         attr_finite == o.attr_finite;
}

OpDecl OpDecl::of(const OpFields& f) {
  const size_t n_in = f.inputs.size(), n_out = f.outputs.size(), n_attr = f.attrs.size();
  if (f.input_dims.size() != n_in || f.differentiable.size() != n_in || f.read_by_backward.size() != n_in ||
      f.output_dims.size() != n_out || f.attr_kinds.size() != n_attr || f.attr_min.size() != n_attr ||
      f.attr_max.size() != n_attr || f.attr_finite.size() != n_attr)
    bad_decl("columns of different lengths", f.op);
  if (f.op.empty() || f.forward_schema.empty() || n_in == 0 || n_out == 0)
    bad_decl("needs op, schema, an input and an output", f.op);
  if (n_in + n_out > 8 || n_attr > 8) bad_decl("more than 8 tensors or attributes", f.op);
  OpDecl d;
  d.fields = f;
  for (size_t i = 0; i < n_in; ++i) {
    if (f.differentiable[i]) d.differentiable.push_back(static_cast<int>(i));
    d.inputs.push_back(TensorDecl{f.inputs[i], DimPattern::parse(f.input_dims[i]), f.differentiable[i],
                                  f.read_by_backward[i]});
  }
  for (size_t i = 0; i < n_out; ++i)
    d.outputs.push_back(TensorDecl{f.outputs[i], DimPattern::parse(f.output_dims[i]), false, false});
  for (size_t i = 0; i < n_attr; ++i) {
    AttrDecl a;
    a.name = f.attrs[i];
    a.kind = f.attr_kinds[i];
    if (a.kind != "float" && a.kind != "int" && a.kind != "bool") bad_decl("attribute kind", a.name + " " + a.kind);
    a.has_min = f.attr_min[i].has_value();
    a.has_max = f.attr_max[i].has_value();
    a.min = f.attr_min[i].value_or(0);
    a.max = f.attr_max[i].value_or(0);
    a.finite = f.attr_finite[i];
    d.attrs.push_back(a);
  }
  return d;
}

OpDecl OpDecl::parse(const std::string& text) {
  OpFields f;
  auto bound = [](const std::string& v) { return v == "-" ? std::nullopt : std::optional<double>(std::stod(v)); };
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    const auto c = split(line, '\t');
    if (c[0] == "op" && c.size() == 2) {
      f.op = c[1];
    } else if (c[0] == "schema" && c.size() == 2) {
      f.forward_schema = c[1];
    } else if (c[0] == "backward_schema" && c.size() == 2) {
      f.backward_schema = c[1];
    } else if (c[0] == "input" && c.size() == 5) {
      f.inputs.push_back(c[1]);
      f.input_dims.push_back(c[2]);
      f.differentiable.push_back(c[3] == "1");
      f.read_by_backward.push_back(c[4] == "1");
    } else if (c[0] == "output" && c.size() == 3) {
      f.outputs.push_back(c[1]);
      f.output_dims.push_back(c[2]);
    } else if (c[0] == "attr" && c.size() == 6) {
      f.attrs.push_back(c[1]);
      f.attr_kinds.push_back(c[2]);
      f.attr_min.push_back(bound(c[3]));
      f.attr_max.push_back(bound(c[4]));
      f.attr_finite.push_back(c[5] == "1");
    } else {
      bad_decl("unknown line", line);
    }
  }
  return of(f);
}

const ShapeBinder::Bound* ShapeBinder::find(const std::string& name) const {
  for (const Bound& b : bound_)
    if (b.name == name) return &b;
  return nullptr;
}

std::string ShapeBinder::bind(const std::string& arg, const DimPattern& p, const int64_t* shape, size_t nd) {
  const size_t fixed = p.fixed();
  // Built only for a message: a call that fits builds no text.
  auto got = [&]() {
    return nd == 0 ? std::string("a 0-dim tensor") : "shape " + shape_text(std::vector<int64_t>(shape, shape + nd));
  };
  auto shape_error = [&]() {
    std::vector<std::string> expected, origins;
    std::set<std::string> listed;
    for (size_t i = 0; i < p.tokens.size(); ++i) {
      const std::string& t = p.tokens[i];
      const Bound* b = p.literals[i] >= 0 ? nullptr : find(t);
      if (!b) {
        expected.push_back(t);
      } else {
        for (int64_t v : b->dims) expected.push_back(std::to_string(v));
        if (listed.insert(t).second)
          origins.push_back(t + " = " + (t == "..." ? shape_text(b->dims) : std::to_string(b->dims[0])) + " from " +
                            b->origin);
      }
    }
    return arg + " must have shape [" + join(expected, ", ") + "] (" + p.display() +
           (origins.empty() ? "" : " with " + join(origins, ", ")) + "); got " + got();
  };

  const bool rank_ok = p.ellipsis >= 0 ? nd >= fixed : nd == fixed;
  if (!rank_ok) {
    bool known = false;
    for (size_t i = 0; i < p.tokens.size(); ++i) known = known || p.literals[i] >= 0 || find(p.tokens[i]);
    if (known) return shape_error();
    return arg + " must have " + (p.ellipsis >= 0 ? "at least " : "") + std::to_string(fixed) + " dimension" +
           (fixed == 1 ? "" : "s") + " (" + p.display() + "); got " + got();
  }
  // The names this tensor binds first: (token index, first dim, count), bound once all fit.
  struct Fresh {
    size_t token, first, count;
  };
  Fresh fresh[WB_DECL_MAX_TOKENS];
  size_t n_fresh = 0;
  auto same = [&](const int64_t* a, size_t n, const int64_t* b, size_t m) { return n == m && std::equal(a, a + n, b); };
  size_t d = 0;
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    const size_t first = d, count = static_cast<int>(i) == p.ellipsis ? nd - fixed : 1;
    d += count;
    if (p.literals[i] >= 0) {
      if (shape[first] != p.literals[i]) return shape_error();
      continue;
    }
    if (const Bound* b = find(p.tokens[i])) {
      if (!same(b->dims.data(), b->dims.size(), shape + first, count)) return shape_error();
      continue;
    }
    const Fresh* seen = nullptr;
    for (size_t k = 0; k < n_fresh; ++k)
      if (p.tokens[fresh[k].token] == p.tokens[i]) seen = &fresh[k];
    if (seen) {
      if (!same(shape + seen->first, seen->count, shape + first, count)) return shape_error();
      continue;
    }
    fresh[n_fresh++] = {i, first, count};
  }
  for (size_t k = 0; k < n_fresh; ++k)
    bound_.push_back({p.tokens[fresh[k].token],
                      std::vector<int64_t>(shape + fresh[k].first, shape + fresh[k].first + fresh[k].count), arg});
  return "";
}

std::vector<int64_t> ShapeBinder::shape_of(const DimPattern& p) const {
  std::vector<int64_t> out;
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    if (p.literals[i] >= 0) {
      out.push_back(p.literals[i]);
      continue;
    }
    const Bound* b = find(p.tokens[i]);
    if (!b) throw std::logic_error("workbench: output dim '" + p.tokens[i] + "' is bound by no input");
    out.insert(out.end(), b->dims.begin(), b->dims.end());
  }
  return out;
}

}  // namespace workbench
