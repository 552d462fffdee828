// The call chains of the generated native workloads (scripts/workloads/generate.sh).
//
// Every module includes this with WL_NS naming a namespace of its own: the executable's
// and each library's template instantiations then stay distinct functions, so no frame
// of one module is resolved to another module's copy by symbol interposition.
//
// A thread follows a plan: a list of hops (WlHop), each of which does its part and calls
// the next one, so the whole plan is one deep stack. A chain hop nests Stage<N> frames,
// each a real call whose call site sits inside several forced inlines (a visitor,
// std::for_each, lambdas, descend): one input frame becomes many inline frames with long
// template names.
#pragma once

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

struct WlCtx;
using WlHop = long (*)(WlCtx &);

struct WlCtx {
    const WlHop *hops;
    int pos;
    int thread;
};

#define WL_INLINE __attribute__((always_inline)) inline

// A chain's depth, from the thread and the hop's position: threads differ, runs do not.
WL_INLINE int wl_depth(const WlCtx &c) {
    return WL_DEPTH_MIN + (c.thread * 5 + c.pos * 3) % WL_DEPTH_SPAN;
}

WL_INLINE long wl_next(WlCtx &c) {
    WlHop hop = c.hops[c.pos++];
    long r = hop(c);
    // Work after the call keeps it a call (no sibling call), as in real code.
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

namespace WL_NS {

template <typename Row> struct Rows {
    std::vector<Row> items;
    std::size_t size() const { return items.size(); }
};
using Payload = Rows<std::pair<int, double>>;

template <int N, typename P> struct Stage {
    __attribute__((noinline)) static long run(WlCtx &c);
};

template <typename F> WL_INLINE long visit_all(const std::array<int, 3> &xs, F &&f) {
    long acc = 0;
    std::for_each(xs.begin(), xs.end(), [&](int x) __attribute__((always_inline)) { acc += f(x); });
    return acc;
}

template <int N, typename P> WL_INLINE long descend(WlCtx &c, const P &p, int x) {
    if (x != N)
        return x + static_cast<long>(p.size());
    if constexpr (N == 0)
        return wl_next(c);
    else
        return Stage<N - 1, P>::run(c);
}

template <int N, typename P> long Stage<N, P>::run(WlCtx &c) {
    P p;
    std::array<int, 3> xs{N, N + 1, N + 2};
    auto step = [&](int x) __attribute__((always_inline)) {
        return descend<N, P>(c, p, x);
    };
#ifdef WL_FLAT
    // The `large` workload measures breadth (threads, modules): one inline level less.
    long r = step(xs[0]) + step(xs[1]) + step(xs[2]);
#else
    long r = visit_all(xs, step);
#endif
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

// A chain of wl_depth(c) + 1 Stage frames, then the plan's next hop.
__attribute__((noinline)) inline long chain(WlCtx &c) {
    long r;
    switch (wl_depth(c)) {
    case 0: r = Stage<0, Payload>::run(c); break;
    case 1: r = Stage<1, Payload>::run(c); break;
    case 2: r = Stage<2, Payload>::run(c); break;
    case 3: r = Stage<3, Payload>::run(c); break;
    case 4: r = Stage<4, Payload>::run(c); break;
    case 5: r = Stage<5, Payload>::run(c); break;
    case 6: r = Stage<6, Payload>::run(c); break;
    default: r = Stage<7, Payload>::run(c); break;
    }
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

} // namespace WL_NS
