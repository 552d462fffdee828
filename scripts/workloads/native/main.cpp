// The C++ program of the generated native workloads (scripts/workloads/generate.sh).
//
// WL_THREADS threads each follow a plan of hops (chain.hpp). Every plan passes through
// code without symbols on the way down: libc's qsort calling back into the program,
// std::call_once (libc's pthread_once, libstdc++'s __once_proxy) and, with WL_LARGE,
// libgcc's _Unwind_Backtrace calling back and the two libraries' own chains. All threads
// but the last then wait on a condition variable (libstdc++ and libc frames); the last
// waits until they all do and writes through a null pointer: the stop gdb records.
#include "chain.hpp"

#include <unwind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#ifdef WL_LARGE
namespace wl_a { long enter(WlCtx &c); }
namespace wl_b { long enter(WlCtx &c); }
#endif

namespace {

std::mutex wl_mutex;
std::condition_variable wl_cv;
int wl_waiting = 0;
// Read through a volatile global, so the compiler cannot see the null store coming.
int *volatile wl_null = nullptr;
thread_local WlCtx *wl_sort_ctx = nullptr;

__attribute__((noinline)) long hop_chain(WlCtx &c) {
    long r = WL_NS::chain(c);
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

__attribute__((noinline)) int by_value(const void *a, const void *b) {
    if (WlCtx *c = std::exchange(wl_sort_ctx, nullptr)) {
        long r = wl_next(*c);
        asm volatile("" : "+r"(r)::"memory");
    }
    return *static_cast<const int *>(a) - *static_cast<const int *>(b);
}

__attribute__((noinline)) long hop_qsort(WlCtx &c) {
    int values[2] = {2, 1};
    wl_sort_ctx = &c;
    std::qsort(values, 2, sizeof(int), by_value);
    return values[0];
}

__attribute__((noinline)) long hop_once(WlCtx &c) {
    static thread_local std::once_flag flag;
    long r = 0;
    std::call_once(flag, [&] { r = wl_next(c); });
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

[[maybe_unused]] _Unwind_Reason_Code on_frame(_Unwind_Context *, void *arg) {
    if (auto *c = static_cast<WlCtx *>(arg)) {
        long r = wl_next(*c);
        asm volatile("" : "+r"(r)::"memory");
    }
    return _URC_END_OF_STACK;
}

[[maybe_unused]] __attribute__((noinline)) long hop_unwind(WlCtx &c) {
    long r = _Unwind_Backtrace(on_frame, &c);
    asm volatile("" : "+r"(r)::"memory");
    return r;
}

__attribute__((noinline)) long hop_wait(WlCtx &) {
    std::unique_lock<std::mutex> lock(wl_mutex);
    ++wl_waiting;
    wl_cv.notify_all();
    wl_cv.wait(lock, [] { return false; });
    return 0;
}

__attribute__((noinline)) long hop_crash(WlCtx &c) {
    {
        std::unique_lock<std::mutex> lock(wl_mutex);
        wl_cv.wait(lock, [] { return wl_waiting == WL_THREADS - 1; });
    }
    // The last waiter has released the mutex; give it time to reach its futex.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    *wl_null = c.thread;
    return 0;
}

#ifdef WL_LARGE
const WlHop plan_wait[] = {hop_chain, wl_a::enter, hop_qsort, wl_b::enter, hop_once, hop_chain,
                           hop_unwind, wl_a::enter, wl_b::enter, hop_chain, hop_wait};
const WlHop plan_crash[] = {hop_chain, wl_b::enter, hop_once, wl_a::enter, hop_qsort, hop_chain,
                            hop_unwind, wl_b::enter, wl_a::enter, hop_chain, hop_crash};
#else
const WlHop plan_wait[] = {hop_chain, hop_once, hop_chain, hop_wait};
const WlHop plan_crash[] = {hop_chain, hop_qsort, hop_chain, hop_crash};
#endif

__attribute__((noinline)) void follow(int thread) {
    WlCtx c{thread == WL_THREADS - 1 ? plan_crash : plan_wait, 0, thread};
    long r = wl_next(c);
    asm volatile("" : "+r"(r)::"memory");
}

} // namespace

int main() {
    std::vector<std::thread> threads;
    for (int t = 1; t < WL_THREADS; ++t)
        threads.emplace_back([t] { follow(t); });
    follow(0);
    for (auto &t : threads)
        t.join();
}
