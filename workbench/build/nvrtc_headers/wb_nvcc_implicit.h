#pragma once
#include <stdint.h>
#include <stddef.h>
#include <math.h>
#include <limits.h>
