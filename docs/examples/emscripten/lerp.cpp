// Linear interpolation exported to JavaScript with embind: LerpModule().lerp(from, to, t).
// Built with the command in README.md; lerp-job.js runs it in a PeerMR job.
#include <emscripten/bind.h>

float lerp(float from, float to, float t) {
    return from + t * (to - from);
}

EMSCRIPTEN_BINDINGS(lerp_module) {
    emscripten::function("lerp", &lerp);
}
