//! Compatibility fronts: thin adapters that speak other symbol services' protocols
//! over the same lookup, fetch and caches as the native endpoints. Each front owns one
//! file and only translates requests and answers; none looks files up itself.
//!
//! - `symbfile`: Elastic's profiler symbol uploads (`/api/symbols-ranges`,
//!   `/api/symbols-returnpads`).

pub mod symbfile;
