// A shared library of the `large` workload: its own chain of Stage frames, entered from
// the executable's plan. Built with WL_NS set to the library's namespace (wl_a, wl_b)
// and hidden visibility, so only `enter` is exported.
#include "chain.hpp"

namespace WL_NS {

__attribute__((visibility("default"), noinline)) long enter(WlCtx &c) {
    long r = chain(c);
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

} // namespace WL_NS
