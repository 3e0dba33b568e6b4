// Third-party code: compiled plainly (outside the src/ allowlist), so it has no counters.
extern "C" int tree_dep_clamp(int x) { return x < -10 ? -10 : x; }
