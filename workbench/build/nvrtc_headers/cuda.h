#pragma once
// The driver API's types that device code takes (a TMA descriptor); its functions are host code.
typedef unsigned int cuuint32_t; typedef unsigned long cuuint64_t;
typedef struct CUtensorMap_st { alignas(64) cuuint64_t opaque[16]; } CUtensorMap;
typedef int CUresult; typedef int CUtensorMapDataType; typedef int CUtensorMapInterleave;
typedef int CUtensorMapSwizzle; typedef int CUtensorMapL2promotion; typedef int CUtensorMapFloatOOBfill;
