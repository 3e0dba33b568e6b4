// A tiny library with known branches, compiled with instrumentation/ by the tests.
// The bodies write to a volatile so that -O1 keeps real branches (a select or a
// folded loop would leave no edge to count).
#include <cstdint>

static volatile int64_t sink;

__attribute__((noinline)) static void positive_side(int x) { sink = sink + x; }  // LINE positive_side

__attribute__((noinline)) static void other_side(int x) { sink = sink - x; }  // LINE other_side

__attribute__((noinline)) static void loop_body(int i) { sink = sink ^ i; }  // LINE loop_body

extern "C" int fixture_branch(int x) {
    if (x > 0) {  // LINE if
        positive_side(x);  // LINE then
        return 1;
    }
    other_side(x);  // LINE else
    return 0;
}

extern "C" int fixture_loop(int n) {
    for (int i = 0; i < n; i++)  // LINE for
        loop_body(i);
    return n;
}

extern "C" int64_t fixture_sink() { return sink; }
