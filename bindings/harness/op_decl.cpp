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
    p.literals.push_back(is_literal(token) ? std::stoll(token) : -1);
  }
  if (p.tokens.size() > WB_DECL_MAX_TOKENS) bad_decl("more than " + std::to_string(WB_DECL_MAX_TOKENS) + " dims", text);
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

const ShapeBinder::Bound* ShapeBinder::find(const std::string& name) const {
  for (const Bound& b : bound_)
    if (b.name == name) return &b;
  return nullptr;
}

std::string ShapeBinder::bind(const std::string& arg, const DimPattern& p, const std::vector<int64_t>& shape) {
  return bind(arg, p, shape.data(), shape.size());
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
