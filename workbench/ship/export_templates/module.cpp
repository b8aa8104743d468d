// The Python module the package imports (<package>._C): empty. Loading it runs the library's static
// registrations (TORCH_LIBRARY in op.cpp), which is all the package needs from it.
#include <Python.h>

extern "C" PyObject* PyInit__C(void) {
  static PyModuleDef module = {PyModuleDef_HEAD_INIT, "_C", "the compiled op: registers it with TORCH_LIBRARY", -1,
                               nullptr};
  return PyModule_Create(&module);
}
