extern "C" int tree_runtime_scale(int x) { return x > 100 ? 100 : 2 * x; }
