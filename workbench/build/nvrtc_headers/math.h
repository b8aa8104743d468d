#pragma once
namespace std { using ::abs; using ::fabs; using ::sqrt; using ::cbrt; using ::exp; using ::exp2; using ::expm1; using ::log; using ::log2; using ::log10; using ::log1p; using ::pow; using ::sin; using ::cos; using ::tan; using ::asin; using ::acos; using ::atan; using ::atan2; using ::sinh; using ::cosh; using ::tanh; using ::asinh; using ::acosh; using ::atanh; using ::erf; using ::erfc; using ::tgamma; using ::lgamma; using ::floor; using ::ceil; using ::round; using ::trunc; using ::rint; using ::nearbyint; using ::lround; using ::llround; using ::fmod; using ::remainder; using ::fmin; using ::fmax; using ::fma; using ::fdim; using ::hypot; using ::ldexp; using ::frexp; using ::modf; using ::copysign; using ::nextafter; using ::isinf; using ::isnan; using ::isfinite; using ::signbit; using ::scalbn; using ::ilogb; using ::logb; }
#define INFINITY __builtin_bit_cast(float, 0x7f800000u)
#define NAN __builtin_bit_cast(float, 0x7fc00000u)
#define HUGE_VALF INFINITY
#define HUGE_VAL __builtin_bit_cast(double, 0x7ff0000000000000ul)
#define M_E 2.7182818284590452354
#define M_LOG2E 1.4426950408889634074
#define M_LOG10E 0.43429448190325182765
#define M_LN2 0.69314718055994530942
#define M_LN10 2.30258509299404568402
#define M_PI 3.14159265358979323846
#define M_PI_2 1.57079632679489661923
#define M_PI_4 0.78539816339744830962
#define M_1_PI 0.31830988618379067154
#define M_2_PI 0.63661977236758134308
#define M_2_SQRTPI 1.12837916709551257390
#define M_SQRT2 1.41421356237309504880
#define M_SQRT1_2 0.70710678118654752440
