//! Finding a request's headers by name on the path of every request (its id, its
//! `Host`). A request carries a few headers: comparing their names costs less than
//! hashing the one asked for to look it up, so a short map is scanned and a long one,
//! which a hostile client could make, is looked up.

use axum::http::header::{GetAll, Iter};
use axum::http::{HeaderMap, HeaderName, HeaderValue};

/// Requests with at most this many headers are scanned by name.
pub(super) const SCANNED_HEADERS: usize = 16;

/// Every value of the header `name`, in the order the request sent them.
pub(super) fn named<'h>(headers: &'h HeaderMap, name: &'h HeaderName) -> Named<'h> {
    if headers.len() <= SCANNED_HEADERS {
        Named::Scan(headers.iter(), name)
    } else {
        Named::Lookup(headers.get_all(name).into_iter())
    }
}

pub(super) enum Named<'h> {
    Scan(Iter<'h, HeaderValue>, &'h HeaderName),
    Lookup(<GetAll<'h, HeaderValue> as IntoIterator>::IntoIter),
}

impl<'h> Iterator for Named<'h> {
    type Item = &'h HeaderValue;

    fn next(&mut self) -> Option<&'h HeaderValue> {
        match self {
            Named::Scan(all, name) => {
                all.find_map(|(other, value)| (other == *name).then_some(value))
            }
            Named::Lookup(values) => values.next(),
        }
    }
}
