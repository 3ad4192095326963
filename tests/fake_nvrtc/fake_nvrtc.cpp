// An NVRTC of another major version, for the test that libkjit refuses one: every entry point
// libkjit binds, with nvrtc.h's prototypes, but nvrtcVersion says 12.9 and nothing compiles.
// Built as libfake_nvrtc.so (not libnvrtc.*, so the test can tell that no real NVRTC was mapped).
#include <nvrtc.h>

extern "C" {

nvrtcResult nvrtcVersion(int *major, int *minor) {
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    *major = 12;
    *minor = 9;
    return NVRTC_SUCCESS;
}

const char *nvrtcGetErrorString(nvrtcResult) { return "fake NVRTC: not a compiler"; }

nvrtcResult nvrtcCreateProgram(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *) {
    return NVRTC_ERROR_INTERNAL_ERROR;
}
nvrtcResult nvrtcDestroyProgram(nvrtcProgram *) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcAddNameExpression(nvrtcProgram, const char *const) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char *const *) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t *) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char *) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetCUBINSize(nvrtcProgram, size_t *) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetCUBIN(nvrtcProgram, char *) { return NVRTC_ERROR_INTERNAL_ERROR; }
nvrtcResult nvrtcGetLoweredName(nvrtcProgram, const char *const, const char **) { return NVRTC_ERROR_INTERNAL_ERROR; }

}  // extern "C"
