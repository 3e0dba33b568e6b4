// Stands for TVM's contrib kernels (sort, topk), built into a library of their own.
extern "C" int tree_sort_first(int a, int b) { return a < b ? a : b; }
