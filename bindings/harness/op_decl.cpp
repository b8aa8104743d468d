// Parsing an op declaration, and the shape rule (see op_decl.h).
#include "op_decl.h"

#include <cctype>
#include <set>
#include <sstream>
#include <stdexcept>

namespace workbench {
namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
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
  }
  return p;
}

std::string DimPattern::display() const { return "[" + join(tokens, ", ") + "]"; }

OpDecl OpDecl::parse(const std::string& text) {
  OpDecl d;
  d.text = text;
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    const auto f = split(line, '\t');
    if (f[0] == "op" && f.size() == 2) {
      d.op = f[1];
    } else if (f[0] == "schema" && f.size() == 2) {
      d.forward_schema = f[1];
    } else if (f[0] == "backward_schema" && f.size() == 2) {
      d.backward_schema = f[1];
    } else if (f[0] == "input" && f.size() == 5) {
      TensorDecl t{f[1], DimPattern::parse(f[2]), f[3] == "1", f[4] == "1"};
      if (t.differentiable) d.differentiable.push_back(static_cast<int>(d.inputs.size()));
      d.inputs.push_back(t);
    } else if (f[0] == "output" && f.size() == 3) {
      d.outputs.push_back(TensorDecl{f[1], DimPattern::parse(f[2]), false, false});
    } else if (f[0] == "attr" && f.size() == 6) {
      AttrDecl a;
      a.name = f[1];
      a.kind = f[2];
      if (a.kind != "float" && a.kind != "int" && a.kind != "bool") bad_decl("attribute kind", line);
      a.has_min = f[3] != "-";
      a.has_max = f[4] != "-";
      if (a.has_min) a.min = std::stod(f[3]);
      if (a.has_max) a.max = std::stod(f[4]);
      a.finite = f[5] == "1";
      d.attrs.push_back(a);
    } else {
      bad_decl("unknown line", line);
    }
  }
  if (d.op.empty() || d.forward_schema.empty() || d.inputs.empty() || d.outputs.empty())
    bad_decl("needs op, schema, an input and an output", text);
  if (d.inputs.size() + d.outputs.size() > 8 || d.attrs.size() > 8)
    bad_decl("more than 8 tensors or attributes", text);
  return d;
}

std::string ShapeBinder::bind(const std::string& arg, const DimPattern& p, const std::vector<int64_t>& shape) {
  const size_t nd = shape.size(), fixed = p.fixed();
  bool known = false;
  for (const auto& t : p.tokens) known = known || is_literal(t) || values_.count(t);
  // Built only for a message: a call that fits builds no text.
  auto got = [&]() { return nd == 0 ? std::string("a 0-dim tensor") : "shape " + shape_text(shape); };

  auto shape_error = [&]() {
    std::vector<std::string> expected, origins;
    std::set<std::string> listed;
    for (const auto& t : p.tokens) {
      const auto it = values_.find(t);
      if (is_literal(t)) {
        expected.push_back(t);
      } else if (it == values_.end()) {
        expected.push_back(t);
      } else {
        for (int64_t v : it->second) expected.push_back(std::to_string(v));
        if (listed.insert(t).second)
          origins.push_back(t + " = " + (t == "..." ? shape_text(it->second) : std::to_string(it->second[0])) +
                            " from " + origin_.at(t));
      }
    }
    return arg + " must have shape [" + join(expected, ", ") + "] (" + p.display() +
           (origins.empty() ? "" : " with " + join(origins, ", ")) + "); got " + got();
  };

  const bool rank_ok = p.ellipsis >= 0 ? nd >= fixed : nd == fixed;
  if (!rank_ok) {
    if (known) return shape_error();
    return arg + " must have " + (p.ellipsis >= 0 ? "at least " : "") + std::to_string(fixed) + " dimension" +
           (fixed == 1 ? "" : "s") + " (" + p.display() + "); got " + got();
  }
  std::map<std::string, std::vector<int64_t>> fresh;
  size_t d = 0;
  for (size_t i = 0; i < p.tokens.size(); ++i) {
    const std::string& t = p.tokens[i];
    std::vector<int64_t> v;
    if (static_cast<int>(i) == p.ellipsis) {
      const size_t n = nd - fixed;
      v.assign(shape.begin() + d, shape.begin() + d + n);
      d += n;
    } else {
      v = {shape[d++]};
    }
    if (is_literal(t)) {
      if (v[0] != std::stoll(t)) return shape_error();
      continue;
    }
    const auto bound = values_.find(t);
    if (bound != values_.end()) {
      if (bound->second != v) return shape_error();
      continue;
    }
    const auto seen = fresh.find(t);
    if (seen != fresh.end() && seen->second != v) return shape_error();
    fresh[t] = v;
  }
  for (const auto& kv : fresh) {
    values_[kv.first] = kv.second;
    origin_[kv.first] = arg;
  }
  return "";
}

std::vector<int64_t> ShapeBinder::shape_of(const DimPattern& p) const {
  std::vector<int64_t> out;
  for (const auto& t : p.tokens) {
    if (is_literal(t)) {
      out.push_back(std::stoll(t));
      continue;
    }
    const auto it = values_.find(t);
    if (it == values_.end()) throw std::logic_error("workbench: output dim '" + t + "' is bound by no input");
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
  return out;
}

}  // namespace workbench
