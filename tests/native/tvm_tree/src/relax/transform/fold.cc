extern "C" int tree_runtime_scale(int x);
extern "C" int tree_dep_clamp(int x);

// A "pass": which branch runs depends on the input, so two inputs reach different counters.
extern "C" int tree_fold(int x) {
  if (x > 0) {
    return tree_runtime_scale(x) + 1;
  }
  return tree_dep_clamp(x);
}
