//! The Rust program of the generated `rust-legacy` and `rust-v0` workloads
//! (scripts/workloads/generate.sh), the shape of the C++ one (native/main.cpp).
//!
//! Two threads each follow a plan of hops, one deep stack: chains of `Level::run`
//! frames, each a real call whose call site sits inside inlined generic helpers,
//! iterator adaptors and closures (one input frame, many inline frames, long generic
//! names), libc's qsort calling back into the program (a module without symbols) and
//! std's `Once`. The first thread then waits on a condition variable; the second waits
//! until it does and writes through a null pointer: the stop gdb records.
use std::cell::Cell;
use std::ffi::c_void;
use std::hint::black_box;
use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, Once};
use std::time::Duration;

const THREADS: usize = 2;

type Hop = fn(&mut Ctx) -> u64;

struct Ctx {
    hops: &'static [Hop],
    pos: usize,
    thread: usize,
}

#[inline(always)]
fn next(c: &mut Ctx) -> u64 {
    let hop = c.hops[c.pos];
    c.pos += 1;
    // Work after the call keeps it a call (no tail call), as in real code.
    black_box(hop(c))
}

/// A chain's depth, from the thread and the hop's position: threads differ, runs do not.
#[inline(always)]
fn depth(c: &Ctx) -> usize {
    1 + (c.thread * 5 + c.pos * 3) % 3
}

trait Payload {
    fn weight(&self) -> u64;
}

struct Rows<R>(Vec<R>);

impl<R> Payload for Rows<R> {
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.0.len() as u64
    }
}

trait Level<P: Payload> {
    fn run(c: &mut Ctx, p: &P) -> u64;
}

struct Bottom;
struct Deeper<T>(PhantomData<T>);

#[inline(always)]
fn visit<P: Payload, F: FnMut(u64) -> u64>(p: &P, mut f: F) -> u64 {
    [0u64, 1, 2]
        .iter()
        .map(|&x| f(x) + p.weight())
        .fold(0, |a, b| a.wrapping_add(b))
}

#[inline(always)]
fn descend<P: Payload, T: Level<P>>(c: &mut Ctx, p: &P) -> u64 {
    T::run(c, p)
}

impl<P: Payload> Level<P> for Bottom {
    #[inline(never)]
    fn run(c: &mut Ctx, p: &P) -> u64 {
        black_box(visit(p, |x| if x == 0 { next(c) } else { x }))
    }
}

impl<P: Payload, T: Level<P>> Level<P> for Deeper<T> {
    #[inline(never)]
    fn run(c: &mut Ctx, p: &P) -> u64 {
        black_box(visit(p, |x| if x == 0 { descend::<P, T>(c, p) } else { x }))
    }
}

type Data = Rows<(&'static str, f64)>;
type D1 = Deeper<Bottom>;
type D2 = Deeper<D1>;
type D3 = Deeper<D2>;
type D4 = Deeper<D3>;
type D5 = Deeper<D4>;

/// A chain of depth(c) + 1 `Level::run` frames, then the plan's next hop.
#[inline(never)]
fn chain(c: &mut Ctx) -> u64 {
    let p: Data = Rows(vec![("row", 1.0)]);
    let r = match depth(c) {
        0 => <Bottom as Level<Data>>::run(c, &p),
        1 => <D1 as Level<Data>>::run(c, &p),
        2 => <D2 as Level<Data>>::run(c, &p),
        3 => <D3 as Level<Data>>::run(c, &p),
        4 => <D4 as Level<Data>>::run(c, &p),
        _ => <D5 as Level<Data>>::run(c, &p),
    };
    black_box(r)
}

extern "C" {
    fn qsort(
        base: *mut c_void,
        n: usize,
        size: usize,
        compare: extern "C" fn(*const c_void, *const c_void) -> i32,
    );
}

thread_local! {
    static SORT_CTX: Cell<*mut Ctx> = const { Cell::new(std::ptr::null_mut()) };
}

extern "C" fn by_value(a: *const c_void, b: *const c_void) -> i32 {
    let c = SORT_CTX.with(|s| s.replace(std::ptr::null_mut()));
    if !c.is_null() {
        // SAFETY: hop_qsort's context, alive for the whole sort.
        black_box(next(unsafe { &mut *c }));
    }
    // SAFETY: qsort passes pointers to the i32s it sorts.
    unsafe { *(a as *const i32) - *(b as *const i32) }
}

#[inline(never)]
fn hop_qsort(c: &mut Ctx) -> u64 {
    let mut values = [2i32, 1];
    SORT_CTX.with(|s| s.set(c as *mut Ctx));
    // SAFETY: two i32s, compared by by_value.
    unsafe { qsort(values.as_mut_ptr().cast(), 2, 4, by_value) };
    black_box(values[0] as u64)
}

#[inline(never)]
fn hop_once(c: &mut Ctx) -> u64 {
    static ONCE: Once = Once::new();
    let mut r = 0;
    ONCE.call_once(|| r = next(c));
    black_box(r)
}

#[inline(never)]
fn hop_chain(c: &mut Ctx) -> u64 {
    black_box(chain(c))
}

static WAITING: Mutex<usize> = Mutex::new(0);
static CHANGED: Condvar = Condvar::new();

#[inline(never)]
fn hop_wait(_: &mut Ctx) -> u64 {
    let mut waiting = WAITING.lock().unwrap();
    *waiting += 1;
    CHANGED.notify_all();
    loop {
        waiting = CHANGED.wait(waiting).unwrap();
    }
}

#[inline(never)]
fn hop_crash(c: &mut Ctx) -> u64 {
    drop(CHANGED.wait_while(WAITING.lock().unwrap(), |n| *n < THREADS - 1).unwrap());
    // The last waiter has released the mutex; give it time to reach its futex.
    std::thread::sleep(Duration::from_millis(100));
    // SAFETY: none; this is the crash.
    unsafe { black_box(std::ptr::null_mut::<u64>()).write_volatile(c.thread as u64) };
    0
}

static PLAN_WAIT: [Hop; 4] = [hop_chain, hop_once, hop_chain, hop_wait];
static PLAN_CRASH: [Hop; 4] = [hop_chain, hop_qsort, hop_chain, hop_crash];

#[inline(never)]
fn follow(thread: usize) {
    let hops: &'static [Hop] = if thread == THREADS - 1 { &PLAN_CRASH } else { &PLAN_WAIT };
    let mut c = Ctx { hops, pos: 0, thread };
    black_box(next(&mut c));
}

fn main() {
    let workers: Vec<_> = (1..THREADS).map(|t| std::thread::spawn(move || follow(t))).collect();
    follow(0);
    for worker in workers {
        worker.join().unwrap();
    }
}
