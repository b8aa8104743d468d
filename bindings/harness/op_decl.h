// An op's declaration as the harness receives it from the op's Python spec, and the shape rule that
// checks tensors against it. Plain C++ (no torch), so any front end can check calls the same way.
//
// Dims patterns name each dimension: "... n" is any number of leading dims then n; "m k" exactly
// two. A name bound by one tensor must match wherever it appears again; "..." is one group of
// dims, the same in every tensor that uses it. The messages are word for word those of the
// Python twin (workbench/model/shapes.py), which the fake implementations use; a test holds them equal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace workbench {

constexpr size_t WB_DECL_MAX_TOKENS = 16;  // dims a pattern names (an ellipsis counts one)

struct DimPattern {
  std::string text;                  // "... n"
  std::vector<std::string> tokens;   // {"...", "n"}
  std::vector<int64_t> literals;     // per token: its value where it is a number ("3"), else -1
  int ellipsis = -1;                 // index of "..." in tokens, or -1
  static DimPattern parse(const std::string& text);
  size_t fixed() const { return tokens.size() - (ellipsis >= 0 ? 1 : 0); }
  std::string display() const;       // "[..., n]"
};

struct TensorDecl {
  std::string name;
  DimPattern dims;
  bool differentiable = false;
  bool read_by_backward = true;      // false: the backward needs only its shape
};

struct AttrDecl {
  std::string name;
  std::string kind;                  // "float", "int" or "bool"
  bool has_min = false, has_max = false;
  double min = 0, max = 0;
  bool finite = true;                // floats: NaN and inf are refused
};

// The declaration as data, a column per field (the order of spec.fields() in workbench/model/opspec.py):
// what an in-process front end hands over (the torch harness, the NumPy module), and what parse()
// reads the text form into. Every way in builds its OpDecl through OpDecl::of.
struct OpFields {
  std::string op, forward_schema, backward_schema;  // backward_schema empty: nothing differentiable
  std::vector<std::string> inputs, input_dims;
  std::vector<bool> differentiable, read_by_backward;
  std::vector<std::string> outputs, output_dims;
  std::vector<std::string> attrs, attr_kinds;
  std::vector<std::optional<double>> attr_min, attr_max;
  std::vector<bool> attr_finite;
  bool operator==(const OpFields& o) const;
};

struct OpDecl {
  OpFields fields;                   // as received: op, schemas (and redefinitions compare them)
  std::vector<TensorDecl> inputs, outputs;
  std::vector<AttrDecl> attrs;
  std::vector<int> differentiable;   // indices into inputs

  static OpDecl of(const OpFields& fields);  // checked: invalid_argument names what is wrong
  // The text form, for a byte protocol (the runner's pipe, an exported package's literal): lines
  // of tab-separated fields, read into OpFields:
  //   op NAME | schema FORWARD | backward_schema BACKWARD
  //   input NAME DIMS DIFFERENTIABLE(0/1) READ_BY_BACKWARD(0/1) | output NAME DIMS
  //   attr NAME KIND MIN|- MAX|- FINITE(0/1)
  static OpDecl parse(const std::string& text);
};

// Binds tensor shapes to dims patterns, one tensor after another.
class ShapeBinder {
 public:
  // "" if `shape` fits `pattern` given what earlier tensors bound (and then binds its new names to
  // it), else the message: "bias must have shape [7] ([n] with n = 7 from x); got shape [6]".
  std::string bind(const std::string& arg, const DimPattern& pattern, const int64_t* shape, size_t ndim);
  // The shape a pattern stands for once all its names are bound.
  std::vector<int64_t> shape_of(const DimPattern& pattern) const;

 private:
  // A few names a call: a flat list, no map (a call's check allocates little).
  struct Bound {
    std::string name;            // "n", "..."
    std::vector<int64_t> dims;   // {7}; {4, 7}
    std::string origin;          // "x"
  };
  const Bound* find(const std::string& name) const;
  std::vector<Bound> bound_;
};

std::string shape_text(const std::vector<int64_t>& shape);  // "[4, 7]"

}  // namespace workbench
